#!/usr/bin/env python3
"""Golden data for the scatter family (scatter, scatter-mul, scatter-min,
scatter-max; scatter-add's own cases are in eval_shape.py) from JAX (CPU,
x64 enabled).

scatter.txt: one lax scatter per line in eval_shape.txt's format (name |
prim | params | inputs | output, arrays as type:hex) for the reference
evaluator to match bit for bit: every kind and mode with repeated and
out-of-range indices, f32/i32 and the other dtypes, 1-D/2-D operands,
window dims, batching dims, NaN and signed zeros for min/max.

scatter_grad.txt (f32_lines format): x.at[idx].<op>(u) along an axis as
kiln_scatter*/kiln_at_* build it: values, vjp of sum(f * c) in x and u, jvp
at (tx, tu), and vmap over x, u or the indices.

Run: python3 tests/golden/scatter.py   (deterministic; rerun when JAX changes)
"""
import os
import sys

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eval_shape as es  # noqa: E402  (the type:hex format and its helpers)
from f32_lines import F32Lines  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "scatter.txt")
SD, MODE = lax.ScatterDimensionNumbers, lax.GatherScatterMode
MODES = {"clip": MODE.CLIP, "fill": MODE.FILL_OR_DROP, "promise": MODE.PROMISE_IN_BOUNDS}
rng = np.random.RandomState(11)
LAX = {"scatter": lax.scatter, "scatter-mul": lax.scatter_mul, "scatter-min": lax.scatter_min,
       "scatter-max": lax.scatter_max}
CASES = []


