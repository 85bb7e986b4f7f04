/* Compiling C sources with the host compiler (cc_compiler.c) into shared
 * objects returned as bytes, so the kernel cache can keep them, and loading
 * such bytes with dlopen. */
#define _GNU_SOURCE /* pipe2 and mkostemp: close-on-exec from birth, see kcpu_cc_run */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backend/cpu/cpu_backend.h"


/* ---- files ---- */

/* Kernel names become file names: anything but [A-Za-z0-9_.-] becomes '_'. */
static void kcpu_cc_safe_name(const char *name, char out[KCPU_CC_NAME_MAX + 1]) {
  size_t n = 0;
  for (; name[n] && n < KCPU_CC_NAME_MAX; n++) {
    char ch = name[n];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || (ch == '.' && n > 0);
    out[n] = ok ? ch : '_';
  }
  if (n == 0) out[n++] = '_';
  out[n] = '\0';
}

static char *kcpu_path_new(const char *dir, const char *name, const char *suffix) {
  size_t n = strlen(dir) + strlen(name) + strlen(suffix) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s%s", dir, name, suffix);
  return p;
}

static kiln_status kcpu_read_file(const char *op, const char *path, void **data, size_t *size) {
  kiln_status st = KILN_OK;
  char *buf = NULL;
  struct stat sb;
  size_t n;
  ssize_t got;
  int fd = -1;
  KCORE_IO_CHECK(fd = open(path, O_RDONLY | O_CLOEXEC), op, path, "open", done);
  KCORE_IO_CHECK(fstat(fd, &sb), op, path, "fstat", done);
  n = (size_t)sb.st_size;
  if (!(buf = malloc(n ? n : 1))) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for %s (%zu bytes)", op, path,
                    n);
    goto done;
  }
  KCORE_IO_CHECK(got = kcache_read_full(fd, buf, n), op, path, "read", done);
  if ((size_t)got < n) {
    st = kcore_fail(KILN_ERR_IO, "%s: %s: the file shrank while being read", op, path);
    goto done;
  }
  *data = buf;
  *size = n;
  buf = NULL;
done:
  if (fd >= 0) close(fd);
  free(buf);
  return st;
}

/* Where one compile happens: a private directory for the output (and for the
 * source unless it is dumped). */
typedef struct kcpu_cc_job {
  char *work;
  char *source;
  char *output;
  bool dumped;
} kcpu_cc_job;

/* Writes the source into the dump directory when there is one, named by
 * its digest so that runs and processes agree; on failure the source stays
 * in the work directory, with a warning. */
static void kcpu_cc_dump(const kcpu_cc *cc, const char *safe, const char *source,
                         kcpu_cc_job *job) {
  char *path = NULL;
  if (kcache_dump_source(cc->dump_dir, safe, "c", source, &path) == KILN_OK) {
    job->source = path;
    job->dumped = true;
    return;
  }
  kcore_log(cc->level, KILN_LOG_WARN, "kcpu_cc_compile: cannot dump the source of %s: %s", safe,
            kiln_last_error());
  kiln_clear_error();
}

static kiln_status kcpu_cc_job_open(const kcpu_cc *cc, const char *safe, const char *source,
                                    kcpu_cc_job *job) {
  memset(job, 0, sizeof *job);
  if (!(job->work = kcpu_path_new(cc->tmp_dir, "kiln-cc-", "XXXXXX")))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_compile: out of host memory");
  kiln_status st = KILN_OK;
  KCORE_IO_CHECK(mkdtemp(job->work) ? 0 : -1, "kcpu_cc_compile", job->work, "mkdtemp", fail);
  if (cc->dump_dir) kcpu_cc_dump(cc, safe, source, job);
  if (!(job->output = kcpu_path_new(job->work, safe, ".so")) ||
      (!job->source && !(job->source = kcpu_path_new(job->work, safe, ".c"))))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_compile: out of host memory");
  if (!job->dumped) return kcache_write_file(job->source, source, strlen(source), false);
  return KILN_OK;
fail:
  free(job->work);
  job->work = NULL;
  return st;
}

