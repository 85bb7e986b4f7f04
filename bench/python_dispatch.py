#!/usr/bin/env python3
"""Host time of a cached call from Python: kiln.jit vs jax.jit of the same
JAX function, in one process, on each framework's default device.

Each row is a function and an input kind: `resident` passes each
framework's own array (a kiln.Array, a jax.Array), `numpy` passes a NumPy
array (converted on every call). A sample times --batch calls issued back
to back, then waits for the last result, and divides by --batch. kiln and
JAX alternate, row by row, for --repeats rounds (so that load from other
processes falls on both); the median and the best of all of a row's
samples are reported in microseconds.

    python3 bench/python_dispatch.py [--iters N] [--batch N] [--repeats N]
                                     [--note TEXT] [--json PATH]

Run it with the package installed (pip install ./python) or with
KILN_LIBRARY and PYTHONPATH=python pointing at a build (the extension
module kiln._dispatch then built in place: setup.py build_ext --inplace).
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import time

import numpy as np

import jax
import jax.numpy as jnp
import kiln

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FUNCTIONS = {
    "add_one f32[8]": (lambda x: x + 1.0, [(8,)]),
    "add f32[8]x2": (lambda x, y: x + y, [(8,), (8,)]),
    "mul_add 4 args f32[8]": (lambda a, b, c, d: a * b + c * d, [(8,)] * 4),
    "add_one f32[256,256]": (lambda x: x + 1.0, [(256, 256)]),
}


def sample(call, args, wait, iters, batch):
    out = call(*args)  # warm: traced and compiled here
    wait(out)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(batch):
            out = call(*args)
        wait(out)
        times.append((time.perf_counter() - t0) / batch * 1e6)
    return times


def kiln_wait(out):
    np.asarray(out)  # reading the result waits for it


def git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--note", action="append", default=[], help="recorded in the report")
    ap.add_argument("--json", default=None, help="default bench/results/python_dispatch-<platform>.json")
    a = ap.parse_args()

    rng = np.random.default_rng(0)
    cases = []
    for name, (fn, shapes) in FUNCTIONS.items():
        host = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        kf, jf = kiln.jit(fn), jax.jit(fn)
        cases.append((name, "resident", kf, [kiln.asarray(h) for h in host], jf,
                      [jnp.asarray(h) for h in host]))
        cases.append((name, "numpy", kf, host, jf, host))
    samples = {(c[0], c[1]): ([], []) for c in cases}
    for _ in range(a.repeats):
        for name, kind, kf, kargs, jf, jargs in cases:
            ks, js = samples[(name, kind)]
            ks += sample(kf, kargs, kiln_wait, a.iters, a.batch)
            js += sample(jf, jargs, jax.block_until_ready, a.iters, a.batch)
    rows = []
    for (name, kind), (ks, js) in samples.items():
        k_med, j_med = statistics.median(ks), statistics.median(js)
        rows.append({"name": name, "inputs": kind, "kiln_us": round(k_med, 2),
                     "kiln_best_us": round(min(ks), 2), "jax_us": round(j_med, 2),
                     "jax_best_us": round(min(js), 2), "kiln_over_jax": round(k_med / j_med, 3)})

    platform = kiln.devices()[0].platform
    print(f"{'function':<24} {'inputs':<9} {'kiln.jit us':>12} {'jax.jit us':>11} {'kiln/jax':>9}")
    for r in rows:
        print(f"{r['name']:<24} {r['inputs']:<9} {r['kiln_us']:>12.2f} {r['jax_us']:>11.2f} "
              f"{r['kiln_over_jax']:>9.3f}")
    report = {
        "benchmark": "python_dispatch",
        "platform": platform,
        "devices": [{"name": repr(d), "platform": d.platform} for d in kiln.devices()],
        "jax_device": jax.devices()[0].device_kind,
        "jax_version": jax.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_revision": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain")),
        "hostname": socket.gethostname(),
        "params": {"iters": a.iters, "batch": a.batch, "repeats": a.repeats},
        "notes": a.note,
        "rows": rows,
    }
    path = a.json or os.path.join(ROOT, "bench", "results", f"python_dispatch-{platform}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
