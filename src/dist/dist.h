/* dist: meshes, partition specs and shardings. The only door of src/dist;
 * prefix kdist_. Built on the public device API only. */
#ifndef KILN_SRC_DIST_H
#define KILN_SRC_DIST_H

#include "core/core.h"
#include "device/device.h"
#include "ir/ir.h"
#include "kiln/dist.h"
#include "trace/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDIST_NAME_MAX 64

struct kiln_mesh {
  _Atomic int refs; /* the creator's, and one per sharding over it */
  kiln_ctx *ctx;
  int ndim;
  int64_t shape[KILN_MESH_MAX_AXES];
  char names[KILN_MESH_MAX_AXES][KDIST_NAME_MAX];
  int64_t ndevices;
  kiln_device **devices; /* row-major over shape */
};

typedef struct kdist_entry {
  int naxes; /* 0: None */
  char axes[KILN_MESH_MAX_AXES][KDIST_NAME_MAX];
} kdist_entry;

struct kiln_pspec {
  int rank;
  kdist_entry dims[KILN_SPEC_MAX_RANK];
};

typedef enum kdist_kind { KDIST_NAMED, KDIST_SINGLE } kdist_kind;

struct kiln_sharding {
  kdist_kind kind;
  kiln_mesh *mesh;     /* NAMED */
  kiln_pspec spec;     /* NAMED; P() when replicated */
  int axis_of[KILN_SPEC_MAX_RANK][KILN_MESH_MAX_AXES]; /* mesh axis per spec name */
  kiln_device *device; /* SINGLE */
};

/* Another reference to mesh (kiln_mesh_free drops one). */
void kdist_mesh_retain(kiln_mesh *mesh);
/* The sharding an array carries: borrowed from the array, NULL for an
 * ordinary single-device array. */
const kiln_sharding *kdist_array_sharding(const kiln_array *a);

/* Where a sharding puts each block of a global array of one shape. */
typedef struct kdist_layout {
  int64_t count; /* devices of the sharding */
  int rank;
  int64_t shard_shape[KILN_MAX_RANK];
  kdev_block *blocks; /* per device, in kiln_sharding_device order */
} kdist_layout;
/* Fails (KILN_ERR_SHAPE naming the dimension) where the shape does not
 * divide; the message starts with op. */
kiln_status kdist_layout_new(const char *op, const kiln_sharding *s, int rank,
                             const int64_t *shape, kdist_layout *out);
void kdist_layout_free(kdist_layout *l);
/* A sharded array of the layout's blocks (taking references to shards),
 * carrying a copy of s. */
kiln_status kdist_wrap_shards(const char *op, const kiln_sharding *s, const kdist_layout *l,
                              kiln_dtype dtype, const int64_t *shape, kiln_array *const *shards,
                              kiln_array **out);

/* ---- trees of arrays (replicate.c) ---- */
/* Maps every leaf of a tree, each of which must be an array (else
 * KILN_ERR_TREE naming its key path); fn gets the leaf's keystr ("the root"
 * for a bare leaf) and returns a new reference. */
typedef kiln_status (*kdist_leaf_fn)(void *user, const char *where, kiln_array *x,
                                     kiln_array **out);
kiln_status kdist_map_arrays(const char *op, const kiln_tree *tree, kdist_leaf_fn fn, void *user,
                             kiln_tree **out);
/* The same, keeping as they are (arrays or not) the leaves whose path keep
 * accepts. */
typedef bool (*kdist_keep_fn)(const void *user, const kiln_path *path);
kiln_status kdist_map_arrays_except(const char *op, const kiln_tree *tree, kdist_keep_fn keep,
                                    const void *keep_user, kdist_leaf_fn fn, void *user,
                                    kiln_tree **out);
/* keystr of p, or "the root"; returns buf. */
const char *kdist_path_name(const kiln_path *p, char *buf, size_t cap);
/* The sharding pmap's layout uses: a one-axis mesh over the devices (NULL:
 * all of ctx's), arrays split along axis 0. */
kiln_status kdist_stack_sharding(const char *op, kiln_ctx *ctx, int ndevices,
                                 kiln_device *const *devices, kiln_sharding **out);
/* Makes the context's jitted programs run shard_map across its devices
 * (spmd_run.c); idempotent. On CPU devices: one thread per device of the
 * mesh, the body compiled once per device and the collectives through the
 * CPU rendezvous. On a backend with kdev_coll_ops (CUDA): in lockstep
 * (spmd_lockstep.c); fails naming the collective library when it is not
 * usable. Other backends are KILN_ERR_UNIMPLEMENTED. */
