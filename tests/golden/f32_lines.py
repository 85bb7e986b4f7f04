"""The line format of the transformation goldens (transform_custom.py,
transform_control.py): `<case> <name> <shape> <values...>`, shape as 4x3 or
- for a scalar, float32 values printed to 9 significant digits; and the
seeded uniform inputs they draw."""
import os

import numpy as np


class F32Lines:
  def __init__(self, seed):
    self.rng = np.random.default_rng(seed)
    self.lines = []

  def put(self, case, name, x):
    x = np.asarray(x, dtype=np.float32)
    shape = "x".join(str(d) for d in x.shape) if x.ndim else "-"
    vals = " ".join(f"{float(v):.9g}" for v in x.reshape(-1))
    self.lines.append(f"{case} {name} {shape} {vals}")

  def uniform(self, lo, hi, shape):
    return self.rng.uniform(lo, hi, size=shape).astype(np.float32)

  def write(self, script, jax_version):
    """Writes <script's name>.txt beside script."""
    path = os.path.splitext(os.path.abspath(script))[0] + ".txt"
    with open(path, "w") as fh:
      fh.write(f"# written by {os.path.basename(script)} (jax {jax_version}); do not edit\n")
      fh.write("\n".join(self.lines) + "\n")
