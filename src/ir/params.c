/* Parameter kinds described as field lists, so that equality, hashing,
 * copying, printing and parsing are written once per field type. */
#include <stddef.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

#define F(member, fname, type) {#fname, KIR_FIELD_##type, offsetof(kir_params, member.fname)}

/* Each list is sorted by name: JAX prints params sorted. */
static const kir_field kir_f_convert[] = {F(convert, new_dtype, DTYPE),
                                          F(convert, weak_type, BOOL)};
static const kir_field kir_f_bitcast[] = {F(bitcast, new_dtype, DTYPE)};
static const kir_field kir_f_round[] = {F(round, rounding_method, INT)};
static const kir_field kir_f_integer_pow[] = {F(integer_pow, y, INT)};
static const kir_field kir_f_reduce_precision[] = {F(reduce_precision, exponent_bits, INT),
                                                   F(reduce_precision, mantissa_bits, INT)};
static const kir_field kir_f_broadcast[] = {F(broadcast, broadcast_dimensions, DIMS),
                                            F(broadcast, shape, SIZES)};
static const kir_field kir_f_reshape[] = {F(reshape, new_sizes, SIZES)};
static const kir_field kir_f_transpose[] = {F(transpose, permutation, DIMS)};
static const kir_field kir_f_dims[] = {F(dims, dimensions, DIMS)};
static const kir_field kir_f_axes[] = {F(axes, axes, DIMS)};
static const kir_field kir_f_argminmax[] = {F(argminmax, axes, DIMS),
                                            F(argminmax, index_dtype, DTYPE)};
static const kir_field kir_f_top_k[] = {F(top_k, axis, INT), F(top_k, k, INT)};
static const kir_field kir_f_cumulative[] = {F(cumulative, axis, INT),
                                             F(cumulative, reverse, BOOL)};
static const kir_field kir_f_slice[] = {F(slice, limit_indices, SIZES),
                                        F(slice, start_indices, SIZES), F(slice, strides, SIZES)};
static const kir_field kir_f_dynamic_slice[] = {F(dynamic_slice, slice_sizes, SIZES)};
static const kir_field kir_f_concatenate[] = {F(concatenate, dimension, INT)};
static const kir_field kir_f_pad[] = {F(pad, padding_config, PADDING)};
static const kir_field kir_f_iota[] = {F(iota, dimension, INT), F(iota, dtype, DTYPE),
                                       F(iota, shape, SIZES)};
static const kir_field kir_f_gather[] = {
    F(gather, dimension_numbers, GATHER_DIMS), F(gather, fill_value, OPT_F64),
    F(gather, indices_are_sorted, BOOL),       F(gather, mode, MODE),
    F(gather, slice_sizes, SIZES),             F(gather, unique_indices, BOOL)};
static const kir_field kir_f_scatter[] = {
    F(scatter, dimension_numbers, SCATTER_DIMS), F(scatter, indices_are_sorted, BOOL),
    F(scatter, mode, MODE), F(scatter, unique_indices, BOOL)};
static const kir_field kir_f_sort[] = {F(sort, dimension, INT), F(sort, is_stable, BOOL),
                                       F(sort, num_keys, INT)};
static const kir_field kir_f_dot[] = {F(dot, dimension_numbers, DOT_DIMS),
                                      F(dot, preferred_element_type, OPT_DTYPE)};
static const kir_field kir_f_cond[] = {F(cond, branches, PROGRAMS)};
static const kir_field kir_f_while[] = {F(while_loop, body_jaxpr, PROGRAM),
                                        F(while_loop, body_nconsts, INT),
                                        F(while_loop, cond_jaxpr, PROGRAM),
                                        F(while_loop, cond_nconsts, INT)};
static const kir_field kir_f_scan[] = {F(scan, jaxpr, PROGRAM), F(scan, length, INT),
                                       F(scan, num_carry, INT), F(scan, num_consts, INT),
                                       F(scan, reverse, BOOL)};
