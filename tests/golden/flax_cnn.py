"""The main job's CNN (examples/train, --model cnn) in Flax + optax, for the
golden script train_cnn.py (small widths) and bench/train/flax_cnn.py (the
real ones): Conv(c0, 3x3) -> relu -> avg_pool 2x2 -> Conv(c1, 3x3) -> relu ->
avg_pool 2x2 -> flatten -> Dense(hidden) -> relu -> Dense(classes).

Layer i (Conv_0, Conv_1, Dense_0, Dense_1) is initialised with
lecun_normal from split(init_key, 4)[i], biases zero, where key, init_key =
split(PRNGKey(seed)); adam at a constant rate; softmax cross-entropy on
images scaled by 1/255. On n > 1 devices the step runs under
jax.shard_map (params and optimizer state P(), the batch P("data")) with
gradients, loss and accuracy averaged by lax.pmean, as kiln's --devices n.
"""


def cnn_training(side, conv, hidden, classes, seed, lr, n_devices, donate=False):
    """(key, params, opt_state, step): key is what is left after the init
    split (the data order's), step(params, opt_state, x u8[b, side*side],
    y[b]) -> (params, opt_state, loss, accuracy)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import linen as nn
    from jax.sharding import Mesh, PartitionSpec as P

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = x.reshape((x.shape[0], side, side, 1))
            for features in conv:
                x = nn.relu(nn.Conv(features, (3, 3))(x))
                x = nn.avg_pool(x, (2, 2), strides=(2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(hidden)(x))
            return nn.Dense(classes)(x)

    key, init_key = jax.random.split(jax.random.PRNGKey(seed))
    keys = jax.random.split(init_key, 4)
    init = nn.initializers.lecun_normal()
    flat = (side // 4) * (side // 4) * conv[1]
    shapes = {"Conv_0": (3, 3, 1, conv[0]), "Conv_1": (3, 3, conv[0], conv[1]),
              "Dense_0": (flat, hidden), "Dense_1": (hidden, classes)}
    params = {"params": {name: {"kernel": init(keys[i], shape, jnp.float32),
                                "bias": jnp.zeros((shape[-1],), jnp.float32)}
                         for i, (name, shape) in enumerate(shapes.items())}}
    model, tx = CNN(), optax.adam(lr)
    opt_state = tx.init(params)

    def loss_fn(params, xb, yb):
        logits = model.apply(params, xb.astype(jnp.float32) / 255.0)
        yb = yb.astype(jnp.int32)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()
        return loss, jnp.mean((jnp.argmax(logits, -1) == yb).astype(jnp.float32))

    def body(params, opt_state, xb, yb):
        (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, xb, yb)
        if n_devices > 1:
            grads, loss, acc = jax.lax.pmean((grads, loss, acc), "data")
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, acc

    assert len(jax.devices()) == n_devices, jax.devices()
    donated = (0, 1) if donate else ()
    if n_devices == 1:
        step = jax.jit(body, donate_argnums=donated)
    else:
        mesh = Mesh(np.array(jax.devices()), ("data",))
        step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P("data"), P("data")),
                                     out_specs=P()), donate_argnums=donated)
    return key, params, opt_state, step
