"""kiln.jit of JAX's training programs: jax.grad/value_and_grad (add_any),
custom_jvp/custom_vjp functions (their primal under a jaxpr JAX has
differentiated already), jax.checkpoint, and a Flax CNN's train step with
optax.adam, compared with jax.jit by value."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp, lax = jax.numpy, jax.lax
import kiln  # noqa: E402
from jax._src.custom_derivatives import linear_call  # noqa: E402
from jaxcmp import assert_matches_jax  # noqa: E402
from translate_cases import run_group  # noqa: E402

rng = np.random.default_rng(3)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@jax.custom_vjp
def clip_grad(x):
    return x


clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.1, 0.1),))


@jax.custom_jvp
def soft(x):
    return jnp.log1p(jnp.exp(x))


soft.defjvp(lambda p, t: (soft(p[0]), t[0] * jax.nn.sigmoid(p[0])))


def test_grads_of_losses():
    w, b, x, y = f32(4, 3), f32(3), f32(5, 4), f32(5, 3)

    def mlp_loss(w, b, x, y):
        h = jax.nn.gelu(x @ w + b)
        return jnp.mean((jax.nn.log_softmax(h) - y) ** 2) + 0.01 * jnp.sum(w * w)

    def layernorm_loss(x):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return jnp.sum(jnp.tanh((x - mu) * lax.rsqrt(var + 1e-5)))

    remat = jax.checkpoint(lambda w, x: jnp.sin(x @ w) * (x @ w))
    spd = f32(5, 5)
    spd = spd @ spd.T + 5 * np.eye(5, dtype=np.float32)

    def cg(a, b):  # lax.custom_linear_solve around a while loop
        return jax.scipy.sparse.linalg.cg(lambda v: a @ v, b, tol=1e-6)[0]

    run_group({
        "linear_solve": (lambda a, b: (cg(a, b), jax.grad(lambda a: jnp.sum(cg(a, b) ** 2))(a)),
                         [spd, f32(5)]),
        "value_and_grad": (jax.value_and_grad(mlp_loss, argnums=(0, 1)), [w, b, x, y]),
        "layernorm": (jax.grad(layernorm_loss), [x]),
        "custom_rules": (jax.grad(lambda x: jnp.sum(clip_grad(x) ** 3 + soft(x) + jax.nn.relu(x)
                                                    + jax.nn.softplus(x) + jax.nn.silu(x))), [x]),
        "custom_forward": (lambda x: (clip_grad(x), soft(x), jax.nn.relu(x),
                                      linear_call(lambda r, v: v * r, lambda r, t: t * r, x, x)),
                           [x]),
        "checkpoint": (jax.grad(lambda w, x: jnp.sum(remat(w, x)), argnums=(0, 1)), [w, x]),
        "scan_grad": (jax.grad(lambda w, xs: lax.scan(lambda c, v: (jnp.tanh(c @ w + v), None),
                                                      jnp.zeros(4), xs)[0].sum()),
                      [f32(4, 4), f32(6, 4)]),
        "hessian_vector": (lambda x, v: jax.jvp(jax.grad(lambda z: jnp.sum(jnp.sin(z) * z)),
                                                 (x,), (v,)), [x, f32(5, 4)]),
    })


def test_bf16_layers():
    x = f32(4, 16).astype(jnp.bfloat16)
    g = np.ones(16, jnp.bfloat16)

    def layernorm(x, g):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * lax.rsqrt(var + 1e-5) * g

    run_group({
        "layers": (lambda x, g: (layernorm(x, g), jax.nn.gelu(x), jax.nn.softmax(x),
                                 jax.nn.gelu(x, approximate=False)), [x, g]),
        "grad": (jax.grad(lambda x: jnp.sum(jax.nn.softmax(x.astype(jnp.float32)) * 3.0)), [x]),
    })


def test_flax_cnn_train_step_with_adam():
    nn = pytest.importorskip("flax.linen")
    optax = pytest.importorskip("optax")

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(8, (3, 3))(x))
            x = nn.max_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Conv(8, (3, 3), strides=(2, 2))(x))
            x = nn.avg_pool(x, (2, 2), padding="SAME")
            x = nn.LayerNorm()(x.reshape(x.shape[0], -1))
            return nn.Dense(10)(x)

    x = f32(4, 12, 12, 3)
    labels = np.array([1, 3, 5, 7], np.int32)
    model = CNN()
    # Shapes from eval_shape, values from NumPy: JAX's init would compile
    # XLA programs (most of this test's time on a 2-core CI machine).
    def fill(s):
        return (rng.standard_normal(s.shape) * 0.3).astype(s.dtype)
    params = jax.tree_util.tree_map(fill, jax.eval_shape(model.init, jax.random.PRNGKey(0), x))
    tx = optax.adam(1e-2)
    opt_state = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype),
                                       jax.eval_shape(tx.init, params))

    def step(params, opt_state, x, labels):
        def loss_fn(p):
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    kstep, jstep = kiln.jit(step), jax.jit(step)
    kp, ko, jp, jo = params, opt_state, params, opt_state
    for _ in range(3):  # the state carried through kiln's outputs
        kp, ko, kl = kstep(kp, ko, x, labels)
        jp, jo, jl = jstep(jp, jo, x, labels)
        assert_matches_jax((kp, kl), (jp, jl))


def test_flax_modules_and_their_grads():
    """Attention (causal mask), Embed, BatchNorm (batch stats updated),
    GroupNorm, LSTM/GRU under nn.RNN, jax.nn.dot_product_attention: forward
    and gradient, one kiln program."""
    nn = pytest.importorskip("flax.linen")

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, ids):
            h = nn.MultiHeadDotProductAttention(num_heads=2)(x, x, mask=nn.make_causal_mask(ids))
            h = h + nn.Embed(10, 8)(ids)
            h = nn.GroupNorm(num_groups=2)(nn.BatchNorm(use_running_average=False)(h))
            h = nn.RNN(nn.LSTMCell(8))(h) + nn.RNN(nn.GRUCell(8))(h)
            q = h.reshape(*h.shape[:2], 2, 4)
            return jax.nn.dot_product_attention(q, q, q, is_causal=True)

    x = f32(2, 5, 8)
    ids = rng.integers(0, 10, (2, 5)).astype(np.int32)
    shapes = jax.eval_shape(Net().init, jax.random.PRNGKey(0), x, ids)
    variables = jax.tree_util.tree_map(lambda s: (rng.standard_normal(s.shape) * 0.3).astype(s.dtype),
                                       shapes)

    def fwd(v, x, ids):
        return Net().apply(v, x, ids, mutable=["batch_stats"])

    def loss(params, v, x, ids):
        out, _ = Net().apply({**v, "params": params}, x, ids, mutable=["batch_stats"])
        return jnp.sum(out ** 2)

    run_group({"forward": (fwd, [variables, x, ids]),
               "grad": (jax.grad(loss), [variables["params"], variables, x, ids])})