static const kir_field kir_f_custom_jvp[] = {F(custom_jvp, call_jaxpr, PROGRAM),
                                             F(custom_jvp, jvp_jaxpr, PROGRAM),
                                             F(custom_jvp, num_consts, INT)};
static const kir_field kir_f_custom_vjp[] = {
    F(custom_vjp, bwd_jaxpr, PROGRAM), F(custom_vjp, call_jaxpr, PROGRAM),
    F(custom_vjp, fwd_jaxpr, PROGRAM), F(custom_vjp, num_consts, INT)};
static const kir_field kir_f_custom_lin[] = {
    F(custom_lin, bwd_jaxpr, PROGRAM), F(custom_lin, num_consts, INT),
    F(custom_lin, num_res, INT), F(custom_lin, out_avals, AVALS)};
static const kir_field kir_f_checkpoint[] = {F(checkpoint, jaxpr, PROGRAM),
                                             F(checkpoint, policy, INT),
                                             F(checkpoint, prevent_cse, BOOL)};
static const kir_field kir_f_debug_print[] = {F(debug_print, fmt, STRING)};
static const kir_field kir_f_host_callback[] = {F(host_callback, callback, INT),
                                                F(host_callback, result_avals, AVALS)};
static const kir_field kir_f_collective[] = {F(collective, axis_name, STRING),
                                             F(collective, axis_size, INT)};
static const kir_field kir_f_all_gather[] = {
    F(all_gather, all_gather_dimension, INT), F(all_gather, axis_name, STRING),
    F(all_gather, axis_size, INT), F(all_gather, tiled, BOOL)};
static const kir_field kir_f_psum_scatter[] = {
    F(psum_scatter, axis_name, STRING), F(psum_scatter, axis_size, INT),
    F(psum_scatter, scatter_dimension, INT), F(psum_scatter, tiled, BOOL)};
static const kir_field kir_f_ppermute[] = {F(ppermute, axis_name, STRING),
                                           F(ppermute, axis_size, INT), F(ppermute, perm, STRING)};
static const kir_field kir_f_all_to_all[] = {
    F(all_to_all, axis_name, STRING), F(all_to_all, axis_size, INT),
    F(all_to_all, concat_axis, INT), F(all_to_all, split_axis, INT), F(all_to_all, tiled, BOOL)};
static const kir_field kir_f_shard_map[] = {
    F(shard_map, check_rep, BOOL), F(shard_map, in_specs, STRING), F(shard_map, jaxpr, PROGRAM),
    F(shard_map, mesh, STRING), F(shard_map, out_specs, STRING)};
static const kir_field kir_f_window[] = {
    F(window, base_dilation, SIZES), F(window, padding, PAIRS), F(window, window_dilation, SIZES),
    F(window, window_dimensions, SIZES), F(window, window_strides, SIZES)};
static const kir_field kir_f_select_gather[] = {
    F(select_gather, base_dilation, SIZES),     F(select_gather, padding, PAIRS),
    F(select_gather, select_prim, PRIM),        F(select_gather, window_dilation, SIZES),
    F(select_gather, window_dimensions, SIZES), F(select_gather, window_strides, SIZES)};
static const kir_field kir_f_select_scatter[] = {
    F(select_scatter, padding, PAIRS), F(select_scatter, select_prim, PRIM),
    F(select_scatter, window_dimensions, SIZES), F(select_scatter, window_strides, SIZES)};
static const kir_field kir_f_device_put[] = {F(device_put, mesh, STRING), F(device_put, spec, STRING)};
static const kir_field kir_f_conv[] = {
    F(conv, batch_group_count, INT),    F(conv, dimension_numbers, CONV_DIMS),
    F(conv, feature_group_count, INT),  F(conv, lhs_dilation, SIZES),
    F(conv, padding, PAIRS),        F(conv, preferred_element_type, OPT_DTYPE),
    F(conv, rhs_dilation, SIZES),       F(conv, window_strides, SIZES)};
