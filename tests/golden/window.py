"""Expected values for tests/trace/test_window.cc, computed by JAX: lax's
reduce_window_sum/max/min (1-D, 2-D, NHWC, strides, padding, base and
window dilation; f32 and bf16), Flax's max_pool / avg_pool (the pooling
arithmetic of flax.linen.pooling, restated below because Flax is not in the
golden venv), jvp and vjp at random points (max-pool's gradient with ties),
and vmap with the mapped axis in each position.

    python3 tests/golden/window.py   # writes window.txt beside it

Each line: `<case> <name> <shape> <values...>` (f32_lines.py). Every case
carries its parameters as lines too: dims, strides, pads (lo, hi per
dimension), base, wdil, and op (0 sum, 1 max, 2 min).
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from f32_lines import F32Lines

gold = F32Lines(7)
put, uniform = gold.put, gold.uniform

INIT = {0: (0.0, lax.add), 1: (-jnp.inf, lax.max), 2: (jnp.inf, lax.min)}


def rw(op, dims, strides, pads, base, wdil):
  init, fn = INIT[op]
  return lambda x: lax.reduce_window(x, jnp.asarray(init, x.dtype), fn, dims, strides, pads,
                                     base, wdil)


def put_params(case, op, dims, strides, pads, base, wdil):
  put(case, "op", np.float32(op))
  put(case, "dims", np.array(dims))
  put(case, "strides", np.array(strides))
  put(case, "pads", np.array(pads).reshape(-1))
  put(case, "base", np.array(base))
  put(case, "wdil", np.array(wdil))


def ties(shape):
  """Small integers: many equal maxima in overlapping windows."""
  return gold.rng.integers(0, 3, size=shape).astype(np.float32)


# (case, op, shape, dims, strides, pads, base, wdil, dtype, grad?, input kind)
CASES = [
    ("max1d", 1, (10,), (3,), (2,), ((1, 1),), (1,), (1,), "f32", True, "u"),
    ("max2d", 1, (6, 7), (2, 3), (2, 2), ((0, 1), (1, 1)), (1, 1), (1, 1), "f32", True, "u"),
    ("min2d", 2, (5, 6), (2, 2), (1, 1), ((1, 0), (0, 1)), (1, 1), (1, 1), "f32", True, "u"),
    ("sum2d", 0, (5, 6), (3, 2), (2, 1), ((1, 1), (0, 2)), (1, 1), (1, 1), "f32", True, "u"),
    ("sumdil", 0, (7, 8), (2, 3), (1, 2), ((1, 2), (0, 1)), (2, 1), (1, 2), "f32", True, "u"),
    ("maxbase", 1, (4, 5), (3, 2), (2, 1), ((1, 1), (0, 1)), (2, 1), (1, 1), "f32", True, "u"),
    ("maxwdil", 1, (7, 7), (2, 2), (1, 2), ((0, 0), (1, 1)), (1, 1), (2, 3), "f32", False, "u"),
    ("maxnhwc", 1, (2, 6, 6, 3), (1, 2, 2, 1), (1, 2, 2, 1), ((0, 0),) * 4, (1,) * 4, (1,) * 4,
     "f32", True, "u"),
    ("maxties", 1, (2, 5, 5, 2), (1, 3, 3, 1), (1, 1, 1, 1), ((0, 0), (1, 1), (1, 1), (0, 0)),
     (1,) * 4, (1,) * 4, "f32", True, "t"),
    ("minties", 2, (6, 6), (2, 3), (1, 2), ((0, 1), (1, 1)), (1, 1), (1, 1), "f32", True, "t"),
    ("maxbf16", 1, (2, 6, 6, 2), (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)),
     (1,) * 4, (1,) * 4, "bf16", True, "t"),
    ("sumbf16", 0, (2, 6, 6, 2), (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)),
     (1,) * 4, (1,) * 4, "bf16", True, "u"),
]

for case, op, shape, dims, strides, pads, base, wdil, dt, grad, kind in CASES:
  put_params(case, op, dims, strides, pads, base, wdil)
  x = ties(shape) if kind == "t" else uniform(-2, 2, shape)
  if dt == "bf16":
    x = np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32))
  f = rw(op, dims, strides, pads, base, wdil)
  if dt == "bf16":  # f32 in and out, the window op in bf16 (as the test traces it)
    f = (lambda g: lambda x: g(x.astype(jnp.bfloat16)).astype(jnp.float32))(f)
  put(case, "x", x)
  y = f(jnp.asarray(x))
  put(case, "y", y)
  t = uniform(-1, 1, shape)
  put(case, "t", t)
  put(case, "jvp", jax.jvp(f, (jnp.asarray(x),), (jnp.asarray(t),))[1])
  if grad:
    c = uniform(-1, 1, y.shape)
    put(case, "c", c)
    put(case, "vjp", jax.vjp(f, jnp.asarray(x))[1](jnp.asarray(c))[0])


# ---- Flax's pooling (flax.linen.pooling.pool / max_pool / avg_pool) ----
def flax_pool(inputs, init, reduce_fn, window_shape, strides, padding):
  num_batch_dims = inputs.ndim - (len(window_shape) + 1)
  strides = strides or (1,) * len(window_shape)
  strides = (1,) * num_batch_dims + strides + (1,)
  dims = (1,) * num_batch_dims + window_shape + (1,)
  if not isinstance(padding, str):
    padding = ((0, 0),) * num_batch_dims + tuple(map(tuple, padding)) + ((0, 0),)
  return lax.reduce_window(inputs, init, reduce_fn, dims, strides, padding)


def flax_avg_pool(inputs, window_shape, strides=None, padding="VALID", count_include_pad=True):
  y = flax_pool(inputs, 0.0, lax.add, window_shape, strides, padding)
  if count_include_pad:
    return y / np.prod(window_shape)
  div_shape = inputs.shape[:-1] + (1,)
  if len(div_shape) - 2 == len(window_shape):
    div_shape = (1,) + div_shape[1:]
  return y / flax_pool(jnp.ones(div_shape), 0.0, lax.add, window_shape, strides, padding)


def flax_max_pool(inputs, window_shape, strides=None, padding="VALID"):
  return flax_pool(inputs, -jnp.inf, lax.max, window_shape, strides, padding)


# (case, kind, shape, window, strides, padding, count_include_pad)
POOLS = [
    ("pool_max_valid", "max", (2, 7, 6, 3), (2, 2), (2, 2), "VALID", True),
    ("pool_max_same", "max", (2, 7, 6, 3), (3, 3), (2, 2), "SAME", True),
    ("pool_max_pairs", "max", (5, 3), (2,), (1,), ((1, 0),), True),
    ("pool_avg_same", "avg", (2, 7, 6, 3), (3, 3), (2, 2), "SAME", True),
    ("pool_avg_nopad", "avg", (2, 7, 6, 3), (3, 3), (2, 2), "SAME", False),
    ("pool_avg_1d", "avg", (3, 9, 2), (4,), (3,), ((2, 1),), False),
]
for case, kind, shape, window, strides, padding, cip in POOLS:
  x = uniform(-2, 2, shape)
  put(case, "x", x)
  put(case, "window", np.array(window))
  put(case, "strides", np.array(strides))
  put(case, "same", np.float32(padding == "SAME"))
  put(case, "pads", np.array(padding if not isinstance(padding, str) else
                             [(0, 0)] * len(window)).reshape(-1))
  put(case, "count_include_pad", np.float32(cip))
  if kind == "max":
    f = lambda x: flax_max_pool(x, window, strides, padding)
  else:
    f = lambda x: flax_avg_pool(x, window, strides, padding, cip)
  put(case, "y", f(jnp.asarray(x)))
  c = uniform(-1, 1, f(jnp.asarray(x)).shape)
  put(case, "c", c)
  put(case, "vjp", jax.vjp(f, jnp.asarray(x))[1](jnp.asarray(c))[0])

# ---- vmap: a (4, 6) max-pool and its gradient, mapped axis (size 3) at 0, 1, 2 ----
mp = rw(1, (2, 3), (2, 1), ((1, 0), (1, 1)), (1, 1), (1, 1))
base = uniform(-2, 2, (3, 4, 6))
put("vmap", "x0", base)
c = uniform(-1, 1, mp(jnp.asarray(base[0])).shape)
put("vmap", "c", c)
loss = lambda x, c: jnp.sum(mp(x) * c)
for ax in range(3):
  xa = np.moveaxis(base, 0, ax)
  put("vmap", f"x{ax}", xa)
  put("vmap", f"y{ax}", jax.vmap(mp, in_axes=ax)(xa))
  put("vmap", f"grad{ax}", jax.vmap(jax.grad(loss), in_axes=(ax, None))(xa, c))
  put("vmap", f"jvp{ax}", jax.vmap(lambda x, t: jax.jvp(mp, (x,), (t,))[1], in_axes=(ax, ax))(
      xa, xa * 0.5 + 0.25))

gold.write(__file__, jax.__version__)
