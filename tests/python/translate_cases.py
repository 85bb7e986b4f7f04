"""Shared by the test_translate_* files: runs many small JAX programs through
kiln.jit as ONE program (one kiln compile, which runs the host C compiler)
and compares every output with jax.jit's; a failing group is re-run case
by case so the report names the case, its error and its jaxpr."""
import jax
import numpy as np

import kiln
from jaxcmp import assert_matches_jax


def loose(tol):
    """A comparison at tolerance tol, for sums whose order differs from
    XLA's (convolution gradients): structure and dtypes still exact."""
    def compare(got, want, err_msg=""):
        gl, gt = jax.tree_util.tree_flatten(got)
        wl, wt = jax.tree_util.tree_flatten(want)
        assert gt == wt, err_msg
        for g, w in zip(gl, wl):
            g, w = np.asarray(g), np.asarray(w)
            assert g.dtype == w.dtype and g.shape == w.shape, err_msg
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol,
                                       atol=tol, err_msg=err_msg)
    return compare


def run_group(cases, compare=assert_matches_jax):
    """cases: {name: (fn, args[, compare])}. Returns kiln's outputs by name."""
    names = sorted(cases)
    cmp = {n: cases[n][2] if len(cases[n]) > 2 else compare for n in names}

    def group(*arg_lists):
        return {n: cases[n][0](*a) for n, a in zip(names, arg_lists)}

    args = [tuple(cases[n][1]) for n in names]
    try:
        got = kiln.jit(group)(*args)
        want = jax.jit(group)(*args)
        for n in names:
            cmp[n](got[n], want[n], err_msg=n)
        return got
    except Exception:  # noqa: BLE001 -- narrowed down below
        pass
    failures = []
    for n in names:
        fn, a = cases[n][:2]
        try:
            cmp[n](kiln.jit(fn)(*a), jax.jit(fn)(*a), err_msg=n)
        except Exception as e:  # noqa: BLE001 -- every failure is reported with its program
            failures.append(f"{n}: {type(e).__name__}: {e}\n{jax.make_jaxpr(fn)(*a)}")
    raise AssertionError("\n\n".join(failures) or "the group fails but each case passes alone")


def assert_bits_equal(got, want, err_msg=""):
    """Bit-for-bit equality of every leaf (NaN payloads and -0.0 included)."""
    gl, gt = jax.tree_util.tree_flatten(got)
    wl, wt = jax.tree_util.tree_flatten(want)
    assert gt == wt, err_msg
    for i, (g, w) in enumerate(zip(gl, wl)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, f"{err_msg} output {i}"
        assert g.tobytes() == w.tobytes(), \
            f"{err_msg} output {i}: bits differ\nkiln {g!r}\njax  {w!r}"