/* Removes what the job made, except a failed compile's source and log. */
static void kcpu_cc_job_close(kcpu_cc_job *job, bool keep_source) {
  if (job->output) unlink(job->output);
  if (job->work && !keep_source) {
    if (job->source && !job->dumped) unlink(job->source);
    rmdir(job->work);
  } else if (job->work && job->dumped) {
    rmdir(job->work); /* only the output was there */
  }
  free(job->work);
  free(job->source);
  free(job->output);
  memset(job, 0, sizeof *job);
}

/* The message of a failed compile: the start of the log (the first errors
 * matter most), cut at a line end; the whole log goes beside the source. */
static kiln_status kcpu_cc_compile_fail(const kcpu_cc *cc, const char *name,
                                        const kcpu_cc_job *job, const kcpu_cc_output *log,
                                        int wstatus) {
  size_t shown = log->size;
  bool cut = log->dropped > 0 || shown > KCPU_CC_MESSAGE_LOG;
  if (shown > KCPU_CC_MESSAGE_LOG) {
    shown = KCPU_CC_MESSAGE_LOG;
    while (shown > KCPU_CC_MESSAGE_LOG / 2 && log->text[shown - 1] != '\n') shown--;
  }
  while (shown > 0 && log->text[shown - 1] == '\n') shown--;
  char *log_path = NULL;
  size_t stem = strlen(job->source) - 2; /* the source ends in ".c" */
  if ((log_path = malloc(stem + 5))) {
    snprintf(log_path, stem + 5, "%.*s.log", (int)stem, job->source);
    if (kcache_write_file(log_path, log->text, log->size, false) != KILN_OK) {
      free(log_path);
      log_path = NULL;
    }
  }
  char how[64];
  char more[160] = "";
  if (cut)
    snprintf(more, sizeof more, "\n[... the log goes on: %s]", log_path ? log_path : "not saved");
  kiln_status st = kcore_fail(KILN_ERR_COMPILE, "kcpu_cc_compile: %s: %s %s compiling %s:\n%.*s%s",
                              name, cc->path, kcpu_cc_describe(wstatus, how, sizeof how),
                              job->source, (int)shown, log->text, more);
  free(log_path);
  return st;
}

/* *rejected: the compiler ran and refused the source. */
static kiln_status kcpu_cc_invoke(const kcpu_cc *cc, const char *name, const kcpu_cc_job *job,
                                  const char *const *options, int num_options, bool *rejected) {
  kcpu_argv a;
  kiln_status st = kcpu_argv_new(cc, KCPU_CC_NUM_BASE_FLAGS + num_options + 3 +
                                         cc->num_link_flags, &a);
  if (st != KILN_OK) return st;
  for (int i = 0; i < KCPU_CC_NUM_BASE_FLAGS; i++) kcpu_argv_push(&a, kcpu_cc_base_flags[i]);
  for (int i = 0; i < num_options; i++) kcpu_argv_push(&a, options[i]);
  kcpu_argv_push(&a, "-o");
  kcpu_argv_push(&a, job->output);
  kcpu_argv_push(&a, job->source);
  for (int i = 0; i < cc->num_link_flags; i++) kcpu_argv_push(&a, cc->link_flags[i]);
  kcpu_cc_output log;
  int wstatus = 0;
  st = kcpu_cc_run("kcpu_cc_compile", a.v, &log, &wstatus);
  free(a.v);
  if (st != KILN_OK) return st;
  *rejected = !kcpu_cc_succeeded(wstatus);
  if (*rejected)
    st = kcpu_cc_compile_fail(cc, name, job, &log, wstatus);
  else if (log.size > 0)
    kcore_log(cc->level, KILN_LOG_DEBUG, "kcpu_cc_compile: %s: compiler output:\n%.2000s", name,
              log.text);
  kcpu_cc_output_free(&log);
  return st;
}

