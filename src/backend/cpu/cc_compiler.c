/* The host C compiler itself: finds `cc`, runs it as a child (posix_spawn,
 * stdin from /dev/null, stdout and stderr captured through a pipe; no shell,
 * so names and options are never reinterpreted), and asks it once who it is
 * (version line, triple, what -march=native means on this CPU: all part of
 * cache keys). */
#define _GNU_SOURCE /* pipe2 and mkostemp: close-on-exec from birth, see kcpu_cc_run */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backend/cpu/cpu_backend.h"

extern char **environ;

const char *const kcpu_cc_base_flags[KCPU_CC_NUM_BASE_FLAGS] = {
    "-O3", "-march=native", "-fPIC", "-shared", "-std=c11", "-fno-math-errno", "-pipe"};

/* Linked without the C runtime's start files and libc: a kernel object
 * needs neither (no constructors; libc's functions resolve at dlopen from the
 * process, which always has libc), and skipping them halves the link, a
 * fifth of a small kernel's compile. libgcc (an archive) brings any helper
 * routine the compiler calls. libm and libmvec (the vector forms that
 * kernels/host.h declares) are named too, unless kcpu_cc_math_global made
 * them global in this process: their symbols then resolve at dlopen as
 * libc's do, and the linker skips reading them (a tenth of the compile). */
static const char *const kcpu_cc_link_named[] = {"-nostdlib",
#if defined(__GLIBC__) && defined(__x86_64__)
                                                 "-lmvec",
#endif
                                                 "-lm", "-lgcc"};
static const char *const kcpu_cc_link_global[] = {"-nostdlib", "-lgcc"};

static pthread_once_t kcpu_cc_math_once = PTHREAD_ONCE_INIT;
static bool kcpu_cc_math_is_global;

/* Once per process; the handles stay open for its life, as the kernels
 * loaded later depend on them. */
static void kcpu_cc_math_global(void) {
#if defined(__GLIBC__) && defined(__x86_64__)
  kcpu_cc_math_is_global = dlopen("libm.so.6", RTLD_NOW | RTLD_GLOBAL) &&
                           dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL);
#endif
}

static void kcpu_cc_choose_link(kcpu_cc *cc) {
  pthread_once(&kcpu_cc_math_once, kcpu_cc_math_global);
  if (kcpu_cc_math_is_global) {
    cc->link_flags = kcpu_cc_link_global;
    cc->num_link_flags = (int)(sizeof kcpu_cc_link_global / sizeof *kcpu_cc_link_global);
  } else {
    cc->link_flags = kcpu_cc_link_named;
    cc->num_link_flags = (int)(sizeof kcpu_cc_link_named / sizeof *kcpu_cc_link_named);
  }
}

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

void kcpu_cc_output_free(kcpu_cc_output *out) {
  free(out->text);
  memset(out, 0, sizeof *out);
}

/* Runs argv (argv[0] a path) with stdin from /dev/null and stdout and stderr
 * into *out; *wstatus is waitpid's status. The pipe is close-on-exec from its
 * creation: a compiler spawned meanwhile by another thread must not inherit
 * its write end, or this thread's read would wait for that compiler too. */
kiln_status kcpu_cc_run(const char *op, const char *const *argv, kcpu_cc_output *out,
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

bool kcpu_cc_succeeded(int wstatus) {
  return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
}

const char *kcpu_cc_describe(int wstatus, char *buf, size_t cap) {
  if (WIFEXITED(wstatus))
    snprintf(buf, cap, "exited with status %d", WEXITSTATUS(wstatus));
  else if (WIFSIGNALED(wstatus))
    snprintf(buf, cap, "was killed by signal %d", WTERMSIG(wstatus));
  else
    snprintf(buf, cap, "ended with wait status %d", wstatus);
  return buf;
}

kiln_status kcpu_argv_new(const kcpu_cc *cc, int extra, kcpu_argv *a) {
  a->cap = cc->num_words + extra + 1;
  a->n = 0;
  if (!(a->v = malloc((size_t)a->cap * sizeof *a->v)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc: out of host memory");
  a->v[a->n++] = cc->path;
  for (int i = 1; i < cc->num_words; i++) a->v[a->n++] = cc->words[i];
  a->v[a->n] = NULL;
  return KILN_OK;
}

void kcpu_argv_push(kcpu_argv *a, const char *s) {
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

/* What the queries found, per compiler path, for the life of the process:
 * every context (and every virtual CPU device set) would otherwise spawn
 * the same three compiler processes again before its first compile. */
#define KCPU_CC_MEMO 4
static struct {
  char *path, *version, *target;
} kcpu_cc_memo[KCPU_CC_MEMO];
static pthread_mutex_t kcpu_cc_memo_lock = PTHREAD_MUTEX_INITIALIZER;

static bool kcpu_cc_recall(kcpu_cc *cc) {
  bool found = false;
  pthread_mutex_lock(&kcpu_cc_memo_lock);
  for (int i = 0; i < KCPU_CC_MEMO && !found; i++) {
    if (!kcpu_cc_memo[i].path || strcmp(kcpu_cc_memo[i].path, cc->path) != 0) continue;
    cc->version = kcore_strdup(kcpu_cc_memo[i].version);
    cc->target = kcore_strdup(kcpu_cc_memo[i].target);
    found = cc->version && cc->target; /* else the queries run again */
  }
  pthread_mutex_unlock(&kcpu_cc_memo_lock);
  return found;
}

static void kcpu_cc_remember(const kcpu_cc *cc) {
  pthread_mutex_lock(&kcpu_cc_memo_lock);
  for (int i = 0; i < KCPU_CC_MEMO; i++) {
    if (kcpu_cc_memo[i].path && strcmp(kcpu_cc_memo[i].path, cc->path) != 0) continue;
    if (kcpu_cc_memo[i].path) break; /* known already */
    char *p = kcore_strdup(cc->path), *v = kcore_strdup(cc->version), *t = kcore_strdup(cc->target);
    if (p && v && t) {
      kcpu_cc_memo[i].path = p;
      kcpu_cc_memo[i].version = v;
      kcpu_cc_memo[i].target = t;
    } else { /* not remembered: the next context asks again */
      free(p);
      free(v);
      free(t);
    }
    break;
  }
  pthread_mutex_unlock(&kcpu_cc_memo_lock);
}

kiln_status kcpu_cc_new(const char *dump_dir, kiln_log_level level, kcpu_cc **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_cc_new: out is NULL");
  *out = NULL;
  kcpu_cc *cc = calloc(1, sizeof *cc);
  if (!cc) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_cc_new: out of host memory");
  cc->level = level;
  kcpu_cc_choose_link(cc);
  const char *tmp = getenv("TMPDIR");
  kiln_status st = kcpu_cc_locate(cc);
  if (st == KILN_OK && !kcpu_cc_recall(cc)) {
    free(cc->version);
    free(cc->target);
    cc->version = cc->target = NULL;
    st = kcpu_cc_query_line(cc, "--version", &cc->version);
    if (st == KILN_OK) st = kcpu_cc_query_target(cc);
    if (st == KILN_OK) kcpu_cc_remember(cc);
  }
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