kiln_status kdist_spmd_install(kiln_ctx *ctx);

/* ---- shard_map across devices (spmd_*.c) ---- */
/* Runs shard_map equation e on CPU devices over shards already in place:
 * local[d * (n_in + n_out) + k] is device d's buffer of body invar k, then
 * of its outvars (host memory, never NULL); in/out carry the global types
 * only. env: the program's (its host callbacks). donated (per body invar;
 * NULL: none): the body is compiled to let outputs take those invars'
 * memory, each output where kdist_spmd_donors says (its local buffer must
 * then be the donor's). */
kiln_status kdist_spmd_run_local(kiln_ctx *ctx, const kir_eval_env *env, const kir_eqn *e,
                                 const kir_buffer *in, kir_buffer *out, const bool *donated,
                                 void *const *local);
/* Per body outvar k, the donated body invar whose memory it takes in
 * kdist_spmd_run_local with the same arguments (-1: none; all -1 for a
 * body on the reference evaluators). Compiles the body if needed. */
kiln_status kdist_spmd_donors(kiln_ctx *ctx, const kir_eqn *e, const kir_buffer *in,
                              const kir_buffer *out, const bool *donated, int *donor);
/* The shard_map equation e alone as a program's text, so that a copy parsed
 * back from it owns a body whose collectives are bound (malloc'ed; NULL:
 * out of memory). */
char *kdist_shard_map_text(const kir_eqn *e, const kir_buffer *in, const kir_buffer *out);
/* ---- the one mapping from a collective equation to the backend's call
 * (spmd_collective.c), for the threaded and the lockstep runners ---- */
/* The mesh axes collective e runs over, as indices: ppermute numbers its
 * ranks in mesh order (as JAX), the others in the order named. */
kiln_status kdist_coll_axes(const kir_mesh *m, const kir_eqn *e, int *na, int *ax);
/* The rank along axes ax[na] of the device at coord (axis_index), and its
 * group (*color, may be NULL): its coordinates on the other axes. */
int kdist_coll_rank(const kir_mesh *m, const int64_t *coord, int na, const int *ax, int *color);
/* The groups of mesh m along axes ax[na]: n_groups of `size` devices. */
typedef struct kdist_coll_groups {
  char axes[KIR_MESH_MAX_AXES * (KIR_AXIS_NAME_MAX + 1)]; /* "data,model": the backend's key */
  int na, ax[KIR_MESH_MAX_AXES];
  int64_t size, n_groups;
  int *color, *rank; /* per device of the mesh: its group and its rank in it */
} kdist_coll_groups;
kiln_status kdist_coll_groups_new(const kir_mesh *m, int na, const int *ax, kdist_coll_groups *g);
void kdist_coll_groups_free(kdist_coll_groups *g);
/* Operand a -> result o of collective e over groups g as the backend's
 * call: kind, reduction, count, layout moves; a ppermute's pairs are
 * parsed into `pairs` (room for g->size). c points into g and pairs. */
kiln_status kdist_coll_describe(const kir_eqn *e, const kir_aval *a, const kir_aval *o,
                                const kdist_coll_groups *g, int (*pairs)[2], kdev_coll *c);

/* Device `coords`' shard of global (split by spec, of type shard) when it
 * is one contiguous run of global's memory: *data points at it (no copy). */
bool kdist_shard_view(const kir_mesh *m, const int64_t *coords, const kir_spec *spec,
                      const kir_buffer *global, const kir_aval *shard, void **data);

/* The collective groups of a CPU shard_map call (spmd_groups.c): one set
 * per set of mesh axes its body's collectives span, run through the
 * backend's threaded collectives on a mesh of the call's own. */
typedef struct kdist_spmd_run {
  kir_mesh m;
  int64_t n;
  double timeout_s; /* the context's collective_timeout_s */
  int n_sets;
  kdist_coll_groups *sets;
  const kdev_coll_ops *coll; /* the backend's (static: outlives the context) */
  void *mesh;                /* NULL: the body has no collective that exchanges data */
  _Atomic bool abandoned; /* a device of the last call was left behind */
} kdist_spmd_run;
/* The groups every collective of body needs and the backend's mesh for
 * them (r->m, n, timeout_s and coll set; coll NULL: the backend runs no
 * collectives, an error where the body has some). */
