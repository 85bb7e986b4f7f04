"""kiln.jit of jax.scipy.special.i0e / i1e (lax.bessel_i0e / bessel_i1e,
each one record in src/ir/elementwise_unary.def), their gradients and a
vmap, compared with jax.jit by value."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp, lax = jax.numpy, jax.lax
from jax.scipy import special  # noqa: E402
from translate_cases import loose, run_group  # noqa: E402

rng = np.random.default_rng(24)


def test_bessel_i0e_i1e():
    x = (rng.standard_normal((3, 5)) * 6).astype(np.float32)
    run_group({
        "values": (lambda x: (special.i0e(x), special.i1e(x), lax.bessel_i0e(x * 0.5)), [x],
                   loose(2e-6)),
        "grad": (jax.grad(lambda x: jnp.sum(special.i0e(x) + special.i1e(x))), [x], loose(2e-5)),
        "vmap": (jax.vmap(lambda r: special.i1e(r) * r[0]), [x], loose(2e-6)),
    })