#undef F

typedef struct kir_kind_fields {
  const kir_field *fields;
  int n;
} kir_kind_fields;

#define KIR_FIELDS(list) {list, (int)(sizeof list / sizeof list[0])}
static const kir_kind_fields kir_kinds[KIR_NUM_PARAM_KINDS] = {
    [KIR_PARAMS_NONE] = {NULL, 0},
    [KIR_PARAMS_CONVERT] = KIR_FIELDS(kir_f_convert),
    [KIR_PARAMS_BITCAST] = KIR_FIELDS(kir_f_bitcast),
    [KIR_PARAMS_ROUND] = KIR_FIELDS(kir_f_round),
    [KIR_PARAMS_INTEGER_POW] = KIR_FIELDS(kir_f_integer_pow),
    [KIR_PARAMS_REDUCE_PRECISION] = KIR_FIELDS(kir_f_reduce_precision),
    [KIR_PARAMS_BROADCAST] = KIR_FIELDS(kir_f_broadcast),
    [KIR_PARAMS_RESHAPE] = KIR_FIELDS(kir_f_reshape),
    [KIR_PARAMS_TRANSPOSE] = KIR_FIELDS(kir_f_transpose),
    [KIR_PARAMS_DIMS] = KIR_FIELDS(kir_f_dims),
    [KIR_PARAMS_AXES] = KIR_FIELDS(kir_f_axes),
    [KIR_PARAMS_ARGMINMAX] = KIR_FIELDS(kir_f_argminmax),
    [KIR_PARAMS_CUMULATIVE] = KIR_FIELDS(kir_f_cumulative),
    [KIR_PARAMS_SLICE] = KIR_FIELDS(kir_f_slice),
    [KIR_PARAMS_DYNAMIC_SLICE] = KIR_FIELDS(kir_f_dynamic_slice),
    [KIR_PARAMS_CONCATENATE] = KIR_FIELDS(kir_f_concatenate),
    [KIR_PARAMS_PAD] = KIR_FIELDS(kir_f_pad),
    [KIR_PARAMS_IOTA] = KIR_FIELDS(kir_f_iota),
    [KIR_PARAMS_GATHER] = KIR_FIELDS(kir_f_gather),
    [KIR_PARAMS_SCATTER] = KIR_FIELDS(kir_f_scatter),
    [KIR_PARAMS_SORT] = KIR_FIELDS(kir_f_sort),
    [KIR_PARAMS_DOT] = KIR_FIELDS(kir_f_dot),
    [KIR_PARAMS_COND] = KIR_FIELDS(kir_f_cond),
    [KIR_PARAMS_WHILE] = KIR_FIELDS(kir_f_while),
    [KIR_PARAMS_SCAN] = KIR_FIELDS(kir_f_scan),
    [KIR_PARAMS_DEBUG_PRINT] = KIR_FIELDS(kir_f_debug_print),
    [KIR_PARAMS_HOST_CALLBACK] = KIR_FIELDS(kir_f_host_callback),
    [KIR_PARAMS_CUSTOM_JVP] = KIR_FIELDS(kir_f_custom_jvp),
    [KIR_PARAMS_CUSTOM_VJP] = KIR_FIELDS(kir_f_custom_vjp),
    [KIR_PARAMS_CUSTOM_LIN] = KIR_FIELDS(kir_f_custom_lin),
    [KIR_PARAMS_CHECKPOINT] = KIR_FIELDS(kir_f_checkpoint),
    [KIR_PARAMS_COLLECTIVE] = KIR_FIELDS(kir_f_collective),
    [KIR_PARAMS_ALL_GATHER] = KIR_FIELDS(kir_f_all_gather),
    [KIR_PARAMS_PSUM_SCATTER] = KIR_FIELDS(kir_f_psum_scatter),
    [KIR_PARAMS_PPERMUTE] = KIR_FIELDS(kir_f_ppermute),
    [KIR_PARAMS_ALL_TO_ALL] = KIR_FIELDS(kir_f_all_to_all),
    [KIR_PARAMS_SHARD_MAP] = KIR_FIELDS(kir_f_shard_map),
    [KIR_PARAMS_WINDOW] = KIR_FIELDS(kir_f_window),
    [KIR_PARAMS_SELECT_GATHER] = KIR_FIELDS(kir_f_select_gather),
    [KIR_PARAMS_SELECT_SCATTER] = KIR_FIELDS(kir_f_select_scatter),
    [KIR_PARAMS_TOP_K] = KIR_FIELDS(kir_f_top_k),
    [KIR_PARAMS_DEVICE_PUT] = KIR_FIELDS(kir_f_device_put),
    [KIR_PARAMS_CONV] = KIR_FIELDS(kir_f_conv),
};
#undef KIR_FIELDS

