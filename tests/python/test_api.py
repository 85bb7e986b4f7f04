"""kiln.jit's calling convention, as jax.jit's: keyword arguments,
static_argnums/static_argnames, donation, pytrees whose leaves come from
NumPy, JAX, PyTorch and kiln, Python scalars, and errors that name the
argument. Expected values come from jax.jit of the same function."""
import numpy as np
import pytest

import kiln

jax = pytest.importorskip("jax")
jnp = jax.numpy
ml_dtypes = pytest.importorskip("ml_dtypes")
from jaxcmp import assert_matches_jax  # noqa: E402


def f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_keyword_arguments_and_defaults():
    def f(x, y=2.0, *, scale, bias=None):
        out = x * y * scale
        return out if bias is None else out + bias["b"]

    x, s, b = f32(3), f32(3, seed=1), {"b": f32(3, seed=2)}
    kf, jf = kiln.jit(f), jax.jit(f)
    for args, kw in [((x,), {"scale": s}), ((x, 3.0), {"scale": s, "bias": b}),
                     ((), {"x": x, "y": s, "scale": 0.5})]:
        assert_matches_jax(kf(*args, **kw), jf(*args, **kw))


def test_static_argnames_and_argnums_infer_each_other():
    traces = []

    def f(x, n, mode="sum"):
        traces.append((n, mode))
        return x[:n].sum() if mode == "sum" else x[:n].max()

    x = f32(5)
    by_name = kiln.jit(f, static_argnames=("n", "mode"))
    by_num = kiln.jit(f, static_argnums=(1, 2))
    for kf in (by_name, by_num):
        for n, mode in [(2, "sum"), (3, "sum"), (3, "max")]:
            want = jax.jit(f, static_argnames=("n", "mode"))(x, n, mode=mode)
            assert_matches_jax(kf(x, n, mode=mode), want)
            assert_matches_jax(kf(x, n=n, mode=mode), want)  # the name given as a keyword
    fresh = kiln.jit(f, static_argnames=("n", "mode"))
    traces.clear()
    for n in (2, 2, 2.0, 3):  # 2.0 == 2 and hashes alike: the same entry, as in jax.jit
        fresh(x, n=int(n) if n == 3 else n, mode="sum")
    assert traces == [(2, "sum"), (3, "sum")]
    with pytest.raises(ValueError, match=r"static argument n .*not hashable"):
        by_name(x, [2])
    with pytest.raises(ValueError, match="'k', which is not a parameter"):
        kiln.jit(f, static_argnames="k")


def test_pytree_leaves_from_every_producer():
    torch = pytest.importorskip("torch")
    big = f32(128, 160, seed=3)  # 80 KiB: imported by DLPack, not copied
    args = {"np": f32(4, 3), "jax": jnp.asarray(f32(4, 3, seed=1)),
            "torch": torch.from_numpy(f32(4, 3, seed=2)),
            "kiln": kiln.asarray(f32(4, 3, seed=4)), "none": None,
            "list": [np.int32(3), 2.5], "big_torch": torch.from_numpy(big), "big_jax": jnp.asarray(big)}

    def f(a):
        s = a["np"] + a["jax"] * a["torch"] - a["kiln"]
        return s * a["list"][0] + a["list"][1], (a["big_torch"] - a["big_jax"]).sum()

    jax_args = jax.tree_util.tree_map(np.asarray, args)
    assert_matches_jax(kiln.jit(f)(args), jax.jit(f)(jax_args))


def test_bfloat16_from_numpy_and_jax_large_and_small():
    for shape in [(8,), (256, 256)]:  # 16 B and 128 KiB (over the zero-copy threshold)
        x = f32(*shape).astype(ml_dtypes.bfloat16)
        want = jax.jit(lambda a, b: a * 2 + b)(x, x)
        for arg in (x, jnp.asarray(x)):
            assert_matches_jax(kiln.jit(lambda a, b: a * 2 + b)(arg, x), want)


def test_python_scalars_are_weakly_typed():
    f = lambda x, s: x * s  # noqa: E731
    for x, s in [(np.arange(3, dtype=np.int8), 3), (f32(3).astype(np.float16), 0.5),
                 (np.arange(3, dtype=np.int32), 1.5), (np.ones(3, bool), True)]:
        got, want = kiln.jit(f)(x, s), jax.jit(f)(x, s)
        assert got.dtype == want.dtype, (x.dtype, type(s))
        assert_matches_jax(got, want)


def test_donation_deletes_kiln_arrays_and_copies_others():
    f = kiln.jit(lambda p, x: {k: v * 2 + x for k, v in p.items()}, donate_argnames="p")
    p = {"w": kiln.from_dlpack(f32(4, 3), copy=True), "b": kiln.from_dlpack(f32(3), copy=True)}
    x = kiln.asarray(np.float32(1))
    w0 = np.array(p["w"])
    out = f(p, x)
    np.testing.assert_allclose(np.asarray(out["w"]), w0 * 2 + 1)
    assert p["w"].is_deleted() and p["b"].is_deleted() and not x.is_deleted()
    assert "<deleted>" in repr(p["w"])
    with pytest.raises(kiln.KilnError, match="deleted"):
        np.asarray(p["w"])
    # NumPy leaves of a donated argument are copied first: NumPy's memory is
    # never handed to kiln (nor changed), as jax.jit leaves NumPy inputs alone.
    big = np.ones((200, 100), np.float32)  # over the zero-copy threshold
    g = kiln.jit(lambda a: a + 1, donate_argnums=0)
    for _ in range(2):  # the Python path, then the C call path
        np.testing.assert_array_equal(np.asarray(g(big)), big + 1)
        np.testing.assert_array_equal(big, 1)
    # A kiln.Array that views NumPy's memory cannot be donated: said in Python.
    view = kiln.asarray(big)
    with pytest.raises(ValueError, match=r"argument a is donated.*another framework's memory"):
        g(view)
    with pytest.raises(ValueError, match="both static and donated"):
        kiln.jit(lambda a: a, static_argnums=0, donate_argnums=0)


def test_bad_arguments_name_their_path():
    f = kiln.jit(lambda params, x: params["w"][0] * x)
    with pytest.raises(TypeError, match=r"argument params\['w'\]\[1\] of type str is not an array"):
        f({"w": [f32(2), "oops"]}, f32(2))
    with pytest.raises(TypeError, match=r"argument x of type object"):
        f({"w": [f32(2)]}, object())
    for bad, dt in [(np.array(["a"]), "<U1"), (np.array([1j], np.complex64), "complex64")]:
        with pytest.raises(TypeError, match=rf"argument x has dtype {dt}, which kiln does not hold"):
            f({"w": [f32(1)]}, bad)
    torch = pytest.importorskip("torch")
    t = torch.ones(2, requires_grad=True)
    with pytest.raises(BufferError, match=r"argument x: .*gradient"):
        f({"w": [f32(2)]}, t)
    with pytest.raises(TypeError):  # a missing argument: JAX's TypeError, as jax.jit
        f({"w": [f32(2)]})


def test_c_path_only_for_flat_positional_arrays():
    f = kiln.jit(lambda x, y: x - y)
    x = f32(3)
    f(x, y=x)
    assert f._signature_count() == 0  # keywords take the Python path
    f(x, x)
    assert f._signature_count() == 1
    np.testing.assert_array_equal(np.asarray(f(x, y=x * 2)), -x)
