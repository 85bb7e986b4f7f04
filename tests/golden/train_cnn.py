"""Golden for tests/train/test_train.cc: the main job's CNN, reduced, trained in
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
    from flax_cnn import cnn_training

    x, y = synthetic(N_TRAIN, 1)
    key, params, opt_state, step = cnn_training(SIDE, CONV, HIDDEN, CLASSES, SEED, LR, n_devices)
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
