/* CUDA graphs of the CUDA executor: from the second call on, a program of
 * kernels and matmuls is built once into a graph and replayed, kernel nodes
 * updated in place and matmuls (and convolutions) re-captured where an
 * address changed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"

/* ---- a call ---- */

/* What a graph node of a step is built from, kept alive while it is used. */
typedef struct kcuda_x_node_make {
  const kcuda_x_call *r;
  const kcuda_step *s;
  kcuda_launch launch;
  long long range[2];
  void *params[3];
} kcuda_x_node_make;

static kiln_status kcuda_x_node_capture(void *user, CUstream stream) {
  const kcuda_x_node_make *m = user;
  return kcuda_step_queue(m->r, m->s, stream);
}

/* Step s's graph node: its kernel launch with arguments a, or its matmul
 * (a convolution's copies with it) captured with this call's addresses. */
static kcuda_graph_node kcuda_step_node(const kcuda_x_call *r, const kcuda_step *s,
                                        kiln_kernel_args *a, kcuda_x_node_make *m) {
  m->r = r;
  m->s = s;
  if (s->kind != KCUDA_STEP_KERNEL) return (kcuda_graph_node){NULL, kcuda_x_node_capture, m};
  m->launch = kcuda_step_launch(s, a, m->range, m->params);
  return (kcuda_graph_node){&m->launch, NULL, NULL};
}

/* Builds the graph from this call's steps (the second call). */
static kiln_status kcuda_x_graph_build(const kcuda_x_call *r) {
  kdev_exec *x = r->x;
  kcuda_graph_node *nodes = calloc((size_t)x->n_nodes, sizeof *nodes);
  kcuda_x_node_make *make = calloc((size_t)x->n_nodes, sizeof *make);
  kiln_status st = KILN_OK;
  if (!nodes || !make) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
    goto done;
  }
  for (int i = 0; i < x->n_steps; i++) {
    const kcuda_step *s = &x->steps[i];
    if (s->node < 0) continue;
    kcuda_step_node_args(r, s, &x->node_args[s->node]);
    nodes[s->node] = kcuda_step_node(r, s, &x->node_args[s->node], &make[s->node]);
  }
  st = kcuda_graph_build(r->d, x->n_nodes, nodes, &x->graph);
done:
  free(nodes);
  free(make);
  return st;
}

/* Replays the graph, updating only the nodes whose addresses changed (those
 * that touch the call's inputs and outputs: temporaries stay put); a matmul
 * node is captured anew. */
kiln_status kcuda_x_replay(const kcuda_x_call *r) {
  kdev_exec *x = r->x;
  kiln_status st = x->graph.exec ? KILN_OK : kcuda_x_graph_build(r);
  for (int i = 0; i < x->n_steps && !st; i++) {
    const kcuda_step *s = &x->steps[i];
    kiln_kernel_args a;
    if (s->node < 0) continue;
    kcuda_step_node_args(r, s, &a);
    if (!memcmp(&a, &x->node_args[s->node], sizeof a)) continue;
    kcuda_x_node_make m;
    kcuda_graph_node node = kcuda_step_node(r, s, &a, &m);
    if (!(st = kcuda_graph_update(r->d, &x->graph, s->node, &node))) x->node_args[s->node] = a;
  }
  if (!st && !(st = kcuda_trail_enter(r->d, x->graph_what))) {
    st = kcuda_graph_launch(r->d, &x->graph, r->d->compute);
    kcuda_trail_leave(r->d);
  }
  return st;
}

