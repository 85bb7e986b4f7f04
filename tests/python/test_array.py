"""kiln.Array as an array: operators and comparisons (run by kiln, promoted
as JAX promotes), NumPy's basic indexing with NumPy's errors, repr/str,
conversions and the sequence protocol. Expected values from JAX/NumPy."""
import numpy as np
import pytest

import kiln

jax = pytest.importorskip("jax")
jnp = jax.numpy
from jaxcmp import assert_matches_jax  # noqa: E402

x_np = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
i_np = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)


@pytest.fixture
def x():
    return kiln.asarray(x_np)


@pytest.fixture
def i():
    return kiln.asarray(i_np)


BINARY = ["__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__", "__mod__", "__pow__",
          "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"]


@pytest.mark.parametrize("op", BINARY)
def test_binary_operators_match_jax(op, x, i):
    jx, ji = jnp.asarray(x_np), jnp.asarray(i_np)
    for a, b, ja, jb in [(x, x * 0.5 + 1, jx, jx * 0.5 + 1), (i, 3, ji, 3), (x, 2.0, jx, 2.0),
                         (i, i_np + 7, ji, i_np + 7)]:
        got, want = getattr(a, op)(b), getattr(ja, op)(jb)
        assert isinstance(got, kiln.Array)
        assert got.dtype == want.dtype, op
        assert_matches_jax(got, want)


def test_reflected_mixed_and_unary(x, i):
    jx, ji = jnp.asarray(x_np), jnp.asarray(i_np)
    cases = [(1 - x, 1 - jx), (2 ** i.astype(np.float32), 2 ** ji.astype(np.float32)),
             (x_np * x, x_np * jx), (x @ x.T, jx @ jx.T), (x_np.T @ x, x_np.T @ jx),
             (-x, -jx), (+x, +jx), (abs(x), abs(jx)), (~i, ~ji), (i & 3, ji & 3),
             (i | 8, ji | 8), (i ^ i, ji ^ ji), (i << 2, ji << 2), (i >> 1, ji >> 1),
             (i + 1.5, ji + 1.5), (x.reshape(4, 3), jx.reshape(4, 3)),
             (x.reshape(-1), jx.reshape(-1))]
    for got, want in cases:
        assert isinstance(got, kiln.Array) and got.dtype == want.dtype
        assert_matches_jax(got, want)
    with pytest.raises(TypeError):
        x + "a"


INDICES = [0, -1, (1, 2), (-3, -4), slice(1, None), slice(None, None, -1), (slice(None), 2),
           (Ellipsis, 1), (None, 1), (1, None, slice(None, None, 2)), (slice(-2, None), None, -1),
           (slice(5, 9),), (slice(3, 1),), (), Ellipsis, (np.int64(2), np.int8(-1))]


@pytest.mark.parametrize("idx", INDICES, ids=repr)
def test_basic_indexing_as_numpy(idx, x):
    got = x[idx]
    assert isinstance(got, kiln.Array)
    np.testing.assert_array_equal(np.asarray(got), x_np[idx])
    assert got.shape == x_np[idx].shape


def test_integer_indices_share_one_program(x):
    from kiln import _array
    _array._indexer.cache_clear()
    rows = [np.asarray(r) for r in x]
    np.testing.assert_array_equal(np.stack(rows), x_np)
    assert [np.asarray(x[k, 1]).item() for k in range(3)] == list(x_np[:, 1])
    assert _array._indexer.cache_info().currsize == 2  # x[k] and x[k, 1]


def test_indexing_errors_as_numpy(x):
    for idx, msg in [(3, "index 3 is out of bounds for axis 0 with size 3"),
                     ((0, -5), "index -5 is out of bounds for axis 1 with size 4"),
                     ((0, 0, 0), "too many indices for array: array is 2-dimensional, but 3"),
                     ((Ellipsis, Ellipsis), "single ellipsis"),
                     ([0, 1], "basic indexing only"), (1.5, "basic indexing only"),
                     (True, "basic indexing only")]:
        with pytest.raises(IndexError, match=msg):
            x[idx]
    with pytest.raises(TypeError, match="immutable"):
        x[0] = 1


def test_repr_str_and_scalars(x):
    r = repr(kiln.asarray(np.array([[1.5, 2], [3, 4]], np.float32)))
    assert r == ("kiln.Array([[1.5, 2. ],\n            [3. , 4. ]], dtype=float32, "
                 "device=cpu:0)"), r
    assert repr(kiln.asarray(np.int32(7))) == "kiln.Array(7, dtype=int32, device=cpu:0)"
    assert repr(kiln.asarray(np.zeros((0, 2), np.int8))) == \
        "kiln.Array([], shape=(0, 2), dtype=int8, device=cpu:0)"
    assert str(kiln.asarray(np.array([1, 2], np.int64))) == "[1 2]"
    assert "dtype=bfloat16" in repr(x.astype(jnp.bfloat16))
    assert f"{x[0, 0]:.2f}" == f"{x_np[0, 0]:.2f}"
    assert x[1, 2].item() == x_np[1, 2] and float(x[0, 0]) == x_np[0, 0]
    assert int(kiln.asarray(np.int32(5))) == 5 and [0, 1, 2][kiln.asarray(np.int32(2))] == 2
    assert bool(x[0, 0] > -100) is True
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x > 0)
    with pytest.raises(TypeError, match="size-1"):
        float(x)
    assert x.tolist() == x_np.tolist()


def test_properties_and_protocols(x):
    assert (x.shape, x.ndim, x.size, x.dtype, x.nbytes) == ((3, 4), 2, 12, np.float32, 48)
    assert x.device == kiln.devices()[0] and x.devices() == {x.device}
    assert x.block_until_ready() is x and len(x) == 3
    assert [r.shape for r in x] == [(4,)] * 3
    with pytest.raises(TypeError, match="len"):
        len(x[0, 0])
    with pytest.raises(TypeError, match="iteration"):
        iter(x[0, 0])
    a = np.asarray(x)
    np.testing.assert_array_equal(a, x_np)
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    y = x.astype(np.int32)
    assert y.dtype == np.int32 and x.astype(np.float32) is x
    np.testing.assert_array_equal(np.asarray(y), x_np.astype(np.int32))
    # NumPy defers to kiln's operators rather than converting the array.
    assert isinstance(x_np + x, kiln.Array) and isinstance(x_np < x, kiln.Array)
    with pytest.raises(TypeError):
        hash(x)