const kir_field *kir_param_fields(kir_param_kind kind, int *n) {
  KCORE_ASSERT((int)kind >= 0 && kind < KIR_NUM_PARAM_KINDS);
  *n = kir_kinds[kind].n;
  return kir_kinds[kind].fields;
}

/* Pointer-typed fields go through typedefs so that CFIELD's const binds to
 * the field, not to what it points at. */
typedef kir_program *kir_program_ptr;
typedef const char *kir_cstr;

#define FIELD(p, f, type) ((type *)(void *)((char *)(p) + (f)->offset))
#define CFIELD(p, f, type) ((const type *)(const void *)((kir_cstr)(p) + (f)->offset))

/* ---- equality ---- */

static bool kir_dims_eq(const kir_dims *a, const kir_dims *b) {
  return a->n == b->n && memcmp(a->v, b->v, (size_t)a->n * sizeof a->v[0]) == 0;
}

static bool kir_sizes_eq(const kir_sizes *a, const kir_sizes *b) {
  return a->n == b->n && memcmp(a->v, b->v, (size_t)a->n * sizeof a->v[0]) == 0;
}

static bool kir_padding_eq(const kir_padding *a, const kir_padding *b) {
  size_t n = (size_t)a->n * sizeof a->lo[0];
  return a->n == b->n && memcmp(a->lo, b->lo, n) == 0 && memcmp(a->hi, b->hi, n) == 0 &&
         memcmp(a->interior, b->interior, n) == 0;
}

/* The dims structs are runs of kir_dims. */
static bool kir_dims_run_eq(const kir_dims *a, const kir_dims *b, int count) {
  for (int i = 0; i < count; i++)
    if (!kir_dims_eq(&a[i], &b[i])) return false;
  return true;
}

static int kir_dims_run_len(kir_field_type t) {
  return t == KIR_FIELD_DOT_DIMS ? 4 : t == KIR_FIELD_CONV_DIMS ? 3 : 5;
}

