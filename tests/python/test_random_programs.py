"""Random jax.numpy programs (progen.py) run through kiln.jit and jax.jit;
outputs must match at JAX's per-dtype tolerances.

KILN_RANDOM_PROGRAMS sets the count (default 1000), KILN_RANDOM_SEED the
first seed (default 0): program i uses seed first + i; KILN_RANDOM_WORKERS
the threads (default min(4, cores)). Programs are compiled
in groups (one function returning every member's outputs) to keep compile
time down; a failing group is re-run member by member, and each failure
prints its seed, its steps and its jaxpr (`python3 progen.py --seed N`
reproduces it)."""
import concurrent.futures
import os

import pytest

import kiln

jax = pytest.importorskip("jax")
pytest.importorskip("ml_dtypes")
import progen  # noqa: E402
from jaxcmp import assert_matches_jax  # noqa: E402

COUNT = int(os.environ.get("KILN_RANDOM_PROGRAMS", "1000"))
FIRST = int(os.environ.get("KILN_RANDOM_SEED", "0"))
GROUP = 20


def _run(fns, inputs):
    def group(*ins):
        return tuple(f(*x) for f, x in zip(fns, ins))
    return kiln.jit(group)(*inputs), jax.jit(group)(*inputs)


def _failure(p):
    try:
        got, want = _run([p.fn], [tuple(p.inputs)])
        assert_matches_jax(got, want)
        return None
    except Exception as e:  # noqa: BLE001 -- every failure is reported with its program
        return f"{type(e).__name__}: {e}\n{progen.describe(p)}"


def _group(start):
    """None if the programs seeded start.. pass together, else the report."""
    progs = [progen.generate(s) for s in range(start, min(start + GROUP, FIRST + COUNT))]
    try:
        got, want = _run([p.fn for p in progs], [tuple(p.inputs) for p in progs])
        assert_matches_jax(got, want)
        return None
    except Exception:  # noqa: BLE001 -- narrowed down below
        pass
    failures = [f for f in map(_failure, progs) if f]
    return "\n\n".join(failures) or (
        f"seeds {start}..{start + len(progs) - 1} fail together but pass one by one")


def test_random_programs():
    # Compiling dominates (kiln's C compiler and XLA, both outside the GIL):
    # groups run on a few threads, which also exercises kiln's thread safety.
    workers = int(os.environ.get("KILN_RANDOM_WORKERS", min(4, os.cpu_count() or 1)))
    starts = range(FIRST, FIRST + COUNT, GROUP)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        reports = [r for r in pool.map(_group, starts) if r]
    assert not reports, f"{len(reports)} of {len(starts)} groups failed:\n\n" + "\n\n".join(reports)
