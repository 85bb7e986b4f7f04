/* The benchmark reporter: rows of named numbers, a table and a JSON file. */
#include "report.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct kbench_named {
  char *name;
  double value;
} kbench_named;

typedef struct kbench_row {
  char *name;
  double *values; /* by column index */
  bool *set;
  int count; /* columns this row has room for */
} kbench_row;

struct kbench_report {
  char *name;
  char **device_names, **device_platforms;
  int num_devices;
  kbench_named *params;
  int num_params;
  char **columns;
  int num_columns;
  kbench_row *rows;
  int num_rows;
  char **notes;
  int num_notes;
};

/* Grows the array that the pointer at `array` points to (items of `size`
 * bytes, *count of them) by one zeroed item. */
static kiln_status kbench_grow(void *array, int *count, size_t size) {
  void *items;
  memcpy(&items, array, sizeof items);
  char *grown = realloc(items, (size_t)(*count + 1) * size);
  if (!grown) return kiln_fail(KILN_ERR_OUT_OF_MEMORY, "kbench: out of host memory");
  memset(grown + (size_t)*count * size, 0, size);
  memcpy(array, &grown, sizeof grown);
  (*count)++;
  return KILN_OK;
}

static kiln_status kbench_dup(const char *s, char **out) {
  *out = strdup(s ? s : "");
  return *out ? KILN_OK : kiln_fail(KILN_ERR_OUT_OF_MEMORY, "kbench: out of host memory");
}

kiln_status kbench_report_new(const char *name, kbench_report **out) {
  *out = NULL;
  kbench_report *r = calloc(1, sizeof *r);
  if (!r) return kiln_fail(KILN_ERR_OUT_OF_MEMORY, "kbench_report_new: out of host memory");
  kiln_status st = kbench_dup(name, &r->name);
  if (st) {
    free(r);
    return st;
  }
  *out = r;
  return KILN_OK;
}

void kbench_report_free(kbench_report *r) {
  if (!r) return;
  for (int i = 0; i < r->num_devices; i++) {
    free(r->device_names[i]);
    free(r->device_platforms[i]);
  }
  for (int i = 0; i < r->num_params; i++) free(r->params[i].name);
  for (int i = 0; i < r->num_columns; i++) free(r->columns[i]);
  for (int i = 0; i < r->num_rows; i++) {
    free(r->rows[i].name);
    free(r->rows[i].values);
    free(r->rows[i].set);
  }
  for (int i = 0; i < r->num_notes; i++) free(r->notes[i]);
  free(r->notes);
  free(r->device_names);
  free(r->device_platforms);
  free(r->params);
  free(r->columns);
  free(r->rows);
  free(r->name);
  free(r);
}

kiln_status kbench_report_add_device(kbench_report *r, const char *name, const char *platform) {
  int n = r->num_devices, m = r->num_devices;
  kiln_status st;
  if ((st = kbench_grow(&r->device_names, &n, sizeof(char *))) ||
      (st = kbench_grow(&r->device_platforms, &m, sizeof(char *))))
    return st;
  r->num_devices = n;
  if ((st = kbench_dup(name, &r->device_names[n - 1])) ||
      (st = kbench_dup(platform, &r->device_platforms[n - 1])))
    return st;
  return KILN_OK;
}

kiln_status kbench_report_param(kbench_report *r, const char *key, double value) {
  kiln_status st = kbench_grow(&r->params, &r->num_params, sizeof *r->params);
  if (st) return st;
  r->params[r->num_params - 1].value = value;
  return kbench_dup(key, &r->params[r->num_params - 1].name);
}

kiln_status kbench_report_note(kbench_report *r, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  kiln_status st = kbench_grow(&r->notes, &r->num_notes, sizeof *r->notes);
  return st ? st : kbench_dup(text, &r->notes[r->num_notes - 1]);
}

kiln_status kbench_report_row(kbench_report *r, const char *name) {
  kiln_status st = kbench_grow(&r->rows, &r->num_rows, sizeof *r->rows);
  if (st) return st;
  return kbench_dup(name, &r->rows[r->num_rows - 1].name);
}

static kiln_status kbench_column(kbench_report *r, const char *column, int *index) {
  for (int i = 0; i < r->num_columns; i++)
    if (strcmp(r->columns[i], column) == 0) {
      *index = i;
      return KILN_OK;
    }
  kiln_status st = kbench_grow(&r->columns, &r->num_columns, sizeof *r->columns);
  if (st) return st;
  *index = r->num_columns - 1;
  return kbench_dup(column, &r->columns[*index]);
}