static bool kir_field_eq(const kir_field *f, const kir_params *a, const kir_params *b) {
  switch (f->type) {
    case KIR_FIELD_INT:
    case KIR_FIELD_PRIM: return *CFIELD(a, f, int64_t) == *CFIELD(b, f, int64_t);
    case KIR_FIELD_BOOL: return *CFIELD(a, f, bool) == *CFIELD(b, f, bool);
    case KIR_FIELD_DTYPE:
    case KIR_FIELD_OPT_DTYPE: return *CFIELD(a, f, kiln_dtype) == *CFIELD(b, f, kiln_dtype);
    case KIR_FIELD_MODE: return *CFIELD(a, f, kir_gather_mode) == *CFIELD(b, f, kir_gather_mode);
    case KIR_FIELD_DIMS: return kir_dims_eq(CFIELD(a, f, kir_dims), CFIELD(b, f, kir_dims));
    case KIR_FIELD_SIZES: return kir_sizes_eq(CFIELD(a, f, kir_sizes), CFIELD(b, f, kir_sizes));
    case KIR_FIELD_PADDING:
    case KIR_FIELD_PAIRS:
      return kir_padding_eq(CFIELD(a, f, kir_padding), CFIELD(b, f, kir_padding));
    case KIR_FIELD_DOT_DIMS:
    case KIR_FIELD_GATHER_DIMS:
    case KIR_FIELD_SCATTER_DIMS:
    case KIR_FIELD_CONV_DIMS:
      return kir_dims_run_eq(CFIELD(a, f, kir_dims), CFIELD(b, f, kir_dims),
                             kir_dims_run_len(f->type));
    case KIR_FIELD_OPT_F64: {
      const kir_opt_f64 *x = CFIELD(a, f, kir_opt_f64), *y = CFIELD(b, f, kir_opt_f64);
      return x->present == y->present &&
             (!x->present || memcmp(&x->v, &y->v, sizeof x->v) == 0);
    }
    case KIR_FIELD_STRING: {
      const char *x = *CFIELD(a, f, kir_cstr), *y = *CFIELD(b, f, kir_cstr);
      return x == y || (x && y && strcmp(x, y) == 0);
    }
    case KIR_FIELD_PROGRAM: {
      const kir_program *x = *CFIELD(a, f, kir_program_ptr), *y = *CFIELD(b, f, kir_program_ptr);
      return x == y || (x && y && kir_program_equal(x, y));
    }
    case KIR_FIELD_PROGRAMS: {
      const kir_program_list *x = CFIELD(a, f, kir_program_list);
      const kir_program_list *y = CFIELD(b, f, kir_program_list);
      if (x->n != y->n) return false;
      for (int i = 0; i < x->n; i++)
        if (x->v[i] != y->v[i] && !kir_program_equal(x->v[i], y->v[i])) return false;
      return true;
    }
    case KIR_FIELD_AVALS: {
      const kir_aval_list *x = CFIELD(a, f, kir_aval_list), *y = CFIELD(b, f, kir_aval_list);
      if (x->n != y->n) return false;
      for (int i = 0; i < x->n; i++)
        if (!kir_aval_equal(&x->v[i], &y->v[i])) return false;
      return true;
    }
  }
  return false;
}

bool kir_params_equal(kir_param_kind kind, const kir_params *a, const kir_params *b) {
  int n;
  const kir_field *fields = kir_param_fields(kind, &n);
  for (int i = 0; i < n; i++)
    if (!kir_field_eq(&fields[i], a, b)) return false;
  return true;
}

/* ---- hashing (agrees with equality; sub-programs only by their sizes) ---- */

static uint64_t kir_dims_hash(const kir_dims *d, uint64_t h) {
  h = kcore_hash_u64(h, (uint64_t)d->n);
  return kcore_hash_bytes(h, d->v, (size_t)d->n * sizeof d->v[0]);
}

static uint64_t kir_program_shape_hash(const kir_program *p, uint64_t h) {
  if (!p) return kcore_hash_u64(h, 0);
  h = kcore_hash_u64(h, (uint64_t)p->n_eqns);
  h = kcore_hash_u64(h, (uint64_t)p->n_invars);
  return kcore_hash_u64(h, (uint64_t)p->n_outvars);
}

