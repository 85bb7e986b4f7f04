/* run.json and the out dir's previous run. */
#define _POSIX_C_SOURCE 200809L
#include "runfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints.h"
#include "train_internal.h"

static const char kFormat[] = "\"kiln examples/train run 1\"";

/* The length of the valid UTF-8 sequence at s, or 0 (overlong forms,
 * surrogates and code points past U+10FFFF are invalid, as in JSON). */
static size_t utf8_len(const unsigned char *s) {
  size_t len = s[0] < 0xc2 ? 0 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : s[0] < 0xf5 ? 4 : 0;
  for (size_t i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
      (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
    return 0;
  return len;
}

/* s as a JSON string; bytes that are not UTF-8 (a path may hold any) become
 * U+FFFD, so that run.json, and the checkpoints' copy of it, stay UTF-8. */
static void json_string(const char *s, char *buf, size_t cap) {
  size_t n = 0;
  if (cap < 8) return;
  buf[n++] = '"';
  for (; *s && n + 8 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    size_t len = c < 0x80 ? 1 : utf8_len((const unsigned char *)s);
    if (c == '"' || c == '\\') buf[n++] = '\\', buf[n++] = (char)c;
    else if (c < 0x20) n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", c);
    else if (!len) n += (size_t)snprintf(buf + n, cap - n, "\\ufffd");
    else if (n + len + 8 < cap) {
      memcpy(buf + n, s, len);
      n += len;
      s += len - 1;
    } else break;
  }
  buf[n++] = '"';
  buf[n] = 0;
}

static void json_ints(int count, const int64_t *v, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < count && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)v[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

static run_field *add(run_record *r, const char *key, const char *flag, int checked) {
  run_field *f = &r->f[r->n++];
  f->key = key, f->flag = flag, f->checked = checked;
  return f;
}

void runfile_describe(const train_config *c, const char *train_fp, const char *test_fp,
                      run_record *r) {
  memset(r, 0, sizeof *r);
  snprintf(add(r, "format", "(the trainer's version)", 1)->value, sizeof r->f[0].value, "%s",
           kFormat);
  json_string(train_fp, add(r, "train_data", "--data (its training split)", 1)->value,
              sizeof r->f[0].value);
  json_string(test_fp, add(r, "test_data", "--data (its test split)", 1)->value,
              sizeof r->f[0].value);
  json_string(c->data_dir, add(r, "data", "--data", 0)->value, sizeof r->f[0].value);
  snprintf(add(r, "classes", "--classes", 1)->value, sizeof r->f[0].value, "%d", c->classes);
  json_ints(c->n_conv, c->conv, add(r, "conv", "--model/--conv", 1)->value, sizeof r->f[0].value);
  json_ints(c->n_hidden, c->hidden, add(r, "hidden", "--model/--hidden", 1)->value,
            sizeof r->f[0].value);
  snprintf(add(r, "batch_size", "--batch-size", 1)->value, sizeof r->f[0].value, "%lld",
           (long long)c->batch_size);
  snprintf(add(r, "seed", "--seed", 1)->value, sizeof r->f[0].value, "%u", c->seed);
  /* the shortest text that reads back as the same double */
  char *lr = add(r, "learning_rate", "--lr", 1)->value;
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(lr, sizeof r->f[0].value, "%.*g", digits, c->learning_rate);
    if (strtod(lr, NULL) == c->learning_rate) break;
  }
  snprintf(add(r, "cosine", "--cosine", 1)->value, sizeof r->f[0].value, "%s",
           c->cosine ? "true" : "false");
  /* the cosine decay spans the epochs; a constant rate lets a run go on */
  snprintf(add(r, "epochs", c->cosine ? "--epochs (the cosine decay spans them)" : "--epochs",
               c->cosine)->value, sizeof r->f[0].value,
           "%d", c->epochs);
}

kiln_status train_write_atomic(const char *path, const char *text) {
  char tmp[1200], dir[1200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  size_t n = strlen(text);
  int ok = fd >= 0 && write(fd, text, n) == (ssize_t)n && !fsync(fd);
  int err = errno;
  if (fd >= 0 && close(fd) && ok) ok = 0, err = errno;
  if (ok && rename(tmp, path)) ok = 0, err = errno;
  if (!ok) {
    unlink(tmp);
    kiln_clear_error();
    return train_fail(KILN_ERR_IO, "writing %s: %s", path, strerror(err));
  }
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) { /* the rename is durable once the directory is */
    fsync(dfd);
    close(dfd);
  }
  return KILN_OK;
}

void runfile_text(const run_record *r, char *text, size_t cap) {
  size_t n = (size_t)snprintf(text, cap, "{\n");
  for (int i = 0; i < r->n && n < cap; i++)
    n += (size_t)snprintf(text + n, cap - n, "  \"%s\": %s%s\n", r->f[i].key, r->f[i].value,
                          i + 1 < r->n ? "," : "");
  if (n < cap) snprintf(text + n, cap - n, "}\n");
}

kiln_status runfile_write(const char *dir, const run_record *r) {
  char text[RUNFILE_TEXT_MAX], path[1200];
  runfile_text(r, text, sizeof text);
  snprintf(path, sizeof path, "%s/%s", dir, RUNFILE_NAME);
  return train_write_atomic(path, text);
}

/* The value text of `key` in run.json's lines ("  "key": value[,]"), or
 * NULL. */
static const char *recorded(char *text, const char *key, char *buf, size_t cap) {
  char pattern[80];
  snprintf(pattern, sizeof pattern, "\n  \"%s\": ", key);
  const char *at = strstr(text, pattern);
  if (!at) return NULL;
  at += strlen(pattern);
  size_t len = strcspn(at, "\n");
  if (len && at[len - 1] == ',') len--;
  snprintf(buf, cap, "%.*s", (int)len, at);
  return buf;
}

kiln_status runfile_check(const char *dir, const run_record *r, int *found) {
  char path[1200], text[RUNFILE_MAX_FIELDS * 1200], was[1200];
  snprintf(path, sizeof path, "%s/%s", dir, RUNFILE_NAME);
  FILE *f = fopen(path, "r");
  *found = f != NULL;
  if (!f) return KILN_OK;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  kiln_clear_error();
  for (int i = 0; i < r->n; i++) {
    const run_field *fd = &r->f[i];
    const char *old = recorded(text, fd->key, was, sizeof was);
    if (!old && fd->checked)
      return train_fail(KILN_ERR_ARGUMENT, "%s records no \"%s\" (%s)", path, fd->key, fd->flag);
    if (!old || !strcmp(old, fd->value)) continue;
    if (!fd->checked) {
      fprintf(stderr, "train: note: %s is %s, the run recorded %s\n", fd->flag, fd->value, old);
      continue;
    }
    return train_fail(KILN_ERR_ARGUMENT,
                      "%s is %s, but the run in %s was started with %s (%s: %s); resume with "
                      "its settings, or --overwrite to start afresh",
                      fd->flag, fd->value, dir, old, path, fd->key);
  }
  return KILN_OK;
}

static const char *const kRunFiles[] = {"metrics.jsonl", RUNFILE_NAME, CKPT_POINTER,
                                        "checkpoint.safetensors" /* before step names */};

/* One of the files a run writes, or a temporary one of them. */
static int ours(const char *name) {
  for (size_t i = 0; i < sizeof kRunFiles / sizeof *kRunFiles; i++) {
    size_t n = strlen(kRunFiles[i]);
    if (!strncmp(name, kRunFiles[i], n) && (!name[n] || !strncmp(name + n, ".tmp.", 5))) return 1;
  }
  /* checkpoint_<step>, and checkpoint-<step> as the trainer named them before */
  return (!strncmp(name, "checkpoint_", 11) || !strncmp(name, "checkpoint-", 11)) &&
         strstr(name, ".safetensors");
}

void outdir_previous_run(const char *dir, char *buf, size_t cap) {
  size_t n = 0, ckpts = 0;
  int64_t *steps = ckpt_list(dir, &ckpts);
  free(steps);
  buf[0] = 0;
  for (size_t i = 0; i < sizeof kRunFiles / sizeof *kRunFiles && n < cap; i++) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, kRunFiles[i]);
    if (!access(path, F_OK))
      n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", kRunFiles[i]);
  }
  if (ckpts && n < cap)
    snprintf(buf + n, cap - n, "%s%zu checkpoint%s", n ? ", " : "", ckpts, ckpts > 1 ? "s" : "");
}

