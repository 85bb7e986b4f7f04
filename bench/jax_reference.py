#!/usr/bin/env python3
"""jax.jit of the functions bench_fusion and bench_matmul time, on JAX's
default device, for bench/compare.py to set beside kiln's numbers.

The rows mirror the C side exactly: the same names, shapes, dtypes, input
values and math as bench/cases.c (softmax and layernorm are the functions of
tests/support/jit_cases.c, whose JAX twins are in tests/golden/trace_jit.py) and as
bench/matmul.c. Timing matches bench_fusion: after a warm-up batch (which
compiles), each sample is --batch calls issued back to back and a
block_until_ready on the last, divided by --batch; the median of --iters
samples is reported in ms.

    python3 bench/jax_reference.py --json out.json [--scale S] [--iters N]
        [--batch N] [--matmul-min N] [--matmul-max N] [--only REGEX]

Numbers measured on a CPU are not the issue's GPU comparison; the JSON names
the device (jax.devices()[0].device_kind) so that compare.py can tell.
"""
import argparse
import datetime
import json
import math
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp

FUSION_ELEMENTS = 1 << 24  # KBENCH_FUSION_ELEMENTS in bench/cases.h
ROW_LENGTHS = (1024, 2048, 4096, 8192)
DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the functions (bench/cases.c, tests/support/jit_cases.c, bench/matmul.c) ----

def chain8(x):
  for _ in range(4):  # kbench_chain with 8 equations
    x = x * 1.0001 + 0.5
  return x


def broadcast(x, y, z):
  return (x + y) * z - x


def softmax(x):
  m = jnp.max(x, axis=1).reshape(x.shape[0], 1)
  e = jnp.exp(x - m)
  return e / jnp.sum(e, axis=1).reshape(x.shape[0], 1)


def layernorm(x):
  n = x.shape[1]
  mean = (jnp.sum(x, axis=1) / n).reshape(x.shape[0], 1)
  c = x - mean
  var = (jnp.sum(c * c, axis=1) / n).reshape(x.shape[0], 1)
  return c * jax.lax.rsqrt(var + 1e-5)


# kiln's f32 matmuls are exact unless KILN_MATMUL_PRECISION=tensorfloat32 (jax.jit's
# own GPU default is TF32): the same precision on both sides.
MATMUL_PRECISION = ("tensorfloat32"
                    if os.environ.get("KILN_MATMUL_PRECISION", "").lower() == "tensorfloat32"
                    else "highest")


def matmul(a, b):
  with jax.default_matmul_precision(MATMUL_PRECISION):
    return jnp.matmul(a, b)


# ---- inputs ----

def case_values(shape, dtype):
  """((k * 2654435761) mod 1000) / 500 - 1 at flat index k, as kbench_case_args."""
  k = np.arange(math.prod(shape), dtype=np.int64)
  v = ((k * 2654435761) % 1000).astype(np.float32) / np.float32(500) - np.float32(1)
  return jnp.asarray(v.reshape(shape)).astype(dtype)


def matrix_values(n, dtype):
  """((i * 2654435761) mod 1000) / 1000, as bench/matmul.c's random_matrix."""
  i = np.arange(n * n, dtype=np.int64)
  v = ((i * 2654435761) % 1000).astype(np.float32) / np.float32(1000)
  return jnp.asarray(v.reshape(n, n)).astype(dtype)


