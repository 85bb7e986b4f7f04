/* Loading compiled kernels, launching them, and replaying chains of
 * launches and captured library calls as CUDA graphs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"

kiln_status kcuda_kernel_load(kcuda_device *d, const void *image, const char *name,
                              kcuda_kernel *out) {
  kiln_status st = KILN_OK;
  memset(out, 0, sizeof *out);
  kcore_range_push("kiln module load");
  KCUDA_CU(d->drv, d->where, cuModuleLoadData, (&out->module, image), fail);
  KCUDA_CU(d->drv, d->where, cuModuleGetFunction, (&out->fn, out->module, name), fail);
  kcore_range_pop();
  return KILN_OK;
fail:
  kcore_range_pop();
  kcuda_kernel_unload(d, out);
  /* A module the driver refuses is a compile failure of that kernel. */
  return kcore_fail_wrap(st == KILN_ERR_INTERNAL ? KILN_ERR_COMPILE : st, "loading kernel %s", name);
}

void kcuda_kernel_unload(kcuda_device *d, kcuda_kernel *k) {
  if (k->module) {
    CUresult rc = d->drv->cuModuleUnload(k->module);
    if (rc != CUDA_SUCCESS) kcuda_log_failure(d, rc, "cuModuleUnload");
  }
  memset(k, 0, sizeof *k);
}

kiln_status kcuda_launch_kernel(kcuda_device *d, CUstream stream, const kcuda_launch *l) {
  CUresult rc = d->drv->cuLaunchKernel(l->fn, l->grid, 1, 1, l->block, 1, 1, 0, stream, l->params,
                                       NULL);
  if (rc == CUDA_SUCCESS) return KILN_OK;
  char call[192];
  snprintf(call, sizeof call, "cuLaunchKernel(%s, grid %u, block %u)", l->name, l->grid, l->block);
  return kcuda_driver_fail(d->drv, rc, call, d->where);
}

kiln_status kcuda_launch_host(kcuda_device *d, CUstream stream, CUhostFn fn, void *user) {
  kiln_status st = KILN_OK;
  KCUDA_CU(d->drv, d->where, cuLaunchHostFunc, (stream, fn, user), out);
out:
  return st;
}

static void kcuda_node_params(const kcuda_launch *l, CUDA_KERNEL_NODE_PARAMS *p) {
  memset(p, 0, sizeof *p);
  p->func = l->fn;
  p->gridDimX = l->grid;
  p->gridDimY = p->gridDimZ = 1;
  p->blockDimX = l->block;
  p->blockDimY = p->blockDimZ = 1;
  p->kernelParams = l->params;
}

static void kcuda_graph_free(kcuda_device *d, CUgraph graph) {
  CUresult rc = graph ? d->drv->cuGraphDestroy(graph) : CUDA_SUCCESS;
  if (rc != CUDA_SUCCESS) kcuda_log_failure(d, rc, "cuGraphDestroy");
}

/* Records what node->capture queues as a graph of its own, on g's capture
 * stream (made on first use). Thread-local capture mode: other threads'
 * driver calls are not disturbed; kiln's callers hold the graph alone. */
static kiln_status kcuda_graph_capture(kcuda_device *d, kcuda_graph *g,
                                       const kcuda_graph_node *node, CUgraph *out) {
  kiln_status st = KILN_OK;
  *out = NULL;
  if (!g->capture)
    KCUDA_CU(d->drv, d->where, cuStreamCreate, (&g->capture, CU_STREAM_NON_BLOCKING), done);
  KCUDA_CU(d->drv, d->where, cuStreamBeginCapture,
           (g->capture, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), done);
  kiln_status queued = node->capture(node->user, g->capture);
  /* Capture always ends, so that the stream stays usable. */
  KCUDA_CU(d->drv, d->where, cuStreamEndCapture, (g->capture, out), done);
  st = queued;
done:
  if (st) {
    kcuda_graph_free(d, *out);
    *out = NULL;
  }
  return st;
}

/* Adds node i, after node i - 1; a captured node's graph is copied in. */
static kiln_status kcuda_graph_add(kcuda_device *d, kcuda_graph *g, int i,
                                   const kcuda_graph_node *node) {
  kiln_status st = KILN_OK;
  const CUgraphNode *dep = i ? &g->nodes[i - 1] : NULL;
  CUgraph child = NULL;
  if (node->launch) {
    CUDA_KERNEL_NODE_PARAMS p;
    kcuda_node_params(node->launch, &p);
    KCUDA_CU(d->drv, node->launch->name, cuGraphAddKernelNode,
             (&g->nodes[i], g->graph, dep, i ? 1 : 0, &p), out);
  } else if (!(st = kcuda_graph_capture(d, g, node, &child))) {
    KCUDA_CU(d->drv, d->where, cuGraphAddChildGraphNode,
             (&g->nodes[i], g->graph, dep, i ? 1 : 0, child), out);
  }
out:
  kcuda_graph_free(d, child);
  return st;
}

kiln_status kcuda_graph_build(kcuda_device *d, int n, const kcuda_graph_node *nodes,
                              kcuda_graph *out) {
  kiln_status st = KILN_OK;
  memset(out, 0, sizeof *out);
  if (!(out->nodes = calloc((size_t)(n > 0 ? n : 1), sizeof *out->nodes)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for a graph", d->where);
  KCUDA_CU(d->drv, d->where, cuGraphCreate, (&out->graph, 0), fail);
  for (int i = 0; i < n; i++, out->n++)
    if ((st = kcuda_graph_add(d, out, i, &nodes[i]))) goto fail;
  KCUDA_CU(d->drv, d->where, cuGraphInstantiateWithFlags, (&out->exec, out->graph, 0), fail);
  return KILN_OK;
fail:
  kcuda_graph_destroy(d, out);
  return st;
}

kiln_status kcuda_graph_update(kcuda_device *d, kcuda_graph *g, int i,
                               const kcuda_graph_node *node) {
  kiln_status st = KILN_OK;
  CUgraph child = NULL;
  if (node->launch) {
    CUDA_KERNEL_NODE_PARAMS p;
    kcuda_node_params(node->launch, &p);
    KCUDA_CU(d->drv, node->launch->name, cuGraphExecKernelNodeSetParams,
             (g->exec, g->nodes[i], &p), out);
  } else if (!(st = kcuda_graph_capture(d, g, node, &child))) {
    KCUDA_CU(d->drv, d->where, cuGraphExecChildGraphNodeSetParams, (g->exec, g->nodes[i], child),
             out);
  }
out:
  kcuda_graph_free(d, child);
  return st;
}

kiln_status kcuda_graph_launch(kcuda_device *d, kcuda_graph *g, CUstream stream) {
  kiln_status st = KILN_OK;
  KCUDA_CU(d->drv, d->where, cuGraphLaunch, (g->exec, stream), out);
out:
  return st;
}

void kcuda_graph_destroy(kcuda_device *d, kcuda_graph *g) {
  CUresult rc;
  if (g->exec && (rc = d->drv->cuGraphExecDestroy(g->exec)) != CUDA_SUCCESS)
    kcuda_log_failure(d, rc, "cuGraphExecDestroy");
  kcuda_graph_free(d, g->graph);
  if (g->capture && (rc = d->drv->cuStreamDestroy(g->capture)) != CUDA_SUCCESS)
    kcuda_log_failure(d, rc, "cuStreamDestroy");
  free(g->nodes);
  memset(g, 0, sizeof *g);
}
