/* The backend interface's collectives (kdev_coll_ops, threaded) over the
 * rendezvous of collective.c: what a shard_map over CPU devices calls from
 * each device's thread. A mesh holds, per set of axes ("data,model"), one
 * rendezvous group per group of devices along them (kdev_coll's colors),
 * made by the first call that names the set and naming its members by
 * device. A device that leaves breaks its groups, and those made after.
 *
 * IR collectives act along any dimension and in any float type, the
 * rendezvous on rank-major buffers: the operand moves to rank-major first
 * and the result back after (kdev_coll's layout moves), and 16-bit floats
 * are reduced in float32 (as XLA does). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"

typedef struct axis_set {
  char *axes;
  int n_groups, size;
  int *color, *rank; /* per device of the mesh */
  kcpu_coll_group **g;
  struct axis_set *next;
} axis_set;

typedef struct cpu_mesh {
  int n;
  double timeout_s;
  pthread_mutex_t mu; /* guards making sets and `left` */
  /* Sets are published whole and never change: looked up without mu. */
  _Atomic(axis_set *) sets;
  char **left;             /* per device: why it left (NULL: it did not) */
  _Atomic bool *timed_out; /* per device: its last failed part timed out */
} cpu_mesh;

static void set_free(axis_set *s) {
  for (int i = 0; s->g && i < s->n_groups; i++) kcpu_coll_group_free(s->g[i]);
  free(s->g), free(s->color), free(s->rank), free(s->axes), free(s);
}

static void coll_mesh_free(void *mesh) {
  cpu_mesh *m = mesh;
  if (!m) return;
  for (axis_set *s = atomic_load(&m->sets), *next; s; s = next) next = s->next, set_free(s);
  for (int d = 0; m->left && d < m->n; d++) free(m->left[d]);
  pthread_mutex_destroy(&m->mu);
  free(m->left), free((void *)m->timed_out), free(m);
}

static kiln_status coll_probe(kdev_backend *b) {
  (void)b;
  return KILN_OK;
}

/* The mesh keeps nothing of b: an abandoned device may use it after the
 * context is gone. Meshes larger than the context run on the reference
 * evaluators' virtual devices. */
static kiln_status coll_mesh_new(kdev_backend *b, int n, double timeout_s, void **out) {
  (void)b;
  *out = NULL;
  if (n < 1 || !(timeout_s > 0))
    return kcore_fail(KILN_ERR_ARGUMENT, "CPU collectives: a mesh of %d devices (timeout %g s)", n,
                      timeout_s);
  cpu_mesh *m = calloc(1, sizeof *m);
  if (m) m->left = calloc((size_t)n, sizeof *m->left);
  if (m) m->timed_out = calloc((size_t)n, sizeof *m->timed_out);
  if (!m || !m->left || !m->timed_out) {
    if (m) free(m->left), free((void *)m->timed_out);
    free(m);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "CPU collectives: out of host memory");
  }
  m->n = n, m->timeout_s = timeout_s;
  pthread_mutex_init(&m->mu, NULL);
  *out = m;
  return KILN_OK;
}

/* The groups of c's axes over the mesh, made (held: mu) from c's colors and
 * ranks, each member named by its device; broken where a member left. */
