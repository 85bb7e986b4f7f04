/* The host C compiler: finds `cc`, asks it once who it is (version line,
 * triple, what -march=native means on this CPU: all part of cache keys),
 * compiles C sources into shared objects returned as bytes (so the kernel
 * cache can keep them), and loads such bytes with dlopen.
 *
 * The compiler runs through posix_spawn with stdin from /dev/null and its
 * stdout and stderr captured through a pipe; no shell is involved, so names
 * and options are never reinterpreted. */
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

extern char **environ;

#define KCPU_CC_MAX_WORDS 32         /* words in $CC */
#define KCPU_CC_OUTPUT_CAP (1 << 20) /* bytes of a child's output kept */
#define KCPU_CC_MESSAGE_LOG 2500     /* bytes of a compiler log put in a message */
#define KCPU_CC_NAME_MAX 64          /* characters of a kernel name in file names */

/* Every compile; -fPIC -shared make a loadable object, -fno-math-errno lets
 * math calls vectorize (kernels never read errno). */
static const char *const kcpu_cc_base_flags[] = {"-O3",     "-march=native", "-fPIC",
                                                 "-shared", "-std=c11",      "-fno-math-errno"};
#define KCPU_CC_NUM_BASE_FLAGS ((int)(sizeof kcpu_cc_base_flags / sizeof *kcpu_cc_base_flags))

struct kcpu_cc {
  char *command;                   /* $CC or "cc", split in place into words */
  char *words[KCPU_CC_MAX_WORDS];  /* words[0] is the command as given */
  int num_words;
  char *path;     /* words[0] found on PATH */
  char *version;  /* `cc --version`'s first line */
  char *target;   /* triple, -march=native and a digest of the CPU features it enables */
  char *flags;    /* kcpu_cc_base_flags joined, for messages */
  char *tmp_dir;  /* $TMPDIR or /tmp */
  char *dump_dir; /* NULL: sources are not dumped */
  kiln_log_level level;
};

struct kcpu_cc_module {
  void *handle;
  char *name;
};

/* ---- finding the compiler ---- */

static const char *kcpu_cc_command(void) {
  const char *cc = getenv("CC");
  return cc && *cc ? cc : "cc";
}

/* Splits text in place on blanks; -1 when it has more than cap words. */
static int kcpu_cc_split(char *text, char **words, int cap) {
  int n = 0;
  for (char *s = text;;) {
    while (*s == ' ' || *s == '\t') *s++ = '\0';
    if (!*s) return n;
    if (n == cap) return -1;
    words[n++] = s;
    while (*s && *s != ' ' && *s != '\t') s++;
  }
}

static bool kcpu_is_executable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* A word with a slash is a path; others are looked up on PATH as a shell
 * would (an empty entry is the current directory). NULL: not found. */
static char *kcpu_cc_which(const char *word) {
  if (strchr(word, '/')) return kcpu_is_executable(word) ? kcore_strdup(word) : NULL;
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  size_t wlen = strlen(word);
  for (const char *s = path;;) {
    const char *end = strchr(s, ':');
    size_t dlen = end ? (size_t)(end - s) : strlen(s);
    char *cand = malloc(dlen + wlen + 3);
    if (!cand) return NULL;
    snprintf(cand, dlen + wlen + 3, "%.*s/%s", (int)(dlen ? dlen : 1), dlen ? s : ".", word);
    if (kcpu_is_executable(cand)) return cand;
    free(cand);
    if (!end) return NULL;
    s = end + 1;
  }
}

bool kcpu_cc_available(void) {
  char *text = kcore_strdup(kcpu_cc_command());
  char *words[KCPU_CC_MAX_WORDS];
  char *path = NULL;
  if (text && kcpu_cc_split(text, words, KCPU_CC_MAX_WORDS) > 0) path = kcpu_cc_which(words[0]);
  bool found = path != NULL;
  free(path);
  free(text);
  return found;
}

