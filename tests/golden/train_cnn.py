"""Golden for tests/test_train.cc: the main job's CNN, reduced, trained in
Flax + optax on 1 CPU device (jax.jit) and on 2 (the step under
jax.shard_map, gradients, loss and accuracy averaged with lax.pmean).

The data set, keys, data order and optimizer are train_dp.py's (the
synthetic 8x8 images of test_train_support.h; key, init_key =
split(PRNGKey(seed)); per epoch key, perm_key = split(key); adam with a
constant rate, here 1e-3). The model is examples/train's CNN with small widths, as
flax.linen modules: Conv(4, 3x3) -> relu -> avg_pool 2x2 -> Conv(8, 3x3) ->
relu -> avg_pool 2x2 -> flatten -> Dense(16) -> relu -> Dense(10); layer i
(Conv_0, Conv_1, Dense_0, Dense_1) initialised with lecun_normal from
split(init_key, 4)[i], biases zero.

Writes train_cnn.txt: "cnn <devices> step <k> <loss> <accuracy>".
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multi_device  # noqa: E402
from train_dp import BATCH, CLASSES, N_TRAIN, SEED, SIDE, STEPS, synthetic  # noqa: E402

# The main job's rate: at train_dp.py's 1e-2 adam turns rounding-level
# differences (XLA's 2-device run vs its own 1-device run: 1e-7 at step 5)
# into 6e-4 by step 20.
CONV, HIDDEN, LR = (4, 8), 16, 1e-3


def records(n_devices):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import linen as nn
    from jax.sharding import Mesh, PartitionSpec as P

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = x.reshape((x.shape[0], SIDE, SIDE, 1))
            for features in CONV:
                x = nn.relu(nn.Conv(features, (3, 3))(x))
                x = nn.avg_pool(x, (2, 2), strides=(2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(HIDDEN)(x))
            return nn.Dense(CLASSES)(x)

    x, y = synthetic(N_TRAIN, 1)
    key, init_key = jax.random.split(jax.random.PRNGKey(SEED))
    keys = jax.random.split(init_key, 4)
    init = nn.initializers.lecun_normal()
    flat = (SIDE // 4) * (SIDE // 4) * CONV[1]
    shapes = {"Conv_0": (3, 3, 1, CONV[0]), "Conv_1": (3, 3, CONV[0], CONV[1]),
              "Dense_0": (flat, HIDDEN), "Dense_1": (HIDDEN, CLASSES)}
    params = {"params": {name: {"kernel": init(keys[i], shape, jnp.float32),
                                "bias": jnp.zeros((shape[-1],), jnp.float32)}
                         for i, (name, shape) in enumerate(shapes.items())}}
    model = CNN()
    tx = optax.adam(LR)
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
    if n_devices == 1:
        step = jax.jit(body)
    else:
        mesh = Mesh(np.array(jax.devices()), ("data",))
        step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P("data"), P("data")),
                                     out_specs=P()))
    key, perm_key = jax.random.split(key)
    order = np.asarray(jax.random.permutation(perm_key, N_TRAIN))
    lines = []
    for b in range(STEPS):
        idx = order[b * BATCH:(b + 1) * BATCH]
        params, opt_state, loss, acc = step(params, opt_state, jnp.asarray(x[idx]),
                                            jnp.asarray(y[idx]))
        lines.append("cnn %d step %d %.9g %.9g" % (n_devices, b + 1, float(loss), float(acc)))
    return lines


if __name__ == "__main__":
    multi_device.run(__file__, records, "train_cnn.txt", counts=(1, 2))
