"""Expected derivatives of the elementwise primitives issue 11 added, for
tests/transform/test_transform.cc, computed by JAX: for each, the vjp of x -> op(x)
against a random cotangent c (the gradient of sum(op(x) * c)) and the jvp
against a random tangent t, f32. digamma's jvp is polygamma(1, x) in JAX;
kiln emits trigamma from primitives (checked on both sides of 0).

    python3 tests/golden/transform_special.py   # writes transform_special.txt beside it
"""
import jax
import jax.numpy as jnp
from jax import lax

from f32_lines import F32Lines

SHAPE = (3, 4)
out = F32Lines(27)

CASES = {
    "square": (lax.square, (-2, 2)),
    "erfc": (lax.erfc, (-2, 2)),
    "lgamma": (lax.lgamma, (0.3, 4)),
    "integer_pow_3": (lambda x: lax.integer_pow(x, 3), (-2, 2)),
    "integer_pow_-2": (lambda x: lax.integer_pow(x, -2), (0.5, 2)),
    "integer_pow_0": (lambda x: lax.integer_pow(x, 0), (-2, 2)),
    "reduce_precision": (lambda x: lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10),
                         (-2, 2)),
    "copy": (jnp.copy, (-2, 2)),
    "digamma": (lax.digamma, (0.2, 6)),
    "digamma_neg": (lax.digamma, (-2.9, -2.1)),
}

for name, (f, (lo, hi)) in CASES.items():
  x, c, t = out.uniform(lo, hi, SHAPE), out.uniform(-1, 1, SHAPE), out.uniform(-1, 1, SHAPE)
  out.put(name, "x", x); out.put(name, "c", c); out.put(name, "t", t)
  out.put(name, "vjp", jax.grad(lambda x: jnp.sum(f(x) * c))(x))
  out.put(name, "jvp", jax.jvp(f, (x,), (t,))[1])

out.write(__file__, jax.__version__)
