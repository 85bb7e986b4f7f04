"""Expected derivatives for tests/transform/test_transform.cc, computed by JAX.

For each elementwise primitive: the vjp of x -> op(x) (and of (x, y) ->
op(x, y), with y also a scalar to exercise broadcasting) against a random
cotangent c, as the gradient of sum(op(x) * c), and the jvp against a random
tangent. Then whole programs: value_and_grad of an MLP loss with softmax
cross-entropy, the gradient of a layernorm, and the equation count of
jax.make_jaxpr(jax.grad(mlp_loss)). f32 throughout.

    python3 tests/golden/transform_grad.py   # writes transform_grad.txt beside it

Each line: `<case> <name> <shape> <values...>` (shape as 4x3, or - for a
scalar); values are float32 printed to 9 significant digits.
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

SHAPE = (3, 4)
rng = np.random.default_rng(11)

UNARY = {
    "neg": (lax.neg, (-2, 2)), "abs": (lax.abs, (-2, 2)), "sign": (lax.sign, (-2, 2)),
    "floor": (lax.floor, (-2, 2)), "exp": (lax.exp, (-2, 2)), "exp2": (lax.exp2, (-2, 2)),
    "expm1": (lax.expm1, (-2, 2)), "log": (lax.log, (0.2, 3)), "log1p": (lax.log1p, (-0.5, 2)),
    "sqrt": (lax.sqrt, (0.2, 3)), "rsqrt": (lax.rsqrt, (0.2, 3)), "cbrt": (lax.cbrt, (0.2, 3)),
    "tanh": (lax.tanh, (-2, 2)), "logistic": (lax.logistic, (-3, 3)), "sin": (lax.sin, (-3, 3)),
    "cos": (lax.cos, (-3, 3)), "tan": (lax.tan, (-1, 1)), "asin": (lax.asin, (-0.9, 0.9)),
    "acos": (lax.acos, (-0.9, 0.9)), "atan": (lax.atan, (-2, 2)), "sinh": (lax.sinh, (-2, 2)),
    "cosh": (lax.cosh, (-2, 2)), "asinh": (lax.asinh, (-2, 2)), "acosh": (lax.acosh, (1.2, 3)),
    "atanh": (lax.atanh, (-0.9, 0.9)), "erf": (lax.erf, (-2, 2)), "erf_inv": (lax.erf_inv, (-0.9, 0.9)),
}
BINARY = {
    "add": (lax.add, (-2, 2)), "sub": (lax.sub, (-2, 2)), "mul": (lax.mul, (-2, 2)),
    "div": (lax.div, (0.5, 2)), "max": (lax.max, (-2, 2)), "min": (lax.min, (-2, 2)),
    "pow": (lax.pow, (0.5, 2)), "atan2": (lax.atan2, (-2, 2)), "rem": (lax.rem, (0.5, 3)),
}

lines = []


def put(case, name, x):
  x = np.asarray(x, dtype=np.float32)
  shape = "x".join(str(d) for d in x.shape) if x.ndim else "-"
  vals = " ".join(f"{float(v):.9g}" for v in x.reshape(-1))
  lines.append(f"{case} {name} {shape} {vals}")


def uniform(lo, hi, shape=SHAPE):
  return rng.uniform(lo, hi, size=shape).astype(np.float32)


for name, (f, (lo, hi)) in UNARY.items():
  x, c, t = uniform(lo, hi), uniform(-1, 1), uniform(-1, 1)
  if name == "abs":
    x[0, 0] = 0.0  # JAX: sign(0) = 0
  put(name, "x", x); put(name, "c", c); put(name, "t", t)
  put(name, "vjp", jax.grad(lambda x: jnp.sum(f(x) * c))(x))
  put(name, "jvp", jax.jvp(f, (x,), (t,))[1])

for name, (f, (lo, hi)) in BINARY.items():
  x, y, c = uniform(lo, hi), uniform(lo, hi), uniform(-1, 1)
  tx, ty = uniform(-1, 1), uniform(-1, 1)
  if name in ("max", "min"):
    y[0, :] = x[0, :]  # ties split the gradient
  s = np.float32(rng.uniform(lo, hi))
  for k, v in (("x", x), ("y", y), ("c", c), ("tx", tx), ("ty", ty), ("s", s)):
    put(name, k, v)
  gx, gy = jax.grad(lambda x, y: jnp.sum(f(x, y) * c), argnums=(0, 1))(x, y)
  put(name, "vjp_x", gx); put(name, "vjp_y", gy)
  put(name, "jvp", jax.jvp(f, (x, y), (tx, ty))[1])
  # y a scalar: broadcast in the primitive, summed in the transpose
  gx, gs = jax.grad(lambda x, s: jnp.sum(f(x, s) * c), argnums=(0, 1))(x, s)
  put(name, "vjp_xs", gx); put(name, "vjp_s", gs)

# pow at 0 (JAX: d/dx 0^y = 0 for y != 0... and d/dy uses log(1) at x = 0)
x0 = np.array([0.0, 0.0, 2.0, 0.5], np.float32)
y0 = np.array([2.0, 0.0, 0.0, 3.0], np.float32)
put("pow0", "x", x0); put("pow0", "y", y0)
gx, gy = jax.grad(lambda x, y: jnp.sum(lax.pow(x, y)), argnums=(0, 1))(x0, y0)
put("pow0", "vjp_x", gx); put("pow0", "vjp_y", gy)


# Structural primitives, reductions, selection and dot_general: vjp against
# a random cotangent and jvp against a random tangent of f(x).
IDX = np.array([2, 0, 2], np.int32)
STRUCT = {
    "broadcast_in_dim": ((3, 4), lambda x: jnp.broadcast_to(x, (2, 3, 4))),
    "broadcast_size1": ((3, 1), lambda x: jnp.broadcast_to(x, (3, 4))),
    "reshape": ((3, 4), lambda x: x.reshape(2, 6)),
    "transpose": ((2, 3, 4), lambda x: jnp.transpose(x, (2, 0, 1))),
    "squeeze": ((3, 1, 4), lambda x: lax.squeeze(x, (1,))),
    "expand_dims": ((3, 4), lambda x: lax.expand_dims(x, (0, 2))),
    "rev": ((3, 4), lambda x: lax.rev(x, (1,))),
    "slice": ((5, 4), lambda x: lax.slice(x, (0, 1), (5, 4), (2, 1))),
    "pad": ((3, 4), lambda x: lax.pad(x, jnp.float32(0.5), ((1, 0, 1), (0, 2, 0)))),
    "pad_value": ((3, 4), lambda x: lax.pad(x, x[0, 0], ((1, -1, 0), (2, 0, 1)))),
    "concatenate": ((3, 4), lambda x: jnp.concatenate([x, 2 * x, x[:, :1]], axis=1)),
    "dynamic_slice": ((5, 4), lambda x: lax.dynamic_slice(x, (1, 2), (2, 2))),
    "dynamic_update_slice": ((5, 4), lambda x: lax.dynamic_update_slice(x, x[:2, :3] * 3, (2, 1))),
    "gather": ((4, 3), lambda x: jnp.take(x, IDX, axis=0)),
    "gather_axis1": ((3, 4), lambda x: jnp.take(x, IDX, axis=1)),
    "scatter_add": ((3, 4), lambda x: jnp.zeros((5, 4), jnp.float32).at[IDX].add(x)),
    "reduce_sum": ((3, 4), lambda x: jnp.sum(x, axis=0)),
    "reduce_max": ((3, 4), lambda x: jnp.max(x, axis=1)),
    "reduce_min": ((3, 4), lambda x: jnp.min(x, axis=0)),
    "argmax": ((3, 4), lambda x: x * jnp.argmax(x, axis=1).astype(jnp.float32)[:, None]),
    "cumsum": ((3, 4), lambda x: jnp.cumsum(x, axis=1)),
    "cumsum_reverse": ((3, 4), lambda x: lax.cumsum(x, axis=0, reverse=True)),
    "sort": ((3, 4), lambda x: jnp.sort(x, axis=1)),
    "sort_axis0": ((3, 4), lambda x: lax.sort(x, dimension=0)),
    "select_n": ((3, 4), lambda x: jnp.where(x > 0, x * x, jnp.sin(x))),
    "clamp": ((3, 4), lambda x: lax.clamp(jnp.float32(-0.5), x, jnp.float32(0.5))),
    "convert": ((3, 4), lambda x: x + x.astype(jnp.int32).astype(jnp.float32)),
    "dot_batch": ((2, 3, 4), lambda x: jnp.einsum("bij,bkj->bik", x, x)),
    "dot_tn": ((3, 4), lambda x: lax.dot_general(x, x, (((0,), (0,)), ((), ())))),
    "dot_mixed": ((2, 3, 4), lambda x: lax.dot_general(x, x[0], (((1,), (0,)), ((), ())))),
}
for name, (shape, f) in STRUCT.items():
  x, t = uniform(-1.5, 1.5, shape), uniform(-1, 1, shape)
  if name == "reduce_max":
    x[0, :] = 0.25  # a tied row: the tangent is split among the ties
  if name == "reduce_min":
    x[:, 1] = -0.25
  if name == "clamp":
    x[0, 0] = 0.5  # at the bound: no tangent, as JAX
  y = f(x)
  c = uniform(-1, 1, y.shape)
  put(name, "x", x); put(name, "c", c); put(name, "t", t)
  put(name, "vjp", jax.grad(lambda x: jnp.sum(f(x) * c))(x))
  put(name, "jvp", jax.jvp(f, (x,), (t,))[1])


def mlp_loss(params, x, labels):
  w1, b1, w2, b2 = params
  h = jnp.tanh(x @ w1 + b1)
  logits = h @ w2 + b2
  m = jnp.max(logits, axis=1, keepdims=True)
  z = logits - m
  logp = z - jnp.log(jnp.sum(jnp.exp(z), axis=1, keepdims=True))
  return -jnp.sum(logp * labels) / x.shape[0]


B, I, H, O = 8, 5, 16, 4
w1, b1 = uniform(-0.5, 0.5, (I, H)), uniform(-0.1, 0.1, (H,))
w2, b2 = uniform(-0.5, 0.5, (H, O)), uniform(-0.1, 0.1, (O,))
xb = uniform(-1, 1, (B, I))
labels = np.eye(O, dtype=np.float32)[rng.integers(0, O, size=B)]
for k, v in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2), ("x", xb), ("labels", labels)):
  put("mlp", k, v)
val, g = jax.value_and_grad(mlp_loss)((w1, b1, w2, b2), xb, labels)
put("mlp", "loss", val)
for k, v in zip(("g_w1", "g_b1", "g_w2", "g_b2"), g):
  put("mlp", k, v)
jaxpr = jax.make_jaxpr(jax.grad(mlp_loss))((w1, b1, w2, b2), xb, labels)
put("mlp", "jax_grad_eqns", np.float32(len(jaxpr.jaxpr.eqns)))


def layernorm(x, gamma, beta):
  n = x.shape[1]
  mean = jnp.sum(x, axis=1, keepdims=True) / n
  c = x - mean
  var = jnp.sum(c * c, axis=1, keepdims=True) / n
  return c * lax.rsqrt(var + 1e-5) * gamma + beta


xl, gam, bet, cl = uniform(-2, 2, (4, 6)), uniform(0.5, 1.5, (6,)), uniform(-0.5, 0.5, (6,)), uniform(-1, 1, (4, 6))
for k, v in (("x", xl), ("gamma", gam), ("beta", bet), ("c", cl)):
  put("layernorm", k, v)
g = jax.grad(lambda x, gm, bt: jnp.sum(layernorm(x, gm, bt) * cl), argnums=(0, 1, 2))(xl, gam, bet)
for k, v in zip(("g_x", "g_gamma", "g_beta"), g):
  put("layernorm", k, v)

def attention(params, x, c):
  wq, wk, wv = params
  q, k, v = x @ wq, x @ wk, x @ wv
  s = (q @ k.T) / np.float32(np.sqrt(x.shape[1]))
  n = x.shape[0]
  causal = lax.broadcasted_iota(jnp.int32, (n, n), 0) >= lax.broadcasted_iota(jnp.int32, (n, n), 1)
  s = jnp.where(causal, s, np.float32(-1e9))
  s = s - jnp.max(s, axis=1, keepdims=True)
  e = jnp.exp(s)
  p = e / jnp.sum(e, axis=1, keepdims=True)
  return jnp.sum(jax.nn.gelu(p @ v, approximate=True) * c)


xa, ca = uniform(-1, 1, (4, 8)), uniform(-1, 1, (4, 8))
wa = [uniform(-0.5, 0.5, (8, 8)) for _ in range(3)]
for k, v in zip(("wq", "wk", "wv", "x", "c"), wa + [xa, ca]):
  put("attention", k, v)
g = jax.grad(attention, argnums=(0, 1))(tuple(wa), xa, ca)
for k, v in zip(("g_wq", "g_wk", "g_wv"), g[0]):
  put("attention", k, v)
put("attention", "g_x", g[1])


out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transform_grad.txt")
with open(out, "w") as f:
  f.write("# written by transform_grad.py (jax %s); do not edit\n" % jax.__version__)
  f.write("\n".join(lines) + "\n")
print("wrote", out, len(lines), "lines")