/* Removes our files (or only our temporaries, which a killed run leaves). */
static kiln_status remove_ours(const char *dir, int temporaries_only) {
  DIR *d = opendir(dir);
  if (!d) return KILN_OK;
  kiln_status s = KILN_OK;
  for (struct dirent *e; !s && (e = readdir(d));) {
    if (!ours(e->d_name) || (temporaries_only && !strstr(e->d_name, ".tmp."))) continue;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) && errno != ENOENT) {
      kiln_clear_error();
      s = train_fail(KILN_ERR_IO, "removing %s: %s", path, strerror(errno));
    }
  }
  closedir(d);
  return s;
}

kiln_status outdir_clear(const char *dir) { return remove_ours(dir, 0); }

/* ---- the out dir's policy ---- */

static int make_dirs(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0777) && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

static kiln_status refuse(train_summary *sum, const char *fmt, const char *a, const char *b) {
  sum->outcome = TRAIN_REFUSED;
  kiln_clear_error();
  return train_fail(KILN_ERR_ARGUMENT, fmt, a, b);
}

/* An exclusive flock on dir/.train.lock, held while fd stays open (the
 * kernel drops it when the process dies, however it dies). */
static kiln_status lock_dir(const char *dir, train_summary *sum, int *fd) {
  char path[1200], pid[32] = "";
  snprintf(path, sizeof path, "%s/%s", dir, RUNFILE_LOCK);
  *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (*fd < 0) {
    kiln_clear_error();
    return train_fail(KILN_ERR_IO, "opening %s: %s", path, strerror(errno));
  }
  if (flock(*fd, LOCK_EX | LOCK_NB) == 0) {
    snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(*fd, 0) == 0 && pwrite(*fd, pid, strlen(pid), 0) < 0) pid[0] = 0;
    return KILN_OK;
  }
  if (errno != EWOULDBLOCK) { /* a file system without locks: go on unguarded */
    fprintf(stderr, "train: warning: cannot lock %s (%s); nothing keeps a second train out\n",
            path, strerror(errno));
    return KILN_OK;
  }
  ssize_t n = pread(*fd, pid, sizeof pid - 1, 0);
  pid[n > 0 ? strcspn(pid, "\n") : 0] = 0;
  close(*fd);
  *fd = -1;
  return refuse(sum, "%s is in use by another train (pid %s)", dir, *pid ? pid : "unknown");
}

