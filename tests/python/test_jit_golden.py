"""The JAX functions behind tests/golden/trace_jit.txt (the cases kiln's C
tests trace by hand), run through kiln.jit and compared with jax.jit on the
same seeded inputs, in JAX's x64 mode as the golden script runs them."""
import importlib.util
import os

import numpy as np
import pytest

import kiln

jax = pytest.importorskip("jax")
from jaxcmp import assert_matches_jax  # noqa: E402

_GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "trace_jit.py")


def _load_golden():
    # The script turns x64 on when imported; keep the session's setting.
    before = jax.config.jax_enable_x64
    spec = importlib.util.spec_from_file_location("trace_jit_golden", _GOLDEN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    jax.config.update("jax_enable_x64", before)
    return mod


golden = _load_golden()


@pytest.mark.parametrize("name,fn,specs", golden.CASES, ids=[c[0] for c in golden.CASES])
def test_golden_case(name, fn, specs):
    with jax.enable_x64(True):
        rng = np.random.default_rng(1234)
        args = [golden.make_input(rng, k, s) for k, s in specs]
        got = kiln.jit(fn)(*args)
        want = jax.jit(fn)(*args)
        assert_matches_jax(got, want, err_msg=f"{name}\n{jax.make_jaxpr(fn)(*args)}")
