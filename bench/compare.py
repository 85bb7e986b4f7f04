#!/usr/bin/env python3
"""Sets kiln's benchmark JSON beside bench/jax_reference.py's and writes a
markdown summary: kiln vs. jax.jit per row (time, ratio, whether kiln is at
least as fast), then every row of kiln's JSON that carries a target.

    python3 bench/compare.py --kiln fusion.json [--kiln matmul.json ...]
        [--jax jax_reference.json] [--device NAME] [--out summary.md]

A row is compared with jax when both files have it (the same name); when
both give `bytes` they must agree (same shapes and dtypes), else the row is
reported as a mismatch. kiln's time is fused_ms (bench_fusion) or kiln_ms
(bench_matmul). The issue's jax target (kiln at least as fast as jax.jit in
the same run) is judged only when both ran on a GPU; elsewhere the ratio is
shown and the verdict is n/a.
"""
import argparse
import json
import sys

KILN_TIME_COLUMNS = ("fused_ms", "kiln_ms")
# The column a row's target is judged on, with its direction and unit.
TARGET_COLUMNS = (("of_copy", ">=", "of copy bandwidth"), ("x_vs_reference", ">=", "x"),
                  ("us_per_kernel", "<=", "us per kernel"), ("max_ms", "<=", "ms, slowest kernel"),
                  ("kiln_vs_bare", ">=", "x a bare pinned copy"),
                  ("kiln_vs_direct", ">=", "x the library called directly"))
# bench_matmul's rows say meets_target against this fixed fraction; bench_collectives'
# psum rows are judged against the same fraction of ncclAllReduce called directly, but
# only from 64 MiB up (issue 10's target: smaller sizes measure host overhead).
DIRECT_TARGET = 0.95
COLLECTIVE_TARGET_MIN_BYTES = 64 << 20


def load(path):
  with open(path) as f:
    return json.load(f)


def device_of(report):
  devs = report.get("devices") or [{}]
  return devs[0].get("name", "unknown"), devs[0].get("platform", report.get("platform", "?"))


def on_gpu(platform):
  return platform in ("cuda", "gpu")


def fmt(v, digits=3):
  if v is None:
    return "n/a"
  if isinstance(v, bool):
    return "yes" if v else "no"
  if isinstance(v, (int, float)) and float(v).is_integer() and abs(v) < 1e15:
    return str(int(v))
  return f"{v:.{digits}g}"


def verdict(applies, met):
  if not applies or met is None:
    return "n/a"
  return "**yes**" if met else "**NO**"


def kiln_time(row):
  for c in KILN_TIME_COLUMNS:
    if row.get(c) is not None:
      return c, row[c]
  return None, None


def jax_table(kilns, jax):
  """Markdown lines comparing every kiln row that jax also measured."""
  jax_rows = {r["name"]: r for r in jax["rows"]}
  jax_dev, jax_platform = device_of(jax)
  lines = []
  problems = 0
  for k in kilns:
    if not any(r["name"] in jax_rows for r in k["rows"]):
      continue
    kiln_dev, kiln_platform = device_of(k)
    comparable = on_gpu(kiln_platform) and on_gpu(jax_platform)
    lines += ["", f"### {k.get('benchmark', '?')}: kiln on {kiln_dev} ({kiln_platform}) vs. "
              f"jax {jax.get('jax_version', '?')} on {jax_dev} ({jax_platform})", ""]
    if not comparable:
      lines += ["Not the issue's comparison (it needs both on the GPU): ratios for "
                "information only.", ""]
    lines += ["| case | kiln ms | jax ms | jax ms / kiln ms | kiln of copy BW | kiln >= jax |",
              "| --- | ---: | ---: | ---: | ---: | :---: |"]
    for row in k["rows"]:
      j = jax_rows.get(row["name"])
      column, kms = kiln_time(row)
      if j is None or kms is None:
        continue
      if row.get("bytes") is not None and j.get("bytes") is not None and row["bytes"] != j["bytes"]:
        problems += 1
        lines.append(f"| {row['name']} | {fmt(kms)} | {fmt(j['jax_ms'])} | shapes differ: "
                     f"{fmt(row['bytes'])} vs {fmt(j['bytes'])} bytes | | **mismatch** |")
        continue
      ratio = j["jax_ms"] / kms if kms > 0 else None
      lines.append(f"| {row['name']} | {fmt(kms)} | {fmt(j['jax_ms'])} | {fmt(ratio)} | "
                   f"{fmt(row.get('of_copy'))} | "
                   f"{verdict(comparable, None if ratio is None else ratio >= 1.0)} |")
  return lines, problems


def target_table(kilns):
  """Every row with a target: what it measured and whether the target is met."""
  lines = ["", "## Targets", "",
           "| benchmark | row | measured | target | applies here | met |",
           "| --- | --- | ---: | ---: | :---: | :---: |"]
  for k in kilns:
    for row in k["rows"]:
      if "kiln_vs_direct" in row and "target" not in row:
        met = row.get("meets_target")
        if k.get("benchmark") == "collectives":
          if row.get("bytes", 0) < COLLECTIVE_TARGET_MIN_BYTES:
            continue
          met = row["kiln_vs_direct"] >= DIRECT_TARGET
        row = dict(row, target=DIRECT_TARGET, target_applies=on_gpu(device_of(k)[1]),
                   target_met=met)
      if "target" not in row:
        continue
      applies = bool(row.get("target_applies"))
      met = row.get("target_met")
      measured, target = fmt(None), fmt(row["target"])
      for column, direction, unit in TARGET_COLUMNS:
        if column in row:
          measured, target = f"{fmt(row[column])} {column}", f"{direction} {target} ({unit})"
          break
      lines.append(f"| {k.get('benchmark', '?')} | {row['name']} | {measured} | {target} | "
                   f"{'yes' if applies else 'no'} | "
                   f"{verdict(applies, None if met is None else bool(met))} |")
  for k in kilns:
    for note in k.get("notes", []):
      lines.append(f"- {k.get('benchmark', '?')}: {note}")
  return lines


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--kiln", action="append", required=True, help="a kiln benchmark JSON")
  p.add_argument("--jax", help="bench/jax_reference.py's JSON")
  p.add_argument("--device", help="the device's name for the heading (default: kiln's JSON)")
  p.add_argument("--out", help="markdown file (default: stdout)")
  args = p.parse_args()
  kilns = [load(path) for path in args.kiln]
  dev, platform = device_of(kilns[0])
  first = kilns[0]
  lines = [f"# kiln benchmarks on {args.device or dev}", "",
           f"kiln's device: {dev} ({platform}); "
           f"revision {first.get('git_revision', '?')[:12]}"
           f"{' (dirty)' if first.get('git_dirty') else ''}, {first.get('date', '?')}, "
           f"host {first.get('hostname', '?')}"]
  problems = 0
  if args.jax:
    jax = load(args.jax)
    lines += ["", "## kiln vs. jax.jit"]
    more, problems = jax_table(kilns, jax)
    lines += more
  else:
    lines += ["", "No jax.jit comparison (jax did not run)."]
  lines += target_table(kilns)
  text = "\n".join(lines) + "\n"
  if args.out:
    with open(args.out, "w") as f:
      f.write(text)
  else:
    sys.stdout.write(text)
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
