"""Goldens for the jvp and gradient of reduce_prod (tests/transform/test_transform_prod.cc),
computed by JAX: inputs with no zero, one zero, two zeros (in one row and
in different rows) and all zeros, reduced along each axis, along several
and along all, in 2-D and 3-D. JAX's jvp multiplies the others (a tree of
pairwise products), so zeros give exact derivatives, never 0/0.

    python3 tests/golden/reduce_prod_grad.py   # writes reduce_prod_grad.txt

Each line: `<case> <name> <shape> <values...>` (transform_grad.txt's format);
<case> is `<input>_<axes>` with axes joined by '.'.
"""
import os

import jax
import jax.numpy as jnp
import numpy as np

rng = np.random.default_rng(7)
lines = []


def put(case, name, a):
  a = np.asarray(a, np.float32)
  shape = "x".join(str(d) for d in a.shape) if a.ndim else "-"
  lines.append(f"{case} {name} {shape} " + " ".join(f"{v:.9g}" for v in a.reshape(-1)))


def u(shape):
  return rng.uniform(0.5, 1.5, shape).astype(np.float32) * rng.choice([-1, 1], shape).astype(np.float32)


base = u((3, 5))
one = base.copy(); one[1, 2] = 0
two_row = base.copy(); two_row[2, 0] = 0; two_row[2, 3] = 0
two_apart = base.copy(); two_apart[0, 4] = 0; two_apart[2, 1] = 0
zeros = np.zeros((3, 5), np.float32)
cube = u((2, 3, 4)); cube[1, 0, 2] = 0; cube[0, 2, 1] = 0; cube[0, 2, 3] = 0
INPUTS = {"none": base, "one": one, "two_row": two_row, "two_apart": two_apart, "zeros": zeros,
          "cube": cube}
AXES = {2: [(0,), (1,), (0, 1)], 3: [(0,), (2,), (0, 2), (1, 2), (0, 1, 2)]}

for name, x in INPUTS.items():
  for axes in AXES[x.ndim]:
    case = name + "_" + ".".join(map(str, axes))
    f = lambda x: jnp.prod(x, axis=axes)
    y = f(x)
    c = u(y.shape)
    t = u(x.shape)
    put(case, "x", x)
    put(case, "c", c)
    put(case, "t", t)
    put(case, "y", y)
    put(case, "grad", jax.grad(lambda x: jnp.sum(f(x) * c))(x))
    put(case, "jvp", jax.jvp(f, (x,), (t,))[1])

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reduce_prod_grad.txt")
with open(out, "w") as fh:
  fh.write("# written by reduce_prod_grad.py (jax %s); do not edit\n" % jax.__version__)
  fh.write("\n".join(lines) + "\n")
print("wrote", out, len(lines), "lines")
