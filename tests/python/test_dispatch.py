"""The C call path of kiln.jit (_dispatch.c): which calls it takes, that
they give what the Python path gives, and the lifetimes it manages."""
import gc
import threading
import weakref

import numpy as np
import pytest

import kiln

jax = pytest.importorskip("jax")
jnp = jax.numpy


def f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_flat_array_signatures_take_the_c_path():
    f = kiln.jit(lambda x, y: x * y + 1.0)
    x, y = f32(4, 3), f32(4, 3, seed=1)
    want = np.asarray(f(x, y))  # first call: Python path, then registered
    assert f._signature_count() == 1
    for args in ((x, y), (kiln.asarray(x), y), (kiln.asarray(x), kiln.asarray(y))):
        got = f(*args)
        assert type(got) is kiln.Array and got.shape == (4, 3) and got.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(got), want)
    assert f._signature_count() == 1
    f(f32(2), f32(2))  # a new shape: compiled by the Python path, a second signature
    assert f._signature_count() == 2


def test_outputs_keep_their_structure():
    tup = kiln.jit(lambda x: (x + 1, x * 2))
    x = f32(3)
    for _ in range(2):  # the first call is Python's, the second the C path's
        a, b = tup(x)
        np.testing.assert_allclose(np.asarray(a), x + 1)
        np.testing.assert_allclose(np.asarray(b), x * 2)
    tree = kiln.jit(lambda x: {"s": x.sum(), "l": [x, x - 1]})
    for _ in range(2):
        out = tree(x)
        assert sorted(out) == ["l", "s"] and len(out["l"]) == 2
        np.testing.assert_allclose(np.asarray(out["l"][1]), x - 1)


def test_other_arguments_take_the_python_path():
    f = kiln.jit(lambda x, y: x + y)
    x = f32(2, 3)
    f(x, x)
    assert f._signature_count() == 1
    strided = np.asarray(f32(3, 2).T)  # not C-contiguous: the Python path copies it
    np.testing.assert_allclose(np.asarray(f(strided, x)), strided + x)
    np.testing.assert_allclose(np.asarray(f(x, 2.0)), x + 2)  # a weak scalar
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x), x)), x + x)  # a JAX array
    assert f._signature_count() == 1  # only the flat array signature was registered
    with pytest.raises(TypeError):
        f(x)


def test_every_numpy_dtype_kiln_holds():
    # int64 and float64 are narrowed by JAX (no x64): the Python path converts them.
    for dt in (np.bool_, np.int8, np.uint8, np.int16, np.int32, np.uint32, np.float16):
        f = kiln.jit(lambda x: x)
        x = (np.arange(6) % 3).astype(dt).reshape(2, 3)
        for _ in range(2):
            got = f(x)
            assert got.dtype == x.dtype
            np.testing.assert_array_equal(np.asarray(got), x)
        assert f._signature_count() == 1, dt
    f = kiln.jit(lambda x: x + 1)
    x = np.arange(3)
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(f(x)), x + 1)
    assert f._signature_count() == 0


def test_large_numpy_inputs_are_lent_and_returned():
    f = kiln.jit(lambda x: x * 2)
    x = f32(256, 256)
    f(x)
    for _ in range(3):  # zero-copy: kiln views x during the call, then lets go
        np.testing.assert_allclose(np.asarray(f(x)), x * 2)
    ident = kiln.jit(lambda x: x)
    ident(x)
    y = ident(x)  # may view x itself: it must keep x's memory alive
    del x
    gc.collect()
    assert np.asarray(y).shape == (256, 256)


def test_results_are_released_with_their_arrays():
    f = kiln.jit(lambda x: x + 1)
    x = kiln.asarray(f32(5))
    f(x)
    r = weakref.ref(f(x))
    gc.collect()
    assert r() is None


def test_concurrent_calls():
    f = kiln.jit(lambda x, y: x - y)
    x, y = f32(64), f32(64, seed=3)
    f(x, y)
    errors = []

    def work():
        try:
            for _ in range(200):
                np.testing.assert_array_equal(np.asarray(f(x, y)), x - y)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
