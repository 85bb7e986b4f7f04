/* The stand-in driver's graphs (replayed in insertion order) and stream
 * capture of kernels and host functions (fake_cuda_driver.c). */
#include "fake_cuda_internal.h"

/* ---- graphs (run in insertion order) and stream capture ---- */

static bool fake_graph_ok(CUgraph g) {
  for (struct CUgraph_st *p = fake_graphs; p; p = p->next)
    if (p == g) return !p->destroyed;
  return false;
}

static bool fake_exec_ok(CUgraphExec e) {
  for (struct CUgraphExec_st *p = fake_execs; p; p = p->next)
    if (p == e) return !p->destroyed;
  return false;
}

CUresult fake_cuGraphCreate(CUgraph *out, unsigned int flags) {
  FAKE_BEGIN(true);
  if (flags != 0) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  g->next = fake_graphs;
  fake_graphs = g;
  *out = g;
  return fake_leave(CUDA_SUCCESS);
}

static void fake_graph_free_nodes(struct CUgraph_st *g) {
  for (struct CUgraphNode_st *n = g->first, *next; n; n = next) {
    next = n->next;
    free(n->ops);
    free(n);
  }
  g->first = g->last = NULL;
}

CUresult fake_cuGraphDestroy(CUgraph g) {
  FAKE_BEGIN(true);
  if (!fake_graph_ok(g)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  g->destroyed = true;
  fake_graph_free_nodes(g);
  return fake_leave(CUDA_SUCCESS);
}

static bool fake_node_in(const struct CUgraph_st *g, CUgraphNode node) {
  for (struct CUgraphNode_st *n = g->first; n; n = n->next)
    if (n == node) return true;
  return false;
}

static CUresult fake_launch_of(const CUDA_KERNEL_NODE_PARAMS *p, fake_launch *out) {
  if (p->kern || p->ctx) return CUDA_ERROR_INVALID_VALUE; /* kiln passes func */
  return fake_launch_make(p->func, (unsigned[]){p->gridDimX, p->gridDimY, p->gridDimZ},
                          (unsigned[]){p->blockDimX, p->blockDimY, p->blockDimZ},
                          p->sharedMemBytes, p->kernelParams, p->extra, out);
}

/* The work of g, flattened in order, in a new array (*n ops). */
static CUresult fake_graph_ops(const struct CUgraph_st *g, fake_op **out, int *n) {
  *n = 0;
  for (const struct CUgraphNode_st *p = g->first; p; p = p->next) *n += p->n;
  if (!(*out = calloc((size_t)(*n ? *n : 1), sizeof **out))) return CUDA_ERROR_OUT_OF_MEMORY;
  int k = 0;
  for (const struct CUgraphNode_st *p = g->first; p; p = p->next)
    for (int i = 0; i < p->n; i++) (*out)[k++] = p->ops[i];
  return CUDA_SUCCESS;
}

/* Appends a node doing ops[0..n) (taken over) to g. Nodes run in insertion
 * order, so each must come after its dependencies. */
static CUresult fake_graph_append(CUgraph g, const CUgraphNode *deps, size_t n_deps, fake_op *ops,
                                  int n, CUgraphNode *out) {
  CUresult rc = CUDA_SUCCESS;
  for (size_t i = 0; i < n_deps && rc == CUDA_SUCCESS; i++)
    if (!fake_node_in(g, deps[i])) rc = CUDA_ERROR_INVALID_VALUE;
  struct CUgraphNode_st *node = rc == CUDA_SUCCESS ? calloc(1, sizeof *node) : NULL;
  if (!node) {
    free(ops);
    return rc == CUDA_SUCCESS ? CUDA_ERROR_OUT_OF_MEMORY : rc;
  }
  *node = (struct CUgraphNode_st){.graph = g, .n = n, .ops = ops};
  if (g->last)
    g->last->next = node;
  else
    g->first = node;
  g->last = node;
  if (out) *out = node;
  return CUDA_SUCCESS;
}

CUresult fake_cuGraphAddKernelNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                   size_t n_deps, const CUDA_KERNEL_NODE_PARAMS *p) {
  FAKE_BEGIN(true);
  if (!fake_graph_ok(g)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  fake_op *op = calloc(1, sizeof *op);
  if (!op) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  op->kind = FAKE_KERNEL;
  CUresult rc = fake_launch_of(p, &op->launch);
  if (rc != CUDA_SUCCESS) {
    free(op);
    return fake_leave(rc);
  }
  return fake_leave(fake_graph_append(g, deps, n_deps, op, 1, out));
}

/* The child's work is copied in, as the driver clones the child graph. */
CUresult fake_cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                       size_t n_deps, CUgraph child) {
  FAKE_BEGIN(true);
  if (!fake_graph_ok(g) || !fake_graph_ok(child)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  fake_op *ops;
  int n;
  CUresult rc = fake_graph_ops(child, &ops, &n);
  if (rc != CUDA_SUCCESS) return fake_leave(rc);
  return fake_leave(fake_graph_append(g, deps, n_deps, ops, n, out));
}

/* Captured work becomes a node of the capture's graph, after the last. */
CUresult fake_capture(CUstream s, fake_op op) {
  if (op.kind != FAKE_KERNEL && op.kind != FAKE_HOST_FN)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  fake_op *copy = malloc(sizeof *copy);
  if (!copy) return CUDA_ERROR_OUT_OF_MEMORY;
  *copy = op;
  struct CUgraph_st *g = s->capture;
  return fake_graph_append(g, g->last ? (CUgraphNode[]){g->last} : NULL, g->last ? 1 : 0, copy, 1,
                           NULL);
}

CUresult fake_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (s->capture || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
    return fake_leave(CUDA_ERROR_INVALID_VALUE);
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  g->next = fake_graphs;
  fake_graphs = g;
  s->capture = g;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuStreamEndCapture(CUstream s, CUgraph *out) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (!s->capture) return fake_leave(CUDA_ERROR_ILLEGAL_STATE);
  *out = s->capture;
  s->capture = NULL;
  return fake_leave(CUDA_SUCCESS);
}

/* Exported too, for the stand-in cuBLASLt, whose queued matmuls must then
 * outlive their first run. */
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s) || !status) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  *status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g,
                                          unsigned long long flags) {
  FAKE_BEGIN(true);
  if (!fake_graph_ok(g)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (flags != 0) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  struct CUgraphExec_st *e = calloc(1, sizeof *e);
  int n = 0;
  for (struct CUgraphNode_st *p = g->first; p; p = p->next) n++;
  if (e) e->nodes = calloc((size_t)(n ? n : 1), sizeof *e->nodes);
  bool ok = e && e->nodes;
  for (struct CUgraphNode_st *p = g->first; ok && p; p = p->next, e->n++) {
    fake_exec_node *x = &e->nodes[e->n];
    *x = (fake_exec_node){p, p->n, malloc(sizeof(fake_op) * (size_t)(p->n ? p->n : 1))};
    if ((ok = x->ops != NULL)) memcpy(x->ops, p->ops, sizeof(fake_op) * (size_t)p->n);
  }
  if (!ok) {
    for (int i = 0; e && i < e->n; i++) free(e->nodes[i].ops);
    if (e) free(e->nodes);
    free(e);
    return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  e->next = fake_execs;
  fake_execs = e;
  *out = e;
  return fake_leave(CUDA_SUCCESS);
}

static fake_exec_node *fake_exec_find(CUgraphExec e, CUgraphNode node) {
  for (int i = 0; i < e->n; i++)
    if (e->nodes[i].node == node) return &e->nodes[i];
  return NULL;
}

CUresult fake_cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode node,
                                             const CUDA_KERNEL_NODE_PARAMS *p) {
  FAKE_BEGIN(true);
  if (!fake_exec_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  fake_exec_node *x = fake_exec_find(e, node);
  if (!x || x->n != 1 || x->ops[0].kind != FAKE_KERNEL) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  fake_launch l;
  CUresult rc = fake_launch_of(p, &l);
  if (rc == CUDA_SUCCESS && l.func != x->ops[0].launch.func) rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) x->ops[0].launch = l;
  return fake_leave(rc);
}

/* As the driver: only a child graph of the same shape (here: the same
 * kinds of work, the same kernels) may replace the node's. */
CUresult fake_cuGraphExecChildGraphNodeSetParams(CUgraphExec e, CUgraphNode node,
                                                 CUgraph child) {
  FAKE_BEGIN(true);
  if (!fake_exec_ok(e) || !fake_graph_ok(child)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  fake_exec_node *x = fake_exec_find(e, node);
  fake_op *ops;
  int n;
  if (!x) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  CUresult rc = fake_graph_ops(child, &ops, &n);
  if (rc != CUDA_SUCCESS) return fake_leave(rc);
  bool same = n == x->n;
  for (int i = 0; same && i < n; i++)
    same = ops[i].kind == x->ops[i].kind &&
           (ops[i].kind != FAKE_KERNEL || ops[i].launch.func == x->ops[i].launch.func);
  if (!same) {
    free(ops);
    return fake_leave(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  }
  free(x->ops);
  x->ops = ops;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuGraphLaunch(CUgraphExec e, CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_exec_ok(e) || !fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  CUresult rc = CUDA_SUCCESS;
  for (int i = 0; i < e->n; i++)
    for (int k = 0; k < e->nodes[i].n && rc == CUDA_SUCCESS; k++) {
      fake_op op = e->nodes[i].ops[k];
      op.dst_device = s->device;
      rc = fake_enqueue(s, op);
    }
  if (rc == CUDA_SUCCESS) fake_graph_launches++;
  return fake_leave(rc);
}

CUresult fake_cuGraphExecDestroy(CUgraphExec e) {
  FAKE_BEGIN(true);
  if (!fake_exec_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  e->destroyed = true;
  for (int i = 0; i < e->n; i++) free(e->nodes[i].ops);
  free(e->nodes);
  e->nodes = NULL;
  e->n = 0;
  return fake_leave(CUDA_SUCCESS);
}

/* Kernels that have run (their pointers checked) and graphs launched. */
void kiln_fake_cuda_kernel_counts(unsigned long long *kernels_run,
                                  unsigned long long *graph_launches) {
  pthread_mutex_lock(&fake_lock);
  if (kernels_run) *kernels_run = fake_kernels_run;
  if (graph_launches) *graph_launches = fake_graph_launches;
  pthread_mutex_unlock(&fake_lock);
}

/* Runs and work items of the kernels whose name contains `part`, over every
 * function looked up so far (a launch over no items computes nothing on a
 * GPU either: tests check that the kernels they expect did work). */
void kiln_fake_cuda_kernel_work(const char *part, unsigned long long *runs,
                                unsigned long long *items) {
  pthread_mutex_lock(&fake_lock);
  *runs = *items = 0;
  for (struct CUfunc_st *f = fake_functions; f; f = f->next)
    if (strstr(f->name, part)) *runs += f->runs, *items += f->items;
  pthread_mutex_unlock(&fake_lock);
}