static kiln_status kcpu_cc_check_options(const char *op, const char *const *options,
                                         int num_options) {
  if (num_options < 0 || (num_options > 0 && !options))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %d options at %p", op, num_options,
                      (const void *)options);
  for (int i = 0; i < num_options; i++)
    if (!options[i]) return kcore_fail(KILN_ERR_ARGUMENT, "%s: option %d is NULL", op, i);
  return KILN_OK;
}

static kiln_status kcpu_cc_compile_unranged(const kcpu_cc *cc, const char *name, const char *source,
                            const char *const *options, int num_options, void **so, size_t *size) {
  if (!cc || !name || !source || !so || !size)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_cc_compile: cc, name, source, so or size is NULL");
  *so = NULL;
  *size = 0;
  kiln_status st = kcpu_cc_check_options("kcpu_cc_compile", options, num_options);
  if (st != KILN_OK) return st;
  char safe[KCPU_CC_NAME_MAX + 1];
  kcpu_cc_safe_name(name, safe);
  kcpu_cc_job job;
  bool rejected = false;
  st = kcpu_cc_job_open(cc, safe, source, &job);
  if (st == KILN_OK) st = kcpu_cc_invoke(cc, name, &job, options, num_options, &rejected);
  if (st == KILN_OK) st = kcpu_read_file("kcpu_cc_compile", job.output, so, size);
  kcpu_cc_job_close(&job, rejected);
  return st;
}

/* ---- through the cache ---- */

/* The key's options are the base flags, the caller's, then the link's. */
static const char **kcpu_cc_all_options(const kcpu_cc *cc, const char *const *options,
                                        int num_options) {
  int n = 0;
  const char **all =
      malloc((size_t)(KCPU_CC_NUM_BASE_FLAGS + num_options + cc->num_link_flags) * sizeof *all);
  if (!all) return NULL;
  for (int i = 0; i < KCPU_CC_NUM_BASE_FLAGS; i++) all[n++] = kcpu_cc_base_flags[i];
  for (int i = 0; i < num_options; i++) all[n++] = options[i];
  for (int i = 0; i < cc->num_link_flags; i++) all[n++] = cc->link_flags[i];
  return all;
}

kiln_status kcpu_cc_key(const kcpu_cc *cc, const char *source, const char *const *options,
                        int num_options, kcache_key *out) {
  if (!cc || !source || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_cc_key: cc, source or out is NULL");
  kiln_status st = kcpu_cc_check_options("kcpu_cc_key", options, num_options);
  if (st != KILN_OK) return st;
  const char **all = kcpu_cc_all_options(cc, options, num_options);
  if (!all) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_key: out of host memory");
  kcache_key_parts parts = {.source = source,
                            .source_size = strlen(source),
                            .target = cc->target,
                            .compiler = cc->version,
                            .options = all,
                            .num_options =
                                KCPU_CC_NUM_BASE_FLAGS + num_options + cc->num_link_flags};
  kcache_key_make(&parts, out);
  free(all);
  return KILN_OK;
}

typedef struct kcpu_cc_request {
  const kcpu_cc *cc;
  const char *name, *source;
  const char *const *options;
  int num_options;
} kcpu_cc_request;

static kiln_status kcpu_cc_build(void *user, void **blob, size_t *size) {
  const kcpu_cc_request *r = user;
  return kcpu_cc_compile(r->cc, r->name, r->source, r->options, r->num_options, blob, size);
}

kiln_status kcpu_cc_compile_cached(const kcpu_cc *cc, kcache *cache, const char *name,
                                   const char *source, const char *const *options, int num_options,
                                   const void **so, size_t *size) {
  if (!cc || !cache || !name || !source || !so || !size)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "kcpu_cc_compile_cached: cc, cache, name, source, so or size is NULL");
  kcache_key key;
  kiln_status st = kcpu_cc_key(cc, source, options, num_options, &key);
  if (st != KILN_OK) return kcore_fail_wrap(st, "kcpu_cc_compile_cached: %s", name);
  kcpu_cc_request r = {cc, name, source, options, num_options};
  return kcache_get_or_build(cache, &key, kcpu_cc_build, &r, so, size);
}

