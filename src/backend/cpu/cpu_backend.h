/* backend/cpu: virtual CPU devices over host memory. The only door of
 * src/backend/cpu; prefix kcpu_. */
#ifndef KILN_SRC_BACKEND_CPU_H
#define KILN_SRC_BACKEND_CPU_H

#include "device/device.h"
#include "ir/ir.h"
#include "kcache/kcache.h"

/* Opens config->opts.num_cpu_devices virtual devices into b, with the
 * executables of the C target. On failure nothing is left allocated. */
kiln_status kcpu_backend_open(const kcore_config *config, kdev_backend *b);

/* ==== executables (exec.c) ==== */
/* The backend's state: the host compiler and one thread pool per device
 * (sized by its info.multiprocessors, its share of the cores), made on
 * first use, so that devices run their programs side by side. */
typedef struct kcpu_state kcpu_state;
kiln_status kcpu_state_new(const kdev_backend *b, kcpu_state **out);
void kcpu_state_free(kcpu_state *s);
/* The C target's executables, run on host views (run_host). */
extern const kdev_exec_ops kcpu_exec_ops;
/* The plan and every C kernel source for arch "host", "c" or this host's
 * architecture ("x86_64"), with no device (lower_text.c). */
kiln_status kcpu_lowered_text(const kcore_config *config, kcache *cache, const kir_program *p,
                              const bool *donated, const char *arch, char **text);
/* ==== end of executables ==== */

/* Buffers are aligned for the widest vector loads the C target emits. */
#define KCPU_ALIGNMENT 64

/* ==== thread pool (pool.c) ====
 * Splits a range of work items across a fixed set of threads. */
typedef struct kcpu_pool kcpu_pool;
/* Works on items [begin, end); returns a status (the first failure wins). */
typedef kiln_status (*kcpu_range_fn)(void *user, int64_t begin, int64_t end);
/* n_threads counts the caller, which runs the first chunk itself. */
kiln_status kcpu_pool_new(int n_threads, kcpu_pool **out);
void kcpu_pool_free(kcpu_pool *p);
int kcpu_pool_threads(const kcpu_pool *p);
/* Runs fn over [begin, end) in one contiguous chunk per thread, inline when
 * the range has fewer than 2 * min_chunk items; waits for every chunk. One
 * call at a time per pool (concurrent callers take turns). */
kiln_status kcpu_pool_parallel_for(kcpu_pool *p, int64_t begin, int64_t end, int64_t min_chunk,
                                   kcpu_range_fn fn, void *user);
/* ==== end of thread pool ==== */

/* ==== host C compiler (cc_compiler.c, cc_jit.c) ====
 * Compiles C sources with the system compiler into shared objects, returned
 * as bytes so that the kernel cache can keep them, and loads them. */
typedef struct kcpu_cc kcpu_cc;               /* a compiler: command, version, target */
typedef struct kcpu_cc_module kcpu_cc_module; /* a loaded shared object */

/* Whether a host compiler exists: $CC (split on blanks, its first word found
 * on PATH unless it has a slash), else `cc` on PATH. Runs nothing. */
bool kcpu_cc_available(void);
/* Finds the compiler (as kcpu_cc_available) and queries its version line,
 * triple and -march=native CPU once. No compiler is KILN_ERR_COMPILE "no host
 * C compiler" (callers fall back to the reference executor). `dump_dir`
 * (may be NULL) receives every source compiled. */
kiln_status kcpu_cc_new(const char *dump_dir, kiln_log_level level, kcpu_cc **out);
void kcpu_cc_free(kcpu_cc *cc);
const char *kcpu_cc_version(const kcpu_cc *cc); /* `cc --version`'s first line */
/* "x86_64-linux-gnu -march=native cpu:<digest of the CPU's feature macros>" */
const char *kcpu_cc_target(const kcpu_cc *cc);
const char *kcpu_cc_flags(const kcpu_cc *cc); /* the flags every compile uses */

/* The cache key of a compile: source, target, version, flags and options. */
kiln_status kcpu_cc_key(const kcpu_cc *cc, const char *source, const char *const *options,
                        int num_options, kcache_key *out);
/* Compiles `source` with the flags and `options` into a shared object:
 * *so from malloc, the caller frees it. `name` names files and messages. A
 * failure is KILN_ERR_COMPILE with the compiler's log (truncated) and the
 * path of the source, kept for inspection. */
kiln_status kcpu_cc_compile(const kcpu_cc *cc, const char *name, const char *source,
                            const char *const *options, int num_options, void **so, size_t *size);
/* kcpu_cc_compile through the cache: *so belongs to the cache. */
kiln_status kcpu_cc_compile_cached(const kcpu_cc *cc, kcache *cache, const char *name,
                                   const char *source, const char *const *options, int num_options,
                                   const void **so, size_t *size);
/* Loads a shared object's bytes: writes them to a private file in `dir`
 * (NULL: $TMPDIR, else /tmp), dlopens it and removes the file. The
 * directory must allow mapping code (not mounted noexec). */
kiln_status kcpu_cc_load(const kcpu_cc *cc, const char *dir, const char *name, const void *so,
                         size_t size, kcpu_cc_module **out);
/* Compiles through the cache and loads, in the cache's directory when it has one. */
kiln_status kcpu_cc_jit(const kcpu_cc *cc, kcache *cache, const char *name, const char *source,
                        const char *const *options, int num_options, kcpu_cc_module **out);
