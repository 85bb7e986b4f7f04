"""Expected values for tests/trace/test_conv.cc, computed by JAX:
lax.conv_general_dilated over 1-D and 2-D cases (strides, padding with
negative entries, lhs and rhs dilation, NCHW, NHWC and mixed layouts,
feature_group_count including depthwise, batch_group_count), their jvp at a
random tangent, vjp at a random cotangent (w.r.t. both operands), vmap over
each operand and over both, and bf16 operands with preferred f32; then the
gradient of a small CNN (conv, relu, mean-pool, dense, softmax
cross-entropy), and the residuals jax.checkpoint's policies save. f32
unless named.

    python3 tests/golden/conv.py   # writes conv.txt beside it

Each line: `<case> <name> <shape> <values...>` (shape as 4x3, or - for a
scalar); values are float32 printed to 9 significant digits. Each case also
records its parameters as lines (strides, padding as lo,hi pairs, lhs_dil,
rhs_dil, groups = feature_group_count, batch_group_count) so the test
builds the same call.
"""
import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.ad_checkpoint import print_saved_residuals

from f32_lines import F32Lines

gold = F32Lines(11)
put, uniform = gold.put, gold.uniform

# name, lhs shape, rhs shape, specs, strides, padding, lhs_dil, rhs_dil, fg, bg
CASES = [
    ("c1d", (2, 3, 9), (4, 3, 3), ("NCH", "OIH", "NCH"), (2,), ((1, 2),), (1,), (2,), 1, 1),
    ("c1d_negpad", (2, 2, 8), (3, 2, 2), ("NCH", "OIH", "NCH"), (1,), ((-1, 2),), (1,), (1,), 1, 1),
    ("nchw", (2, 3, 7, 6), (4, 3, 3, 2), ("NCHW", "OIHW", "NCHW"), (1, 2), ((1, 1), (0, 1)),
     (1, 1), (1, 1), 1, 1),
    ("nhwc", (2, 6, 7, 3), (3, 2, 3, 4), ("NHWC", "HWIO", "NHWC"), (2, 1), ((2, 1), (1, 0)),
     (1, 1), (1, 2), 1, 1),
    ("lhs_dil", (1, 2, 5, 5), (3, 2, 3, 3), ("NCHW", "OIHW", "NCHW"), (1, 1), ((2, 2), (1, 1)),
     (2, 2), (1, 1), 1, 1),
    ("mixed", (2, 3, 6, 5), (3, 3, 3, 4), ("NCHW", "HWIO", "NHWC"), (1, 2), ((1, 1), (2, 0)),
     (1, 1), (2, 1), 1, 1),
    ("depthwise", (2, 5, 5, 4), (3, 3, 1, 8), ("NHWC", "HWIO", "NHWC"), (1, 1), ((1, 1), (1, 1)),
     (1, 1), (1, 1), 4, 1),
    ("groups", (2, 6, 5, 4), (4, 3, 2, 2), ("NCHW", "OIHW", "NCHW"), (1, 1), ((0, 1), (1, 0)),
     (1, 1), (1, 1), 2, 1),
    ("batch_groups", (4, 3, 5, 5), (6, 3, 2, 2), ("NCHW", "OIHW", "NCHW"), (2, 1), ((0, 0), (1, 1)),
     (1, 1), (1, 1), 1, 2),
    # 9 output features: the f32 im2col + GEMM path (the others run the direct loop)
    ("wide", (2, 6, 7, 5), (3, 3, 5, 9), ("NHWC", "HWIO", "NHWC"), (2, 1), ((1, 1), (1, 2)),
     (1, 2), (1, 1), 1, 1),
]


def conv_fn(c, pref=None):
  _, _, _, specs, strides, pad, ld, rd, fg, bg = c
  def f(l, r):
    return lax.conv_general_dilated(l, r, strides, pad, lhs_dilation=ld, rhs_dilation=rd,
                                    dimension_numbers=specs, feature_group_count=fg,
                                    batch_group_count=bg, preferred_element_type=pref)
  return f


