#!/usr/bin/env python3
"""A Flax CNN trained with optax.adam, its whole train step (forward,
jax.value_and_grad, adam update) compiled by kiln.jit and run on kiln.

The model is the main job's CNN: Conv(32, 3x3 SAME) -> relu -> avg_pool 2x2
-> Conv(64, 3x3 SAME) -> relu -> avg_pool 2x2 -> flatten -> Dense(256) ->
relu -> Dense(10); softmax cross-entropy; optax.adam(1e-3); batch 128 of
28x28x1 Fashion-MNIST images (gzip IDX files, read with NumPy below), or
synthetic data with --synthetic. With --compare the same step is also run
under jax.jit from the same initial parameters on the same batches, and the
per-step losses and step times are printed side by side.

    pip install './python[examples]'    # jax, flax and optax beside kiln
    python python/examples/flax_cnn.py --steps 50 --compare
    python python/examples/flax_cnn.py --steps 20 --synthetic   # no data files

Parameters are built without running JAX's init (which would compile XLA
programs): jax.eval_shape gives the shapes, NumPy the values (lecun_normal as
Flax draws it: a truncated normal, std sqrt(1/fan_in) after correction;
zero biases). The step's state (params and adam's moments) stays in
kiln.Arrays between steps; only the loss is read back each step.
"""
import argparse
import gzip
import os
import statistics
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp
import flax.linen as nn
import optax

import kiln


class CNN(nn.Module):
    conv: tuple = (32, 64)
    hidden: int = 256
    classes: int = 10

    @nn.compact
    def __call__(self, x):
        for features in self.conv:
            x = nn.relu(nn.Conv(features, (3, 3), padding="SAME")(x))
            x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.classes)(x)


def load_idx(path):
    """A (gzip) IDX file as a NumPy array: magic 0 0 dtype ndim, big-endian dims."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] or raw[1] or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = np.frombuffer(raw, ">u4", ndim, 4).astype(int)
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} bytes of data for shape {tuple(dims)}")
    return data.reshape(dims)


def fashion_mnist(root):
    """The training split: images (n, 28, 28, 1) float32 in [0, 1], labels int32."""
    def path(name):
        p = os.path.join(root, name)
        return p + ".gz" if os.path.exists(p + ".gz") else p
    x = load_idx(path("train-images-idx3-ubyte"))
    y = load_idx(path("train-labels-idx1-ubyte"))
    return (x[..., None].astype(np.float32) / 255.0), y.astype(np.int32)


def synthetic(n, side, classes, seed):
    """Images whose class sets the mean of one block of pixels: learnable."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n).astype(np.int32)
    x = rng.random((n, side, side, 1), dtype=np.float32) * 0.5
    rows = (y * side) // classes
    for i in range(n):
        x[i, rows[i]:rows[i] + max(side // classes, 1), :, 0] += 0.5
    return x, y


def init_state(model, tx, side, seed):
    """Initial params (lecun_normal kernels, zero biases) and adam state, in NumPy."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0),
                            jax.ShapeDtypeStruct((1, side, side, 1), jnp.float32))

    def fill(path, s):
        if path[-1].key == "bias":
            return np.zeros(s.shape, s.dtype)
        fan_in = int(np.prod(s.shape[:-1]))
        # Flax's lecun_normal: truncated normal on [-2, 2], rescaled to std 1.
        w = rng.standard_normal(s.shape)
        while np.any(bad := np.abs(w) > 2):
            w[bad] = rng.standard_normal(int(bad.sum()))
        return (w / 0.87962566103423978 * np.sqrt(1.0 / fan_in)).astype(s.dtype)

    params = jax.tree_util.tree_map_with_path(fill, shapes)
    opt_state = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype),
                                       jax.eval_shape(tx.init, params))
    return params, opt_state


def make_step(model, tx):
    def train_step(params, opt_state, x, labels):
        def loss_fn(p):
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return train_step


def batches(x, y, batch, steps, seed):
    """`steps` batches in a seeded shuffled order (reshuffled each epoch)."""
    rng = np.random.default_rng(seed)
    per_epoch = x.shape[0] // batch
    out = []
    while len(out) < steps:
        order = rng.permutation(x.shape[0])
        for b in range(min(per_epoch, steps - len(out))):
            idx = order[b * batch:(b + 1) * batch]
            out.append((np.ascontiguousarray(x[idx]), y[idx]))
    return out


def run(step, params, opt_state, data):
    """Runs `step` over `data`: per-step losses and wall times (loss read back each step)."""
    losses, times = [], []
    for xb, yb in data:
        t0 = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, xb, yb)
        losses.append(float(loss))
        times.append(time.perf_counter() - t0)
    return losses, times, params


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="folder of Fashion-MNIST's gzip IDX files")
    p.add_argument("--synthetic", action="store_true", help="synthetic 28x28 data instead")
    p.add_argument("--compare", action="store_true",
                   help="also run the step under jax.jit and compare losses and times")
    p.add_argument("--warmup", type=int, default=2,
                   help="first steps left out of the median step time (compiles)")
    a = p.parse_args(argv)

    if a.synthetic:
        x, y = synthetic(max(a.batch_size * 8, 1024), 28, 10, a.seed)
    else:
        x, y = fashion_mnist(a.data)
    model, tx = CNN(), optax.adam(a.lr)
    params, opt_state = init_state(model, tx, x.shape[1], a.seed)
    data = batches(x, y, a.batch_size, a.steps, a.seed)
    step = make_step(model, tx)

    k_loss, k_time, _ = run(kiln.jit(step), params, opt_state, data)
    rows = [("kiln.jit", k_loss, k_time)]
    if a.compare:
        j_loss, j_time, _ = run(jax.jit(step), params, opt_state, data)
        rows.append(("jax.jit", j_loss, j_time))
        rel = np.abs(np.array(k_loss) - np.array(j_loss)) / np.abs(np.array(j_loss))
        print(f"{'step':>4}  {'kiln loss':>10}  {'jax loss':>10}  {'rel diff':>8}  "
              f"{'kiln ms':>8}  {'jax ms':>8}")
        for i in range(a.steps):
            print(f"{i:4d}  {k_loss[i]:10.6f}  {j_loss[i]:10.6f}  {rel[i]:8.1e}  "
                  f"{1e3 * k_time[i]:8.2f}  {1e3 * j_time[i]:8.2f}")
        print(f"max relative loss difference over {a.steps} steps: {rel.max():.2e} "
              f"(step {int(rel.argmax())})")
    else:
        for i in range(a.steps):
            print(f"step {i:4d}  loss {k_loss[i]:.6f}  {1e3 * k_time[i]:.2f} ms")
    for name, _, times in rows:
        t = times[a.warmup:] or times
        print(f"{name}: first step (trace + compile + run) {times[0]:.2f} s, "
              f"median step {1e3 * statistics.median(t):.2f} ms over {len(t)} steps")
    if a.compare:
        km, jm = (statistics.median(r[2][a.warmup:] or r[2]) for r in rows)
        print(f"kiln.jit / jax.jit step time: {km / jm:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
