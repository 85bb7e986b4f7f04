"""Replays the kept fuzz cases (regressions/*.json, written by shrink.keep
when test_random_programs finds a failure) through kiln.jit and jax.jit; a
case with an "xfail" reason is a known kiln bug (strict: fixing it makes the
test fail until the reason is removed). Also tests the shrinker itself."""
import dataclasses
import glob
import json
import os

import pytest

import kiln

jax = pytest.importorskip("jax")
pytest.importorskip("ml_dtypes")
import fuzzcase  # noqa: E402
import shrink  # noqa: E402
from jaxcmp import assert_matches_jax  # noqa: E402


def _kept():
    for path in sorted(glob.glob(os.path.join(shrink.REGRESSIONS, "*.json"))):
        with open(path) as f:
            d = json.load(f)
        marks = [pytest.mark.xfail(reason=d["xfail"], strict=True)] if d.get("xfail") else []
        yield pytest.param(d, id=os.path.basename(path)[:-5], marks=marks)


@pytest.mark.parametrize("kept", list(_kept()))
def test_kept_case(kept):
    built = fuzzcase.Built(fuzzcase.Case.from_json(kept))
    assert [built.p.names[k] for k in built.live] == kept["steps"], "progen changed this seed"
    got, want = kiln.jit(built.fn)(*built.args), jax.jit(built.fn)(*built.args)
    assert_matches_jax(got, want, built.describe())


def _deep_step():
    """(seed, step) of a program whose output lies at least two steps past a
    step that itself needs another step: room for every move."""
    for seed in range(200):
        p = fuzzcase.program(seed)
        b = fuzzcase.Built(fuzzcase.Case(seed))
        for k in b.live:
            val = p.sources.index(("step", k))
            feeds = [j for j in p.steps[k][1] if p.sources[j][0] == "step"]
            users = [m for m in b.live if val in p.steps[m][1] and m > k]
            if feeds and users and val not in b.outputs and fuzzcase.wrap(
                    "vmap", b.fn, b.args, seed):
                return seed, k
    pytest.skip("no program deep enough")


def test_shrinker_reduces_to_the_failing_step():
    seed, target = _deep_step()
    calls = []

    def fails(case):  # an injected "mismatch": step `target` is in the program
        calls.append(case)
        return target in fuzzcase.Built(dataclasses.replace(case, wrapper=None)).live
    start = fuzzcase.Case(seed, wrapper="vmap")
    assert len(fuzzcase.Built(start).live) > 1
    small = shrink.shrink(start, fails)
    built = fuzzcase.Built(small)
    assert built.live == [target], built.describe()
    assert small.wrapper is None and len(built.outputs) == 1
    assert len(calls) < 300


def test_kept_case_round_trips(tmp_path):
    seed, target = _deep_step()
    case = fuzzcase.Case(seed, cut=(target,), wrapper="vmap")
    path = shrink.keep(case, "why", str(tmp_path))
    with open(path) as f:
        d = json.load(f)
    assert fuzzcase.Case.from_json(d) == case and d["xfail"] == "why"
    built = fuzzcase.Built(fuzzcase.Case.from_json(d))
    assert d["steps"] == [built.p.names[k] for k in built.live]
    assert built.args[0].shape[0] == fuzzcase.BATCH  # the wrapper is replayed
