/* Running a compiled program on its device with the reference executor:
 * inputs are read in place on CPU devices and staged through the host on
 * others; donated inputs give their memory to outputs of the same size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"

void krt_reference_env(const kiln_compiled *c, kir_eval_env *env) {
  const kir_eval_table *spmd = c->p.ctx ? atomic_load(&c->p.ctx->spmd_evals) : NULL;
  bool reference = c->p.ctx && c->p.ctx->config.opts.executor == KILN_EXECUTOR_REFERENCE;
  kir_eval_env_init(env, spmd && !reference ? spmd : kir_reference_evals());
  env->host_call = krt_host_call;
  env->host_user = c->p.hosts;
}

kiln_status krt_host_call(void *user, int64_t id, int n_in, const kir_buffer *in, int n_out,
                                 kir_buffer *out) {
  const ktr_host_table *h = user;
  if (!h || id < 0 || id >= h->n)
    return kcore_fail(KILN_ERR_INTERNAL, "host_callback: unknown callback id %lld", (long long)id);
  kiln_host_buffer small_in[8], small_out[8];
  kiln_host_buffer *hi = n_in <= 8 ? small_in : malloc((size_t)n_in * sizeof *hi);
  kiln_host_buffer *ho = n_out <= 8 ? small_out : malloc((size_t)n_out * sizeof *ho);
  kiln_status st = KILN_OK;
  if (!hi || !ho) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "host_callback: out of host memory");
    goto done;
  }
  for (int i = 0; i < n_in; i++) {
    ktr_aval_export(&in[i].aval, &hi[i].aval);
    hi[i].data = in[i].data;
    hi[i].nbytes = in[i].nbytes;
  }
  for (int i = 0; i < n_out; i++) {
    ktr_aval_export(&out[i].aval, &ho[i].aval);
    ho[i].data = out[i].data;
    ho[i].nbytes = out[i].nbytes;
  }
  kiln_clear_error();
  st = h->v[id].fn(h->v[id].user, n_in, hi, n_out, ho);
  if (st) kcore_fail_wrap(st, "host_callback %lld failed", (long long)id);
done:
  if (hi != small_in) free(hi);
  if (ho != small_out) free(ho);
  return st;
}

static bool krt_host_addressable(const kiln_device *dev) {
  return (dev->backend->caps & KDEV_CAP_HOST_MEMORY) != 0;
}

/* Per-call state: host views of inputs and outputs, the output arrays and
 * which donated input each output took its memory from (-1: none). */
typedef struct krt_call {
  const kiln_compiled *c;
  kiln_array *const *args;
  kir_buffer *in, *out;
  kiln_array **outs;
  int *donor;
  bool *staged_in;  /* in[i].data is a host copy we own */
  bool *staged_out; /* out[i].data is a host buffer to upload */
} krt_call;

static kiln_status krt_call_alloc(krt_call *k) {
  const kiln_compiled *c = k->c;
  size_t ni = (size_t)(c->p.sig.n ? c->p.sig.n : 1), no = (size_t)(c->p.n_out ? c->p.n_out : 1);
  k->in = calloc(ni, sizeof *k->in);
  k->staged_in = calloc(ni, sizeof *k->staged_in);
  k->out = calloc(no, sizeof *k->out);
  k->donor = malloc(no * sizeof *k->donor);
  k->staged_out = calloc(no, sizeof *k->staged_out);
  if (!k->in || !k->staged_in || !k->out || !k->donor || !k->staged_out)
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
  for (size_t i = 0; i < no; i++) k->donor[i] = -1;
  return KILN_OK;
}

static void krt_call_free(krt_call *k, bool failed) {
  const kiln_compiled *c = k->c;
  for (int i = 0; k->in && i < c->p.sig.n; i++)
    if (k->staged_in[i]) free(k->in[i].data);
  for (int i = 0; k->out && i < c->p.n_out; i++) {
    if (k->staged_out[i]) free(k->out[i].data);
    if (failed && k->outs[i]) {
      kiln_array_release(k->outs[i]);
      k->outs[i] = NULL;
    }
  }
  free(k->in);
  free(k->staged_in);
  free(k->out);
  free(k->donor);
  free(k->staged_out);
}

static kiln_status krt_check_args(const kiln_compiled *c, kiln_array *const *args) {
  for (int i = 0; i < c->p.sig.n; i++) {
    kiln_status st = kdev_array_check("kiln_jit_call", args[i]);
    if (st) return st;
    if (args[i]->device != c->p.dev) {
      char d[200];
      kiln_array_describe(args[i], d, sizeof d);
      return kcore_fail(KILN_ERR_WRONG_DEVICE, "kiln_jit_call: argument leaf %d %s is not on %s, "
                        "where the program runs (kiln_device_put it first)", i, d,
                        c->p.dev->info.name);
    }
    for (int j = 0; j < i; j++)
      if (args[j] == args[i] && (c->p.donated[i] || c->p.donated[j]))
        return kcore_fail(KILN_ERR_ARGUMENT, "kiln_jit_call: donated argument leaf %d is also "
                          "passed as leaf %d", c->p.donated[j] ? j : i, c->p.donated[j] ? i : j);
  }
  return KILN_OK;
}

/* The address handed out for zero-size data: evaluators and kernels may
 * pass it to memcpy with a zero length, which must not be NULL. */
static char krt_no_data[1];

