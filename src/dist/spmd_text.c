/* A shard_map equation alone as a program's text: the key the SPMD runners
 * cache their compiled bodies by, and what they parse back so that the copy
 * owns a body whose collectives are bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"

char *kdist_shard_map_text(const kir_eqn *e, const kir_buffer *in, const kir_buffer *out) {
  const kir_p_shard_map *p = &e->params.shard_map;
  char *body = NULL;
  if (kir_print(p->jaxpr, &body)) return NULL;
  size_t cap = strlen(body) + strlen(p->in_specs) + strlen(p->out_specs) + strlen(p->mesh) +
               (size_t)(e->n_in + e->n_out) * (KIR_AVAL_STR_CAP + 16) + 256;
  char *t = malloc(cap), a[KIR_AVAL_STR_CAP];
  if (!t) {
    free(body);
    return NULL;
  }
  size_t n = (size_t)snprintf(t, cap, "{ lambda ; ");
  for (int k = 0; k < e->n_in; k++)
    n += (size_t)snprintf(t + n, cap - n, "%sx%d:%s", k ? " " : "", k, kir_aval_str(&in[k].aval, a, sizeof a));
  n += (size_t)snprintf(t + n, cap - n, ". let ");
  for (int k = 0; k < e->n_out; k++)
    n += (size_t)snprintf(t + n, cap - n, "y%d:%s ", k, kir_aval_str(&out[k].aval, a, sizeof a));
  n += (size_t)snprintf(t + n, cap - n, "= shard_map[check_rep=False in_specs=\"%s\" jaxpr=%s "
                        "mesh=\"%s\" out_specs=\"%s\"]", p->in_specs, body, p->mesh, p->out_specs);
  for (int k = 0; k < e->n_in; k++) n += (size_t)snprintf(t + n, cap - n, " x%d", k);
  n += (size_t)snprintf(t + n, cap - n, " in (");
  for (int k = 0; k < e->n_out; k++) n += (size_t)snprintf(t + n, cap - n, "%sy%d", k ? ", " : "", k);
  snprintf(t + n, cap - n, "%s) }", e->n_out == 1 ? "," : "");
  free(body);
  return t;
}
