#!/usr/bin/env python3
"""The main job's MLP in Flax + optax, side by side with kiln's trainer.

Same model (flax.linen Dense layers named Dense_0.., relu), same initial
parameters (layer i's kernel is lecun_normal()(split(init_key, layers)[i]),
biases zero; key, init_key = split(PRNGKey(seed))), same data order (each
epoch key, perm_key = split(key); jax.random.permutation(perm_key, n); full
batches only), same optimizer (optax.adam) and loss (mean integer-label
softmax cross-entropy of pixels / 255).

It runs kiln's trainer (examples/train) for the first --steps steps with a
metrics line per step, runs the same steps in Flax under jax.jit (params and
optimizer state donated), and reports the per-step relative loss difference
and the step time of each (host batching, transfer, step and reading the loss
back, as the C trainer does). With --epochs it also trains Flax for whole
epochs and prints the test accuracy after each.

    python3 bench/train/flax_mlp.py --kiln build/examples/train --steps 100
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import jax
import jax.numpy as jnp
import flax.linen as nn
import optax


def load_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * rank).reshape(dims)


def load_split(data, prefix):
    def path(name):
        p = os.path.join(data, name)
        return p + ".gz" if os.path.exists(p + ".gz") else p
    x = load_idx(path(f"{prefix}-images-idx3-ubyte"))
    y = load_idx(path(f"{prefix}-labels-idx1-ubyte"))
    return x.reshape(x.shape[0], -1), y


class MLP(nn.Module):
    hidden: tuple
    classes: int

    @nn.compact
    def __call__(self, x):
        for h in self.hidden:
            x = nn.relu(nn.Dense(h)(x))
        return nn.Dense(self.classes)(x)


def init_params(init_key, widths):
    keys = jax.random.split(init_key, len(widths) - 1)
    layers = {}
    for i in range(len(widths) - 1):
        kernel = nn.initializers.lecun_normal()(keys[i], (widths[i], widths[i + 1]), jnp.float32)
        layers[f"Dense_{i}"] = {"kernel": kernel, "bias": jnp.zeros((widths[i + 1],), jnp.float32)}
    return {"params": layers}


def make_fns(model, tx):
    def loss_fn(params, x, y):
        logits = model.apply(params, x.astype(jnp.float32) / 255.0)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y.astype(jnp.int32)).mean()
        return loss, jnp.mean(jnp.argmax(logits, -1) == y)

    def step(params, opt_state, x, y):
        (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, acc

    step = jax.jit(step, donate_argnums=(0, 1))

    @jax.jit
    def evaluate(params, x, y):
        logits = model.apply(params, x.astype(jnp.float32) / 255.0)
        return jnp.sum(jnp.argmax(logits, -1) == y)

    return step, evaluate


def run_epochs(args):
    return args.epochs or 10


def flax_run(args, train, test, steps, epochs):
    """Per-step losses of the first `steps` steps, their mean step time, and
    the test accuracy after each of `epochs` epochs."""
    (x, y), n = train, train[0].shape[0]
    classes = int(y.max()) + 1
    widths = [x.shape[1], *args.hidden, classes]
    model = MLP(tuple(args.hidden), classes)
    # kiln's trainer decays over all of its --epochs (passed as run_epochs)
    lr = (optax.cosine_decay_schedule(args.lr, run_epochs(args) * (n // args.batch_size))
          if args.cosine else args.lr)
    tx = optax.adam(lr)
    step, evaluate = make_fns(model, tx)
    key, init_key = jax.random.split(jax.random.PRNGKey(args.seed))
    params = init_params(init_key, widths)
    opt_state = tx.init(params)
    spe = n // args.batch_size
    total = max(steps, epochs * spe)
    losses, times, accs = [], [], []
    done = 0
    while done < total:
        key, perm_key = jax.random.split(key)
        order = np.asarray(jax.random.permutation(perm_key, n))
        for b in range(spe):
            if done == total:
                break
            t0 = time.perf_counter()
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            params, opt_state, loss, _ = step(params, opt_state, jnp.asarray(x[idx]),
                                              jnp.asarray(y[idx]))
            loss = float(loss)
            times.append(time.perf_counter() - t0)
            done += 1
            if done <= steps:
                losses.append(loss)
        if epochs and done % spe == 0:
            correct = sum(int(evaluate(params, jnp.asarray(test[0][i:i + 1000]),
                                       jnp.asarray(test[1][i:i + 1000])))
                          for i in range(0, test[0].shape[0], 1000))
            accs.append(correct / test[0].shape[0])
            print(f"flax epoch {done // spe}: test accuracy {100 * accs[-1]:.2f}% "
                  f"({sum(times):.1f} s of steps)", flush=True)
    warm = times[5:] or times  # the first steps compile
    return losses, float(np.median(warm)), accs


def kiln_run(args, steps):
    """kiln's per-step losses and its median step time after the first five
    (as for Flax: the first compiles), both from metrics.jsonl written with
    --log-every 1 (each line's "time" is taken as the step ends)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [args.kiln, "--data", args.data, "--out", out, "--max-steps", str(steps),
               "--log-every", "1", "--batch-size", str(args.batch_size), "--lr", str(args.lr),
               "--seed", str(args.seed), "--epochs", str(run_epochs(args)), "--model", "mlp",
               "--hidden", ",".join(map(str, args.hidden)), "--devices", "1", "--quiet"]
        if args.cosine:
            cmd.append("--cosine")
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"kiln trainer failed: {done.stderr}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    losses = [r["loss"] for r in recs if "loss" in r]
    times = np.diff([r["time"] for r in recs if "loss" in r])
    summary = done.stdout.strip().splitlines()[-1]
    return losses, float(np.median(times[4:] if len(times) > 8 else times)), summary


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--kiln", default="build/examples/train", help="kiln's trainer binary")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--epochs", type=int, default=0, help="also train Flax this many epochs")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cosine", action="store_true",
                   help="cosine decay of the learning rate over the epochs (10 if --epochs is 0)")
    p.add_argument("--hidden", type=lambda s: [int(v) for v in s.split(",")], default=[512, 256])
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()

    train, test = load_split(args.data, "train"), load_split(args.data, "t10k")
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, flax MLP "
          f"{train[0].shape[1]}-{'-'.join(map(str, args.hidden))}-{int(train[1].max()) + 1}, "
          f"batch {args.batch_size}, adam {args.lr}", flush=True)
    k_losses, k_step, k_summary = kiln_run(args, args.steps)
    f_losses, f_step, accs = flax_run(args, train, test, args.steps, args.epochs)
    rel = np.abs(np.array(k_losses) - np.array(f_losses)) / np.abs(np.array(f_losses))
    print(f"kiln: {k_summary}")
    for s in (0, 1, 9, 49, args.steps - 1):
        if s < len(rel):
            print(f"  step {s + 1:4d}: kiln {k_losses[s]:.7f}  flax {f_losses[s]:.7f}  "
                  f"rel diff {rel[s]:.2e}")
    print(f"loss, first {args.steps} steps: max rel diff {rel.max():.2e}, mean {rel.mean():.2e}")
    print(f"step time: kiln {1e3 * k_step:.2f} ms ({args.batch_size / k_step:.0f} ex/s), "
          f"flax {1e3 * f_step:.2f} ms ({args.batch_size / f_step:.0f} ex/s), "
          f"kiln/flax {k_step / f_step:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                 text=True).stdout.strip() or "unknown"
            json.dump({"benchmark": "train_flax_mlp", "device": jax.devices()[0].device_kind,
                       "platform": jax.devices()[0].platform, "jax": jax.__version__,
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "git_revision": rev, "data": args.data, "steps": args.steps, "max_rel_diff": float(rel.max()),
                       "mean_rel_diff": float(rel.mean()), "kiln_step_s": k_step,
                       "flax_step_s": f_step, "flax_test_accuracy": accs,
                       "kiln_loss": k_losses, "flax_loss": f_losses}, f, indent=1)


if __name__ == "__main__":
    main()
