"""Whole-program gradients from JAX for tests/transform/test_transform_models.cc: the
JAX twins of tests/transform/grad_models.c (an MLP, a small CNN with max-pool, a
2-layer pre-layernorm transformer block with causal attention, tanh GELU and
residuals), their loss and jax.grad with respect to every parameter and the
input, f32; and bf16 gradients of a few primitives (x f32 converted to bf16
inside, so the derivative chain runs in bf16 as in JAX). bench/grad_jax.py
imports the models and init() from here.

    python3 tests/golden/transform_models.py   # writes transform_models.txt
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

LAYER = ("ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w1", "b1", "w2", "b2")


def xent(logits, labels):
  return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits, axis=1), axis=1))


def mlp_loss(p, x, labels):
  w1, b1, w2, b2 = p
  return xent(jnp.tanh(x @ w1 + b1) @ w2 + b2, labels)


def conv(x, k):
  return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def cnn_loss(p, x, labels):
  k1, c1, k2, c2, w, b = p
  h = jax.nn.relu(conv(x, k1) + c1)
  h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
  h = jax.nn.relu(conv(h, k2) + c2)
  return xent(jnp.mean(h, axis=(1, 2)) @ w + b, labels)


def layernorm(x, g, b):
  c = x - jnp.mean(x, axis=1, keepdims=True)
  var = jnp.mean(c * c, axis=1, keepdims=True)
  return c * lax.rsqrt(var + np.float32(1e-5)) * g + b


def attention(l, x):
  q, k, v = x @ l["wq"], x @ l["wk"], x @ l["wv"]
  s = (q @ k.T) / np.float32(np.sqrt(x.shape[1]))
  n = x.shape[0]
  causal = lax.broadcasted_iota(jnp.int32, (n, n), 0) >= lax.broadcasted_iota(jnp.int32, (n, n), 1)
  s = jax.nn.softmax(jnp.where(causal, s, np.float32(-1e9)), axis=1)
  return (s @ v) @ l["wo"]


def block(l, h):
  h = h + attention(l, layernorm(h, l["ln1_g"], l["ln1_b"]))
  m = jax.nn.gelu(layernorm(h, l["ln2_g"], l["ln2_b"]) @ l["w1"] + l["b1"], approximate=True)
  return h + (m @ l["w2"] + l["b2"])


def transformer_loss(layers, x, c, remat=False):
  """remat: each layer under jax.checkpoint (nothing saveable), as kiln's
  kiln_checkpoint in grad_models.c"""
  f = jax.checkpoint(block) if remat else block
  h = x
  for l in layers:
    h = f(l, h)
  return jnp.sum(h * c)


def init(model, rng, size):
  """(params, x, target) of the model at `size` (a dict), as f32 numpy."""
  u = lambda lo, hi, shape: rng.uniform(lo, hi, size=shape).astype(np.float32)  # noqa: E731
  if model == "transformer":
    s, d, f, n = size["seq"], size["dim"], size["ffn"], size["layers"]
    sd, sf = 1 / np.sqrt(d), 1 / np.sqrt(f)
    layers = [{"ln1_g": u(0.8, 1.2, (d,)), "ln1_b": u(-0.1, 0.1, (d,)),
               "wq": u(-sd, sd, (d, d)), "wk": u(-sd, sd, (d, d)), "wv": u(-sd, sd, (d, d)),
               "wo": u(-sd, sd, (d, d)), "ln2_g": u(0.8, 1.2, (d,)), "ln2_b": u(-0.1, 0.1, (d,)),
               "w1": u(-sd, sd, (d, f)), "b1": u(-0.1, 0.1, (f,)), "w2": u(-sf, sf, (f, d)),
               "b2": u(-0.1, 0.1, (d,))} for _ in range(n)]
    return layers, u(-1, 1, (s, d)), u(-1, 1, (s, d))
  n, k = size["batch"], size["classes"]
  labels = np.eye(k, dtype=np.float32)[rng.integers(0, k, n)]
  if model == "mlp":
    i, h = size["in"], size["hidden"]
    p = (u(-1 / np.sqrt(i), 1 / np.sqrt(i), (i, h)), u(-0.1, 0.1, (h,)),
         u(-1 / np.sqrt(h), 1 / np.sqrt(h), (h, k)), u(-0.1, 0.1, (k,)))
    return p, u(-1, 1, (n, i)), labels
  hw, ci, c1, c2 = size["hw"], size["cin"], size["c1"], size["c2"]
  p = (u(-0.3, 0.3, (3, 3, ci, c1)), u(-0.1, 0.1, (c1,)), u(-0.2, 0.2, (3, 3, c1, c2)),
       u(-0.1, 0.1, (c2,)), u(-0.3, 0.3, (c2, k)), u(-0.1, 0.1, (k,)))
  return p, u(-1, 1, (n, hw, hw, ci)), labels


LOSSES = {"mlp": mlp_loss, "cnn": cnn_loss, "transformer": transformer_loss}
TEST_SIZES = {"mlp": {"batch": 4, "in": 6, "hidden": 8, "classes": 3},
              "cnn": {"batch": 2, "hw": 6, "cin": 2, "c1": 4, "c2": 5, "classes": 3},
              "transformer": {"seq": 8, "dim": 16, "ffn": 32, "layers": 2}}

BF16 = {"tanh": jnp.tanh, "exp": jnp.exp, "logistic": jax.nn.sigmoid, "log1p": jnp.log1p,
        "square_mul": lambda x: x * x * x, "softmax": lambda x: jax.nn.softmax(x, axis=1),
        "rsqrt": lambda x: lax.rsqrt(x * x + 1)}


def main():
  out = F32Lines(41)
  rng = np.random.default_rng(43)
  for model, loss in LOSSES.items():
    p, x, tgt = init(model, rng, TEST_SIZES[model])
    val, (gp, gx) = jax.value_and_grad(loss, argnums=(0, 1))(p, x, tgt)
    out.put(model, "x", x); out.put(model, "target", tgt)
    out.put(model, "loss", val); out.put(model, "g_x", gx)
    if model == "transformer":
      for i, (l, gl) in enumerate(zip(p, gp)):
        for n in LAYER:
          out.put(model, f"l{i}_{n}", l[n]); out.put(model, f"g_l{i}_{n}", gl[n])
    else:
      for i, (a, g) in enumerate(zip(p, gp)):
        out.put(model, f"p{i}", a); out.put(model, f"g_p{i}", g)
  for name, f in BF16.items():
    x, c = out.uniform(-2, 2, (4, 6)), out.uniform(-1, 1, (4, 6))
    bf = jnp.bfloat16
    g = jax.grad(lambda x: jnp.sum((f(x.astype(bf)) * c.astype(bf)).astype(jnp.float32)))(x)
    out.put(f"bf16_{name}", "x", x); out.put(f"bf16_{name}", "c", c)
    out.put(f"bf16_{name}", "vjp", g)
  out.write(__file__, jax.__version__)


if __name__ == "__main__":
  main()