static kiln_status kcpu_cc_locate(kcpu_cc *cc) {
  const char *env = getenv("CC");
  bool from_env = env && *env;
  const char *command = kcpu_cc_command();
  if (!(cc->command = kcore_strdup(command)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_new: out of host memory");
  cc->num_words = kcpu_cc_split(cc->command, cc->words, KCPU_CC_MAX_WORDS);
  if (cc->num_words < 0)
    return kcore_fail(KILN_ERR_COMPILE, "kcpu_cc_new: $CC='%s' has more than %d words", command,
                      KCPU_CC_MAX_WORDS);
  if (cc->num_words == 0 || !(cc->path = kcpu_cc_which(cc->words[0]))) {
    if (from_env)
      return kcore_fail(KILN_ERR_COMPILE,
                        "kcpu_cc_new: no host C compiler: $CC='%s' names no executable file",
                        command);
    return kcore_fail(KILN_ERR_COMPILE, "kcpu_cc_new: no host C compiler: `cc` is not on PATH");
  }
  return KILN_OK;
}

/* ---- running a child ---- */

typedef struct kcpu_cc_output {
  char *text; /* NUL-terminated */
  size_t size;
  size_t dropped; /* bytes past KCPU_CC_OUTPUT_CAP, read and discarded */
} kcpu_cc_output;

/* Reads the pipe to its end, so that the child never blocks on a full pipe. */
static void kcpu_cc_drain(int fd, kcpu_cc_output *out) {
  size_t cap = 0;
  char scratch[4096];
  for (;;) {
    if (out->size == cap && cap < KCPU_CC_OUTPUT_CAP) {
      size_t next = cap ? cap * 2 : 8192;
      char *t = realloc(out->text, next + 1);
      if (t) out->text = t, cap = next;
    }
    bool keep = out->size < cap;
    ssize_t r = keep ? read(fd, out->text + out->size, cap - out->size)
                     : read(fd, scratch, sizeof scratch);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (keep)
      out->size += (size_t)r;
    else
      out->dropped += (size_t)r;
  }
  if (out->text) out->text[out->size] = '\0';
}

static void kcpu_cc_output_free(kcpu_cc_output *out) {
  free(out->text);
  memset(out, 0, sizeof *out);
}

/* Runs argv (argv[0] a path) with stdin from /dev/null and stdout and stderr
 * into *out; *wstatus is waitpid's status. The pipe is close-on-exec from its
 * creation: a compiler spawned meanwhile by another thread must not inherit
 * its write end, or this thread's read would wait for that compiler too. */
static kiln_status kcpu_cc_run(const char *op, const char *const *argv, kcpu_cc_output *out,
                               int *wstatus) {
  memset(out, 0, sizeof *out);
  int fds[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  bool fa_ready = false;
  kiln_status st = KILN_OK;
  pid_t pid;
  int rc;
  KCORE_IO_CHECK(pipe2(fds, O_CLOEXEC), op, argv[0], "pipe2", done);
  rc = posix_spawn_file_actions_init(&fa);
  fa_ready = rc == 0;
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  if (rc == 0) rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  if (rc != 0) {
    st = kcore_fail(KILN_ERR_COMPILE, "%s: cannot run %s: %s", op, argv[0], strerror(rc));
    goto done;
  }
  close(fds[1]);
  fds[1] = -1;
  kcpu_cc_drain(fds[0], out);
  while (waitpid(pid, wstatus, 0) < 0) {
    if (errno != EINTR) {
      st = kcore_fail(KILN_ERR_INTERNAL, "%s: waitpid on %s failed: %s", op, argv[0],
                      strerror(errno));
      break;
    }
  }
  if (st == KILN_OK && !out->text)
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for %s's output", op, argv[0]);
done:
  if (fa_ready) posix_spawn_file_actions_destroy(&fa);
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0) close(fds[1]);
  if (st != KILN_OK) kcpu_cc_output_free(out);
  return st;
}

static bool kcpu_cc_succeeded(int wstatus) {
  return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
}

static const char *kcpu_cc_describe(int wstatus, char *buf, size_t cap) {
  if (WIFEXITED(wstatus))
    snprintf(buf, cap, "exited with status %d", WEXITSTATUS(wstatus));
  else if (WIFSIGNALED(wstatus))
    snprintf(buf, cap, "was killed by signal %d", WTERMSIG(wstatus));
  else
    snprintf(buf, cap, "ended with wait status %d", wstatus);
  return buf;
}

/* The compiler's argv: its path, the rest of its words, then `extra` groups. */
typedef struct kcpu_argv {
  const char **v;
  int n, cap;
} kcpu_argv;

static kiln_status kcpu_argv_new(const kcpu_cc *cc, int extra, kcpu_argv *a) {
  a->cap = cc->num_words + extra + 1;
  a->n = 0;
  if (!(a->v = malloc((size_t)a->cap * sizeof *a->v)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc: out of host memory");
  a->v[a->n++] = cc->path;
  for (int i = 1; i < cc->num_words; i++) a->v[a->n++] = cc->words[i];
  a->v[a->n] = NULL;
  return KILN_OK;
}

static void kcpu_argv_push(kcpu_argv *a, const char *s) {
  KCORE_ASSERT(a->n + 1 < a->cap);
  a->v[a->n++] = s;
  a->v[a->n] = NULL;
}

/* Runs the compiler with `args` and returns its output's first line. */
static kiln_status kcpu_cc_query(const kcpu_cc *cc, const char *const *args, int num_args,
                                 kcpu_cc_output *out) {
  kcpu_argv a;
  kiln_status st = kcpu_argv_new(cc, num_args, &a);
  if (st != KILN_OK) return st;
  for (int i = 0; i < num_args; i++) kcpu_argv_push(&a, args[i]);
  int wstatus = 0;
  st = kcpu_cc_run("kcpu_cc_new", a.v, out, &wstatus);
  if (st == KILN_OK && !kcpu_cc_succeeded(wstatus)) {
    char how[64];
    st = kcore_fail(KILN_ERR_COMPILE, "kcpu_cc_new: `%s %s` %s: %.500s", cc->path, args[0],
                    kcpu_cc_describe(wstatus, how, sizeof how), out->text);
    kcpu_cc_output_free(out);
  }
  free(a.v);
  return st;
}

/* A copy of the first line of text, trailing blanks removed. */
static char *kcpu_first_line(const char *text) {
  size_t n = strcspn(text, "\n");
  while (n > 0 && (text[n - 1] == '\r' || text[n - 1] == ' ' || text[n - 1] == '\t')) n--;
  char *line = malloc(n + 1);
  if (line) {
    memcpy(line, text, n);
    line[n] = '\0';
  }
  return line;
}

static kiln_status kcpu_cc_query_line(const kcpu_cc *cc, const char *arg, char **line) {
  kcpu_cc_output out;
  const char *args[] = {arg};
  kiln_status st = kcpu_cc_query(cc, args, 1, &out);
  if (st != KILN_OK) return st;
  *line = kcpu_first_line(out.text);
  kcpu_cc_output_free(&out);
  if (!*line) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_new: out of host memory");
  if (!**line)
    return kcore_fail(KILN_ERR_COMPILE, "kcpu_cc_new: `%s %s` printed nothing", cc->path, arg);
  return KILN_OK;
}

/* What -march=native enables differs between machines that may share a
 * cache directory: the digest of the predefined macros it yields (__AVX2__,
 * __AVX512F__, ...) goes into the target, and so into every key. */
static kiln_status kcpu_cc_query_target(kcpu_cc *cc) {
  char *triple = NULL;
  kiln_status st = kcpu_cc_query_line(cc, "-dumpmachine", &triple);
  if (st != KILN_OK) return st;
  const char *args[] = {"-march=native", "-dM", "-E", "-x", "c", "/dev/null"};
  kcpu_cc_output out;
  st = kcpu_cc_query(cc, args, (int)(sizeof args / sizeof *args), &out);
  if (st == KILN_OK) {
    kcache_key cpu;
    kcache_digest(out.text, out.size, &cpu);
    char hex[33];
    kcache_key_hex(&cpu, hex);
    size_t n = strlen(triple) + 64;
    if ((cc->target = malloc(n)))
      snprintf(cc->target, n, "%s -march=native cpu:%.16s", triple, hex);
    else
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_new: out of host memory");
    kcpu_cc_output_free(&out);
  }
  free(triple);
  return st;
}

static char *kcpu_join(const char *const *words, int n) {
  size_t len = 1;
  for (int i = 0; i < n; i++) len += strlen(words[i]) + 1;
  char *s = malloc(len);
  if (!s) return NULL;
  s[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (i) strcat(s, " ");
    strcat(s, words[i]);
  }
  return s;
}

kiln_status kcpu_cc_new(const char *dump_dir, kiln_log_level level, kcpu_cc **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_cc_new: out is NULL");
  *out = NULL;
  kcpu_cc *cc = calloc(1, sizeof *cc);
  if (!cc) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_new: out of host memory");
  cc->level = level;
  const char *tmp = getenv("TMPDIR");
  kiln_status st = kcpu_cc_locate(cc);
  if (st == KILN_OK) st = kcpu_cc_query_line(cc, "--version", &cc->version);
  if (st == KILN_OK) st = kcpu_cc_query_target(cc);
  if (st == KILN_OK &&
      (!(cc->flags = kcpu_join(kcpu_cc_base_flags, KCPU_CC_NUM_BASE_FLAGS)) ||
       !(cc->tmp_dir = kcore_strdup(tmp && *tmp ? tmp : "/tmp")) ||
       (dump_dir && *dump_dir && !(cc->dump_dir = kcore_strdup(dump_dir)))))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_new: out of host memory");
  if (st != KILN_OK) {
    kcpu_cc_free(cc);
    return st;
  }
  kcore_log(level, KILN_LOG_DEBUG, "host compiler: %s (%s), target %s", cc->path, cc->version,
            cc->target);
  *out = cc;
  return KILN_OK;
}

void kcpu_cc_free(kcpu_cc *cc) {
  if (!cc) return;
  free(cc->command);
  free(cc->path);
  free(cc->version);
  free(cc->target);
  free(cc->flags);
  free(cc->tmp_dir);
  free(cc->dump_dir);
  free(cc);
}

const char *kcpu_cc_version(const kcpu_cc *cc) { return cc ? cc->version : NULL; }
const char *kcpu_cc_target(const kcpu_cc *cc) { return cc ? cc->target : NULL; }
const char *kcpu_cc_flags(const kcpu_cc *cc) { return cc ? cc->flags : NULL; }

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
  size_t n, got = 0;
  int fd = -1;
  KCORE_IO_CHECK(fd = open(path, O_RDONLY | O_CLOEXEC), op, path, "open", done);
  KCORE_IO_CHECK(fstat(fd, &sb), op, path, "fstat", done);
  n = (size_t)sb.st_size;
  if (!(buf = malloc(n ? n : 1))) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for %s (%zu bytes)", op, path,
                    n);
    goto done;
  }
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    KCORE_IO_CHECK(r, op, path, "read", done);
    if (r == 0) {
      st = kcore_fail(KILN_ERR_IO, "%s: %s: the file shrank while being read", op, path);
      goto done;
    }
    got += (size_t)r;
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
  kcache_key digest;
  kcache_digest(source, strlen(source), &digest);
  char hex[33], suffix[24];
  kcache_key_hex(&digest, hex);
  snprintf(suffix, sizeof suffix, ".%.16s.c", hex);
  char *path = kcpu_path_new(cc->dump_dir, safe, suffix);
  kiln_status st;
  if (!path)
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "out of host memory");
  else if (mkdir(cc->dump_dir, 0777) != 0 && errno != EEXIST)
    st = kcore_fail(KILN_ERR_IO, "%s: cannot create the directory: %s", cc->dump_dir,
                    strerror(errno));
  else
    st = kcache_write_file(path, source, strlen(source), false);
  if (st == KILN_OK) {
    job->source = path;
    job->dumped = true;
    return;
  }
  kcore_log(cc->level, KILN_LOG_WARN, "kcpu_cc_compile: cannot dump the source of %s: %s", safe,
            kiln_last_error());
  kiln_clear_error();
  free(path);
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
  kiln_status st = kcpu_argv_new(cc, KCPU_CC_NUM_BASE_FLAGS + num_options + 4, &a);
  if (st != KILN_OK) return st;
  for (int i = 0; i < KCPU_CC_NUM_BASE_FLAGS; i++) kcpu_argv_push(&a, kcpu_cc_base_flags[i]);
  for (int i = 0; i < num_options; i++) kcpu_argv_push(&a, options[i]);
  kcpu_argv_push(&a, "-o");
  kcpu_argv_push(&a, job->output);
  kcpu_argv_push(&a, job->source);
  kcpu_argv_push(&a, "-lm"); /* kernels call libm; the object then says so itself */
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

/* The key's options are the base flags followed by the caller's. */
static const char **kcpu_cc_all_options(const char *const *options, int num_options) {
  const char **all = malloc((size_t)(KCPU_CC_NUM_BASE_FLAGS + num_options) * sizeof *all);
  if (!all) return NULL;
  for (int i = 0; i < KCPU_CC_NUM_BASE_FLAGS; i++) all[i] = kcpu_cc_base_flags[i];
  for (int i = 0; i < num_options; i++) all[KCPU_CC_NUM_BASE_FLAGS + i] = options[i];
  return all;
}

kiln_status kcpu_cc_key(const kcpu_cc *cc, const char *source, const char *const *options,
                        int num_options, kcache_key *out) {
  if (!cc || !source || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_cc_key: cc, source or out is NULL");
  kiln_status st = kcpu_cc_check_options("kcpu_cc_key", options, num_options);
  if (st != KILN_OK) return st;
  const char **all = kcpu_cc_all_options(options, num_options);
  if (!all) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_key: out of host memory");
  kcache_key_parts parts = {.source = source,
                            .source_size = strlen(source),
                            .target = cc->target,
                            .compiler = cc->version,
                            .options = all,
                            .num_options = KCPU_CC_NUM_BASE_FLAGS + num_options};
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
