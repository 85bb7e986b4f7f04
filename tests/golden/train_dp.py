"""Golden for tests/train/test_train_dp.cc: the main job's MLP trained data-parallel
in JAX itself, the step under jax.shard_map over 2 CPU devices.

The data set is the synthetic one test_train_support.h writes (the same
LCG, 8x8 images, class c a bright 2x2 block at its own place over noise);
the model, keys, data order and optimizer follow examples/train (as
bench/train/flax_mlp.py does): key, init_key = split(PRNGKey(seed)); layer
i's kernel lecun_normal()(split(init_key, layers)[i]), zero biases; per epoch
key, perm_key = split(key), order = permutation(perm_key, n), full batches;
adam with a constant learning rate. Inside the shard_map each device takes
its half of the batch, and its gradients, loss and accuracy are averaged
with lax.pmean over "data" before the update, params and optimizer state
being replicated (P()).

Writes train_dp.txt: "step <k> <loss> <accuracy>" for every step.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multi_device  # noqa: E402

SIDE, CLASSES, N_TRAIN, BATCH, HIDDEN, LR, SEED, STEPS = 8, 10, 640, 32, 32, 1e-2, 7, 20


def synthetic(n, seed):
    import numpy as np
    state = [seed]

    def nxt():
        state[0] = (state[0] * 1664525 + 1013904223) & 0xFFFFFFFF
        return state[0] >> 24

    images = np.zeros((n, SIDE * SIDE), np.uint8)
    labels = np.zeros(n, np.uint8)
    for i in range(n):
        c = nxt() % CLASSES
        labels[i] = c
        for p in range(SIDE * SIDE):
            images[i, p] = nxt() % 64
        r0, c0 = (c // 4) * 3, (c % 4) * 2
        for r in range(r0, r0 + 2):
            for q in range(c0, c0 + 2):
                images[i, r * SIDE + q] = 192 + nxt() % 64
    return images, labels


def records(n_devices):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import linen as nn
    from jax.sharding import Mesh, PartitionSpec as P

    x, y = synthetic(N_TRAIN, 1)
    widths = [SIDE * SIDE, HIDDEN, CLASSES]
    key, init_key = jax.random.split(jax.random.PRNGKey(SEED))
    keys = jax.random.split(init_key, len(widths) - 1)
    params = {"params": {
        f"Dense_{i}": {"kernel": nn.initializers.lecun_normal()(keys[i], (widths[i], widths[i + 1]),
                                                                 jnp.float32),
                       "bias": jnp.zeros((widths[i + 1],), jnp.float32)}
        for i in range(len(widths) - 1)}}
    tx = optax.adam(LR)
    opt_state = tx.init(params)

    def loss_fn(params, xb, yb):
        h = xb.astype(jnp.float32) / 255.0
        layers = params["params"]
        for i in range(len(widths) - 1):
            h = h @ layers[f"Dense_{i}"]["kernel"] + layers[f"Dense_{i}"]["bias"]
            if i + 2 < len(widths):
                h = jax.nn.relu(h)
        yb = yb.astype(jnp.int32)
        loss = optax.softmax_cross_entropy_with_integer_labels(h, yb).mean()
        return loss, jnp.mean((jnp.argmax(h, -1) == yb).astype(jnp.float32))

    def body(params, opt_state, xb, yb):
        (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, xb, yb)
        grads, loss, acc = jax.lax.pmean((grads, loss, acc), "data")
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, acc

    assert len(jax.devices()) == n_devices, jax.devices()
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
        lines.append("step %d %.9g %.9g" % (b + 1, float(loss), float(acc)))
    return lines


if __name__ == "__main__":
    multi_device.run(__file__, records, "train_dp.txt", counts=(2,))
