#!/usr/bin/env python3
"""kiln and jax.jit alternately on the same functions, shapes and values:
kiln/jax per case, minimum and median over the rounds.

    python3 bench/side_by_side.py [--build build] [--rounds 5] [--iters 3]
        [--scales 1,0.25] [--only REGEX] [--matmul 512,1024,2048]
        [--blas openblas,blis,onednn] [--no-fusion] [--no-dispatch]
        [--json PATH] [--out PATH] [--note TEXT]...

A round times every selected case with kiln (bench_fusion --fused-only and
bench_matmul, each a fresh process: its kernels come from the disk cache,
its inputs from the formula of bench/cases.c; bench_dispatch --quick for a
cached call and the cold first call of a small program) and then with jax.jit
in this process (bench/jax_reference.py's functions and inputs), the order flipped on
every other round so that neither side always runs on a warmer machine. Each
side reports the median of --iters calls after a warm-up; the ratio
kiln_ms / jax_ms is taken per round, and its minimum and median over the
rounds are printed and written. Scale 1 is 2^24 elements per operand (64 MiB
of f32), 0.25 is 16 MiB. --blas adds, per host BLAS library Debian ships,
its sgemm called directly (bench_blas, a fresh process per library) at the
--matmul sizes, against the same round's XLA dot: the measurement behind
kiln's choice of host BLAS.
"""
import argparse
import datetime
import importlib.util
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_jax_reference():
  spec = importlib.util.spec_from_file_location("jax_reference",
                                                os.path.join(ROOT, "bench", "jax_reference.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def run_kiln(cmd):
  """Runs a kiln benchmark writing JSON; returns {row name: row}."""
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "out.json")
    proc = subprocess.run(cmd + ["--json", path], capture_output=True, text=True)
    if proc.returncode != 0:
      sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    with open(path) as f:
      return {r["name"]: r for r in json.load(f)["rows"]}


class Side:
  """One round of one side: {case key: ms}."""

  def __init__(self, args, ref):
    self.args, self.ref = args, ref
    self.only = re.compile(args.only) if args.only else None
    self.inputs = {}

  def fusion_cases(self, scale):
    return [c for c in self.ref.fusion_cases(scale) if not self.only or self.only.search(c[0])]

  def kiln(self):
    out, a = {}, self.args
    bench = os.path.join(a.build, "bench")
    if not a.no_fusion:
      for scale in a.scales:
        cmd = [os.path.join(bench, "bench_fusion"), "--fused-only", "--iters", str(a.iters),
               "--scale", str(scale)]
        if a.only:
          cmd += ["--only", a.only]
        for name, row in run_kiln(cmd).items():
          out[(scale, name)] = row["fused_ms"]
    if a.matmul:
      cmd = [os.path.join(bench, "bench_matmul"), "--min", str(min(a.matmul)), "--max",
             str(max(a.matmul)), "--iters", str(a.iters)]
      for name, row in run_kiln(cmd).items():
        n = int(name.split("_")[1].rstrip("^3"))
        if n in a.matmul:
          out[("matmul", name)] = row["kiln_ms"]
    for lib in a.blas:
      sizes = ",".join(str(n) for n in a.matmul)
      rows = run_kiln([os.path.join(bench, "bench_blas"), "--lib", lib, "--sizes", sizes,
                       "--iters", str(a.iters)])
      for n in a.matmul:
        ms = rows.get(f"{lib}_f32_{n}^3", {}).get("ms")
        if ms is not None:
          out[(f"{lib} sgemm", f"f32_{n}^3")] = ms
    if not a.no_dispatch:
      rows = run_kiln([os.path.join(bench, "bench_dispatch"), "--quick", "--iters", "2000",
                       "--compile-iters", str(a.iters)])
      out[("dispatch", "cached_call_1_kernel")] = rows["cached_call_1_kernel"]["wall_us"] / 1e3
      out[("dispatch", "first_call_cold")] = rows["first_call_cold"]["total_ms"]
    return out

  def jax(self):
    out, a, ref = {}, self.args, self.ref
    jnp = ref.jnp
    if not a.no_fusion:
      for scale in a.scales:
        for name, fn, shapes, dt, _ in self.fusion_cases(scale):
          key = (scale, name)
          if key not in self.inputs:
            self.inputs[key] = [ref.case_values(s, ref.DTYPES[dt]) for s in shapes]
          out[key] = ref.time_ms(self.jitted(fn), self.inputs[key], a.iters, 1)
    for n in a.matmul:
      key = ("matmul", f"f32_{n}^3")
      if key not in self.inputs:
        self.inputs[key] = [ref.matrix_values(n, jnp.float32)] * 2
      out[key] = ref.time_ms(self.jitted(ref.matmul), self.inputs[key], a.iters, 1)
      for lib in a.blas:  # each library against this round's XLA dot
        out[(f"{lib} sgemm", f"f32_{n}^3")] = out[key]
    if not a.no_dispatch:
      out[("dispatch", "cached_call_1_kernel")] = ref.cached_call_us(2000) / 1e3
      out[("dispatch", "first_call_cold")] = ref.first_call_ms(a.iters)
    return out

  def jitted(self, fn, cache={}):  # one jax.jit per function: compiled once, as kiln's disk cache
    if fn not in cache:
      cache[fn] = self.ref.jax.jit(fn)
    return cache[fn]


def where_of(key):
  return key[0] if isinstance(key[0], str) else f"{64 * key[0]:g} MiB"


def label(key):
  return f"{key[1]} @ {where_of(key)}"


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--build", default=os.path.join(ROOT, "build"), help="the CMake build folder")
  p.add_argument("--rounds", type=int, default=5, help="alternations (at least 5 for the issue)")
  p.add_argument("--iters", type=int, default=3, help="calls per side per round; median kept")
  p.add_argument("--scales", default="1,0.25", help="bench_fusion scales (1: 64 MiB f32)")
  p.add_argument("--only", help="fusion cases matching this regular expression")
  p.add_argument("--matmul", default="512,1024,2048", help="square f32 sizes; empty for none")
  p.add_argument("--blas", default="", help="host BLAS libraries to time directly "
                 "(openblas, blis, onednn; bench_blas), each against XLA's dot")
  p.add_argument("--no-fusion", action="store_true", help="no bench_fusion rows")
  p.add_argument("--no-dispatch", action="store_true", help="no bench_dispatch rows")
  p.add_argument("--json", help="write the rounds and ratios here")
  p.add_argument("--out", help="write the markdown table here (default: stdout only)")
  p.add_argument("--note", action="append", default=[],
                 help="a line for the JSON's notes (machine load, what changed); repeatable")
  a = p.parse_args()
  a.scales = [float(s) for s in a.scales.split(",") if s]
  a.matmul = [int(n) for n in a.matmul.split(",") if n]
  a.blas = [b for b in a.blas.split(",") if b]
  if a.rounds < 1 or a.iters < 1:
    p.error("--rounds and --iters must be at least 1")
  ref = load_jax_reference()
  side = Side(a, ref)
  rounds = []
  for r in range(a.rounds):
    if r % 2 == 0:
      k, j = side.kiln(), side.jax()
    else:
      j, k = side.jax(), side.kiln()
    rounds.append((k, j))
    print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
  keys = [key for key in rounds[0][0] if key in rounds[0][1]]
  dev = ref.jax.devices()[0]
  lines = [f"kiln vs. jax {ref.jax.__version__} ({dev.platform}, {dev.device_kind}), "
           f"{a.rounds} alternations of median-of-{a.iters} calls; ratio = kiln ms / jax ms "
           "(< 1: kiln faster); dispatch rows in ms too", "",
           "| case | kiln ms (median) | jax ms (median) | ratio min | ratio median |",
           "| --- | ---: | ---: | ---: | ---: |"]
  rows = []
  for key in keys:
    ks = [k[key] for k, _ in rounds]
    js = [j[key] for _, j in rounds]
    ratios = [kk / jj for kk, jj in zip(ks, js)]
    row = {"case": key[1], "where": where_of(key),
           "kiln_ms": ks, "jax_ms": js, "ratio_min": min(ratios),
           "ratio_median": statistics.median(ratios)}
    rows.append(row)
    lines.append(f"| {label(key)} | {statistics.median(ks):.4g} | {statistics.median(js):.4g} | "
                 f"{row['ratio_min']:.2f} | {row['ratio_median']:.2f} |")
  text = "\n".join(lines) + "\n"
  sys.stdout.write(text)
  if a.out:
    with open(a.out, "w") as f:
      f.write(text)
  if a.json:
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    with open(a.json, "w") as f:
      json.dump({"benchmark": "side_by_side", "jax_version": ref.jax.__version__,
                 "device": dev.device_kind, "platform": dev.platform, "git_revision": rev,
                 "hostname": socket.gethostname(), "rounds": a.rounds, "iters": a.iters,
                 "date": datetime.datetime.now(datetime.timezone.utc).strftime(
                     "%Y-%m-%dT%H:%M:%SZ"), "notes": a.note, "rows": rows}, f, indent=2)
      f.write("\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