def fusion_cases(scale):
  """(name, fn, input shapes, dtype, output elements), as kbench_fusion_cases."""
  n = max(int(float(FUSION_ELEMENTS) * scale), 1)
  s = int(math.sqrt(n))
  cases = [("chain8_f32", chain8, [(n,)], "f32", n),
           ("broadcast_f32", broadcast, [(s, 1), (1, s), (s,)], "f32", s * s)]
  for length in ROW_LENGTHS:
    rows = max(n // length, 1)
    for dt in ("f32", "bf16"):
      for name, fn in (("softmax", softmax), ("layernorm", layernorm)):
        cases.append((f"{name}_{length}_{dt}", fn, [(rows, length)], dt, rows * length))
  return cases


# ---- timing ----

def time_ms(fn, args, iters, batch):
  """Median ms per call: samples of `batch` back-to-back calls and a wait."""
  def run_batch():
    out = None
    for _ in range(batch):
      out = fn(*args)
    out.block_until_ready()
  run_batch()  # compiles
  samples = []
  for _ in range(iters):
    t0 = time.perf_counter_ns()
    run_batch()
    samples.append((time.perf_counter_ns() - t0) / batch / 1e6)
  return sorted(samples)[len(samples) // 2]  # the C side's median: element n / 2


def itemsize(dtype):
  return np.dtype(dtype).itemsize


def fusion_rows(args, only):
  rows = []
  for name, fn, shapes, dt, out_elements in fusion_cases(args.scale):
    if only and not only.search(name):
      continue
    dtype = DTYPES[dt]
    inputs = [case_values(shape, dtype) for shape in shapes]
    elements = out_elements + sum(math.prod(shape) for shape in shapes)
    nbytes = elements * itemsize(dtype)
    ms = time_ms(jax.jit(fn), inputs, args.iters, args.batch)
    rows.append({"name": name, "bytes": nbytes, "jax_ms": ms, "jax_GBps": nbytes / (ms * 1e6)})
    print(f"{name:24s} {ms:10.4f} ms  {nbytes / (ms * 1e6):8.2f} GB/s", flush=True)
  return rows


def matmul_rows(args, only):
  rows = []
  if args.matmul_max <= 0:
    return rows
  for dt in ("f32", "bf16"):
    n = args.matmul_min
    while n <= args.matmul_max:
      name = f"{dt}_{n}^3"  # bench/matmul.c's row names
      if not only or only.search(name):
        a, b = matrix_values(n, DTYPES[dt]), matrix_values(n, DTYPES[dt])
        ms = time_ms(jax.jit(matmul), (a, b), args.iters, args.batch)
        gflops = 2.0 * n ** 3 / (ms * 1e6)
        rows.append({"name": name, "jax_ms": ms, "jax_GFLOPs": gflops})
        print(f"{name:24s} {ms:10.4f} ms  {gflops:8.1f} GFLOP/s", flush=True)
      n *= 2
  return rows


# ---- dispatch and first calls (bench_dispatch --quick) ----

def cached_call_us(iters):
  """Median us of a cached jax.jit call of x + 1 on f32[4], until the result
  is ready (bench_dispatch's cached_call_1_kernel wall_us)."""
  f = jax.jit(lambda x: x + 1)
  x = jnp.zeros((4,), jnp.float32)
  for _ in range(10):
    f(x).block_until_ready()
  samples = []
  for _ in range(iters):
    t0 = time.perf_counter_ns()
    f(x).block_until_ready()
    samples.append((time.perf_counter_ns() - t0) / 1e3)
  return sorted(samples)[len(samples) // 2]


def first_call_ms(iters):
  """Median ms of jax.jit's first call of x -> (x * c + 0.5) four times on
  f32[1024], a new constant c each time so that nothing is reused (kiln's
  first_call_cold); the backend is started beforehand."""
  x = jnp.asarray(np.arange(1024, dtype=np.float32) / np.float32(1024))
  jax.jit(lambda v: v + 1)(x).block_until_ready()
  samples = []
  for i in range(iters):
    c = 1.0001 + 1e-3 * i + 1e-6 * (time.perf_counter_ns() % 1000)

    def chain(v, c=c):
      for _ in range(4):
        v = v * c + 0.5
      return v
    t0 = time.perf_counter_ns()
    jax.jit(chain)(x).block_until_ready()
    samples.append((time.perf_counter_ns() - t0) / 1e6)
  return sorted(samples)[len(samples) // 2]


# ---- provenance ----

def git(*cmd):
  try:
    return subprocess.run(["git", "-C", ROOT, *cmd], capture_output=True, text=True,
                          check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return ""


def report(args, rows):
  dev = jax.devices()[0]
  return {
      "benchmark": "jax_reference",
      "platform": dev.platform,
      "devices": [{"name": dev.device_kind, "platform": dev.platform}],
      "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
      "git_revision": git("rev-parse", "HEAD") or "unknown",
      "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
      "hostname": socket.gethostname(),
      "jax_version": jax.__version__,
      "params": {"iters": args.iters, "batch": args.batch, "scale": args.scale,
                 "matmul_min": args.matmul_min, "matmul_max": args.matmul_max},
      "notes": ["jax.jit of bench_fusion's and bench_matmul's functions (same names, shapes, "
                "dtypes, values); ms per call, median of samples of back-to-back calls ended "
                "by block_until_ready"],
      "rows": rows,
  }


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--json", required=True, help="where to write the results")
  p.add_argument("--scale", type=float, default=1.0, help="as bench_fusion --scale (default 1)")
  p.add_argument("--iters", type=int, default=10, help="samples; the median is kept")
  p.add_argument("--batch", type=int, default=0,
                 help="calls per sample (default: 10 on a GPU, 1 elsewhere, as bench_fusion)")
  p.add_argument("--matmul-min", type=int, default=1024)
  p.add_argument("--matmul-max", type=int, default=8192, help="0: no matmul rows")
  p.add_argument("--only", help="a regular expression; only the rows it matches")
  args = p.parse_args()
  if args.iters < 1 or args.batch < 0 or not 0 < args.scale <= 16 or args.matmul_min < 1:
    p.error("--iters >= 1, --batch >= 0, 0 < --scale <= 16, --matmul-min >= 1")
  dev = jax.devices()[0]
  if args.batch == 0:
    args.batch = 10 if dev.platform == "gpu" else 1
  print(f"jax {jax.__version__} on {dev.device_kind} ({dev.platform})", flush=True)
  only = re.compile(args.only) if args.only else None
  rows = fusion_rows(args, only) + matmul_rows(args, only)
  with open(args.json, "w") as f:
    json.dump(report(args, rows), f, indent=2)
    f.write("\n")
  print(f"wrote {args.json}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
