/* bench/cases: the functions bench_fusion and bench_dispatch time, and
 * their arguments. Row names and shapes are shared with
 * bench/jax_reference.py, which times jax.jit of the same functions on the
 * same shapes and values; keep the two in step. Prefix kbench_. */
#ifndef KILN_BENCH_CASES_H
#define KILN_BENCH_CASES_H

#include <stdbool.h>
#include <stdint.h>
#include "kiln/jit.h"
#include "kiln/kiln.h"

/* Elements of a case's main operand at scale 1: 2^24 (64 MiB of f32, more
 * than the L2 cache of an H100 or H200). */
#define KBENCH_FUSION_ELEMENTS ((int64_t)1 << 24)
#define KBENCH_MAX_INPUTS 3
#define KBENCH_MAX_FUSION_CASES 18

/* What a case is held to: elementwise work against 85% of copy bandwidth,
 * row reductions against 75% (issue 4's targets on an H100/H200). */
typedef enum kbench_kind { KBENCH_ELEMENTWISE, KBENCH_ROW } kbench_kind;

typedef struct kbench_case {
  char name[48]; /* "chain8_f32", "softmax_1024_bf16": the row name */
  kiln_fn fn;
  void *user;
  kbench_kind kind;
  kiln_dtype dtype;
  int n_in;
  int rank[KBENCH_MAX_INPUTS];
  int64_t shape[KBENCH_MAX_INPUTS][2];
  int64_t out_elements;
} kbench_case;

/* x -> x * 1.0001 + 0.5, repeated until there are *(int *)user equations;
 * args is a tuple of one array. */
kiln_tree *kbench_chain(kiln_trace *t, const kiln_tree *args, void *user);

/* The fusion cases for n = 2^24 * scale elements (at least 1), in order:
 *   chain8_f32            the 8-op chain over f32[n]
 *   broadcast_f32         (x[s,1] + y[1,s]) * z[s] - x, s = floor(sqrt(n))
 *   softmax_<L>_<dtype>   row softmax and layernorm (the functions the jit
 *   layernorm_<L>_<dtype> tests check) over [max(n / L, 1), L], for
 *                         L = 1024, 2048, 4096, 8192 and f32, bf16.
 * Fills out (room for KBENCH_MAX_FUSION_CASES) and returns the count. */
int kbench_fusion_cases(double scale, kbench_case *out);
/* The case called `name` among those of kbench_fusion_cases; false if none. */
bool kbench_fusion_case(double scale, const char *name, kbench_case *out);

/* The case's arguments on dev: a tuple of arrays holding
 * ((k * 2654435761) mod 1000) / 500 - 1 at flat index k. */
kiln_status kbench_case_args(kiln_device *dev, const kbench_case *c, kiln_tree **out);
/* Bytes the function must move: its inputs read once, its output written once. */
double kbench_case_bytes(const kbench_case *c);

#endif