kiln_status kbench_report_value(kbench_report *r, const char *column, double value) {
  if (r->num_rows == 0)
    return kiln_fail(KILN_ERR_ARGUMENT, "kbench_report_value: column %s set before any row",
                      column);
  int c;
  kiln_status st = kbench_column(r, column, &c);
  if (st) return st;
  kbench_row *row = &r->rows[r->num_rows - 1];
  while (row->count <= c) {
    int n = row->count;
    if ((st = kbench_grow(&row->values, &n, sizeof *row->values)) ||
        (st = kbench_grow(&row->set, &row->count, sizeof *row->set)))
      return st;
  }
  row->values[c] = value;
  row->set[c] = true;
  return KILN_OK;
}

/* ---- the table ---- */

/* Whole numbers print as such, measurements with two decimals. */
static void kbench_format(const kbench_row *row, int c, char *buf, size_t cap) {
  if (c >= row->count || !row->set[c]) {
    snprintf(buf, cap, "-");
    return;
  }
  double v = row->values[c];
  if (isnan(v))
    snprintf(buf, cap, "n/a");
  else if (v == floor(v) && fabs(v) < 1e15)
    snprintf(buf, cap, "%.0f", v);
  else
    snprintf(buf, cap, "%.2f", v);
}

static int kbench_max(int a, int b) { return a > b ? a : b; }

void kbench_report_print(const kbench_report *r, FILE *out) {
  char cell[64];
  fprintf(out, "%s", r->name);
  for (int i = 0; i < r->num_devices; i++)
    fprintf(out, "%s%s (%s)", i ? ", " : " on ", r->device_names[i], r->device_platforms[i]);
  fprintf(out, "\n");
  int name_width = 4;
  for (int i = 0; i < r->num_rows; i++)
    name_width = kbench_max(name_width, (int)strlen(r->rows[i].name));
  int *width = calloc((size_t)r->num_columns + 1, sizeof *width);
  if (!width) return;
  for (int c = 0; c < r->num_columns; c++) {
    width[c] = (int)strlen(r->columns[c]);
    for (int i = 0; i < r->num_rows; i++) {
      kbench_format(&r->rows[i], c, cell, sizeof cell);
      width[c] = kbench_max(width[c], (int)strlen(cell));
    }
  }
  fprintf(out, "%-*s", name_width, "case");
  for (int c = 0; c < r->num_columns; c++) fprintf(out, "  %*s", width[c], r->columns[c]);
  fprintf(out, "\n");
  for (int i = 0; i < r->num_rows; i++) {
    fprintf(out, "%-*s", name_width, r->rows[i].name);
    for (int c = 0; c < r->num_columns; c++) {
      kbench_format(&r->rows[i], c, cell, sizeof cell);
      fprintf(out, "  %*s", width[c], cell);
    }
    fprintf(out, "\n");
  }
  for (int i = 0; i < r->num_notes; i++) fprintf(out, "  %s\n", r->notes[i]);
  free(width);
}

/* ---- provenance ---- */

/* The first line a shell command prints, or "" (it runs at report time, so
 * the revision is the one the program was run from). */
static void kbench_command_line(const char *command, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *p = popen(command, "r");
  if (!p) return;
  if (!fgets(buf, (int)cap, p)) buf[0] = '\0';
  pclose(p);
  buf[strcspn(buf, "\r\n")] = '\0';
}

/* The revision of the source tree, and whether tracked files differ from it. */
static void kbench_git(char *rev, size_t cap, bool *dirty) {
  char cmd[sizeof KILN_SOURCE_DIR + 96], status[8];
  *dirty = false;
  rev[0] = '\0';
  if (!strchr(KILN_SOURCE_DIR, '\'')) {
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse HEAD 2>/dev/null", KILN_SOURCE_DIR);
    kbench_command_line(cmd, rev, cap);
    snprintf(cmd, sizeof cmd, "git -C '%s' status --porcelain --untracked-files=no 2>/dev/null",
             KILN_SOURCE_DIR);
    kbench_command_line(cmd, status, sizeof status);
    *dirty = rev[0] && status[0];
  }
  if (!rev[0]) snprintf(rev, cap, "%s", KILN_GIT_REVISION); /* as configured */
}

