"""Expected derivatives of the cumulative primitives (cumprod, cummax,
cummin, cumlogsumexp) for tests/transform/test_transform_cumulative.cc, computed by
JAX, f32: for each case along axis 1, forward and reversed, the value, the
vjp of x -> f(x) against a random cotangent c (the gradient of
sum(f(x) * c)), the jvp against a random tangent t, and the jvp under vmap
with the mapped axis at 1 (in_axes=1, out_axes=0).

cumprod's inputs hold zeros (JAX's associative-scan jvp never divides);
cummax/cummin's are distinct (at ties JAX's scan tree splits the tangent).
cumlogsumexp with -inf prefixes: JAX's own jvp is NaN from the second
position of such a line on (even past the prefix), so the golden is JAX's
jvp with -inf replaced by -100, the limit of equal tiny entries, which is
kiln's convention there (the value golden is JAX's at -inf).

    python3 tests/golden/transform_cumulative.py   # writes transform_cumulative.txt
"""
import jax

jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

from f32_lines import F32Lines  # noqa: E402

out = F32Lines(31)
SHAPE = (3, 5)

OPS = {"cumprod": lax.cumprod, "cummax": lax.cummax, "cummin": lax.cummin,
       "cumlogsumexp": lax.cumlogsumexp}


def inputs(name):
  if name == "cumprod":
    x = out.uniform(-2, 2, SHAPE)
    x[0, 1] = 0.0
    x[2, 2] = 0.0
    x[2, 4] = 0.0
    return x
  x = out.uniform(-3, 3, SHAPE)
  if name == "cumlogsumexp_neginf":
    x[0, :2] = -np.inf
    x[1, 3] = -np.inf
    x[2, :] = -np.inf
  return x


for name in ["cumprod", "cummax", "cummin", "cumlogsumexp", "cumlogsumexp_neginf"]:
  op = OPS[name.split("_")[0]]
  for rev in (False, True):
    case = f"{name}_{int(rev)}"
    f = lambda x: op(x, axis=1, reverse=rev)  # noqa: E731
    x, c, t = inputs(name), out.uniform(-1, 1, SHAPE), out.uniform(-1, 1, SHAPE)
    xd = np.where(np.isneginf(x), np.float32(-100), x)  # the derivatives' point
    out.put(case, "x", x); out.put(case, "c", c); out.put(case, "t", t)
    out.put(case, "y", f(x))
    out.put(case, "vjp", jax.grad(lambda x: jnp.sum(f(x) * c))(xd))
    out.put(case, "jvp", jax.jvp(f, (xd,), (t,))[1])
    vj = jax.vmap(lambda x, t: jax.jvp(lambda z: op(z, axis=0, reverse=rev), (x,), (t,))[1],
                  in_axes=1)
    out.put(case, "vmap_jvp", vj(xd, t))

out.write(__file__, jax.__version__)
