"""Expected results of kiln's numpy-level API (include/kiln/numpy.h), computed
by jax.numpy / jax.nn / jax.lax under jax.jit.

Each case is written here with JAX and in tests/trace/numpy_cases.c with kiln's
functions; test_numpy.cc runs the C twin through kiln_jit on the inputs
recorded here and compares with JAX's tolerances. Same file format as
trace_jit.txt.

    python3 tests/golden/numpy_api.py   # writes numpy_api.txt beside it
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)

from trace_jit import write_cases  # noqa: E402  (same directory)

rng = np.random.default_rng(2026)


def f32(*shape):
  return rng.standard_normal(shape).astype(np.float32)


def bf16(*shape):
  return jnp.asarray(rng.standard_normal(shape), jnp.bfloat16)


def i32(lo, hi, *shape):
  return rng.integers(lo, hi, shape).astype(np.int32)


def i32s(*values):
  return np.array(values, np.int32)


MASK = np.array([[True, False, True, True, False],
                 [False, False, False, False, False],
                 [True, True, True, True, True]])
# Ties for argsort / top_k: repeated values in every row.
TIES = np.array([[1, 3, 3, 2, 3, 0], [5, 5, 5, 5, 5, 5], [2, -1, 2, -1, 0, 7]], np.float32)
# A row with -inf entries, one of only -inf: logsumexp's and softmax's edges.
NEG_INF = np.array([[0.5, -np.inf, 1.5, -2.0], [-np.inf, -np.inf, -np.inf, -np.inf],
                    [1e30, 1e30, -1e30, 3.0]], np.float32)
# Indices out of range for an axis of 5, both ways, and negatives within it.
IDX = i32s(-1, 5, -6, 2, 0, -5, 7)


def reductions(x):
  return (jnp.sum(x, axis=1, keepdims=True), jnp.sum(x), jnp.prod(x, axis=0),
          jnp.max(x, axis=(0, 2), keepdims=True), jnp.min(x, axis=-1))


def int_reductions(x):
  return jnp.sum(x), jnp.sum(x, axis=0, keepdims=True), jnp.max(x, axis=1), jnp.prod(x[:, :3], axis=1)


def bf16_reductions(x):
  return jnp.sum(x, axis=-1), jnp.mean(x, axis=0, keepdims=True), jnp.var(x, axis=1)


def moments(x):
  return (jnp.mean(x, axis=1), jnp.mean(x), jnp.var(x, axis=0),
          jnp.std(x, axis=(0, 1), ddof=1, keepdims=True), jnp.std(x))


def int_moments(x):
  return jnp.mean(x, axis=0), jnp.var(x), jnp.std(x, axis=1, ddof=1)


def lse(x, m):
  return (jax.nn.logsumexp(x, axis=1), jax.nn.logsumexp(x, keepdims=True),
          jax.nn.logsumexp(x, axis=(0, 1)), jax.nn.logsumexp(x, axis=1, where=m, keepdims=True))


def softmaxes(x, m):
  return (jax.nn.softmax(x), jax.nn.softmax(x, axis=0), jax.nn.softmax(x, where=m),
          jax.nn.log_softmax(x), jax.nn.log_softmax(x, axis=0), jax.nn.log_softmax(x, where=m))


def divmod_cases(a, b, fa, fb):
  return (jnp.floor_divide(a, b), jnp.remainder(a, b), jnp.floor_divide(fa, fb),
          jnp.remainder(fa, fb), jnp.remainder(a, jnp.zeros_like(a)), jnp.floor_divide(a, 3),
          jnp.remainder(fa, 0.75))


def take_cases(x, xi, xu, i):
  return (jnp.take(x, i, axis=0), jnp.take(x, i, axis=0, mode="clip"),
          jnp.take(x, i, axis=0, mode="wrap"), jnp.take(xi, i, axis=1),
          jnp.take(xu, i, axis=0), jnp.take(x, i.reshape(1, 7) % 3 - 1, axis=1))


def take_along_cases(x, i):
  return (jnp.take_along_axis(x, i, axis=1), jnp.take_along_axis(x, i, axis=1, mode="clip"),
          jnp.take_along_axis(x, i % 5, axis=1, mode="promise_in_bounds"))


def sort_cases(x, xi):
  i32 = lambda v: v.astype(jnp.int32)
  return (i32(jnp.argsort(x, axis=1, stable=True)), i32(jnp.argsort(x, axis=1, stable=True, descending=True)),
          i32(jnp.argsort(xi, axis=0, stable=True, descending=True)), *lax.top_k(x, 3), *lax.top_k(xi.T, 2))


def einsums(a, b, c, v, w, bb):
  return (jnp.einsum("ij,jk->ik", a, b), jnp.einsum("bij,bjk->bik", c, bb), jnp.einsum("i,j->ij", v, w),
          jnp.einsum("ij,ij->", a, a), jnp.einsum("ij,kj->ki", a, a), jnp.einsum("ij,jk", a, b),
          jnp.einsum("bij,jk->kbi", c, b), jnp.einsum("ij,jk->i", a, b), jnp.einsum("ij,j->ji", a, w[:4]))


def matmuls(v3, m23, m34, m45, b2234, b245, b2134, b542, h23, h34):
  return (jnp.matmul(v3, m34), jnp.matmul(m23, v3), jnp.matmul(v3, v3), jnp.matmul(b2234, m45),
          jnp.matmul(m34, b245), jnp.matmul(b2134, b542), jnp.matmul(v3, b2134.reshape(2, 3, 4)),
          jnp.matmul(h23, h34))


def misc(x, i):
  return (jnp.clip(x, -0.5, 0.5), jnp.clip(x, None, 0.0), jnp.clip(i, -3, 3), jnp.clip(i, 0),
          jax.nn.one_hot(i, 4, dtype=jnp.float32), jnp.where(x > 0, x, 0.0))


def dyn_slice(x, r, c):
  upd = jnp.full((2, 3), 9.0, jnp.float32)
  return (lax.dynamic_slice(x, (r, c), (2, 3)), lax.dynamic_slice(x, (jnp.int32(-1), jnp.int32(-2)), (2, 3)),
          lax.dynamic_update_slice(x, upd, (r, c)), lax.dynamic_slice(x, (jnp.int32(-9), jnp.int32(1)), (2, 3)))


def narrow_types(m, u, v, i):
  return (jnp.sum(m, axis=0), jnp.mean(m), jnp.floor_divide(u, v), jnp.remainder(u, v),
          jax.nn.logsumexp(i, axis=1), jax.nn.softmax(i), jnp.prod(u, axis=1))


CASES = [
    ("reductions", reductions, [f32(2, 3, 4)]),
    ("int_reductions", int_reductions, [i32(-20, 20, 3, 4)]),
    ("bf16_reductions", bf16_reductions, [bf16(4, 8)]),
    ("moments", moments, [f32(3, 5)]),
    ("int_moments", int_moments, [i32(-50, 50, 3, 4)]),
    ("logsumexp", lse, [np.pad(NEG_INF, ((0, 0), (0, 1)), constant_values=0.25), MASK]),
    ("softmax", softmaxes, [f32(3, 5) * 4, MASK]),
    ("softmax_bf16", lambda x: (jax.nn.softmax(x), jax.nn.log_softmax(x, axis=0)), [bf16(3, 8)]),
    ("divmod", divmod_cases, [i32s(7, -7, 7, -7, 0, 9, -9, 1), i32s(2, 2, -2, -2, 3, -4, 4, -1),
                              np.array([7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 1e-3, 5.0], np.float32),
                              np.array([2.0, 2.0, -2.0, -2.0, 3.0, 2.0, -1.0, 0.0], np.float32)]),
    ("take", take_cases, [f32(5, 3), i32(-9, 9, 4, 5), rng.integers(0, 200, (5, 2)).astype(np.uint8), IDX]),
    ("take_along", take_along_cases, [f32(3, 5), i32s(-1, 5, 2, -6, 0, -5, 4, 9, 1).reshape(3, 3)]),
    ("sort", sort_cases, [TIES, i32s(3, 1, 3, 0, 1, 3).reshape(3, 2)]),
    ("einsum", einsums, [f32(3, 4), f32(4, 5), f32(2, 3, 4), f32(3), f32(5), f32(2, 4, 5)]),
    ("matmul", matmuls, [f32(3), f32(2, 3), f32(3, 4), f32(4, 5), f32(2, 2, 3, 4), f32(2, 4, 5),
                         f32(2, 1, 3, 4), f32(5, 4, 2), bf16(2, 3), bf16(3, 4)]),
    ("misc", misc, [f32(6), i32s(-5, -1, 0, 2, 3, 4, 9)]),
    ("narrow_types", narrow_types, [MASK, rng.integers(0, 250, (3, 5)).astype(np.uint8),
                                    rng.integers(1, 9, (3, 5)).astype(np.uint8), i32(-4, 4, 3, 5)]),
    ("dynamic_slice", dyn_slice, [np.arange(24, dtype=np.float32).reshape(4, 6), np.int32(-1), np.int32(-2)]),
]


if __name__ == "__main__":
  write_cases(CASES, "numpy_api.py", "numpy_api.txt")
