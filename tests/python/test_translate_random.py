"""jax.random under kiln.jit: keys (legacy u32 and typed), split, fold_in,
bits and the distributions built on them must be bit-for-bit JAX's (kiln's
threefry2x32 is JAX's), including dropout in a Flax module."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp, lax = jax.numpy, jax.lax
from jaxcmp import assert_matches_jax  # noqa: E402
from translate_cases import assert_bits_equal, run_group  # noqa: E402


def test_random_family_bit_exact():
    def legacy(seed):
        key = jax.random.PRNGKey(seed)
        k1, k2, k3 = jax.random.split(key, 3)
        return (key, k1, jax.random.fold_in(k2, 7), jax.random.bits(k3, (5,)),
                jax.random.uniform(k1, (3, 2)), jax.random.normal(k2, (4,)),
                jax.random.randint(k3, (6,), 0, 10), jax.random.bernoulli(k1, 0.3, (8,)),
                jax.random.bits(k2, (3,), jnp.uint8), jax.random.bits(k2, (2,), jnp.uint16),
                jax.random.normal(k3, (2,), jnp.bfloat16))

    def typed(seed):
        key = jax.random.key(seed)
        keys = jax.random.split(key, 4)
        return (jax.random.key_data(keys), jax.random.key_data(keys[1]),
                jax.vmap(lambda k: jax.random.uniform(k, (2,)))(keys),
                jax.random.key_data(jax.random.fold_in(keys[2], seed)),
                jax.random.permutation(keys[3], 6), jax.random.choice(keys[0], 10, (3,), replace=False),
                jax.random.categorical(keys[1], jnp.log(jnp.arange(1.0, 5.0)), shape=(5,)))

    def key_shapes(seed, i, pred):
        """Shape primitives on typed keys (kiln carries their u32 data)."""
        keys = jax.random.split(jax.random.key(seed), 4)
        picked = keys[i]  # a dynamic index
        both = jnp.concatenate([keys, keys[::-1]])
        grid = jnp.stack([keys, keys]).reshape(8).T
        chosen = jnp.where(pred, keys, keys[::-1])
        lone = lax.dynamic_slice(keys, (i,), (2,))
        wide = jnp.broadcast_to(keys[0], (3,))
        return tuple(jax.random.key_data(k) for k in (picked, both, grid, chosen, lone, wide)) + (
            jax.random.uniform(keys[i], (2,)),)

    run_group({"legacy": (legacy, [np.uint32(42)]), "typed": (typed, [np.int32(3)]),
               "key_shapes": (key_shapes, [np.int32(5), np.int32(2),
                                           np.array([True, False, False, True])])},
              compare=assert_bits_equal)


def test_dropout_and_distributions():
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)

    def dropout(key, x):
        keep = jax.random.bernoulli(key, 0.9, x.shape)
        return jnp.where(keep, x / 0.9, 0.0)

    run_group({
        "dropout": (dropout, [jax.random.PRNGKey(1), x]),
        "dists": (lambda k: (jax.random.truncated_normal(k, -1.0, 1.0, (4,)),
                             jax.random.exponential(k, (3,)), jax.random.laplace(k, (3,)),
                             jax.random.gumbel(k, (3,)), jax.random.logistic(k, (2,))),
                  [jax.random.PRNGKey(5)]),
    })


def test_flax_dropout_module():
    nn = pytest.importorskip("flax.linen")

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            x = nn.Dense(16)(x)
            x = nn.Dropout(0.5, deterministic=not train)(x)
            return nn.Dense(2)(x)

    x = np.ones((3, 4), np.float32)
    shapes = jax.eval_shape(lambda k: Net().init(k, x, False), jax.random.PRNGKey(0))
    params = jax.tree_util.tree_map(
        lambda s: np.random.default_rng(1).standard_normal(s.shape).astype(s.dtype), shapes)

    def apply(p, x, key):
        return Net().apply(p, x, True, rngs={"dropout": key})

    import kiln
    args = (params, x, jax.random.PRNGKey(9))
    assert_matches_jax(kiln.jit(apply)(*args), jax.jit(apply)(*args))