static kiln_status set_make(cpu_mesh *m, const kdev_coll *c, axis_set **out) {
  axis_set *s = calloc(1, sizeof *s);
  kiln_status st = KILN_OK;
  int64_t *ids = NULL;
  if (!s || !(s->axes = kcore_strdup(c->axes)) || !(s->color = malloc((size_t)m->n * sizeof *s->color)) ||
      !(s->rank = malloc((size_t)m->n * sizeof *s->rank)) || !(ids = malloc((size_t)m->n * sizeof *ids)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", c->name);
  for (int d = 0; !st && d < m->n; d++) {
    s->color[d] = c->color[d], s->rank[d] = c->rank[d];
    if (c->color[d] >= s->n_groups) s->n_groups = c->color[d] + 1;
  }
  if (!st) s->size = m->n / s->n_groups;
  for (int d = 0; !st && d < m->n; d++)
    if (s->color[d] < 0 || s->rank[d] < 0 || s->rank[d] >= s->size || m->n % s->n_groups)
      st = kcore_fail(KILN_ERR_INTERNAL, "%s over axis '%s': device %d has group %d, rank %d of %d "
                      "groups over %d devices", c->name, c->axes, d, s->color[d], s->rank[d],
                      s->n_groups, m->n);
  if (!st && !(s->g = calloc((size_t)s->n_groups, sizeof *s->g)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", c->name);
  for (int d = 0; !st && d < m->n; d++) ids[s->color[d] * s->size + s->rank[d]] = d;
  for (int i = 0; !st && i < s->n_groups; i++)
    if (!(st = kcpu_coll_group_new(s->size, s->axes, m->timeout_s, &s->g[i])))
      st = kcpu_coll_group_name(s->g[i], ids + (size_t)i * (size_t)s->size);
  for (int d = 0; !st && d < m->n; d++)
    if (m->left[d]) kcpu_coll_fail(s->g[s->color[d]], s->rank[d], "shard_map", m->left[d]);
  free(ids);
  if (st && s) set_free(s);
  *out = st ? NULL : s;
  return st;
}

static kiln_status set_get(cpu_mesh *m, const kdev_coll *c, axis_set **out) {
  for (axis_set *s = atomic_load(&m->sets); s; s = s->next)
    if (!strcmp(s->axes, c->axes)) return *out = s, KILN_OK;
  pthread_mutex_lock(&m->mu);
  axis_set *s = atomic_load(&m->sets);
  while (s && strcmp(s->axes, c->axes)) s = s->next;
  kiln_status st = KILN_OK;
  if (!s && !(st = set_make(m, c, &s))) {
    s->next = atomic_load(&m->sets);
    atomic_store(&m->sets, s);
  }
  pthread_mutex_unlock(&m->mu);
  *out = s;
  return st;
}

static void coll_leave(void *mesh, int device, const char *why) {
  cpu_mesh *m = mesh;
  if (!m || device < 0 || device >= m->n) return;
  pthread_mutex_lock(&m->mu);
  if (!m->left[device]) m->left[device] = kcore_strdup(why ? why : "left");
  const char *reason = m->left[device] ? m->left[device] : "left (out of host memory)";
  for (axis_set *s = atomic_load(&m->sets); s; s = s->next)
    kcpu_coll_fail(s->g[s->color[device]], s->rank[device], "shard_map", reason);
  pthread_mutex_unlock(&m->mu);
}

static bool coll_timed_out(void *mesh, int device) {
  cpu_mesh *m = mesh;
  return m && device >= 0 && device < m->n && atomic_load(&m->timed_out[device]);
}

/* Moves block r of [outer][size][block] to the front: -> [size][outer]
 * [block] (back: the inverse). */
static void blocks_to_front(const char *src, char *dst, int64_t outer, int64_t size, size_t block,
                            bool back) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t r = 0; r < size; r++) {
      size_t a = (size_t)(o * size + r) * block, b = (size_t)(r * outer + o) * block;
      memcpy(dst + (back ? a : b), src + (back ? b : a), block);
    }
}

/* The exchange itself, on rank-major buffers of dtype dt. */
static kiln_status exchange(kcpu_coll_group *g, int rank, const kdev_coll *c, kiln_dtype dt,
                            const void *in, void *out) {
  switch (c->kind) {
    case KDEV_COLL_ALL_REDUCE:
      return kcpu_coll_all_reduce(g, rank, dt, c->count, in, out, (kcpu_coll_reduce)c->reduce);
    case KDEV_COLL_ALL_GATHER: return kcpu_coll_all_gather(g, rank, dt, c->count, in, out);
    case KDEV_COLL_REDUCE_SCATTER: return kcpu_coll_reduce_scatter(g, rank, dt, c->count, in, out);
    case KDEV_COLL_ALL_TO_ALL: return kcpu_coll_all_to_all(g, rank, dt, c->count, in, out);
    case KDEV_COLL_PPERMUTE:
      return kcpu_coll_ppermute(g, rank, dt, c->count, in, out, c->npairs, c->pairs);
  }
  return kcore_fail(KILN_ERR_INTERNAL, "%s: unknown collective kind %d", c->name, (int)c->kind);
}

/* One member's part: widened and moved to rank-major where c says, the
 * exchange, then narrowed or moved back into out. A plain reduction or
 * permutation works on the device's buffers, without scratch. */
static kiln_status part(kcpu_coll_group *g, int rank, int size, const kdev_coll *c, const void *in,
                        void *out) {
  kiln_dtype dt = c->dtype;
  bool widen = (dt == KILN_F16 || dt == KILN_BF16) &&
               (c->kind == KDEV_COLL_ALL_REDUCE || c->kind == KDEV_COLL_REDUCE_SCATTER);
  size_t es = widen ? 4 : kiln_dtype_size(dt);
  int64_t out_count = c->kind == KDEV_COLL_ALL_GATHER       ? c->count * size
                      : c->kind == KDEV_COLL_REDUCE_SCATTER ? c->count / size
                                                            : c->count;
  bool move_in = c->in_outer > 1, move_out = c->out_outer > 1;
  char *wide = widen ? malloc((size_t)c->count * es + 1) : NULL;
  char *moved = move_in ? malloc((size_t)c->count * es + 1) : NULL;
  char *res = widen || move_out ? malloc((size_t)out_count * es + 1) : NULL;
  kiln_status st = KILN_OK;
  if ((widen && !wide) || (move_in && !moved) || ((widen || move_out) && !res)) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", c->name);
    goto out;
  }
  const char *src = in;
  size_t in_es = kiln_dtype_size(dt);
  for (int64_t i = 0; widen && i < c->count; i++) {
    float f = (float)kir_scalar_load(dt, src + (size_t)i * in_es).f;
    memcpy(wide + (size_t)i * 4, &f, 4);
  }
  if (widen) src = wide;
  if (move_in) blocks_to_front(src, moved, c->in_outer, size, (size_t)c->in_block * es, false), src = moved;
  st = exchange(g, rank, c, widen ? KILN_F32 : dt, src, res ? res : out);
  if (!st && move_out)
    blocks_to_front(res, out, c->out_outer, size, (size_t)c->out_block * es, true);
  for (int64_t i = 0; !st && widen && i < out_count; i++) {
    float f;
    memcpy(&f, res + (size_t)i * 4, 4);
    kir_scalar_store(dt, kir_scalar_f(f), (char *)out + (size_t)i * in_es);
  }
out:
  free(wide), free(moved), free(res);
  return st;
}

static kiln_status coll_run_part(void *mesh, const kdev_coll *c, int device, const kdev_buffer *in,
                                 kdev_buffer *out) {
  cpu_mesh *m = mesh;
  if (device < 0 || device >= m->n)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: device %d is outside the mesh of %d", c->name, device,
                      m->n);
  axis_set *s;
  kiln_status st = set_get(m, c, &s);
  if (st) return st;
  kcpu_coll_group *g = s->g[s->color[device]];
  st = part(g, s->rank[device], s->size, c, (const void *)in->ptr, (void *)out->ptr);
  atomic_store(&m->timed_out[device], st == KILN_ERR_COLLECTIVE && kcpu_coll_timed_out(g));
  return st;
}

const kdev_coll_ops kcpu_coll_ops = {
    .probe = coll_probe,
    .mesh_new = coll_mesh_new,
    .mesh_free = coll_mesh_free,
    .run_part = coll_run_part,
    .leave = coll_leave,
    .timed_out = coll_timed_out,
};
