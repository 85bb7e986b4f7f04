"""The translator's coverage of JAX's own primitive registry: every
primitive JAX defines is translated or refused with a reason, the ones
training programs need are translated, and a refusal says whether kiln or
the translator lacks the primitive."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp, lax = jax.numpy, jax.lax
import kiln  # noqa: E402
from kiln import _jaxpr_registry as registry  # noqa: E402
from kiln._jaxpr import KilnLacks, TranslatorLacks  # noqa: E402

MUST_TRANSLATE = """add_any pjit closed_call custom_jvp_call custom_vjp_call checkpoint
random_seed random_wrap random_unwrap random_bits random_split random_fold_in threefry2x32
platform_index scatter scatter-add scatter-mul scatter-min scatter-max conv_general_dilated
reduce_window_sum reduce_window_max reduce_window_min reduce_window select_and_scatter_add
select_and_gather_add top_k cumsum cumprod cummax cummin cumlogsumexp reduce_precision erfc
erf_inv sort iota split concatenate pad dynamic_slice dynamic_update_slice gather clamp rem
sign nextafter integer_pow square rsqrt logistic lgamma digamma optimization_barrier
convert_element_type bitcast_convert_type dot_general while cond scan""".split()


def test_every_jax_primitive_is_classified(capsys):
    table = registry.coverage()
    assert len(table) > 150, "JAX's registry was not found"
    for name, (status, reason) in table.items():
        assert status in ("translated", "kiln lacks", "translator lacks"), name
        assert status == "translated" or reason, name
    present = {n for n in MUST_TRANSLATE if n in table}
    missing = {n: table[n] for n in present if table[n][0] != "translated"}
    assert not missing, missing
    # jit's primitive is 'jit' in recent JAX, 'pjit' before
    assert table.get("jit", table.get("pjit"))[0] == "translated"
    with capsys.disabled():
        counts = {}
        for status, _ in table.values():
            counts[status] = counts.get(status, 0) + 1
        print(f"\njaxpr primitives: {counts}")


def test_kiln_lacks_names_the_primitive():
    x = np.ones((4, 4), np.float32)
    with pytest.raises(KilnLacks, match=r"kiln lacks FFTs: primitive 'fft'"):
        kiln.jit(lambda x: jnp.fft.rfft(x).real)(x)
    with pytest.raises(KilnLacks, match=r"'cholesky'"):
        kiln.jit(jnp.linalg.cholesky)(x)
    with pytest.raises(KilnLacks, match="kiln lacks dtype complex64.*equation: convert_element_type"):
        kiln.jit(lambda x: x.astype(jnp.complex64))(x)


def test_translator_lacks_is_distinct():
    def cb(x):
        return jax.pure_callback(lambda v: v, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    with pytest.raises(TranslatorLacks, match=r"the translator lacks primitive 'pure_callback'"):
        kiln.jit(cb)(np.ones(3, np.float32))


def test_scatter_sub():
    from translate_cases import run_group
    x = np.arange(6, dtype=np.float32)
    i = np.array([1, 1, 4], np.int32)
    u = np.array([0.5, 2.0, -1.0], np.float32)
    dn = lax.ScatterDimensionNumbers((), (0,), (0,))
    run_group({"sub": (lambda x, i, u: lax.scatter_sub(x, i[:, None], u, dn), [x, i, u])})


def test_platform_index_picks_kilns_backend():
    # jnp.diag lowers through platform_dependent; its cpu branch must be kept
    text = kiln.jit(jnp.diag).lower_text(np.ones(3, np.float32))
    assert "platform_index" not in text and "cond" not in text, text


def test_constants_hoisted_into_control_flow():
    """kiln's sub-programs are closed: array constants (and keys, and NaNs
    with a sign) a loop or branch body captures become its operands."""
    from translate_cases import assert_bits_equal, run_group
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    neg_nan = np.float32(-np.nan)

    @jax.jit
    def inner(y):
        return y * table[:, 0] + 1

    def branches(p, x):
        return lax.cond(p, inner, lambda v: v * table[:, 1] + jnp.where(v > 100, neg_nan, 0.0), x)

    def keyed(x):
        key = jax.random.key(1)
        return lax.fori_loop(0, 2, lambda i, v: v + jax.random.uniform(jax.random.fold_in(key, i),
                                                                       v.shape), x)

    x = np.ones(4, np.float32)
    run_group({"fori": (lambda x: lax.fori_loop(0, 3, lambda i, v: inner(v), x), [x]),
               "cond": (branches, [True, x]), "cond_nan": (branches, [False, x * 200]),
               "while": (lambda x: lax.while_loop(lambda v: jnp.sum(v * table[:, 2]) < 1000,
                                                  inner, x), [x]),
               "key": (keyed, [x])}, compare=assert_bits_equal)


def test_vmap_of_a_while_whose_predicate_is_batched():
    """jax.vmap of a while_loop whose condition depends on the mapped value:
    its cond returns one bool per lane, which the translator lowers as JAX's
    batching rule runs it (loop while any lane holds; lanes that are done
    keep their carry). Found by the fuzzer (regressions/320.json)."""
    def f(x):
        def c(st):
            i, y = st
            return (i < 6) & (jnp.max(y) < 1.9)

        def b(st):
            i, y = st
            return i + 1, y * 1.3 + 0.1
        return lax.while_loop(c, b, (0, x))

    g = jax.vmap(f)
    x = np.array([[0.1, 0.2], [1.0, 1.5], [-0.5, 0.3]], np.float32)
    got, want = kiln.jit(g)(x), jax.jit(g)(x)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_array_equal(np.asarray(got[0]), [6, 1, 5])
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-6)
