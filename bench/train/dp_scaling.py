#!/usr/bin/env python3
"""Steps/s of kiln's trainer on 1 and on N devices (data-parallel, --devices).

Runs examples/train for --steps steps per device count (same model, data,
batch and seed; a metrics line per step), takes the median time between
consecutive steps after the first --warmup (the first ones compile), and
writes bench/results/train_dp-<platform>.json with the device, date, git
revision, the machine's cores and load average while it ran.

    python3 bench/train/dp_scaling.py --kiln build/examples/train --counts 1,2
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def step_times(args, devices):
    with tempfile.TemporaryDirectory() as out:
        cmd = [args.kiln, "--data", args.data, "--out", out, "--max-steps", str(args.steps),
               "--log-every", "1", "--batch-size", str(args.batch_size), "--quiet",
               "--model", args.model,
               "--devices", str(devices)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            t = [json.loads(line)["time"] for line in f if '"loss"' in line]
    return [b - a for a, b in zip(t[args.warmup:], t[args.warmup + 1:])]


def git(*a):
    return subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=("mlp", "cnn"))
    p.add_argument("--kiln", default=os.path.join(ROOT, "build/examples/train"))
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--counts", default="1,2")
    p.add_argument("--platform", default="cpu")
    args = p.parse_args()
    rows = []
    for n in map(int, args.counts.split(",")):
        load = os.getloadavg()[0]
        dt = step_times(args, n)
        med = statistics.median(dt)
        rows.append({"name": f"mlp 784-512-256-10 batch {args.batch_size} on {n} devices",
                     "devices": n, "median_step_ms": round(1e3 * med, 3),
                     "steps_per_s": round(1 / med, 2),
                     "examples_per_s": round(args.batch_size / med, 1),
                     "steps_timed": len(dt), "load_average_1min_before": round(load, 2)})
        print(f"{n} devices: {1e3 * med:.1f} ms/step, {1 / med:.1f} steps/s")
    base = rows[0]["median_step_ms"]
    for r in rows:
        r["speedup_vs_first"] = round(base / r["median_step_ms"], 3)
    result = {
        "benchmark": "train_dp",
        "platform": args.platform,
        "devices": [{"name": f"{args.platform}:{i}", "platform": args.platform}
                    for i in range(max(r["devices"] for r in rows))],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_revision": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "hostname": socket.gethostname(),
        "cpu_cores": os.cpu_count(),
        "params": {"steps": args.steps, "warmup": args.warmup, "batch_size": args.batch_size},
        "notes": "CPU virtual devices split the machine's cores between them (one each on 2 "
                 "cores), and the machine is shared with other jobs: the load average says how "
                 "busy it was. Step time: between consecutive metrics lines (host batching, "
                 "transfer, step, reading the loss back).",
        "rows": rows,
    }
    path = os.path.join(ROOT, "bench/results", f"train_dp-{args.platform}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