kiln_status kdist_groups_build(kdist_spmd_run *r, kdev_backend *be, const kir_program *body);
kdist_coll_groups *kdist_groups_find(kdist_spmd_run *r, int na, const int *ax);
void kdist_groups_free(kdist_spmd_run *r);

/* A CPU shard_map call's frame (spmd_frame.c): what a call over a mesh
 * needs besides its values: the groups, each device's run and buffers, and
 * memory of their own for the shards that are not views of the global
 * buffers. A cached body keeps its frame between calls (nothing allocated,
 * no thread created per step). */
typedef struct kdist_device_run kdist_device_run;
/* What a device's evaluators see as env->user: the call it takes part in
 * (a cached executable keeps its env, so the slot outlives the call). */
typedef struct kdist_device_slot {
  kdist_device_run *cur;
} kdist_device_slot;
struct kdist_device_run {
  kdist_spmd_run *run;
  int64_t d;
  int64_t coord[KIR_MESH_MAX_AXES];
  kir_eval_env env; /* the caller's, with the device evaluators and a slot as user */
  kdist_device_slot own; /* the slot when no cached executable runs the body */
  const kir_program *body;
  kdev_exec *x; /* the body compiled for this device; NULL: the reference evaluators */
  const kdev_exec_ops *ops;
  kir_buffer *in, *out;
  kiln_status st;
  bool timed_out; /* a collective of this device timed out */
  _Atomic bool in_rendezvous;
  kdev_watch watch; /* steps: equations, executable steps and collectives done;
                       cancel: the run's `abandoned` */
  char msg[1024];
};
struct kdist_spmd_state;
typedef struct kdist_frame {
  kdist_spmd_run run;
  struct kdist_spmd_state *state; /* what an abandoned device holds a reference to */
  bool fenced;    /* every buffer is the frame's own (the reference evaluators) */
  bool *left;     /* per device: abandoned by the last call */
  char why[1024]; /* then: why */
  /* The program's host callbacks as the call began: a late device reads
   * these, not the program's table (freed with the program). */
  ktr_host_table hosts;
  size_t nio; /* the body's invars then outvars */
  kir_spec *specs;
  kdist_device_run *devs;
  kir_buffer *bufs; /* per device, nio */
  void **own;       /* per buffer: its own memory, made on first need */
} kdist_frame;
/* A frame for shard_map p (its collectives on be's mesh, NULL: none, wait
 * timeout_s). */
kiln_status kdist_frame_new(const kir_p_shard_map *p, struct kdist_spmd_state *state,
                            kdev_backend *be, double timeout_s, bool fenced, kdist_frame **out);
void kdist_frame_free(kdist_frame *f); /* NULL is allowed */
/* Points device d's buffer k at its shard of the global value g where that
 * is one run of g's memory (a result only where d writes it back and no
 * operand shares the memory; never when fenced), else at the buffer's own
 * memory (an operand copied in). */
kiln_status kdist_frame_bind(kdist_frame *f, int64_t d, size_t k, const kir_buffer *g,
                             const kir_buffer *in, int n_in);
/* A fenced call over the shards themselves (local, as
 * kdist_spmd_run_local's): every buffer the frame's own, the operands
 * copied in (out = false) or the results out. */
kiln_status kdist_frame_fence(kdist_frame *f, int n_in, void *const *local, bool out);
/* Copies the program's host-callback table h (NULL: none) into f->hosts. */
kiln_status kdist_frame_hosts(kdist_frame *f, const ktr_host_table *h);
/* The call's error: the first device that failed on its own (not because
 * another did), else the first collective's; with a device left behind
 * (stuck >= 0), which ones (and f->why: the reason). KILN_OK: none. */
kiln_status kdist_frame_error(kdist_frame *f, const kir_eqn *e, int64_t stuck);