/* ---- loading ---- */

/* -1 with errno set on failure. */
/* dlopen needs a file: a fresh one per load, so two loads never alias (the
 * loader recognises objects by path and inode); it is removed at once, the
 * mapping keeps the code alive. */
static kiln_status kcpu_cc_open_bytes(const char *path_template, const void *so, size_t size,
                                      void **handle) {
  char *path = kcore_strdup(path_template);
  if (!path) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_load: out of host memory");
  kiln_status st = KILN_OK;
  int fd = -1, rc;
  bool created = false;
  KCORE_IO_CHECK(fd = mkostemp(path, O_CLOEXEC), "kcpu_cc_load", path, "mkostemp", done);
  created = true;
  KCORE_IO_CHECK(kcore_write_all(fd, so, size), "kcpu_cc_load", path, "write", done);
  rc = close(fd);
  fd = -1;
  KCORE_IO_CHECK(rc, "kcpu_cc_load", path, "close", done);
  if (!(*handle = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
    const char *why = dlerror();
    st = kcore_fail(KILN_ERR_IO, "kcpu_cc_load: dlopen failed: %s", why ? why : path);
  }
done:
  if (fd >= 0) close(fd);
  if (created) unlink(path);
  free(path);
  return st;
}

kiln_status kcpu_cc_load(const kcpu_cc *cc, const char *dir, const char *name, const void *so,
                         size_t size, kcpu_cc_module **out) {
  if (!cc || !name || !so || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_cc_load: cc, name, so or out is NULL");
  *out = NULL;
  char safe[KCPU_CC_NAME_MAX + 1];
  kcpu_cc_safe_name(name, safe);
  /* Named as the cache's temporary files, so that one a crash leaves in the
   * cache directory is swept like theirs. */
  char *templ = kcpu_path_new(dir ? dir : cc->tmp_dir, safe, KCACHE_TEMP_MARK "XXXXXX");
  kcpu_cc_module *m = calloc(1, sizeof *m);
  kiln_status st = KILN_OK;
  if (!templ || !m || !(m->name = kcore_strdup(name))) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_load: out of host memory");
    goto done;
  }
  st = kcpu_cc_open_bytes(templ, so, size, &m->handle);
  if (st != KILN_OK) goto done;
  *out = m;
  m = NULL;
done:
  if (m) free(m->name);
  free(m);
  free(templ);
  return st;
}

kiln_status kcpu_cc_jit(const kcpu_cc *cc, kcache *cache, const char *name, const char *source,
                        const char *const *options, int num_options, kcpu_cc_module **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_cc_jit: out is NULL");
  *out = NULL;
  const void *so = NULL;
  size_t size = 0;
  kiln_status st = kcpu_cc_compile_cached(cc, cache, name, source, options, num_options, &so,
                                          &size);
  if (st != KILN_OK) return st;
  return kcpu_cc_load(cc, kcache_dir(cache), name, so, size, out);
}

kiln_status kcpu_cc_symbol(const kcpu_cc_module *m, const char *symbol, void **out) {
  if (!m || !symbol || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_cc_symbol: module, symbol or out is NULL");
  dlerror();
  void *p = dlsym(m->handle, symbol);
  if (!p) {
    *out = NULL;
    const char *why = dlerror();
    return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_cc_symbol: kernel module %s has no symbol '%s'%s%s",
                      m->name, symbol, why ? ": " : "", why ? why : "");
  }
  *out = p;
  return KILN_OK;
}

void kcpu_cc_unload(kcpu_cc_module *m) {
  if (!m) return;
  dlclose(m->handle);
  free(m->name);
  free(m);
}

/* The same, inside an NVTX range. */
kiln_status kcpu_cc_compile(const kcpu_cc *cc, const char *name, const char *source,
                            const char *const *options, int num_options, void **so, size_t *size) {
  kcore_range_push("kiln host C compile");
  kiln_status st = kcpu_cc_compile_unranged(cc, name, source, options, num_options, so, size);
  kcore_range_pop();
  return st;
}