/* The address of a symbol; a missing one is KILN_ERR_ARGUMENT naming it. */
kiln_status kcpu_cc_symbol(const kcpu_cc_module *m, const char *symbol, void **out);
void kcpu_cc_unload(kcpu_cc_module *m);
/* ==== end of host C compiler ==== */

/* ==== inside the host C compiler (cc_compiler.c, cc_jit.c) ==== */
#define KCPU_CC_MAX_WORDS 32         /* words in $CC */
#define KCPU_CC_OUTPUT_CAP (1 << 20) /* bytes of a child's output kept */
#define KCPU_CC_MESSAGE_LOG 2500     /* bytes of a compiler log put in a message */
#define KCPU_CC_NAME_MAX 64          /* characters of a kernel name in file names */

/* Every compile; -fPIC -shared make a loadable object, -fno-math-errno lets
 * math calls vectorize (kernels never read errno), -pipe runs the assembler
 * beside the compiler instead of after it (the machine's other core). */
#define KCPU_CC_NUM_BASE_FLAGS 7
extern const char *const kcpu_cc_base_flags[KCPU_CC_NUM_BASE_FLAGS];

struct kcpu_cc {
  char *command;                   /* $CC or "cc", split in place into words */
  char *words[KCPU_CC_MAX_WORDS];  /* words[0] is the command as given */
  int num_words;
  char *path;     /* words[0] found on PATH */
  char *version;  /* `cc --version`'s first line */
  char *target;   /* triple, -march=native and a digest of the CPU features it enables */
  char *flags;    /* kcpu_cc_base_flags joined, for messages */
  const char *const *link_flags; /* after the source; part of every key (cc_compiler.c) */
  int num_link_flags;
  char *tmp_dir;  /* $TMPDIR or /tmp */
  char *dump_dir; /* NULL: sources are not dumped */
  kiln_log_level level;
};

struct kcpu_cc_module {
  void *handle;
  char *name;
};

/* A child's captured output. */
typedef struct kcpu_cc_output {
  char *text; /* NUL-terminated */
  size_t size;
  size_t dropped; /* bytes past KCPU_CC_OUTPUT_CAP, read and discarded */
} kcpu_cc_output;

/* The compiler's argv: its path, the rest of its words, then `extra` groups. */
typedef struct kcpu_argv {
  const char **v;
  int n, cap;
} kcpu_argv;

/* cc_compiler.c */
void kcpu_cc_output_free(kcpu_cc_output *out);
kiln_status kcpu_cc_run(const char *op, const char *const *argv, kcpu_cc_output *out, int *wstatus);
bool kcpu_cc_succeeded(int wstatus);
const char *kcpu_cc_describe(int wstatus, char *buf, size_t cap);
kiln_status kcpu_argv_new(const kcpu_cc *cc, int extra, kcpu_argv *a);
void kcpu_argv_push(kcpu_argv *a, const char *s);
/* ==== end of inside the host C compiler ==== */
/* ==== CPU collectives (collective.c) ====
 * A group of n participants (one thread per virtual device) over one mesh
 * axis. Every participant calls the same collective with the same dtype and
 * count; results are written once all have arrived. A participant that does
 * not arrive within timeout_s, or that reports a failure (kcpu_coll_fail),
 * makes every participant fail with KILN_ERR_COLLECTIVE; the group then
 * stays broken. Reductions run in rank order: every participant gets the
 * same bits, independent of thread timing. */
typedef struct kcpu_coll_group kcpu_coll_group;
typedef enum kcpu_coll_reduce { KCPU_COLL_SUM, KCPU_COLL_MAX, KCPU_COLL_MIN } kcpu_coll_reduce;
kiln_status kcpu_coll_group_new(int n, const char *axis, double timeout_s, kcpu_coll_group **out);
void kcpu_coll_group_free(kcpu_coll_group *g);
/* Names each rank by the device it is in messages (copied; by default
 * "participant <rank>"). */
kiln_status kcpu_coll_group_name(kcpu_coll_group *g, const int64_t *device_of_rank);
/* Whether the group broke because a member did not arrive in time. */
bool kcpu_coll_timed_out(kcpu_coll_group *g);
/* Reports that participant rank cannot take part in op (why: the reason). */
kiln_status kcpu_coll_fail(kcpu_coll_group *g, int rank, const char *op, const char *why);
/* out[i] = op over ranks of in[i] (psum/pmax/pmin); out may alias in. */
kiln_status kcpu_coll_all_reduce(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out, kcpu_coll_reduce op);
/* out holds n * count elements: rank r's in at r * count (tiled on axis 0). */
kiln_status kcpu_coll_all_gather(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out);
/* psum_scatter, tiled, over dimension 0 of a flat buffer of count elements
 * (count divisible by n): rank r gets the sum of every rank's block r. */
kiln_status kcpu_coll_reduce_scatter(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                     const void *in, void *out);
/* all_to_all with split and concat axis 0: block j of rank r's count
 * elements goes to rank j, where it becomes block r. */
kiln_status kcpu_coll_all_to_all(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out);
/* pairs[i] = {source, destination}; a rank no pair sends to gets zeros. */
kiln_status kcpu_coll_ppermute(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                               const void *in, void *out, int npairs, const int (*pairs)[2]);
/* The backend interface's collectives over these groups (collective_ops.c):
 * threaded, each device's part called on its own thread. */
extern const kdev_coll_ops kcpu_coll_ops;
/* ==== end of CPU collectives ==== */

#endif
