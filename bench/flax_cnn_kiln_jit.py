#!/usr/bin/env python3
"""The main job's Flax CNN train step (value_and_grad + optax.adam) under
kiln.jit and under jax.jit, alternately, on CPU: step times and per-step
losses.

    PYTHONPATH=... python3 bench/flax_cnn_kiln_jit.py [--steps 30] [--rounds 3]
        [--parity-steps 50] [--synthetic] [--json bench/results/flax_cnn_kiln_jit-cpu.json]

The model, data, initial parameters and step are python/examples/flax_cnn.py's.
Both steps are compiled first (a few steps each, not timed). Each round then
runs --steps steps from the same initial state on the same batches with one
side and then the other, the order flipped every other round so that neither
always runs on a warmer machine; a side's round figure is its median step time
(loss read back every step, as a training loop logging it does). The printed
and written figures are the medians over the rounds and their ratio.

Parity: --parity-steps steps from the same state and batches through both;
per-step relative loss differences. As a measure of how far two correct f32
implementations drift apart on this run, jax.jit is also run against itself
with every initial parameter moved by one ulp (np.nextafter towards zero):
adam's first updates are about lr * sign(grad), so rounding-level differences
in tiny gradients change updates by O(lr) and grow over the steps.
"""
import argparse
import datetime
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_example():
    spec = importlib.util.spec_from_file_location(
        "flax_cnn_example", os.path.join(ROOT, "python", "examples", "flax_cnn.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rel_diff(a, b):
    a, b = np.array(a), np.array(b)
    return np.abs(a - b) / np.abs(b)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30, help="timed steps per side per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--parity-steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--synthetic", action="store_true")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--note", default="", help="free text stored in the JSON")
    a = p.parse_args()

    ex = load_example()
    import jax
    import optax
    import kiln

    x, y = (ex.synthetic(4096, 28, 10, a.seed) if a.synthetic else ex.fashion_mnist(a.data))
    model, tx = ex.CNN(), optax.adam(1e-3)
    params, opt_state = ex.init_state(model, tx, 28, a.seed)
    data = ex.batches(x, y, a.batch_size, max(a.steps, a.parity_steps), a.seed)
    step = ex.make_step(model, tx)
    sides = {"kiln.jit": kiln.jit(step), "jax.jit": jax.jit(step)}

    # Parity (also the compile and warm-up of both sides).
    losses = {n: ex.run(f, params, opt_state, data[:a.parity_steps])[0] for n, f in sides.items()}
    nudged = jax.tree_util.tree_map(lambda w: np.nextafter(w, np.zeros_like(w)), params)
    jax_nudged = ex.run(sides["jax.jit"], nudged, opt_state, data[:a.parity_steps])[0]
    rel = rel_diff(losses["kiln.jit"], losses["jax.jit"])
    floor = rel_diff(jax_nudged, losses["jax.jit"])

    rounds = []
    for r in range(a.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        rec = {"first": order[0], "load_avg": os.getloadavg()[0]}
        for name in order:
            times = ex.run(sides[name], params, opt_state, data[:a.steps])[1]
            rec[name] = statistics.median(times)
        rec["ratio"] = rec["kiln.jit"] / rec["jax.jit"]
        rounds.append(rec)
        print(f"round {r + 1}: kiln.jit {1e3 * rec['kiln.jit']:.1f} ms/step, jax.jit "
              f"{1e3 * rec['jax.jit']:.1f} ms/step (load {rec['load_avg']:.1f})",
              file=sys.stderr, flush=True)
    ratios = [r["ratio"] for r in rounds]
    k = statistics.median(r["kiln.jit"] for r in rounds)
    j = statistics.median(r["jax.jit"] for r in rounds)

    dev = jax.devices()[0]
    print(f"Flax CNN train step, batch {a.batch_size}, 28x28x1, adam; jax {jax.__version__} "
          f"({dev.platform}), {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"{'':10}{'ms/step':>10}{'examples/s':>12}")
    for name, t in (("kiln.jit", k), ("jax.jit", j)):
        print(f"{name:10}{1e3 * t:10.1f}{a.batch_size / t:12.0f}")
    print(f"kiln.jit / jax.jit: {k / j:.2f}x (median of {a.rounds} alternating rounds of "
          f"{a.steps} steps; per round {', '.join(f'{q:.2f}' for q in ratios)})")
    print(f"losses over {a.parity_steps} steps: kiln.jit vs jax.jit max rel diff "
          f"{rel.max():.2e} (first step above 1e-5: "
          f"{next((i for i, v in enumerate(rel) if v > 1e-5), None)}); jax.jit vs jax.jit "
          f"with params 1 ulp off: {floor.max():.2e}")
    if a.json:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                             text=True).stdout.strip() or "unknown"
        with open(a.json, "w") as f:
            json.dump({"benchmark": "flax_cnn_kiln_jit", "jax_version": jax.__version__,
                       "device": dev.device_kind, "platform": dev.platform,
                       "cores": os.cpu_count(), "hostname": socket.gethostname(),
                       "git_revision": rev,
                       "date": datetime.datetime.now(datetime.timezone.utc).strftime(
                           "%Y-%m-%dT%H:%M:%SZ"),
                       "data": "synthetic" if a.synthetic else a.data,
                       "batch_size": a.batch_size, "steps": a.steps, "rounds": a.rounds,
                       "kiln_step_s": k, "jax_step_s": j, "kiln_over_jax": k / j,
                       "round_ratio_min": min(ratios), "round_ratio_median": statistics.median(ratios),
                       "round_figures": rounds, "parity_steps": a.parity_steps,
                       "kiln_loss": losses["kiln.jit"], "jax_loss": losses["jax.jit"],
                       "rel_diff": rel.tolist(), "max_rel_diff": float(rel.max()),
                       "jax_1ulp_rel_diff": floor.tolist(),
                       "jax_1ulp_max_rel_diff": float(floor.max()), "note": a.note},
                      f, indent=1)


if __name__ == "__main__":
    main()