static uint64_t kir_field_hash(const kir_field *f, const kir_params *p, uint64_t h) {
  switch (f->type) {
    case KIR_FIELD_INT:
    case KIR_FIELD_PRIM: return kcore_hash_u64(h, (uint64_t)*CFIELD(p, f, int64_t));
    case KIR_FIELD_BOOL: return kcore_hash_u64(h, *CFIELD(p, f, bool));
    case KIR_FIELD_DTYPE:
    case KIR_FIELD_OPT_DTYPE: return kcore_hash_u64(h, (uint64_t)*CFIELD(p, f, kiln_dtype));
    case KIR_FIELD_MODE: return kcore_hash_u64(h, (uint64_t)*CFIELD(p, f, kir_gather_mode));
    case KIR_FIELD_DIMS: return kir_dims_hash(CFIELD(p, f, kir_dims), h);
    case KIR_FIELD_SIZES: {
      const kir_sizes *s = CFIELD(p, f, kir_sizes);
      h = kcore_hash_u64(h, (uint64_t)s->n);
      return kcore_hash_bytes(h, s->v, (size_t)s->n * sizeof s->v[0]);
    }
    case KIR_FIELD_PADDING:
    case KIR_FIELD_PAIRS: {
      const kir_padding *s = CFIELD(p, f, kir_padding);
      size_t n = (size_t)s->n * sizeof s->lo[0];
      h = kcore_hash_u64(h, (uint64_t)s->n);
      h = kcore_hash_bytes(h, s->lo, n);
      h = kcore_hash_bytes(h, s->hi, n);
      return kcore_hash_bytes(h, s->interior, n);
    }
    case KIR_FIELD_DOT_DIMS:
    case KIR_FIELD_GATHER_DIMS:
    case KIR_FIELD_SCATTER_DIMS:
    case KIR_FIELD_CONV_DIMS: {
      const kir_dims *d = CFIELD(p, f, kir_dims);
      for (int i = 0; i < kir_dims_run_len(f->type); i++) h = kir_dims_hash(&d[i], h);
      return h;
    }
    case KIR_FIELD_OPT_F64: {
      const kir_opt_f64 *x = CFIELD(p, f, kir_opt_f64);
      h = kcore_hash_u64(h, x->present);
      return x->present ? kcore_hash_bytes(h, &x->v, sizeof x->v) : h;
    }
    case KIR_FIELD_STRING: {
      const char *s = *CFIELD(p, f, kir_cstr);
      return s ? kcore_hash_str(h, s) : kcore_hash_u64(h, 0);
    }
    case KIR_FIELD_PROGRAM: return kir_program_shape_hash(*CFIELD(p, f, kir_program_ptr), h);
    case KIR_FIELD_PROGRAMS: {
      const kir_program_list *l = CFIELD(p, f, kir_program_list);
      h = kcore_hash_u64(h, (uint64_t)l->n);
      for (int i = 0; i < l->n; i++) h = kir_program_shape_hash(l->v[i], h);
      return h;
    }
    case KIR_FIELD_AVALS: {
      const kir_aval_list *l = CFIELD(p, f, kir_aval_list);
      h = kcore_hash_u64(h, (uint64_t)l->n);
      for (int i = 0; i < l->n; i++) {
        const kir_aval *a = &l->v[i];
        h = kcore_hash_u64(h, (uint64_t)a->dtype * 2 + a->weak);
        h = kcore_hash_bytes(h, a->shape, (size_t)a->rank * sizeof a->shape[0]);
      }
      return h;
    }
  }
  return h;
}

uint64_t kir_params_hash(kir_param_kind kind, const kir_params *p, uint64_t h) {
  int n;
  const kir_field *fields = kir_param_fields(kind, &n);
  for (int i = 0; i < n; i++) h = kir_field_hash(&fields[i], p, h);
  return h;
}

void kir_params_for_each_program(kir_param_kind kind, const kir_params *p,
                                 void (*fn)(kir_program *sub, void *user), void *user) {
  int n;
  const kir_field *fields = kir_param_fields(kind, &n);
  for (int i = 0; i < n; i++) {
    const kir_field *f = &fields[i];
    if (f->type == KIR_FIELD_PROGRAM) {
      kir_program *sub = *CFIELD(p, f, kir_program_ptr);
      if (sub) fn(sub, user);
    } else if (f->type == KIR_FIELD_PROGRAMS) {
      const kir_program_list *l = CFIELD(p, f, kir_program_list);
      for (int k = 0; k < l->n; k++)
        if (l->v[k]) fn(l->v[k], user);
    }
  }
}

/* ---- importing params into a program ---- */

static kiln_status kir_count_check(const char *op, const char *field, int n, int max) {
  if (n < 0 || n > max)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: param %s has %d entries (at most %d)", op, field, n,
                      max);
  return KILN_OK;
}

