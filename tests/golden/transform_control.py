"""Expected values for tests/transform/test_transform_control.cc, computed by JAX:
autodiff (grad, jvp) and vmap of lax.cond and of a lax.scan RNN, per-example
gradients through both, f32.

    python3 tests/golden/transform_control.py   # writes transform_control.txt beside it

Each line: `<case> <name> <shape> <values...>` (shape as 4x3, or - for a
scalar); values are float32 printed to 9 significant digits.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from f32_lines import F32Lines

gold = F32Lines(13)
put, uniform = gold.put, gold.uniform


# ---- cond ----
x, y, c = uniform(-2, 2, (3, 4)), uniform(-2, 2, (3, 4)), uniform(-1, 1, (3, 4))
tx, ty = uniform(-1, 1, (3, 4)), uniform(-1, 1, (3, 4))
preds = np.array([1.0, -1.0, 1.0], np.float32)
for n, v in (("x", x), ("y", y), ("c", c), ("tx", tx), ("ty", ty), ("preds", preds)):
  put("cond", n, v)


def f(p, x, y):
  return lax.cond(p > 0, lambda x, y: jnp.sin(x) * y, lambda x, y: jnp.cos(x) + y * y, x, y)


def loss(p, x, y, c):
  return jnp.sum(f(p, x, y) * c)


for name, p in (("true", 1.0), ("false", -1.0)):
  gx, gy = jax.grad(loss, argnums=(1, 2))(np.float32(p), x, y, c)
  put("cond_" + name, "gx", gx)
  put("cond_" + name, "gy", gy)
  put("cond_" + name, "jvp", jax.jvp(lambda x, y: f(np.float32(p), x, y), (x, y), (tx, ty))[1])
put("cond_vmap", "value", jax.vmap(f)(preds, x, y))
gx, gy = jax.vmap(jax.grad(loss, argnums=(1, 2)))(preds, x, y, c)
put("cond_vmap", "gx", gx)
put("cond_vmap", "gy", gy)

# ---- scan: an RNN h' = tanh(h @ w + x @ u + b), ys = h' ----
T, B, H, D = 5, 2, 3, 4
h0, w, u, b = uniform(-1, 1, (B, H)), uniform(-1, 1, (H, H)), uniform(-1, 1, (D, H)), uniform(-1, 1, (H,))
xs, cs = uniform(-1, 1, (T, B, D)), uniform(-1, 1, (T, B, H))
th0, tw = uniform(-1, 1, (B, H)), uniform(-1, 1, (H, H))
for n, v in (("h0", h0), ("w", w), ("u", u), ("b", b), ("xs", xs), ("cs", cs), ("th0", th0),
             ("tw", tw)):
  put("rnn", n, v)


def rnn(h0, w, u, b, xs, reverse=False):
  def step(h, x):
    h = jnp.tanh(h @ w + x @ u + b)
    return h, h
  return lax.scan(step, h0, xs, reverse=reverse)


def rnn_loss(h0, w, u, b, xs, cs, reverse=False):
  h, ys = rnn(h0, w, u, b, xs, reverse)
  return jnp.sum(ys * cs) + jnp.sum(h)


for name, rev in (("fwd", False), ("rev", True)):
  l, g = jax.value_and_grad(rnn_loss, argnums=(0, 1, 2, 3, 4))(h0, w, u, b, xs, cs, rev)
  put("rnn_" + name, "loss", l)
  for n, v in zip(("g_h0", "g_w", "g_u", "g_b", "g_xs"), g):
    put("rnn_" + name, n, v)
_, (th, tys) = jax.jvp(lambda h0, w: rnn(h0, w, u, b, xs), (h0, w), (th0, tw))
put("rnn_jvp", "h", th)
put("rnn_jvp", "ys", tys)
# per-example (batch axis 1 of xs and cs, 0 of h0) gradients of the weights
per = jax.vmap(jax.grad(rnn_loss, argnums=(1, 2)), in_axes=(0, None, None, None, 1, 1))
gw, gu = per(h0, w, u, b, xs, cs)
put("rnn_vmap", "g_w", gw)
put("rnn_vmap", "g_u", gu)
h, ys = jax.vmap(rnn, in_axes=(0, None, None, None, 1))(h0, w, u, b, xs)
put("rnn_vmap", "h", h)
put("rnn_vmap", "ys", ys)

gold.write(__file__, jax.__version__)
