/* kiln: a GPU-native array runtime. The umbrella header. */
#ifndef KILN_KILN_H
#define KILN_KILN_H

#include "kiln/status.h"
#include "kiln/dtype.h"
#include "kiln/config.h"
#include "kiln/device.h"
#include "kiln/array.h"
#include "kiln/tree.h"
#include "kiln/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, "MAJOR.MINOR.PATCH". */
const char *kiln_version(void);

#ifdef __cplusplus
}
#endif
#endif