for c in CASES:
  name, ls, rs, specs, strides, pad, ld, rd, fg, bg = c
  put(name, "strides", np.array(strides))
  put(name, "padding", np.array(pad).reshape(-1))
  put(name, "lhs_dil", np.array(ld))
  put(name, "rhs_dil", np.array(rd))
  put(name, "groups", np.array([fg, bg]))
  f = conv_fn(c)
  lhs, rhs = uniform(-1, 1, ls), uniform(-1, 1, rs)
  put(name, "lhs", lhs)
  put(name, "rhs", rhs)
  out = f(lhs, rhs)
  put(name, "out", out)
  tl, tr = uniform(-1, 1, ls), uniform(-1, 1, rs)
  put(name, "tl", tl)
  put(name, "tr", tr)
  put(name, "jvp", jax.jvp(f, (lhs, rhs), (tl, tr))[1])
  ct = uniform(-1, 1, out.shape)
  put(name, "ct", ct)
  gl, gr = jax.vjp(f, lhs, rhs)[1](ct)
  put(name, "vjp_lhs", gl)
  put(name, "vjp_rhs", gr)
  # vmap: lhs batched at 0, rhs batched at its last axis, both
  lb, rb = uniform(-1, 1, (2,) + ls), uniform(-1, 1, rs + (2,))
  put(name, "lhs_b", lb)
  put(name, "rhs_b", rb)
  put(name, "vmap_lhs", jax.vmap(f, (0, None))(lb, rhs))
  put(name, "vmap_rhs", jax.vmap(f, (None, -1))(lhs, rb))
  put(name, "vmap_both", jax.vmap(f, (0, -1))(lb, rb))
  # grad of vmap: batching rules under reverse mode
  g = jax.grad(lambda l, r: jnp.sum(jax.vmap(f, (0, -1))(l, r) ** 2), (0, 1))(lb, rb)
  put(name, "gvmap_lhs", g[0])
  put(name, "gvmap_rhs", g[1])

# bf16 operands (values exactly representable), preferred f32 result
for name in ("nhwc", "depthwise"):
  c = next(x for x in CASES if x[0] == name)
  l16 = jnp.asarray(uniform(-1, 1, c[1]), jnp.bfloat16)
  r16 = jnp.asarray(uniform(-1, 1, c[2]), jnp.bfloat16)
  put(name, "lhs16", l16.astype(jnp.float32))
  put(name, "rhs16", r16.astype(jnp.float32))
  put(name, "out16", conv_fn(c, jnp.float32)(l16, r16))

# A small CNN: conv(3x3, SAME) + relu, conv(3x3, stride 2, VALID) + relu,
# mean-pool over space, dense, softmax cross-entropy; grad w.r.t. all params.
x = uniform(-1, 1, (4, 8, 8, 2))
labels = np.array([0, 2, 1, 2])
w1, b1 = uniform(-0.5, 0.5, (3, 3, 2, 8)), uniform(-0.1, 0.1, (8,))
w2, b2 = uniform(-0.5, 0.5, (3, 3, 8, 12)), uniform(-0.1, 0.1, (12,))
wd, bd = uniform(-0.5, 0.5, (12, 3)), uniform(-0.1, 0.1, (3,))
for n, v in (("x", x), ("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2), ("wd", wd), ("bd", bd)):
  put("cnn", n, v)
put("cnn", "labels", labels)


def cnn_loss(params, x):
  w1, b1, w2, b2, wd, bd = params
  dn = ("NHWC", "HWIO", "NHWC")
  h = jax.nn.relu(lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=dn) + b1)
  h = jax.nn.relu(lax.conv_general_dilated(h, w2, (2, 2), "VALID", dimension_numbers=dn) + b2)
  h = jnp.sum(h, axis=(1, 2)) / (h.shape[1] * h.shape[2])
  logits = h @ wd + bd
  logp = logits - jax.nn.logsumexp(logits, axis=1, keepdims=True)
  return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, 3) * logp, axis=1))


params = (w1, b1, w2, b2, wd, bd)
loss, grads = jax.jit(jax.value_and_grad(cnn_loss))(params, x)
put("cnn", "loss", loss)
for n, g in zip(("w1", "b1", "w2", "b2", "wd", "bd"), grads):
  put("cnn", "g" + n, g)

# jax.checkpoint of two conv blocks: dots_saveable keeps the convolutions'
# results (counts of print_saved_residuals' lines per policy)
rx, rw = uniform(-1, 1, (2, 4, 4, 2)), uniform(-1, 1, (3, 3, 2, 2))
put("remat", "x", rx)
put("remat", "w", rw)


def block(x, w):
  dn = ("NHWC", "HWIO", "NHWC")
  return jnp.sin(lax.conv_general_dilated(jnp.sin(x), w, (1, 1), "SAME", dimension_numbers=dn))


pol = jax.checkpoint_policies
for name, p in (("none", None), ("nothing", pol.nothing_saveable), ("dots", pol.dots_saveable)):
  b = block if p is None else jax.checkpoint(block, policy=p)
  f = lambda x, w, b=b: jnp.sum(b(b(x, w), w))
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    print_saved_residuals(f, rx, rw)
  put("remat", name, np.float32(len(out.getvalue().strip().splitlines())))
  put("remat", "grad_" + name, jax.grad(f, (0, 1))(rx, rw)[1])

gold.write(__file__, jax.__version__)