/* Persistent worker threads of the CPU shard_map runner (spmd_workers.c). */
typedef struct kdist_workers kdist_workers;
typedef void (*kdist_work_fn)(void *arg, int i);
typedef struct kdist_call {
  kdist_work_fn fn; /* fn(arg, i) for each device i, each on a thread */
  /* Once device i has finished: how many seconds the others still get
   * (i = -1: the longest a device waiting in a rendezvous takes). */
  double (*grace)(void *arg, int i);
  /* Whether device i waits in a rendezvous (it comes back by itself, so it
   * is not abandoned: the others get that long again). */
  bool (*waiting)(void *arg, int i);
  /* Device i's progress: a count that moves with each step it finishes. A
   * device that moved within the last period is not judged stuck (the
   * others get grace(-1) more); while no device has finished, a grace(-1)
   * in which no running device moved (none waiting) ends the call. */
  uint64_t (*progress)(void *arg, int i);
  /* Device i is being abandoned (called before its thread is detached and
   * before the call returns): tell it to stop, hold what it may touch. */
  kdist_work_fn give_up;
  /* Called by the thread of an abandoned device once fn returns (late):
   * it releases what the thread held. NULL: nothing to do. */
  kdist_work_fn left;
  void *arg;
} kdist_call;
/* n threads, one per device index. */
kiln_status kdist_workers_new(int n, kdist_workers **out);
/* Joins the idle threads; abandoned ones are detached, not waited for.
 * NULL is allowed. */
void kdist_workers_free(kdist_workers *w);
/* Runs c for devices 0..n-1 on w's threads (on threads of its own where w is
 * NULL, busy or too small) while the caller waits. Once a device finishes,
 * the others have c->grace seconds; those that have not finished by then
 * (while none waits in a rendezvous and none of them moved in that time)
 * are abandoned (left[i] set): their
 * threads are detached, and whenever they return they call c->left and
 * exit. KILN_OK once every device
 * finished or was abandoned; an error (nothing ran) where threads cannot
 * start or w left a device behind in an earlier call. */
kiln_status kdist_workers_run(kdist_workers *w, int n, const kdist_call *c, bool *left);
/* The first device an earlier call of w abandoned; -1: none. */
int kdist_workers_stuck(kdist_workers *w);

/* A body split for lockstep execution: the equations between two
 * collectives as one program compiled for every device, and each
 * collective (axis_index too) as a step of its own. */
typedef enum kdist_step_kind {
  KDIST_STEP_COMPUTE,
  KDIST_STEP_COLLECTIVE,
  KDIST_STEP_COPY, /* a reshape: the operand's bytes copied on the device */
  KDIST_STEP_CONTROL /* a cond, while or scan whose bodies hold collectives */
} kdist_step_kind;
struct kdist_plan;
typedef struct kdist_step {
  kdist_step_kind kind;
  const kir_eqn *e;  /* COLLECTIVE, COPY: the body's equation */
  kir_program *prog; /* COMPUTE: its equations as a root program */
  int n_in, n_out;
  kir_vid *in, *out; /* COMPUTE: the body vars it reads, and those later steps read */
  bool *donated;     /* COMPUTE: per invar, all false */
  kdev_exec **x;     /* COMPUTE: per device */
  /* CONTROL: a plan per sub-program: cond's branches, while's cond then
   * body, scan's body. */
  int n_sub;
  struct kdist_plan **sub;
} kdist_step;

typedef struct kdist_plan {
  char *text; /* kdist_shard_map_text: the cache key, with n (NULL: a sub-plan) */
  int64_t n;  /* devices */
  kir_program *prog; /* parsed from text: owns body (NULL: a sub-plan) */
  const kir_program *body;
  char where[72]; /* a sub-plan's place in names: ".<step>.<sub-program>", nested */
  int n_steps;
  kdist_step *steps;
  struct kdist_plan *next;
} kdist_plan;

/* Splits and compiles (for the context's first n devices). Bodies with
 * effects, or with collectives nested elsewhere than in cond, while and
 * scan, are KILN_ERR_UNIMPLEMENTED. */
kiln_status kdist_plan_build(kiln_ctx *ctx, const char *text, int64_t n, kdist_plan **out);
void kdist_plan_free(kiln_ctx *ctx, kdist_plan *p); /* NULL is allowed */
void kdist_step_free(kiln_ctx *ctx, int64_t n, kdist_step *s);

/* The lockstep runner of a context: its plans and its collective mesh. */
typedef struct kdist_lockstep kdist_lockstep;
kiln_status kdist_lockstep_new(kiln_ctx *ctx, kdist_lockstep **out);
void kdist_lockstep_free(kdist_lockstep *ls); /* NULL is allowed */
/* Evaluates shard_map equation e on global host values in -> out. */
kiln_status kdist_lockstep_run(kdist_lockstep *ls, const kir_eqn *e, const kir_buffer *in,
                               kir_buffer *out);
/* One lockstep run of a plan: every device's value of each var of the
 * plan's program (a sub-plan runs in a scope of its own). */