static kiln_status kir_sub_check(const char *op, const char *field, kir_program *owner,
                                 const kir_program *sub) {
  if (!sub) return kcore_fail(KILN_ERR_ARGUMENT, "%s: param %s is a NULL program", op, field);
  if (sub->parent != owner)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "%s: param %s is not a sub-program of this program (create it with "
                      "kir_program_new_sub on the equation's program)",
                      op, field);
  return KILN_OK;
}

/* Zeroes unused entries so that any bytewise view of the params is canonical. */
static void kir_dims_clear_tail(kir_dims *d) {
  memset(d->v + d->n, 0, (size_t)(KIR_MAX_RANK - d->n) * sizeof d->v[0]);
}

static kiln_status kir_field_import(kir_program *p, const char *op, const kir_field *f,
                                    kir_params *dst) {
  switch (f->type) {
    case KIR_FIELD_INT:
    case KIR_FIELD_PRIM:
    case KIR_FIELD_BOOL:
    case KIR_FIELD_DTYPE:
    case KIR_FIELD_OPT_DTYPE:
    case KIR_FIELD_MODE: return KILN_OK;
    case KIR_FIELD_OPT_F64: {
      kir_opt_f64 *x = FIELD(dst, f, kir_opt_f64);
      if (!x->present) x->v = 0;
      return KILN_OK;
    }
    case KIR_FIELD_DIMS:
    case KIR_FIELD_DOT_DIMS:
    case KIR_FIELD_GATHER_DIMS:
    case KIR_FIELD_SCATTER_DIMS:
    case KIR_FIELD_CONV_DIMS: {
      kir_dims *d = FIELD(dst, f, kir_dims);
      int count = f->type == KIR_FIELD_DIMS ? 1 : kir_dims_run_len(f->type);
      for (int i = 0; i < count; i++) {
        kiln_status st = kir_count_check(op, f->name, d[i].n, KIR_MAX_RANK);
        if (st != KILN_OK) return st;
        kir_dims_clear_tail(&d[i]);
      }
      return KILN_OK;
    }
    case KIR_FIELD_SIZES: {
      kir_sizes *s = FIELD(dst, f, kir_sizes);
      kiln_status st = kir_count_check(op, f->name, s->n, KIR_MAX_RANK);
      if (st != KILN_OK) return st;
      memset(s->v + s->n, 0, (size_t)(KIR_MAX_RANK - s->n) * sizeof s->v[0]);
      return KILN_OK;
    }
    case KIR_FIELD_PADDING:
    case KIR_FIELD_PAIRS: {
      kir_padding *s = FIELD(dst, f, kir_padding);
      kiln_status st = kir_count_check(op, f->name, s->n, KIR_MAX_RANK);
      if (st != KILN_OK) return st;
      size_t tail = (size_t)(KIR_MAX_RANK - s->n) * sizeof s->lo[0];
      memset(s->lo + s->n, 0, tail);
      memset(s->hi + s->n, 0, tail);
      memset(s->interior + s->n, 0, tail);
      return KILN_OK;
    }
    case KIR_FIELD_STRING: {
      const char **s = FIELD(dst, f, kir_cstr);
      if (!*s) return kcore_fail(KILN_ERR_ARGUMENT, "%s: param %s is NULL", op, f->name);
      size_t len = strlen(*s);
      char *copy = kir_alloc(p, len + 1);
      if (!copy) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
      memcpy(copy, *s, len + 1);
      *s = copy;
      return KILN_OK;
    }
    case KIR_FIELD_PROGRAM: return kir_sub_check(op, f->name, p, *FIELD(dst, f, kir_program_ptr));
    case KIR_FIELD_PROGRAMS: {
      kir_program_list *l = FIELD(dst, f, kir_program_list);
      if (l->n < 0 || (l->n > 0 && !l->v))
        return kcore_fail(KILN_ERR_ARGUMENT, "%s: param %s is an invalid list (%d programs)", op,
                          f->name, l->n);
      for (int i = 0; i < l->n; i++) {
        kiln_status st = kir_sub_check(op, f->name, p, l->v[i]);
        if (st != KILN_OK) return st;
      }
      kir_program **copy = l->n ? kir_alloc(p, (size_t)l->n * sizeof *copy) : NULL;
      if (l->n && !copy) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
      if (l->n) memcpy(copy, l->v, (size_t)l->n * sizeof *copy);
      l->v = copy;
      return KILN_OK;
    }
    case KIR_FIELD_AVALS: {
      kir_aval_list *l = FIELD(dst, f, kir_aval_list);
      if (l->n < 0 || (l->n > 0 && !l->v))
        return kcore_fail(KILN_ERR_ARGUMENT, "%s: param %s is an invalid list (%d avals)", op,
                          f->name, l->n);
      for (int i = 0; i < l->n; i++) {
        kiln_status st = kir_aval_check(op, &l->v[i]);
        if (st != KILN_OK) return st;
      }
      kir_aval *copy = l->n ? kir_alloc(p, (size_t)l->n * sizeof *copy) : NULL;
      if (l->n && !copy) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
      for (int i = 0; i < l->n; i++)
        copy[i] = kir_aval_make(l->v[i].dtype, l->v[i].rank, l->v[i].shape, l->v[i].weak);
      l->v = copy;
      return KILN_OK;
    }
  }
  return KILN_OK;
}

