#!/usr/bin/env python3
"""Golden data for top_k, cumlogsumexp and optimization_barrier from JAX
(CPU), in the f32_lines format (tests/trace/test_topk.cc reads topk.txt):
values (top_k with ties and k = n, with its int32 indices; cumlogsumexp
forward and reverse with -inf entries), vjp of sum(f * c) and jvp at random
points, and vmap with the mapped axis at 0 and 1.

Run: python3 tests/golden/topk.py   (deterministic; rerun when JAX changes)
"""
import os
import sys

import jax

jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from f32_lines import F32Lines  # noqa: E402

G = F32Lines(7)


def derivs(name, f, x):
    """f's value, vjp of sum(f * c) and jvp at tangent t."""
    y = f(x)
    c, t = G.uniform(-1, 1, np.shape(y)), G.uniform(-1, 1, np.shape(x))
    gx = jax.grad(lambda x: jnp.sum(f(x) * c))(x)
    _, ty = jax.jvp(f, (x,), (t,))
    for n, v in [("x", x), ("y", y), ("c", c), ("t", t), ("vjp", gx), ("jvp", ty)]:
        G.put(name, n, v)


def vmapped(name, f, x, axis):
    G.put(name, "x", x)
    G.put(name, "y", jax.vmap(f, in_axes=axis)(x))


# ---- top_k ----
TIES = np.array([[3, 1, 3, 2, 3, 0], [5, 5, 5, 5, 5, 5], [-1, 4, -2, 4, 0, -1]], np.float32)
for k in (1, 3, 6):
    vals, idx = lax.top_k(TIES, k)
    G.put(f"top_k_ties_{k}", "x", TIES)
    G.put(f"top_k_ties_{k}", "y", vals)
    G.put(f"top_k_ties_{k}", "i", idx)
x = G.uniform(-3, 3, (4, 7))
derivs("top_k_grad_3", lambda x: lax.top_k(x, 3)[0], x)
derivs("top_k_grad_n", lambda x: lax.top_k(x, 7)[0], x)
x = G.uniform(-3, 3, (3, 4, 5))
vmapped("top_k_vmap_0", lambda x: lax.top_k(x, 2)[0], x, 0)
vmapped("top_k_vmap_1", lambda x: lax.top_k(x, 2)[0], x, 1)
vmapped("top_k_vmap_idx_1", lambda x: lax.top_k(x, 2)[1].astype(jnp.float32), x, 1)

# ---- cumlogsumexp ----
x = G.uniform(-3, 3, (3, 6))
x[0, :2] = -np.inf
x[1, 4] = -np.inf
x[2, :] = -np.inf
for axis in (0, 1):
    for rev in (False, True):
        G.put(f"cumlogsumexp_{axis}_{int(rev)}", "x", x)
        G.put(f"cumlogsumexp_{axis}_{int(rev)}", "y", lax.cumlogsumexp(x, axis=axis, reverse=rev))
x = G.uniform(-3, 3, (3, 6))
for rev in (False, True):
    derivs(f"cumlogsumexp_grad_{int(rev)}", lambda x: lax.cumlogsumexp(x, axis=1, reverse=rev), x)
x = G.uniform(-3, 3, (3, 4, 5))
vmapped("cumlogsumexp_vmap_0", lambda x: lax.cumlogsumexp(x, axis=1), x, 0)
vmapped("cumlogsumexp_vmap_1", lambda x: lax.cumlogsumexp(x, axis=0, reverse=True), x, 1)


# ---- optimization_barrier: the identity for every rule ----
def barrier_fn(x):
    a, b = lax.optimization_barrier((x * 2.0, jnp.sin(x)))
    return a * b


derivs("barrier_grad", barrier_fn, G.uniform(-2, 2, (3, 4)))
vmapped("barrier_vmap_1", barrier_fn, G.uniform(-2, 2, (3, 4)), 1)

if __name__ == "__main__":
    G.write(__file__, jax.__version__)
    print(f"{len(G.lines)} lines -> topk.txt")