typedef struct kdist_lock_call {
  kiln_ctx *ctx;
  const kdist_plan *p;
  kir_mesh m;
  void *mesh;        /* the backend's collective mesh */
  kiln_array **vals; /* [d * p->body->n_vars + v], references */
  bool *used_mesh;   /* collectives were queued on the mesh (shared by the scopes) */
} kdist_lock_call;
/* Device d's value of v (borrowed; a literal is uploaded on first use). */
kiln_status kdist_lock_value(kdist_lock_call *c, int64_t d, kir_vid v, kiln_array **out);
/* Sets device d's value of v, taking the reference a. */
void kdist_lock_set(kdist_lock_call *c, int64_t d, kir_vid v, kiln_array *a);
/* Runs sub-plan sub in a scope of its own over args[d * n_invars + k]
 * (borrowed); res[d * n_outvars + k] receives new references. */
kiln_status kdist_lock_run_sub(kdist_lock_call *c, const kdist_plan *sub, kiln_array *const *args,
                               kiln_array **res);
/* Waits for the collectives queued on the mesh so far (bounded by the
 * timeout): before the host reads a value that one may write. */
kiln_status kdist_lock_sync(kdist_lock_call *c);
/* A control step (spmd_control.c): the branch every device takes, or the
 * loop's iterations, each through its sub-plan. */
kiln_status kdist_control_run(kdist_lock_call *c, const kdist_step *s);

/* ---- jit over sharded arguments (jit_shard.c, jit_shard_plan.c) ---- */
/* Lends the context's jit the hooks that run calls with sharded leaves or
 * in/out shardings (krt_shard_hooks); idempotent. */
void kdist_jit_install(kiln_ctx *ctx);
/* How a value is split over a mesh: the mesh axes (indices) dividing each
 * dimension, as a partition spec's entries; all zero: replicated. */
typedef struct kdist_split {
  int8_t na[KILN_MAX_RANK];
  int8_t ax[KILN_MAX_RANK][KILN_MESH_MAX_AXES];
} kdist_split;
/* The program each device runs when prog (jit(fname), over global types)
 * runs shard by shard with its invars split as in[]: a new program over
 * per-shard types, and each outvar's split. Where an equation is neither
 * elementwise nor keeps the split dimensions, KILN_ERR_UNIMPLEMENTED
 * naming it, the dimension and the mesh axis (use shard_map). */
struct kir_program;
kiln_status kdist_shard_program(const char *fname, const kiln_mesh *mesh,
                                const struct kir_program *prog, const kdist_split *in,
                                kdist_split *out_splits, struct kir_program **out);

/* Spec k of a " | "-separated list (a shard_map's in_specs), into buf. */
void kdist_nth_spec(const char *specs, int k, char *buf, size_t cap);
/* The invar index of v in g, -1 if v is not an invar. */
int kdist_invar_index(const struct kir_program *g, kir_vid v);

/* Whether f is a function kiln_shard_map (shard_map.c) or kiln_pmap
 * (pmap.c) made. */
bool kdist_is_shard_map(const kiln_func *f);
bool kdist_is_pmap(const kiln_func *f);

/* jit(shard_map) on CPU devices (jit_shard_map.c). */
typedef struct kdist_smap_plan kdist_smap_plan;
struct krt_program;
/* A plan where p's program is one shard_map over its arguments, returning
 * its results; *out NULL otherwise. Its mesh is that of the context's
 * first devices (a leaf's mesh where one is laid out over it). eff: per
 * leaf, its sharding (NULL: none). */
kiln_status kdist_smap_plan_new(const struct krt_program *p, const kiln_sharding *const *eff,
                                kdist_smap_plan **out);
void kdist_smap_plan_free(kdist_smap_plan *pl); /* NULL is allowed */
/* Lays each operand out as its in_spec (no copy where it is), runs every
 * device over its shards and sets res[k] to result k sharded as its
 * out_spec. env: the program's. args: every argument leaf. A donated
 * leaf (the program's donation mask) whose shards are the operand's gives
 * them to the results and is deleted; one laid out otherwise is not
 * (warned once; its resharded copy is donated instead). */
kiln_status kdist_smap_call(const kdist_smap_plan *pl, const kir_eval_env *env,
                            kiln_array *const *args, kiln_array **res);

/* Copies a name checked for length and emptiness; `what` names the caller. */
kiln_status kdist_copy_name(const char *what, const char *name, char dst[KDIST_NAME_MAX]);

#ifdef __cplusplus
}
#endif
#endif