/* Host views of the inputs: in place on the CPU, else a host copy. */
static kiln_status krt_stage_inputs(krt_call *k) {
  const kiln_compiled *c = k->c;
  for (int i = 0; i < c->p.sig.n; i++) {
    kiln_array *a = k->args[i];
    size_t nb = kiln_array_nbytes(a);
    k->in[i] = (kir_buffer){.aval = c->p.sig.avals[i], .data = krt_no_data, .nbytes = nb};
    if (nb == 0) continue;
    kiln_status st = kiln_array_block_until_ready(a);
    if (st) return st;
    if (krt_host_addressable(a->device)) {
      k->in[i].data = (void *)a->buf.ptr;
      continue;
    }
    if (!(k->in[i].data = malloc(nb)))
      return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory staging %zu bytes", nb);
    k->staged_in[i] = true;
    if ((st = kiln_array_to_host(a, k->in[i].data, nb))) return st;
  }
  return KILN_OK;
}

/* A donated input of the same byte size not yet given to another output. */
static int krt_find_donor(const krt_call *k, size_t nbytes, int upto) {
  const kiln_compiled *c = k->c;
  for (int i = 0; i < c->p.sig.n; i++) {
    if (!c->p.donated[i] || nbytes == 0 || kiln_array_nbytes(k->args[i]) != nbytes) continue;
    bool taken = false;
    for (int j = 0; j < upto && !taken; j++) taken = k->donor[j] == i;
    if (!taken) return i;
  }
  return -1;
}

static kiln_status krt_prepare_outputs(krt_call *k) {
  const kiln_compiled *c = k->c;
  const kir_program *p = c->p.prog;
  for (int i = 0; i < c->p.n_out; i++) {
    const kir_aval *a = kir_var_aval(p, p->outvars[i]);
    size_t nb = (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype);
    k->out[i] = (kir_buffer){.aval = *a, .data = krt_no_data, .nbytes = nb};
    /* Fused kernels write outputs as they go: only the planner knows which
     * donated input is dead by then. The reference executor writes outputs
     * last, so any donated input of the size will do. */
    k->donor[i] = c->exec ? c->exec_ops->output_donor(c->exec, i) : krt_find_donor(k, nb, i);
    if (k->donor[i] >= 0) {
      kiln_status st = kdev_array_check_donation("kiln_jit_call", k->args[k->donor[i]], k->donor[i]);
      if (st) return st;
    }
    bool host = krt_host_addressable(c->p.dev);
    if (k->donor[i] >= 0 && host) {
      k->out[i].data = (void *)k->args[k->donor[i]]->buf.ptr;
      continue;
    }
    if (k->donor[i] < 0) {
      kiln_status st =
          kdev_array_alloc("kiln_jit_call", c->p.dev, a->dtype, a->rank, a->shape, &k->outs[i]);
      if (st) return st;
      if (host) {
        if (nb) k->out[i].data = (void *)k->outs[i]->buf.ptr;
        continue;
      }
    }
    if (nb && !(k->out[i].data = malloc(nb)))
      return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory for %zu bytes", nb);
    k->staged_out[i] = nb > 0;
  }
  return KILN_OK;
}

/* After a successful run: donated memory moves to its outputs, staged
 * outputs are uploaded, donated inputs are deleted. */
static kiln_status krt_finish_outputs(krt_call *k) {
  const kiln_compiled *c = k->c;
  for (int i = 0; i < c->p.n_out; i++) {
    kiln_status st;
    if (k->donor[i] >= 0) {
      const kir_aval *a = &k->out[i].aval;
      if ((st = kdev_array_take_buffer(k->args[k->donor[i]], a->dtype, a->rank, a->shape,
                                       &k->outs[i])))
        return st;
    }
    if (k->staged_out[i] && (st = c->p.dev->ops->upload(c->p.dev, &k->outs[i]->buf, k->out[i].data,
                                                        k->out[i].nbytes, KDEV_COPY_STAGED)))
      return st;
  }
  for (int i = 0; i < c->p.sig.n; i++)
    if (c->p.donated[i]) kiln_array_delete(k->args[i]);
  return KILN_OK;
}

static kiln_status krt_execute_unranged(const kiln_compiled *c, kiln_array *const *args,
                                        kiln_array **outs) {
  krt_call k = {.c = c, .args = args, .outs = outs};
  for (int i = 0; i < c->p.n_out; i++) outs[i] = NULL;
  kiln_status st = krt_check_args(c, args);
  if (!st && c->exec && c->exec_ops->run) return c->exec_ops->run(c->exec, args, outs);
  if (!st) st = krt_call_alloc(&k);
  if (!st) st = krt_stage_inputs(&k);
  if (!st) st = krt_prepare_outputs(&k);
  if (!st && c->exec)
    st = c->exec_ops->run_host(c->exec, k.in, k.out, NULL);
  else if (!st)
    st = kir_eval_program(&c->env, c->p.prog, k.in, k.out);
  if (!st) st = krt_finish_outputs(&k);
  krt_call_free(&k, st != KILN_OK);
  return st;
}

kiln_status krt_execute(const kiln_compiled *c, kiln_array *const *args, kiln_array **outs) {
  kcore_range_push("kiln execute");
  kiln_status st = krt_execute_unranged(c, args, outs);
  kcore_range_pop();
  return st;
}
