"""Expected values for tests/test_transform_vmap*.cc, computed by JAX.

Each case `op@tag` is jax.vmap(f, in_axes, out_axes) of a small per-example
function f (named by `op`; the test has a kiln twin of each) applied to
random arguments a0, a1, ... (batch size 2 inserted at the in_axes position;
None arguments have the per-example shape) giving y. Then per-example
gradients of an MLP loss (vmap of grad), nested vmap, axis_size with nothing
mapped, and jacfwd/jacrev/hessian of small functions. f32 throughout.

    python3 tests/golden/transform_vmap.py   # writes transform_vmap.txt beside it

Each line: `<case> <name> <shape> <values...>` as in transform_grad.txt;
in_axes/out_axes lines hold the axes, 99 standing for None.
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

B = 2
rng = np.random.default_rng(12)
lines = []
NONE = 99


def put(case, name, x):
  x = np.asarray(x, dtype=np.float32)
  shape = "x".join(str(d) for d in x.shape) if x.ndim else "-"
  vals = " ".join(f"{float(v):.9g}" for v in x.reshape(-1))
  lines.append(f"{case} {name} {shape} {vals}")


def uniform(lo, hi, shape):
  return rng.uniform(lo, hi, size=shape).astype(np.float32)


def case(name, f, shapes, in_axes, out_axes=0, lo=-2, hi=2, ints=None):
  """ints: {argument: n} for integer arguments drawn from [0, n) (stored as floats)."""
  args = []
  for i, (s, a) in enumerate(zip(shapes, in_axes)):
    if a is not None:
      ax = a if a >= 0 else len(s) + 1 + a
      s = s[:ax] + (B,) + s[ax:]
    if ints and i in ints:
      args.append(rng.integers(0, ints[i], size=s).astype(np.float32))
    else:
      args.append(uniform(lo, hi, s))
  y = jax.vmap(f, in_axes=tuple(in_axes), out_axes=out_axes)(*args)
  for i, x in enumerate(args):
    put(name, f"a{i}", x)
  put(name, "in_axes", [NONE if a is None else a for a in in_axes])
  put(name, "out_axes", [NONE if out_axes is None else out_axes])
  put(name, "y", y)


X = (3, 4)
UNARY = {
    "neg": (lax.neg, (-2, 2)), "abs": (lax.abs, (-2, 2)), "sign": (lax.sign, (-2, 2)),
    "floor": (lax.floor, (-2, 2)), "ceil": (lax.ceil, (-2, 2)), "exp": (lax.exp, (-2, 2)),
    "exp2": (lax.exp2, (-2, 2)), "expm1": (lax.expm1, (-2, 2)), "log": (lax.log, (0.2, 3)),
    "log1p": (lax.log1p, (-0.5, 2)), "sqrt": (lax.sqrt, (0.2, 3)), "rsqrt": (lax.rsqrt, (0.2, 3)),
    "cbrt": (lax.cbrt, (0.2, 3)), "tanh": (lax.tanh, (-2, 2)), "logistic": (lax.logistic, (-3, 3)),
    "sin": (lax.sin, (-3, 3)), "cos": (lax.cos, (-3, 3)), "tan": (lax.tan, (-1, 1)),
    "asin": (lax.asin, (-0.9, 0.9)), "acos": (lax.acos, (-0.9, 0.9)), "atan": (lax.atan, (-2, 2)),
    "sinh": (lax.sinh, (-2, 2)), "cosh": (lax.cosh, (-2, 2)), "asinh": (lax.asinh, (-2, 2)),
    "acosh": (lax.acosh, (1.2, 3)), "atanh": (lax.atanh, (-0.9, 0.9)), "erf": (lax.erf, (-2, 2)),
    "erf_inv": (lax.erf_inv, (-0.9, 0.9)),
}
for op, (f, (lo, hi)) in UNARY.items():
  for a in (0, 1, -1):
    case(f"{op}@{a}", f, [X], [a], lo=lo, hi=hi)

BINARY = {
    "add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "max": lax.max,
    "min": lax.min, "pow": lax.pow, "atan2": lax.atan2, "rem": lax.rem,
}
for op, f in BINARY.items():
  lo, hi = (0.5, 2) if op in ("div", "pow", "rem") else (-2, 2)
  for tag, axes in (("0n", (0, None)), ("10", (1, 0)), ("n-1", (None, -1)), ("-11", (-1, 1))):
    case(f"{op}@{tag}", f, [X, X], list(axes), lo=lo, hi=hi)
# a per-example scalar operand, mapped or not
for tag, axes in (("00", (0, 0)), ("1n", (1, None)), ("n0", (None, 0))):
  case(f"mul_scalar@{tag}", lax.mul, [X, ()], list(axes))
case("lt@0n", lambda x, y: (x < y).astype(jnp.float32), [X, X], [0, None])
case("lt@1-1", lambda x, y: (x < y).astype(jnp.float32), [X, X], [1, -1])

where = lambda x, y: jnp.where(x > 0, x, y)
case("where@0n", where, [X, X], [0, None])
case("where@n1", where, [X, X], [None, 1])
sel = lambda p, x, y: lax.select_n(p > 0, y, x)
case("select_scalar@0nn", sel, [(), X, X], [0, None, None])
case("select_scalar@n10", sel, [(), X, X], [None, 1, 0])
clamp = lambda lo, x, hi: lax.clamp(lo - 1.0, x, hi + 1.0)
case("clamp@n10", clamp, [(), X, ()], [None, 1, 0])
case("clamp@0nn", clamp, [(), X, ()], [0, None, None])
case("convert@1", lambda x: x.astype(jnp.int32).astype(jnp.float32), [X], [1], lo=-5, hi=5)
case("iota_add@-1", lambda x: x + lax.broadcasted_iota(jnp.float32, X, 1), [X], [-1])

RED = {
    "reduce_sum": lambda x: jnp.sum(x, axis=1), "reduce_max": lambda x: jnp.max(x, axis=0),
    "reduce_min": lambda x: jnp.min(x, axis=1), "reduce_prod": lambda x: jnp.prod(x, axis=0),
    "argmax": lambda x: jnp.argmax(x, axis=1).astype(jnp.float32),
    "argmin": lambda x: jnp.argmin(x, axis=0).astype(jnp.float32),
    "cumsum": lambda x: lax.cumsum(x, axis=0), "cumprod": lambda x: lax.cumprod(x, axis=1),
    "cummax": lambda x: lax.cummax(x, axis=0, reverse=True),
    "sort": lambda x: lax.sort(x, dimension=1),
}
for op, f in RED.items():
  for a in (0, 1, -1):
    case(f"{op}@{a}", f, [X], [a])

for tag, axes in (("0n", (0, None)), ("n1", (None, 1)), ("10", (1, 0)), ("-1-1", (-1, -1))):
  case(f"matmul@{tag}", jnp.matmul, [(3, 4), (4, 5)], list(axes))
bdot = lambda a, b: lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,))))
case("dot_batch@12", bdot, [(2, 3, 4), (2, 4, 5)], [1, 2])
case("dot_batch@n0", bdot, [(2, 3, 4), (2, 4, 5)], [None, 0])
case("dot_batch@-1n", bdot, [(2, 3, 4), (2, 4, 5)], [-1, None])

SHAPE1 = {
    "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, (5, 3, 4), (1, 2)), X),
    "reshape": (lambda x: x.reshape(4, 3), X),
    "transpose": (lambda x: x.T, X),
    "expand_dims": (lambda x: lax.expand_dims(x, (1,)), X),
    "squeeze": (lambda x: lax.squeeze(x, (1,)), (3, 1, 4)),
    "rev": (lambda x: lax.rev(x, (0,)), X),
    "slice": (lambda x: lax.slice(x, (1, 0), (3, 4), (1, 2)), X),
    "pad": (lambda x: lax.pad(x, np.float32(0.5), ((1, 0, 0), (0, 2, 1))), X),
    "dynamic_slice": (lambda x: lax.dynamic_slice(x, (1, 1), (2, 2)), X),
}
for op, (f, s) in SHAPE1.items():
  for a in (0, 1, -1):
    case(f"{op}@{a}", f, [s], [a])
cat = lambda x, y: jnp.concatenate([x, y], axis=0)
case("concatenate@0n", cat, [X, (2, 4)], [0, None])
case("concatenate@11", cat, [X, (2, 4)], [1, 1])
dus = lambda x, u: lax.dynamic_update_slice(x, u, (1, 2))
case("dynamic_update_slice@0n", dus, [X, (2, 2)], [0, None])
case("dynamic_update_slice@n1", dus, [X, (2, 2)], [None, 1])

# gather and scatter-add (indices passed as floats, converted inside f)
take = lambda x, i: jnp.take(x, i.astype(jnp.int32), axis=0)
for tag, axes in (("0n", (0, None)), ("n0", (None, 0)), ("1-1", (1, -1))):
  case(f"take@{tag}", take, [(5, 4), (3,)], list(axes), ints={1: 5})
tal = lambda x, i: jnp.take_along_axis(x, i.astype(jnp.int32), axis=1)
for tag, axes in (("0n", (0, None)), ("n1", (None, 1)), ("00", (0, 0))):
  case(f"take_along_axis@{tag}", tal, [X, (3, 2)], list(axes), ints={1: 4})
sca = lambda x, i, u: jnp.asarray(x).at[i.astype(jnp.int32)].add(u)
for tag, axes in (("0nn", (0, None, None)), ("n00", (None, 0, 0)), ("000", (0, 0, 0)),
                  ("nn1", (None, None, 1)), ("1n-1", (1, None, -1))):
  case(f"scatter_add@{tag}", sca, [(5, 4), (3,), (3, 4)], list(axes), ints={1: 5})

# dynamic_slice with mapped start indices (a gather; starts clamped)
dsl = lambda x, i, j: lax.dynamic_slice(x, (i.astype(jnp.int32), j.astype(jnp.int32)), (2, 2))
for tag, axes in (("n0n", (None, 0, None)), ("100", (1, 0, 0)), ("0n0", (0, None, 0))):
  case(f"dynamic_slice_idx@{tag}", dsl, [X, (), ()], list(axes), ints={1: 4, 2: 5})

# out_axes other than 0, and an unmapped output broadcast
case("exp@out1", lax.exp, [X], [0], out_axes=1)
case("exp@out-1", lax.exp, [X], [1], out_axes=-1)

# nested: vmap(vmap(matmul, (None, 1)), (0, None))
a, b = uniform(-1, 1, (2, 3, 4)), uniform(-1, 1, (4, 3, 5))
put("nested", "a", a); put("nested", "b", b)
put("nested", "y", jax.vmap(jax.vmap(jnp.matmul, (None, 1)), (0, None))(a, b))

# axis_size with nothing mapped
x = uniform(-1, 1, X)
put("axis_size", "x", x)
put("axis_size", "y", jax.vmap(lambda x: jnp.sin(x), in_axes=None, axis_size=3)(x))


# per-example gradients of an MLP loss
def mlp_loss(params, x, t):
  w1, b1, w2 = params
  h = jnp.tanh(x @ w1 + b1)
  return jnp.sum((h @ w2 - t) ** 2)


w1, b1, w2 = uniform(-0.5, 0.5, (4, 8)), uniform(-0.5, 0.5, (8,)), uniform(-0.5, 0.5, (8, 3))
xs, ts = uniform(-1, 1, (5, 4)), uniform(-1, 1, (5, 3))
for k, v in zip(("w1", "b1", "w2", "x", "t"), (w1, b1, w2, xs, ts)):
  put("per_example", k, v)
g = jax.vmap(jax.grad(mlp_loss), in_axes=(None, 0, 0))((w1, b1, w2), xs, ts)
for k, v in zip(("g_w1", "g_b1", "g_w2"), g):
  put("per_example", k, v)


# jacobians and the hessian
def jf(x):
  return jnp.sin(x) * jnp.sum(x ** 2)


def hf(x):
  return jnp.sum(jnp.tanh(x) * x[::-1]) + jnp.sum(x) ** 2


x = uniform(-1, 1, (4,))
put("jac", "x", x)
put("jac", "jacfwd", jax.jacfwd(jf)(x))
put("jac", "jacrev", jax.jacrev(jf)(x))
put("jac", "hessian", jax.hessian(hf)(x))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transform_vmap.txt")
with open(out, "w") as f:
  f.write("# written by transform_vmap.py (jax %s); do not edit\n" % jax.__version__)
  f.write("\n".join(lines) + "\n")
print("wrote", out, len(lines), "lines")
