#!/usr/bin/env python3
"""Golden sums for tests/test_reduce_exact.cc from JAX (CPU): f32 sums of
up to 2^23 elements, long enough that a single sequential f32 accumulator
drifts far from JAX's result, in the shapes that take each of the C target's
reduction loops (a full sum, few long rows, many long rows, long columns,
a middle axis).

x[k] = (splitmix64(k) >> 40) / 2^24 at flat index k: uniform in [0, 1) with
24 bits, exact in f32, and computed again by the test. Each line:
  <case> <shape> <axes> <result values, %.9g>
Also written: the exact (float64) sums on lines starting `exact`.

Run: python3 tests/golden/reduce_exact.py   (deterministic; rerun when JAX changes)
"""
import os

import jax

jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

M64 = (1 << 64) - 1


def values(n):
    """splitmix64 over k = 0..n-1, top 24 bits as a fraction (numpy uint64 wraps)."""
    with np.errstate(over="ignore"):
        z = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(40)).astype(np.float64) / float(1 << 24)).astype(np.float32)


CASES = [
    ("full", (1 << 23,), (0,)),
    ("rows", (4, 1 << 21), (1,)),
    ("many_rows", (160, 1 << 16), (1,)),
    ("cols", (1 << 22, 2), (0,)),
    ("middle", (1 << 11, 2, 1 << 11), (0, 2)),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    lines = [f"# written by reduce_exact.py (jax {jax.__version__}); do not edit"]
    for name, shape, axes in CASES:
        x = values(int(np.prod(shape))).reshape(shape)
        got = np.asarray(jax.jit(lambda a, axes=axes: jnp.sum(a, axis=axes))(x)).reshape(-1)
        exact = x.astype(np.float64).sum(axis=axes).reshape(-1)
        dims = "x".join(str(d) for d in shape)
        ax = ",".join(str(a) for a in axes)
        lines.append(f"{name} {dims} {ax} " + " ".join("%.9g" % v for v in got))
        lines.append(f"exact {name} " + " ".join("%.17g" % v for v in exact))
    with open(os.path.join(here, "reduce_exact.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