def data(dtype, shape):
    """Small values (products stay exact-ish, min/max see ties)."""
    dt = es.npdt(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "bool":
        return (rng.randint(0, 2, size=n) == 1).reshape(shape)
    if dt.kind in "iu":
        return rng.randint(0 if dt.kind == "u" else -9, 10, size=n).astype(dt).reshape(shape)
    return (rng.randn(n) * 4).round(1).astype(dt).reshape(shape)


def case(name, prim, x, idx, u, dnums, mode, sorted_=False, unique=False):
    params = {"dimension_numbers": dnums, "mode": mode, "indices_are_sorted": sorted_,
              "unique_indices": unique}
    args = [np.asarray(a) for a in (x, idx, u)]
    out = np.asarray(LAX[prim](*[jnp.asarray(a) for a in args], dnums, indices_are_sorted=sorted_,
                               unique_indices=unique, mode=mode))
    CASES.append(" | ".join([name, prim, es.params_text(params),
                             " ".join(es.enc(a) for a in args), es.enc(out)]))


def along(x, idx, axis):
    """Dimension numbers of x.at[idx] along axis (kiln_scatter*'s form)."""
    ir = np.asarray(idx).ndim - 1
    window = tuple(d if d < axis else d - 1 + ir for d in range(np.ndim(x)) if d != axis)
    return SD(update_window_dims=window, inserted_window_dims=(axis,),
              scatter_dims_to_operand_dims=(axis,))


DUP_IDX = es.ints("int32", [0, 9, -1, 10, 3, 3, 0, 9], (2, 4, 1))
for prim in LAX:
    p = prim.replace("-", "_")
    for mname, mode in MODES.items():
        # 2-D operand, windows of rows: duplicates, negative and too-large indices.
        for dt in ("float32", "int32"):
            x, u = data(dt, (10, 3)), data(dt, (2, 4, 3))
            case(f"{p}_rows_{dt}_{mname}", prim, x, DUP_IDX, u, along(x, DUP_IDX, 0), mode)
        # 1-D operand, scalar updates.
        x, idx = data("float32", (6,)), es.ints("int32", [5, 0, 5, 6, -1, 2], (6, 1))
        case(f"{p}_1d_{mname}", prim, x, idx, data("float32", (6,)), along(x, idx, 0), mode)
        # Along axis 1 of a 3-D operand.
        x, idx = data("float64", (3, 5, 2)), es.ints("int32", [4, 0, 5, 4], (4, 1))
        case(f"{p}_axis1_{mname}", prim, x, idx, data("float64", (3, 4, 2)), along(x, idx, 1),
             mode)
        # Batching dims (take_along_axis's transpose).
        x = data("float32", (4, 5))
        case(f"{p}_batching_{mname}", prim, x,
             es.ints("int32", [0, 4, 5, -1, 2, 2, 9, 1, 3, 0, 0, 4], (4, 3, 1)),
             data("float32", (4, 3)),
             SD(update_window_dims=(), inserted_window_dims=(1,), scatter_dims_to_operand_dims=(1,),
                operand_batching_dims=(0,), scatter_indices_batching_dims=(0,)), mode)
        # Two index components, a partial window (window 2 of 3 columns).
        x = data("int32", (4, 3, 3))
        case(f"{p}_2d_index_{mname}", prim, x, es.ints("int32", [0, 1, 3, 2, 0, 1, 4, 0], (4, 2)),
             data("int32", (4, 2)),
             SD(update_window_dims=(1,), inserted_window_dims=(0, 1),
                scatter_dims_to_operand_dims=(0, 1)), mode)
    # Every dtype the kind takes.
    for dt in es.DTYPES:
        if dt == "bool" and prim == "scatter-mul":
            continue
        x, idx = data(dt, (5, 2)), es.ints("int32", [4, 0, 4, 5, 1], (5, 1))
        case(f"{p}_{dt}", prim, x, idx, data(dt, (5, 2)), along(x, idx, 0), MODE.FILL_OR_DROP)
    # Empty indices; sorted and unique promises.
    x = data("float32", (4, 3))
    case(f"{p}_empty_indices", prim, x, np.zeros((0, 1), np.int32), np.zeros((0, 3), np.float32),
         along(x, np.zeros((0, 1)), 0), MODE.FILL_OR_DROP)
    idx = es.ints("int32", [0, 2, 3], (3, 1))
    case(f"{p}_sorted_unique", prim, x, idx, data("float32", (3, 3)), along(x, idx, 0), MODE.CLIP,
         sorted_=True, unique=True)

# NaNs and signed zeros against min/max; overflow of mul.
SPECIAL = np.array([np.nan, 0.0, -0.0, 1.0, -np.inf, np.inf], np.float32)
SPECIAL_U = np.array([1.0, -0.0, 0.0, np.nan, 2.0, -1.0], np.float32)
for prim in ("scatter-min", "scatter-max", "scatter-mul"):
    p = prim.replace("-", "_")
    idx = es.ints("int32", [0, 1, 2, 3, 4, 5], (6, 1))
    case(f"{p}_special_f32", prim, SPECIAL, idx, SPECIAL_U, along(SPECIAL, idx, 0), MODE.CLIP)
    for dt in ("float16", "bfloat16"):
        xs, us = SPECIAL.astype(es.npdt(dt)), SPECIAL_U.astype(es.npdt(dt))
        case(f"{p}_special_{dt}", prim, xs, idx, us, along(xs, idx, 0), MODE.CLIP)
case("scatter_mul_int8_wraps", "scatter-mul", np.array([100, -128], np.int8),
     es.ints("int32", [0, 1, 0], (3, 1)), np.array([3, -1, 5], np.int8),
     along(np.zeros(2), np.zeros((3, 1)), 0), MODE.CLIP)
case("scatter_mul_f16_rounds_each", "scatter-mul", np.array([1.0], np.float16),
     es.ints("int32", [0, 0, 0], (3, 1)), np.array([1.001, 1.001, 1.001], np.float16),
     along(np.zeros(1), np.zeros((3, 1)), 0), MODE.CLIP)


# optimization_barrier (the identity; one operand fits this file's format) lives
# in the shape family too.
for dt in ("float32", "int8", "bool"):
    xb = data(dt, (2, 3))
    out = np.asarray(lax.optimization_barrier(jnp.asarray(xb)))
    CASES.append(" | ".join([f"optimization_barrier_{dt}", "optimization_barrier", "",
                             es.enc(xb), es.enc(out)]))

# ---- transformations of x.at[idx].op(u) along an axis ----

G = F32Lines(12)
IDX = np.array([2, 0, 2], np.int32)      # a repeated index: JAX's non-unique rules
UIDX = np.array([2, 0, 4], np.int32)     # unique (scatter-mul's update gradient)
OPS = {"set": "set", "add": "add", "mul": "mul", "min": "min", "max": "max"}


def at(op, x, idx, u, axis=0, unique=False):
    ix = (slice(None),) * axis + (idx,)
    return getattr(jnp.asarray(x).at[ix], op)(u, unique_indices=unique)


def grad_case(name, op, idx, x, u, axis=0, unique=False):
    f = lambda x, u: at(op, x, idx, u, axis, unique)  # noqa: E731
    c = G.uniform(-1, 1, np.shape(f(x, u)))
    tx, tu = G.uniform(-1, 1, x.shape), G.uniform(-1, 1, u.shape)
    loss = lambda x, u: jnp.sum(f(x, u) * c)  # noqa: E731
    gx, gu = jax.grad(loss, argnums=(0, 1))(x, u)
    y, ty = jax.jvp(f, (x, u), (tx, tu))
    for n, v in [("x", x), ("u", u), ("c", c), ("tx", tx), ("tu", tu), ("y", y), ("vjp_x", gx),
                 ("vjp_u", gu), ("jvp", ty)]:
        G.put(name, n, v)


for op in OPS:
    x, u = G.uniform(-2, 2, (5, 4)), G.uniform(-2, 2, (3, 4))
    grad_case(f"{op}_dup", op, IDX if op != "mul" else UIDX, x, u, unique=op == "mul")
    x, u = G.uniform(-2, 2, (3, 5)), G.uniform(-2, 2, (3, 3))
    grad_case(f"{op}_axis1", op, UIDX, x, u, axis=1, unique=op == "mul")
# Ties: two updates and the operand share the extreme; one update ties the operand.
for op in ("min", "max"):
    x = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    u = np.array([[1, 7], [1, 0], [5, 2]], np.float32)
    grad_case(f"{op}_ties", op, np.array([0, 0, 2], np.int32), x, u)


def vmap_case(name, op, in_axes, x, u, idx):
    f = lambda x, u, i: at(op, x, i.astype(jnp.int32), u)  # noqa: E731
    y = jax.vmap(f, in_axes=in_axes)(x, u, idx)
    for n, v in [("x", x), ("u", u), ("i", idx), ("y", y)]:
        G.put(name, n, v)


for op in OPS:
    x, u = G.uniform(-2, 2, (2, 5, 3)), G.uniform(-2, 2, (2, 4, 3))
    i2 = np.array([[4, 0, 4, 7], [1, 1, -1, 2]], np.float32)
    vmap_case(f"vmap_{op}_x", op, (0, None, None), x, u[0], i2[0])
    vmap_case(f"vmap_{op}_u", op, (None, 0, None), x[0], u, i2[0])
    vmap_case(f"vmap_{op}_i", op, (None, None, 0), x[0], u[0], i2)
    vmap_case(f"vmap_{op}_all", op, (0, 0, 0), x, u, i2)


def main():
    with open(OUT, "w") as f:
        f.write("# name | prim | params | inputs type:hex | output type:hex "
                "(tests/golden/scatter.py)\n")
        for line in CASES:
            f.write(line + "\n")
    G.write(os.path.join(HERE, "scatter_grad.py"), jax.__version__)
    print(f"{len(CASES)} cases -> {OUT}; {len(G.lines)} lines -> scatter_grad.txt")


if __name__ == "__main__":
    main()
