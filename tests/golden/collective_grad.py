"""Goldens for the autodiff and batching of shard_map and the collectives
(tests/dist/test_spmd_grad.cc), computed by JAX on 8 CPU devices.

Cases (mesh of 8 devices on axis 'i' unless said):
  tp_dense   a tensor-parallel MLP: x split over rows, all_gather (tiled) +
             matmul with column-split w1 + tanh + matmul with row-split w2 +
             psum_scatter (tiled); grad of sum(sin(out) * c) w.r.t. x, w1,
             w2, and the jvp against tangents of all three.
  ring       a ring step: ppermute (j -> j+1) of x * w and a partial
             permutation (only 0->3, 5->1); grad w.r.t. x and w.
  psum_pmean a replicated loss psum(sum(tanh(x @ w))) + pmean(sum(x * x))
             with w replicated; grad w.r.t. x and w.
  a2a        all_to_all tiled (split 1, concat 0) and untiled (split 0,
             concat 1) of x * x; grad w.r.t. x.
  gather_u   all_gather untiled (axis 1) and psum_scatter untiled over the
             2x4 mesh's axis b; grad w.r.t. x.
  vmap_psum  vmap (over a leading axis of 3) of a shard_map whose body
             psums, a shard_map whose body vmaps a psum, and vmap of the
             grad of sum(sin(.)) of the first.
  rank8      grad through a body whose residual has rank 8.
  inside     jax.grad inside a body (check_vma=False: see below).
Every gradient is taken with check_vma=True (JAX's default); the script
asserts check_vma=False gives the same values (kiln's transposes are the
check_vma=False ones, which need no varying-type tracking).

    python3 tests/golden/collective_grad.py   # writes collective_grad.txt

Each line: `<case> <name> <shape> <values...>` (shape as 4x3, - for a
scalar), float32 printed to 9 significant digits (transform_grad.txt's).
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

jax.config.update("jax_platforms", "cpu")

rng = np.random.default_rng(24)
lines = []
MESH = Mesh(np.array(jax.devices()[:8]), ("i",))
MESH2 = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("a", "b"))


def uniform(lo, hi, shape):
  return rng.uniform(lo, hi, shape).astype(np.float32)


def put(case, name, a):
  a = np.asarray(a, np.float32)
  shape = "x".join(str(d) for d in a.shape) if a.ndim else "-"
  lines.append(f"{case} {name} {shape} " + " ".join(f"{v:.9g}" for v in a.reshape(-1)))


def smap(f, mesh, in_specs, out_specs, check_vma):
  return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)


def both(make, args, argnums):
  """grad of make(check_vma) at args, checking both settings agree."""
  g1 = jax.grad(make(True), argnums=argnums)(*args)
  g0 = jax.grad(make(False), argnums=argnums)(*args)
  for a, b in zip(g1, g0):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  return g1


# ---- tp_dense ----
B, D, H = 16, 4, 16
x, w1, w2 = uniform(-1, 1, (B, D)), uniform(-0.5, 0.5, (D, H)), uniform(-0.5, 0.5, (H, D))
c = uniform(-1, 1, (B, D))


def tp_body(x, w1, w2):
  xf = lax.all_gather(x, "i", axis=0, tiled=True)
  h = jnp.tanh(xf @ w1)
  return lax.psum_scatter(h @ w2, "i", scatter_dimension=0, tiled=True)


def tp_loss(check_vma):
  f = smap(tp_body, MESH, (P("i", None), P(None, "i"), P("i", None)), P("i", None), check_vma)
  return lambda x, w1, w2: jnp.sum(jnp.sin(f(x, w1, w2)) * c)


for k, v in (("x", x), ("w1", w1), ("w2", w2), ("c", c)):
  put("tp_dense", k, v)
put("tp_dense", "out", smap(tp_body, MESH, (P("i", None), P(None, "i"), P("i", None)),
                            P("i", None), True)(x, w1, w2))
for k, v in zip(("g_x", "g_w1", "g_w2"), both(tp_loss, (x, w1, w2), (0, 1, 2))):
  put("tp_dense", k, v)
tx, tw1, tw2 = uniform(-1, 1, x.shape), uniform(-1, 1, w1.shape), uniform(-1, 1, w2.shape)
for k, v in (("tx", tx), ("tw1", tw1), ("tw2", tw2)):
  put("tp_dense", k, v)
f_tp = smap(tp_body, MESH, (P("i", None), P(None, "i"), P("i", None)), P("i", None), True)
_, jt = jax.jvp(f_tp, (x, w1, w2), (tx, tw1, tw2))
put("tp_dense", "jvp", jt)

# ---- ring ----
N = 8
xr, wr, cr = uniform(-1, 1, (16, 3)), uniform(-1, 1, (16, 3)), uniform(-1, 1, (16, 3))
RING = [(j, (j + 1) % N) for j in range(N)]
PART = [(0, 3), (5, 1)]


def ring_body(x, w):
  y = lax.ppermute(x * w, "i", perm=RING)
  z = lax.ppermute(jnp.sin(y), "i", perm=PART)
  return y * y + z * x


def ring_loss(check_vma):
  f = smap(ring_body, MESH, (P("i"), P("i")), P("i"), check_vma)
  return lambda x, w: jnp.sum(f(x, w) * cr)


for k, v in (("x", xr), ("w", wr), ("c", cr)):
  put("ring", k, v)
for k, v in zip(("g_x", "g_w"), both(ring_loss, (xr, wr), (0, 1))):
  put("ring", k, v)

# ---- psum_pmean ----
xp, wp = uniform(-1, 1, (16, 4)), uniform(-1, 1, (4, 3))


def pp_body(x, w):
  return lax.psum(jnp.sum(jnp.tanh(x @ w)), "i") + lax.pmean(jnp.sum(x * x), "i")


def pp_loss(check_vma):
  f = smap(pp_body, MESH, (P("i"), P()), P(), check_vma)
  return lambda x, w: f(x, w)


for k, v in (("x", xp), ("w", wp)):
  put("psum_pmean", k, v)
put("psum_pmean", "out", pp_loss(True)(xp, wp))
for k, v in zip(("g_x", "g_w"), both(pp_loss, (xp, wp), (0, 1))):
  put("psum_pmean", k, v)

# ---- a2a ----
xa, ca1, ca2 = uniform(-1, 1, (64, 16)), uniform(-1, 1, (512, 2)), uniform(-1, 1, (64, 8))


def a2a_body(x):
  y = x * x
  t = lax.all_to_all(y, "i", split_axis=1, concat_axis=0, tiled=True)  # [8,16] -> [64,2]
  # untiled split 0 -> concat 1 of [8, 8]: JAX 0.10.2 cannot transpose it
  # (its untiled all_to_all is expand_dims + tiled + squeeze, and the
  # cotangent comes back [8,1,8] for [8,8,1]), so the gradient goes
  # through the equal tiled (0 -> 0) one, transposed; checked equal below.
  u = lax.all_to_all(y[:, :8], "i", split_axis=0, concat_axis=0, tiled=True).T
  return t, u


def a2a_loss(check_vma):
  f = smap(a2a_body, MESH, (P("i", None),), (P("i", None), P("i")), check_vma)

  def loss(x):
    t, u = f(x)
    return jnp.sum(jnp.sin(t) * ca1) + jnp.sum(jnp.cos(u) * ca2)
  return loss


f_u = smap(lambda x: lax.all_to_all(x[:, :8], "i", split_axis=0, concat_axis=1), MESH,
           (P("i", None),), P("i"), True)


np.testing.assert_allclose(f_u(xa * xa), smap(a2a_body, MESH, (P("i", None),),
                                              (P("i", None), P("i")), True)(xa)[1], rtol=0)
for k, v in (("x", xa), ("c1", ca1), ("c2", ca2)):
  put("a2a", k, v)
put("a2a", "g_x", both(a2a_loss, (xa,), (0,))[0])

# ---- gather_u: untiled all_gather / psum_scatter over b of the 2x4 mesh ----
xg, cg = uniform(-1, 1, (8, 4)), uniform(-1, 1, (4, 4))


def gu_body(x):  # x: [4, 1] per device
  g = lax.all_gather(x, "b", axis=1)  # [4, 4, 1]
  s = lax.psum_scatter(jnp.tanh(g) * g, "b", scatter_dimension=1)  # [4, 1]
  return s


def gu_loss(check_vma):
  f = smap(gu_body, MESH2, (P("a", "b"),), P("a", "b"), check_vma)
  return lambda x: jnp.sum(jnp.sin(f(x)) * np.tile(cg, (2, 1)))


for k, v in (("x", xg), ("c", cg)):
  put("gather_u", k, v if k == "x" else np.tile(v, (2, 1)))
put("gather_u", "g_x", both(gu_loss, (xg,), (0,))[0])

# ---- vmap_psum ----
xv = uniform(-1, 1, (3, 16, 2))


def vp_body(x):
  return lax.psum(x * x, "i")


f_vp = smap(vp_body, MESH, (P("i"),), P(), True)
put("vmap_psum", "x", xv)
put("vmap_psum", "outer", jax.vmap(f_vp)(xv))  # [3, 2, 2]
f_in = smap(lambda x: jax.vmap(lambda r: lax.psum(jnp.sin(r), "i"))(x), MESH, (P(None, "i"),),
            P(), True)
put("vmap_psum", "inner", f_in(xv))  # [3, 2, 2]
g_vp = jax.vmap(jax.grad(lambda x: jnp.sum(jnp.sin(f_vp(x)))))(xv)
put("vmap_psum", "vmap_grad", g_vp)

# ---- rank8: a residual of rank 8 (kiln's most), which cannot gain the
# leading axis kiln lays residuals out with: the recomputing fallback ----
x8 = uniform(-1, 1, (16, 1, 2, 1, 1, 2, 1, 1))
f8 = smap(lambda x: lax.psum(jnp.tanh(x) * x, "i"), MESH, (P("i"),), P(), True)
put("rank8", "x", x8)
put("rank8", "g_x", jax.grad(lambda x: jnp.sum(jnp.sin(f8(x))))(x8))

# ---- inside: jax.grad taken inside the body (check_vma=False) ----
# There psum transposes to psum, so the gradient of psum(f(w)) is the
# axis size times the local one, and w (replicated) gets no automatic
# psum; with check_vma=True JAX types w as invariant and its gradient is
# the psum over the members instead (the sum of the local ones), which
# kiln, without varying types, does not do.
xi, wi = uniform(-1, 1, (16, 4)), uniform(-1, 1, (4, 3))


def inside_body(x, w):
  return jax.grad(lambda w: lax.psum(jnp.sum(jnp.tanh(x @ w)), "i")
                  + lax.pmean(jnp.sum(w * w), "i"))(w)


for k, v in (("x", xi), ("w", wi)):
  put("inside", k, v)
put("inside", "g", smap(inside_body, MESH, (P("i"), P()), P("i"), False)(xi, wi))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "collective_grad.txt")
with open(out, "w") as f:
  f.write("# written by collective_grad.py (jax %s); do not edit\n" % jax.__version__)
  f.write("\n".join(lines) + "\n")
print("wrote", out, len(lines), "lines")
