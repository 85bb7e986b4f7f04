"""kiln.jit of programs using each primitive family the translator maps,
from jnp, lax and jax.nn as users write them, compared with jax.jit by
value. Cases are grouped (one kiln compile per test) to keep the suite fast."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("ml_dtypes")
jnp, lax = jax.numpy, jax.lax
from translate_cases import loose, run_group  # noqa: E402

rng = np.random.default_rng(11)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_elementwise_family():
    x, y = f32(3, 4), f32(3, 4)
    pos = np.abs(f32(6)) + 0.5
    ints = rng.integers(-40, 40, 8).astype(np.int32)
    run_group({
        "unary": (lambda x: (lax.erfc(x), lax.erf_inv(jnp.tanh(x) * 0.9), lax.rsqrt(jnp.abs(x) + 1),
                             jax.nn.sigmoid(x), lax.logistic(x), jnp.sign(x), jnp.square(x),
                             x ** 5, x ** -2, lax.integer_pow(x, 0), jnp.cbrt(x), jnp.expm1(x),
                             jnp.log1p(jnp.abs(x)), jnp.exp2(x), lax.is_finite(x / x)), [x]),
        "special": (lambda p: (lax.lgamma(p), lax.digamma(p)), [pos]),
        "binary": (lambda x, y: (jnp.remainder(x, y), lax.rem(x, y), jnp.nextafter(x, y),
                                 jnp.arctan2(x, y), lax.clamp(-0.5, x, 0.5),
                                 lax.clamp(y - 1, x, y + 1), jnp.power(jnp.abs(x), y)), [x, y]),
        "ints": (lambda a: (jnp.sign(a), a % 7, lax.rem(a, 7), lax.population_count(a),
                            jnp.clip(a, -5, 5), a ** 3, lax.clz(a), lax.clz(a.astype(jnp.uint8)),
                            lax.clz(a.astype(jnp.int16)), lax.mulhi(a * 99991, a - 77777),
                            lax.mulhi(a.astype(jnp.uint32) * 4000000, a.astype(jnp.uint32))),
                 [ints]),
        "precision": (lambda x: (lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10),
                                 lax.reduce_precision(x * 1e5, exponent_bits=8, mantissa_bits=7)),
                      [x]),
        "bf16": (lambda x: (x * 0.1, x + 2.5, jax.nn.gelu(x), jax.nn.gelu(x, approximate=False),
                            jax.nn.softmax(x), x / 3.0),
                 [f32(2, 8).astype(jnp.bfloat16)]),
        "f16": (lambda x: (x * 0.1, x + 2.5, jax.nn.softmax(x)), [f32(2, 8).astype(jnp.float16)]),
    })


def test_shape_family():
    x = f32(3, 4)
    v = f32(5)
    run_group({
        "stack_tile": (lambda a, b: (jnp.stack([a, b]), jnp.stack([a, b], axis=-1), jnp.tile(a, (2, 3)),
                                     jnp.repeat(a, 2, axis=1), jnp.vstack([a, b]),
                                     jnp.hstack([a, b])), [x, x * 2]),
        "diag": (lambda v, a: (jnp.diag(v), jnp.diag(a), jnp.diagonal(a), jnp.eye(3) * a[:, :3],
                               jnp.tril(a), jnp.triu(a, 1)), [v, x]),
        "split_concat_pad": (lambda a: (jnp.split(a, 2, axis=1), jnp.array_split(a, 3, axis=0),
                                        jnp.concatenate([a, a[:1]], 0),
                                        lax.pad(a, 0.5, ((1, 2, 1), (0, -1, 0)))), [x]),
        "iota_sort": (lambda v: (jnp.arange(5) * v, jnp.sort(v), jnp.argsort(v), jnp.argsort(-v),
                                 lax.sort((v, jnp.arange(5.0)), num_keys=1),
                                 lax.broadcasted_iota(jnp.int32, (2, 3), 1)), [v]),
        "dynamic": (lambda a, i: (lax.dynamic_slice(a, (i, 1), (2, 2)),
                                  lax.dynamic_update_slice(a, jnp.ones((2, 2)), (i, i)),
                                  lax.dynamic_index_in_dim(a, i, 1), jnp.roll(a, 1, axis=1)),
                    [x, np.int32(1)]),
        "gather": (lambda a, idx: (a[idx], a[:, idx % 4], jnp.take_along_axis(a, (idx[:3, None] % 4), 1),
                                   a[idx, idx % 4], jnp.take(a, idx, axis=0, mode="fill",
                                                              fill_value=-1.0)),
                   [x, np.array([2, 0, 1, 7, -1], np.int32)]),
    })


def test_scatter_family():
    x = f32(5, 3)
    i = np.array([4, 0, 2, 2], np.int32)
    u = f32(4, 3)
    run_group({
        "at": (lambda x, i, u: (x.at[i].set(u), x.at[i].add(u), x.at[i].mul(u), x.at[i].min(u),
                                x.at[i].max(u), x.at[1:3, 0].set(9.0), x.at[i, 1].add(1.0),
                                x.at[jnp.array([9, 1])].set(0.0, mode="drop")), [x, i, u]),
        "ints": (lambda a, i: (a.at[i].add(1), a.at[i].max(3), jnp.zeros(6, jnp.int32).at[i].add(1)),
                 [np.arange(6, dtype=np.int32), i]),
        "bincount": (lambda i: jnp.bincount(i, length=6), [i]),
    })


def test_window_conv_topk_cumulative():
    img = f32(2, 6, 6, 3)
    k = f32(3, 3, 3, 4)
    v = f32(4, 6)

    def pools(x):
        return (lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
                lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME"),
                lax.reduce_window(x, jnp.inf, lax.min, (1, 2, 2, 1), (1, 1, 1, 1),
                                  ((0, 0), (1, 0), (0, 1), (0, 0))))

    def conv(x, w):
        dn = ("NHWC", "HWIO", "NHWC")
        return (lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn),
                lax.conv_general_dilated(x, w, (2, 2), "VALID", rhs_dilation=(1, 2),
                                         dimension_numbers=dn),
                lax.conv_general_dilated(x, w[:, :, :1, :3], (1, 1), "SAME", dimension_numbers=dn,
                                         feature_group_count=3))

    run_group({
        "pools": (pools, [img]),
        "pool_grads": (jax.grad(lambda x: sum(jnp.sum(p ** 2) for p in pools(x))), [img]),
        "conv": (conv, [img, k]),
        "conv_grads": (jax.grad(lambda x, w: sum(jnp.sum(jnp.tanh(c)) for c in conv(x, w)),
                                argnums=(0, 1)), [img, k], loose(2e-5)),
        "top_k": (lambda v: lax.top_k(v, 3), [v]),
        "cumulative": (lambda v: (jnp.cumsum(v, 1), lax.cumprod(v, 0, reverse=True), lax.cummax(v, 1),
                                  lax.cummin(v, 0), lax.cumlogsumexp(v, 1),
                                  lax.cumlogsumexp(v, 0, reverse=True)), [v]),
        "reduce_ops": (lambda v: (jnp.max(v, 1), jnp.min(v), jnp.prod(v[:2], 0), jnp.any(v > 1),
                                  jnp.argmax(v, 1), jax.nn.logsumexp(v, 1)), [v]),
    })
