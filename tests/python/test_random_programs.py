"""Random jax.numpy programs (progen.py) run through kiln.jit and jax.jit;
outputs must match at JAX's per-dtype tolerances (jaxcmp.py). About a
quarter are wrapped in jax.grad, jax.vmap or jax.jvp (fuzzcase.py), where
the transform applies; the transformed function is what both jits run.

KILN_RANDOM_PROGRAMS sets the count (default 1000), KILN_RANDOM_SEED the
first seed (default 0): program i uses seed first + i; KILN_RANDOM_WORKERS
the threads (default min(4, cores)). Programs are compiled in groups (one
function returning every member's outputs) to keep compile time down; a
failing group is re-run member by member. Each failing program is shrunk
(shrink.py) to a small case, printed (steps and jaxpr) and written to
regressions/<seed>.json, which test_regressions.py replays: commit it with
the fix, or with an "xfail" reason until then. A failure that shrinks to a
kept xfail case (same wrapper, same steps) is a known bug: counted, not
failed. A kiln refusal
(UnsupportedPrimitive, of which TranslatorLacks is one) is a failure like a
mismatch. The counts (programs run, wrapped per transform, compared) are
printed in pytest's terminal summary."""
import collections
import concurrent.futures
import os

import pytest

import kiln

jax = pytest.importorskip("jax")
pytest.importorskip("ml_dtypes")
import fuzzcase  # noqa: E402
import shrink  # noqa: E402
from jaxcmp import assert_matches_jax  # noqa: E402

COUNT = int(os.environ.get("KILN_RANDOM_PROGRAMS", "1000"))
FIRST = int(os.environ.get("KILN_RANDOM_SEED", "0"))
GROUP = 20


def _run(fns, inputs):
    def group(*ins):
        return tuple(f(*x) for f, x in zip(fns, ins))
    return kiln.jit(group)(*inputs), jax.jit(group)(*inputs)


def _error(built):
    """The exception running one case raises (None if it matches)."""
    try:
        got, want = _run([built.fn], [built.args])
        assert_matches_jax(got, want)
        return None
    except Exception as e:  # noqa: BLE001 -- every failure is reported with its program
        return e


def _shrunk_report(built, e):
    """(known xfail case's file or None, report): the failure shrunk; a new
    one is written to regressions/."""
    kind = type(e)

    def fails(case):
        return isinstance(_error(fuzzcase.Built(case)), kind)
    small = shrink.shrink(built.case, fails)
    head = f"seed {built.case.seed} ({built.case.wrapper or 'unwrapped'}): {kind.__name__}: {e}"
    known = shrink.known_failure(small)
    if known:
        return known, f"{head}\nshrinks to the known failure {known}"
    path = shrink.keep(small, f"found by test_random_programs: {kind.__name__} (untriaged)")
    return None, f"{head}\nshrunk to {path}:\n{fuzzcase.Built(small).describe()}"


def _group(start):
    """(per-wrapper counts, [(known case or None, report)]) of the programs
    seeded start.."""
    cases = [fuzzcase.random_case(s) for s in range(start, min(start + GROUP, FIRST + COUNT))]
    counts = collections.Counter(c.case.wrapper or "unwrapped" for c in cases)
    try:
        got, want = _run([c.fn for c in cases], [c.args for c in cases])
        assert_matches_jax(got, want)
        return counts, []
    except Exception:  # noqa: BLE001 -- narrowed down below
        pass
    errors = [(c, _error(c)) for c in cases]
    reports = [_shrunk_report(c, e) for c, e in errors if e is not None]
    return counts, reports or [
        (None, f"seeds {start}..{start + len(cases) - 1} fail together but pass one by one")]


def test_random_programs(summary):
    # Compiling dominates (kiln's C compiler and XLA, both outside the GIL):
    # groups run on a few threads, which also exercises kiln's thread safety.
    workers = int(os.environ.get("KILN_RANDOM_WORKERS", min(4, os.cpu_count() or 1)))
    starts = range(FIRST, FIRST + COUNT, GROUP)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(_group, starts))
    counts = sum((c for c, _ in results), collections.Counter())
    found = [r for _, rs in results for r in rs]
    reports = [r for known, r in found if not known]
    known = collections.Counter(os.path.basename(k) for k, _ in found if k)
    summary.append(f"random programs (seeds {FIRST}..{FIRST + COUNT - 1}): {sum(counts.values())} "
                   f"run through kiln.jit and jax.jit, {counts['unwrapped']} plain, "
                   + ", ".join(f"{counts[w]} in jax.{w}" for w in fuzzcase.WRAPPERS)
                   + f"; {sum(counts.values()) - len(found)} matched, {len(reports)} failed, "
                   f"{sum(known.values())} failed as known xfail cases "
                   f"({', '.join(f'{n} x {k}' for k, n in sorted(known.items())) or 'none'})")
    assert not reports, f"{len(reports)} programs failed:\n\n" + "\n\n".join(reports)
