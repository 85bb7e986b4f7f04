/* kiln: a GPU-native array runtime. The umbrella header. */
#ifndef KILN_KILN_H
#define KILN_KILN_H

#include "kiln/status.h"
#include "kiln/dtype.h"
#include "kiln/config.h"
#include "kiln/device.h"
#include "kiln/array.h"
#include "kiln/tree.h"
#include "kiln/trace.h"
#include "kiln/jit.h"
#include "kiln/numpy.h"
#include "kiln/data.h"
#include "kiln/optim.h"
#include "kiln/nn.h"
#include "kiln/transform.h"
#include "kiln/dist.h"
#include "kiln/interop.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, "MAJOR.MINOR.PATCH". */
const char *kiln_version(void);

#ifdef __cplusplus
}
#endif
#endif
