#!/usr/bin/env python3
"""The main job's CNN in Flax + optax, side by side with kiln's trainer, on
1 and on 2 CPU devices.

Same model (flax.linen: Conv(32, 3x3) -> relu -> avg_pool 2x2 -> Conv(64,
3x3) -> relu -> avg_pool 2x2 -> flatten -> Dense(256) -> relu -> Dense(10)),
same initial parameters (layer i of Conv_0, Conv_1, Dense_0, Dense_1 gets
lecun_normal()(split(init_key, 4)[i]), zero biases; key, init_key =
split(PRNGKey(seed))), same data order, optimizer (optax.adam, constant
rate) and loss as bench/train/flax_mlp.py. On 2 devices the Flax step is a
jax.shard_map whose gradients, loss and accuracy are averaged with
lax.pmean, as kiln's --devices 2.

For each device count (a child process each: XLA reads its device count
once) it alternates --rounds times: kiln's trainer for --steps steps (its
median step time from metrics.jsonl, the first --warmup dropped), then the
same steps in Flax under jax.jit; the first round's per-step losses are
compared. Writes the figures to --json.

    python3 bench/train/flax_cnn.py --kiln build/examples/train --json \\
        bench/results/train_cnn-cpu.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def flax_steps(args, train, steps):
    """Per-step losses and times of the first `steps` steps in Flax."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
    from flax_cnn import cnn_training

    (x, y), n = train, train[0].shape[0]
    key, params, opt_state, step = cnn_training(28, (32, 64), 256, int(y.max()) + 1, args.seed,
                                                args.lr, len(jax.devices()), donate=True)
    spe, bs = n // args.batch_size, args.batch_size
    losses, times = [], []
    while len(losses) < steps:
        key, perm_key = jax.random.split(key)
        order = np.asarray(jax.random.permutation(perm_key, n))
        for b in range(min(spe, steps - len(losses))):
            t0 = time.perf_counter()
            idx = order[b * bs:(b + 1) * bs]
            params, opt_state, loss, _ = step(params, opt_state, jnp.asarray(x[idx]),
                                              jnp.asarray(y[idx]))
            losses.append(float(loss))
            times.append(time.perf_counter() - t0)
    return losses, times


def kiln_steps(args, devices, steps):
    """kiln's per-step losses and step times (from metrics.jsonl)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [args.kiln, "--model", "cnn", "--data", args.data, "--out", out, "--max-steps",
               str(steps), "--log-every", "1", "--batch-size", str(args.batch_size), "--lr",
               str(args.lr), "--seed", str(args.seed), "--devices", str(devices), "--quiet"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"kiln trainer failed: {done.stderr}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f if '"loss"' in line]
    t = [r["time"] for r in recs]
    return [r["loss"] for r in recs], [b - a for a, b in zip(t, t[1:])]


def child(args):
    """One device count: alternating rounds; prints one JSON object."""
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.child}"
    import numpy as np
    import jax
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from flax_mlp import load_split
    train = load_split(args.data, "train")
    rounds = []
    for r in range(args.rounds):
        k_loss, k_times = kiln_steps(args, args.child, args.steps)
        f_loss, f_times = flax_steps(args, train, args.steps)
        if r == 0:
            rel = np.abs(np.array(k_loss) - np.array(f_loss)) / np.abs(np.array(f_loss))
            first = {"kiln_loss": k_loss, "flax_loss": f_loss, "max_rel_diff": float(rel.max()),
                     "mean_rel_diff": float(rel.mean())}
        rounds.append({"kiln_step_s": float(np.median(k_times[args.warmup:])),
                       "flax_step_s": float(np.median(f_times[args.warmup:])),
                       "load_avg": os.getloadavg()[0]})
        print(f"{args.child} devices, round {r + 1}: kiln {1e3 * rounds[-1]['kiln_step_s']:.1f} "
              f"ms/step, flax {1e3 * rounds[-1]['flax_step_s']:.1f} ms/step", file=sys.stderr,
              flush=True)
    k = float(np.median([r["kiln_step_s"] for r in rounds]))
    f = float(np.median([r["flax_step_s"] for r in rounds]))
    print(json.dumps({"devices": args.child, "jax": jax.__version__, "kiln_step_s": k,
                      "flax_step_s": f, "kiln_over_flax": k / f,
                      "kiln_examples_per_s": args.batch_size / k,
                      "flax_examples_per_s": args.batch_size / f, "rounds": rounds, **first}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--kiln", default="build/examples/train", help="kiln's trainer binary")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5, help="first step times dropped (compiles)")
    p.add_argument("--rounds", type=int, default=2, help="kiln/flax alternations per count")
    p.add_argument("--counts", default="1,2", help="device counts")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    results = []
    for n in map(int, args.counts.split(",")):
        out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", str(n)],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        results.append(r)
        print(f"{n} devices: kiln {1e3 * r['kiln_step_s']:.1f} ms/step, flax "
              f"{1e3 * r['flax_step_s']:.1f} ms/step ({r['kiln_over_flax']:.2f}x); loss over "
              f"{args.steps} steps: max rel diff {r['max_rel_diff']:.2e}", flush=True)
    extra = {}
    if len(results) == 2:  # how far Flax's own 2-device losses are from its 1-device ones
        import numpy as np
        a, b = (np.array(r["flax_loss"]) for r in results)
        extra["flax_devices_max_rel_diff"] = float((np.abs(b - a) / np.abs(a)).max())
        print(f"flax, {results[1]['devices']} devices vs {results[0]['devices']}: max rel diff "
              f"{extra['flax_devices_max_rel_diff']:.2e}")
    if args.json:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True).stdout.strip() or "unknown"
        with open(args.json, "w") as f:
            json.dump({"benchmark": "train_cnn", "platform": "cpu", "cores": os.cpu_count(),
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "git_revision": rev, "data": args.data, "steps": args.steps,
                       "batch_size": args.batch_size, "lr": args.lr,
                       "note": "shared 2-core machine (other builds and tests running): "
                               "see each round's load_avg",
                       **extra, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
