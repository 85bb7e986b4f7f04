/* bench_dispatch's first-call measurement (first_call.c). Prefix kbench_. */
#ifndef KILN_BENCH_FIRST_CALL_H
#define KILN_BENCH_FIRST_CALL_H

#include "kiln/jit.h"
#include "kiln/kiln.h"

/* The program's input: f32[1024]. */
#define KBENCH_FIRST_CALL_ELEMENTS 1024
/* lower (jit_new + jit_lower), compile, call, total */
#define KBENCH_FIRST_CALL_PHASES 4

/* The median over `iters` cold first calls of x -> (x * c + 0.5) four times
 * (a new context, an empty kernel cache and a new constant c each time), per
 * phase, in ms. */
kiln_status kbench_first_call(int iters, double ms[KBENCH_FIRST_CALL_PHASES]);

/* Removes a folder and what is in it (files and folders of files). */
void kbench_remove_tree(const char *dir);

#endif