static void kbench_utc_now(char *buf, size_t cap) {
  time_t now = time(NULL);
  struct tm tm;
  if (!gmtime_r(&now, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(buf, cap, "unknown");
}

/* ---- JSON ---- */

static void kbench_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static void kbench_json_number(FILE *f, double v) {
  if (isnan(v) || isinf(v))
    fprintf(f, "null");
  else if (v == floor(v) && fabs(v) < 1e15)
    fprintf(f, "%.0f", v);
  else
    fprintf(f, "%.6g", v);
}

static void kbench_json_rows(const kbench_report *r, FILE *f) {
  fprintf(f, "  \"rows\": [");
  for (int i = 0; i < r->num_rows; i++) {
    const kbench_row *row = &r->rows[i];
    fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
    kbench_json_string(f, row->name);
    for (int c = 0; c < row->count; c++) {
      if (!row->set[c]) continue;
      fprintf(f, ", ");
      kbench_json_string(f, r->columns[c]);
      fprintf(f, ": ");
      kbench_json_number(f, row->values[c]);
    }
    fprintf(f, "}");
  }
  fprintf(f, "\n  ]\n");
}

static void kbench_json(const kbench_report *r, FILE *f) {
  char rev[128], date[32], host[256];
  bool dirty;
  kbench_git(rev, sizeof rev, &dirty);
  kbench_utc_now(date, sizeof date);
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = '\0';
  fprintf(f, "{\n  \"benchmark\": ");
  kbench_json_string(f, r->name);
  fprintf(f, ",\n  \"platform\": ");
  kbench_json_string(f, r->num_devices ? r->device_platforms[0] : "unknown");
  fprintf(f, ",\n  \"devices\": [");
  for (int i = 0; i < r->num_devices; i++) {
    fprintf(f, "%s{\"name\": ", i ? ", " : "");
    kbench_json_string(f, r->device_names[i]);
    fprintf(f, ", \"platform\": ");
    kbench_json_string(f, r->device_platforms[i]);
    fprintf(f, "}");
  }
  fprintf(f, "],\n  \"date\": ");
  kbench_json_string(f, date);
  fprintf(f, ",\n  \"git_revision\": ");
  kbench_json_string(f, rev);
  fprintf(f, ",\n  \"git_dirty\": %s,\n  \"hostname\": ", dirty ? "true" : "false");
  kbench_json_string(f, host);
  fprintf(f, ",\n  \"params\": {");
  for (int i = 0; i < r->num_params; i++) {
    fprintf(f, "%s", i ? ", " : "");
    kbench_json_string(f, r->params[i].name);
    fprintf(f, ": ");
    kbench_json_number(f, r->params[i].value);
  }
  fprintf(f, "},\n  \"notes\": [");
  for (int i = 0; i < r->num_notes; i++) {
    fprintf(f, "%s\n    ", i ? "," : "");
    kbench_json_string(f, r->notes[i]);
  }
  fprintf(f, "%s],\n", r->num_notes ? "\n  " : "");
  kbench_json_rows(r, f);
  fprintf(f, "}\n");
}

/* "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3". */
static void kbench_slug(const char *s, char *buf, size_t cap) {
  size_t n = 0;
  for (; *s && n + 1 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (isalnum(c))
      buf[n++] = (char)tolower(c);
    else if (n > 0 && buf[n - 1] != '-')
      buf[n++] = '-';
  }
  while (n > 0 && buf[n - 1] == '-') n--;
  buf[n] = '\0';
  if (n == 0) snprintf(buf, cap, "unknown");
}

static kiln_status kbench_default_path(const kbench_report *r, char *buf, size_t cap) {
  char slug[128];
  kbench_slug(r->num_devices ? r->device_names[0] : "", slug, sizeof slug);
  snprintf(buf, cap, "%s/bench/results", KILN_SOURCE_DIR);
  if (mkdir(buf, 0777) != 0 && errno != EEXIST)
    return kiln_fail(KILN_ERR_IO, "kbench_report_write_json: cannot create %s: %s", buf,
                      strerror(errno));
  size_t n = strlen(buf);
  snprintf(buf + n, cap - n, "/%s-%s.json", r->name, slug);
  return KILN_OK;
}

kiln_status kbench_report_write_json(const kbench_report *r, const char *path, char *written,
                                     size_t cap) {
  char fallback[4096];
  kiln_status st;
  if (!path) {
    if ((st = kbench_default_path(r, fallback, sizeof fallback))) return st;
    path = fallback;
  }
  FILE *f = fopen(path, "w");
  if (!f)
    return kiln_fail(KILN_ERR_IO, "kbench_report_write_json: cannot open %s: %s", path,
                      strerror(errno));
  kbench_json(r, f);
  bool failed = ferror(f) != 0;
  if (fclose(f) != 0 || failed)
    return kiln_fail(KILN_ERR_IO, "kbench_report_write_json: writing %s failed", path);
  if (written) snprintf(written, cap, "%s", path);
  return KILN_OK;
}

static int kbench_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

double kbench_median_ns(uint64_t *ns, int n) {
  qsort(ns, (size_t)n, sizeof *ns, kbench_cmp_u64);
  return (double)ns[n / 2];
}

uint64_t kbench_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int kbench_report_finish(const kbench_report *r, kiln_status st, const char *json,
                         const char *program) {
  char path[512] = "";
  if (!st) {
    kbench_report_print(r, stdout);
    st = kbench_report_write_json(r, json, path, sizeof path);
  }
  if (st)
    fprintf(stderr, "%s: %s: %s\n", program, kiln_status_str(st), kiln_last_error());
  else
    printf("wrote %s\n", path);
  return st ? 1 : 0;
}