kiln_status outdir_prepare(const train_config *cfg, train_summary *sum, int *resuming,
                           int *lock_fd) {
  if (make_dirs(cfg->out_dir)) {
    kiln_clear_error();
    return train_fail(KILN_ERR_IO, "creating %s: %s", cfg->out_dir, strerror(errno));
  }
  kiln_status s = lock_dir(cfg->out_dir, sum, lock_fd);
  if (!s) s = remove_ours(cfg->out_dir, 1); /* no other run writes here now */
  if (s) return s;
  char previous[512];
  size_t ckpts = 0;
  free(ckpt_list(cfg->out_dir, &ckpts));
  outdir_previous_run(cfg->out_dir, previous, sizeof previous);
  if (cfg->resume == TRAIN_RESUME && !ckpts)
    return refuse(sum, "--resume: %s holds no checkpoint to resume (%s)", cfg->out_dir,
                  *previous ? previous : "nothing of a previous run");
  *resuming = cfg->resume != TRAIN_FRESH && ckpts;
  if (*resuming || !*previous) return KILN_OK;
  if (cfg->resume == TRAIN_FRESH && !cfg->overwrite)
    return refuse(sum, "%s holds a previous run (%s): --resume continues it, --overwrite "
                  "replaces it", cfg->out_dir, previous);
  /* --overwrite, or --resume=auto over a run that saved no checkpoint */
  return outdir_clear(cfg->out_dir);
}

kiln_status runfile_settle(const train_config *cfg, int resuming, const char *train_fp,
                           const char *test_fp, train_summary *sum, char *text, size_t cap) {
  run_record rec;
  runfile_describe(cfg, train_fp, test_fp, &rec);
  runfile_text(&rec, text, cap);
  if (!resuming) return runfile_write(cfg->out_dir, &rec);
  int found = 0;
  kiln_status s = runfile_check(cfg->out_dir, &rec, &found);
  if (s) sum->outcome = TRAIN_REFUSED;
  if (s || found) return s;
  return refuse(sum, "%s holds checkpoints but no %s to check this run's settings against; "
                "--overwrite starts afresh", cfg->out_dir, RUNFILE_NAME);
}