static size_t kir_field_size(kir_field_type t) {
  switch (t) {
    case KIR_FIELD_INT:
    case KIR_FIELD_PRIM: return sizeof(int64_t);
    case KIR_FIELD_BOOL: return sizeof(bool);
    case KIR_FIELD_DTYPE:
    case KIR_FIELD_OPT_DTYPE: return sizeof(kiln_dtype);
    case KIR_FIELD_MODE: return sizeof(kir_gather_mode);
    case KIR_FIELD_OPT_F64: return sizeof(kir_opt_f64);
    case KIR_FIELD_DIMS: return sizeof(kir_dims);
    case KIR_FIELD_SIZES: return sizeof(kir_sizes);
    case KIR_FIELD_PADDING:
    case KIR_FIELD_PAIRS: return sizeof(kir_padding);
    case KIR_FIELD_CONV_DIMS: return sizeof(kir_conv_dims);
    case KIR_FIELD_DOT_DIMS: return sizeof(kir_dot_dims);
    case KIR_FIELD_GATHER_DIMS: return sizeof(kir_gather_dims);
    case KIR_FIELD_SCATTER_DIMS: return sizeof(kir_scatter_dims);
    case KIR_FIELD_STRING: return sizeof(kir_cstr);
    case KIR_FIELD_PROGRAM: return sizeof(kir_program_ptr);
    case KIR_FIELD_PROGRAMS: return sizeof(kir_program_list);
    case KIR_FIELD_AVALS: return sizeof(kir_aval_list);
  }
  return 0;
}

kiln_status kir_params_import(kir_program *p, kir_prim prim, const kir_params *src,
                              kir_params *dst) {
  const kir_prim_info *info = kir_prim_get(prim);
  /* Field by field, so that padding and other members' bytes are zero. */
  memset(dst, 0, sizeof *dst);
  if (info->params == KIR_PARAMS_NONE) return KILN_OK;
  if (!src) return kcore_fail(KILN_ERR_ARGUMENT, "%s: params are NULL", info->name);
  int n;
  const kir_field *fields = kir_param_fields(info->params, &n);
  for (int i = 0; i < n; i++)
    memcpy((char *)dst + fields[i].offset, (kir_cstr)src + fields[i].offset,
           kir_field_size(fields[i].type));
  for (int i = 0; i < n; i++) {
    kiln_status st = kir_field_import(p, info->name, &fields[i], dst);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}
