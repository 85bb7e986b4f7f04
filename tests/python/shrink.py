"""Greedy shrinking of a failing fuzz case (fuzzcase.Case) and keeping it as
a regression case (tests/python/regressions/<seed>.json, replayed by
test_regressions.py).

`fails(case) -> bool` says whether a candidate still fails the same way.
Moves, each kept only if the failure persists, repeated until none helps:
  - unwrap: drop the grad/vmap/jvp wrapper;
  - fewer outputs: keep one output;
  - bypass: an output made by a step is replaced by one of that step's
    operands that a step makes (the step, and what only it needed, go);
  - cut: a live step's value becomes an argument (the value JAX computed for
    it), so the steps feeding it go.
Shapes are not shrunk: progen's steps capture their shapes (slice bounds,
reshape targets) when generated, so a program's shapes are fixed by its
seed; cutting leaves the failing step with the smallest inputs it had.
"""
import dataclasses
import glob
import json
import os

import fuzzcase

REGRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions")


def _outputs(case):
    return tuple(case.outputs or fuzzcase.program(case.seed).outputs)


def _live(case):
    return fuzzcase.Built(dataclasses.replace(case, wrapper=None)).live


def candidates(case):
    """The smaller cases one move away, most aggressive first."""
    p = fuzzcase.program(case.seed)
    if case.wrapper:
        yield dataclasses.replace(case, wrapper=None)
    outs = _outputs(case)
    if len(outs) > 1:
        for o in outs:
            yield dataclasses.replace(case, outputs=(o,))
    cut = set(case.cut)
    for n, o in enumerate(outs):
        kind, k = p.sources[o]
        if kind != "step" or k in cut:
            continue
        for j in p.steps[k][1]:
            if p.sources[j][0] == "step" and j not in outs:
                yield dataclasses.replace(case, outputs=outs[:n] + (j,) + outs[n + 1:])
    for k in _live(case):
        if not any(p.sources[o] == ("step", k) for o in outs):
            yield dataclasses.replace(case, cut=tuple(sorted(cut | {k})))


def shrink(case, fails, budget=300):
    """The smallest case reached greedily from `case` (which must fail)."""
    tried = 0
    progress = True
    while progress and tried < budget:
        progress = False
        for c in candidates(case):
            if tried >= budget:
                break
            tried += 1
            try:
                bad = fails(c)
            except ValueError:  # the wrapper does not apply to the smaller program
                bad = False
            if bad:
                case, progress = c, True
                break
    p = fuzzcase.program(case.seed)
    params = fuzzcase.Built(dataclasses.replace(case, wrapper=None)).params
    return dataclasses.replace(case, cut=tuple(k for k in case.cut
                                               if p.sources.index(("step", k)) in params))


def keep(case, reason, directory=REGRESSIONS):
    """Writes the case as <directory>/<seed>.json; returns the path."""
    os.makedirs(directory, exist_ok=True)
    built = fuzzcase.Built(case)
    d = dict(case.to_json(), steps=[built.p.names[k] for k in built.live], xfail=reason)
    path = os.path.join(directory, f"{case.seed}.json")
    with open(path, "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")
    return path


def signature(case):
    """What identifies a shrunk failure: its wrapper and its steps' names."""
    built = fuzzcase.Built(case)
    return case.wrapper, [built.p.names[k] for k in built.live]


def known_failure(case, directory=REGRESSIONS):
    """The kept xfail case file with the same signature as `case`, or None."""
    sig = signature(case)
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            d = json.load(f)
        if d.get("xfail") and (d["wrapper"], d["steps"]) == sig:
            return path
    return None
