"""Constants of every dtype reach kiln's IR bit-exactly: bf16 and f16
included, inf, -inf, nan (a payload too), -0.0, subnormals, extremes of
each integer type. Checked bit for bit against jax.jit, and in the text."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
ml_dtypes = pytest.importorskip("ml_dtypes")
jnp, lax = jax.numpy, jax.lax
import kiln  # noqa: E402
from translate_cases import assert_bits_equal  # noqa: E402

FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32]


def _specials(dt):
    fi = ml_dtypes.finfo(dt) if dt is ml_dtypes.bfloat16 else np.finfo(dt)
    vals = [0.1, 2.5, 1e-5, -0.0, 0.0, np.inf, -np.inf, np.nan, -np.nan, 1 / 3, 65504.0, 3e38,
            float(fi.max), float(fi.min), float(fi.tiny), float(fi.eps), float(fi.smallest_subnormal)]
    with np.errstate(over="ignore"):  # 3e38 is inf in f16
        return [np.asarray(v).astype(dt) for v in vals]


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
def test_float_literals_bit_exact(dt):
    consts = _specials(dt)
    # NaNs with a sign or payload travel as inputs, bit-exact
    width = np.dtype(dt).itemsize * 8
    bits = {"float16": 0x7E01, "bfloat16": 0x7FC1, "float32": 0x7FC00123}[np.dtype(dt).name]
    payload = np.asarray(bits, f"uint{width}").view(dt)  # a quiet NaN with a payload
    consts.append(payload)

    def f(x):
        return tuple(lax.broadcast_in_dim(c, (2,), ()) for c in consts) + \
            tuple(x * c for c in consts[:4]) + tuple(x + c for c in consts[:4])

    x = np.asarray([1.5, -3.0]).astype(dt)
    got = kiln.jit(f)(x)
    assert_bits_equal(got, jax.jit(f)(x), np.dtype(dt).name)
    text = kiln.jit(f).lower_text(x)
    short = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}[np.dtype(dt).name]
    assert f"-0.0:{short}[]" in text and f"inf:{short}[]" in text, text
    assert "nan:" in text, text


def test_bf16_constants_are_not_truncated():
    """x*0.1 in bf16 once became `mul v1 0:bf16[]`."""
    x = np.asarray([1.0, 2.0, 3.0], ml_dtypes.bfloat16)
    f = lambda x: (x * 0.1, x + 2.5)  # noqa: E731
    text = kiln.jit(f).lower_text(x)
    assert " 0:" not in text and " 2:" not in text, text
    assert_bits_equal(kiln.jit(f)(x), jax.jit(f)(x))


@pytest.mark.parametrize("dt", [np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32],
                         ids=lambda d: np.dtype(d).name)
def test_integer_literals(dt):
    ii = np.iinfo(dt)
    consts = [np.asarray(v, dt) for v in (ii.min, ii.max, 0, 1, ii.max // 3)]

    def f(x):
        return tuple(x ^ c for c in consts) + (x + consts[3],)

    x = np.arange(4).astype(dt)
    assert_bits_equal(kiln.jit(f)(x), jax.jit(f)(x))


def test_bool_literals_and_scalar_closures():
    scale = np.float32(-0.0)

    def f(b, x):
        return b & True, b | False, x * scale, jnp.where(b, x, jnp.float32(np.nan))

    args = (np.array([True, False]), np.array([1.0, -2.0], np.float32))
    assert_bits_equal(kiln.jit(f)(*args), jax.jit(f)(*args))
