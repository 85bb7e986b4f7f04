/* bench/report: what every benchmark program reports. Rows of named numbers,
 * printed as an aligned table and written as JSON together with where and
 * when they were measured: the devices, the platform, the UTC date, the git
 * revision (read when the program runs), the host and the run's parameters.
 * Prefix kbench_. */
#ifndef KILN_BENCH_REPORT_H
#define KILN_BENCH_REPORT_H

#include <stdint.h>
#include <stdio.h>
#include "kiln/kiln.h"

typedef struct kbench_report kbench_report;

/* A report for the benchmark `name` ("copy_bandwidth"). */
kiln_status kbench_report_new(const char *name, kbench_report **out);
void kbench_report_free(kbench_report *r); /* NULL is allowed */

/* A device the numbers come from, with its platform ("cuda", "cpu"). */
kiln_status kbench_report_add_device(kbench_report *r, const char *name, const char *platform);
/* A parameter of the run (iterations, sizes), kept in the JSON. */
kiln_status kbench_report_param(kbench_report *r, const char *key, double value);

/* Starts a row; kbench_report_value fills its columns. Columns appear in the
 * order they are first used. A NaN value means "not applicable": the table
 * prints n/a and the JSON null; a column a row never sets is left out. */
kiln_status kbench_report_row(kbench_report *r, const char *name);
kiln_status kbench_report_value(kbench_report *r, const char *column, double value);

/* A line of text printed under the table and kept in the JSON's "notes":
 * what a row or column measures, which target it is compared with. */
kiln_status kbench_report_note(kbench_report *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void kbench_report_print(const kbench_report *r, FILE *out);

/* The median of n timings in nanoseconds (sorted in place), in ns. */
double kbench_median_ns(uint64_t *ns, int n);
/* A monotonic clock in nanoseconds, for timing calls. */
uint64_t kbench_now_ns(void);
/* Writes the JSON to `path`, or, when path is NULL, to
 * bench/results/<name>-<first device>.json in the source tree. The path used
 * is copied into `written` (cap bytes) when it is not NULL. */
kiln_status kbench_report_write_json(const kbench_report *r, const char *path, char *written,
                                     size_t cap);

/* The end of a benchmark program: when st is KILN_OK prints the table and
 * writes the JSON (to json, as kbench_report_write_json), else prints the
 * error after `program`'s name; returns the process's exit status. */
int kbench_report_finish(const kbench_report *r, kiln_status st, const char *json,
                         const char *program);

#endif
