/* C drivers of the CPU backend's thread pool for test_cpu_pool.cc. */
#ifndef KILN_TESTS_CPU_POOL_CHECKS_H
#define KILN_TESTS_CPU_POOL_CHECKS_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* jobs parallel_fors over [0, items) in a row on a pool of n_threads: the
 * number of items not visited exactly once (0), or < 0 when a call failed;
 * *max_chunks the most chunks one job was cut into. */
int kpt_back_to_back(int n_threads, int jobs, int64_t items, int64_t min_chunk, int *max_chunks);
/* A job whose last chunk (a worker's) fails: its status, its message in
 * msg; KILN_ERR_INTERNAL if the pool then fails a good job. */
kiln_status kpt_failing_last_chunk(int n_threads, int64_t items, char *msg, size_t cap);
/* callers threads each running jobs parallel_fors on one shared pool: the
 * number of wrong visits (0). */
int kpt_shared_by_callers(int n_threads, int callers, int jobs);

#ifdef __cplusplus
}
#endif

#endif
