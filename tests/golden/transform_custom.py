"""Expected values for tests/transform/test_transform_custom.cc, computed by JAX:
stop_gradient, custom_jvp and custom_vjp rules (under grad, jvp, vmap and
grad of grad), and jax.checkpoint (remat) of a two-block network with its
saved-residual counts per policy. f32 throughout.

    python3 tests/golden/transform_custom.py   # writes transform_custom.txt beside it

Each line: `<case> <name> <shape> <values...>` (shape as 4x3, or - for a
scalar); values are float32 printed to 9 significant digits.
"""
import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.ad_checkpoint import print_saved_residuals

from f32_lines import F32Lines

gold = F32Lines(12)
put, uniform = gold.put, gold.uniform


x, c, t = uniform(-2, 2, (3, 4)), uniform(-1, 1, (3, 4)), uniform(-1, 1, (3, 4))
y = uniform(-2, 2, (3, 4))
w = uniform(0.5, 1.5, (3, 4))
for n, v in (("x", x), ("c", c), ("t", t), ("y", y), ("w", w)):
  put("in", n, v)

# ---- stop_gradient ----
sg = lambda x: jnp.sum(jnp.sin(x) * lax.stop_gradient(jnp.cos(x)) + lax.stop_gradient(x) * x)
put("sg", "grad", jax.grad(sg)(x))
put("sg", "jvp", jax.jvp(lambda x: jnp.sin(x) * lax.stop_gradient(x), (x,), (t,))[1])
row = lambda r: jnp.sum(jnp.sin(r) * lax.stop_gradient(r * r))
put("sg", "vmap_grad", jax.vmap(jax.grad(row))(x))

# ---- custom_jvp: sin with a rule of twice its derivative ----
@jax.custom_jvp
def cj(x):
  return jnp.sin(x)


@cj.defjvp
def cj_jvp(p, tn):
  return jnp.sin(p[0]), 2.0 * jnp.cos(p[0]) * tn[0]


put("cj", "value", cj(x))
put("cj", "grad", jax.grad(lambda x: jnp.sum(cj(x) * c))(x))
put("cj", "jvp", jax.jvp(cj, (x,), (t,))[1])
put("cj", "vmap_grad", jax.vmap(jax.grad(lambda r, cr: jnp.sum(cj(r) * cr)))(x, c))
put("cj", "grad_vmap", jax.grad(lambda x: jnp.sum(jax.vmap(cj)(x) * c))(x))
inner = jax.grad(lambda z: jnp.sum(cj(z)))
put("cj", "grad_grad", jax.grad(lambda x: jnp.sum(inner(x) * c))(x))


@jax.custom_jvp
def cj2(x, y):
  return x * y


@cj2.defjvp
def cj2_jvp(p, tn):
  return p[0] * p[1], 3.0 * tn[0] * p[1] + p[0] * tn[1]


gx, gy = jax.grad(lambda x, y: jnp.sum(cj2(x, y) * c), argnums=(0, 1))(x, y)
put("cj2", "gx", gx)
put("cj2", "gy", gy)


def closing(w):
  @jax.custom_jvp
  def f(x):
    return jnp.sin(x) * w

  @f.defjvp
  def f_jvp(p, tn):
    return jnp.sin(p[0]) * w, 2.0 * jnp.cos(p[0]) * w * tn[0]
  return f


put("cjw", "grad", jax.grad(lambda x: jnp.sum(closing(w)(x) * c))(x))

# ---- custom_vjp: sin with a cotangent three times its derivative's ----
@jax.custom_vjp
def cv(x):
  return jnp.sin(x)


cv.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda r, g: (3.0 * r * g,))
put("cv", "value", cv(x))
put("cv", "grad", jax.grad(lambda x: jnp.sum(cv(x) * c))(x))
put("cv", "vmap_grad", jax.vmap(jax.grad(lambda r, cr: jnp.sum(cv(r) * cr)))(x, c))
put("cv", "grad_vmap", jax.grad(lambda x: jnp.sum(jax.vmap(cv)(x) * c))(x))


@jax.custom_vjp
def cv2(x, y):
  return x * y


cv2.defvjp(lambda x, y: (x * y, (x, y)),
           lambda r, g: (jnp.clip(g * r[1], -0.5, 0.5), g * r[0]))
gx, gy = jax.grad(lambda x, y: jnp.sum(cv2(x, y) * c), argnums=(0, 1))(x, y)
put("cv2", "gx", gx)
put("cv2", "gy", gy)

# ---- checkpoint: two blocks tanh(sin(h @ w)) ----
h0, w1, w2 = uniform(-1, 1, (4, 3)), uniform(-1, 1, (3, 5)), uniform(-1, 1, (5, 2))
cc = uniform(-1, 1, (4, 2))
for n, v in (("x", h0), ("w1", w1), ("w2", w2), ("c", cc)):
  put("remat", n, v)


def block(h, w):
  return jnp.tanh(jnp.sin(h @ w))


def net(policy):
  b = block if policy is None else jax.checkpoint(block, policy=policy)
  return lambda x, w1, w2, c: jnp.sum(b(b(x, w1), w2) * c)


plain = net(None)
loss, grads = jax.value_and_grad(plain, argnums=(0, 1, 2))(h0, w1, w2, cc)
put("remat", "loss", loss)
for n, g in zip(("g_x", "g_w1", "g_w2"), grads):
  put("remat", n, g)
# per-example gradients (rows of x and c) of the checkpointed network
per = jax.vmap(jax.grad(net(jax.checkpoint_policies.nothing_saveable), argnums=(1, 2)),
               in_axes=(0, None, None, 0))
for n, g in zip(("g_w1", "g_w2"), per(h0, w1, w2, cc)):
  put("remat_vmap", n, g)
pol = jax.checkpoint_policies
for name, p in (("none", None), ("nothing", pol.nothing_saveable), ("dots", pol.dots_saveable)):
  f = net(p)
  l2, g2 = jax.value_and_grad(f, argnums=(0, 1, 2))(h0, w1, w2, cc)
  assert np.allclose(l2, loss) and all(np.allclose(a, b) for a, b in zip(g2, grads))
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    print_saved_residuals(f, h0, w1, w2, cc)  # one line per residual
  n_res = len(out.getvalue().strip().splitlines())
  put("remat_residuals", name, np.float32(n_res))

gold.write(__file__, jax.__version__)
