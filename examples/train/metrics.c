/* The metrics file. */
#define _POSIX_C_SOURCE 200809L
#include "metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

/* The "step" field of a metrics line, or -1. */
static long long line_step(const char *line) {
  const char *s = strstr(line, "\"step\": ");
  return s ? strtoll(s + 8, NULL, 10) : -1;
}

FILE *metrics_open(const char *path, int64_t keep_until_step) {
  if (keep_until_step < 0) return fopen(path, "w");
  FILE *old = fopen(path, "r");
  if (old) {
    char *kept = NULL, *line = NULL;
    size_t kept_len = 0, cap = 0;
    int dropped = 0;
    ssize_t len;
    FILE *mem = open_memstream(&kept, &kept_len);
    while (mem && (len = getline(&line, &cap, old)) > 0) {
      long long step = line_step(line);
      if (line[len - 1] == '\n' && step >= 0 && step <= keep_until_step) fputs(line, mem);
      else dropped = 1;
    }
    free(line);
    fclose(old);
    int ok = mem && !fclose(mem);
    /* the rewrite is atomic: a kill now leaves the old lines or the kept ones */
    if (ok && dropped) {
      kiln_status s = train_write_atomic(path, kept ? kept : "");
      ok = !s;
    }
    free(kept);
    if (!ok) return NULL;
  }
  return fopen(path, "a");
}

int metrics_write(FILE *f, int64_t step, double epoch, int n, const char *const *names,
                  const double *values, double time) {
  fprintf(f, "{\"step\": %lld, \"epoch\": %.4f", (long long)step, epoch);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    if (isfinite(values[i])) fprintf(f, ", \"%s\": %.9g", names[i], values[i]);
    else fprintf(f, ", \"%s\": null", names[i]), bad++;
  }
  fprintf(f, ", \"time\": %.6f", time);
  if (bad) {
    fprintf(f, ", \"nonfinite\": [");
    for (int i = 0, k = 0; i < n; i++)
      if (!isfinite(values[i])) fprintf(f, "%s\"%s\"", k++ ? ", " : "", names[i]);
    fprintf(f, "]");
  }
  fprintf(f, "}\n");
  return fflush(f) || ferror(f) ? -1 : 0;
}
