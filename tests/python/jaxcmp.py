"""Comparison of kiln results with JAX's, at JAX's own per-dtype tolerances
(jax._src.public_test_util, what JAX's test suite uses)."""
import jax
import numpy as np
from jax._src import public_test_util as jtu


def tolerance(dtype):
    return jtu.default_tolerance()[np.dtype(dtype)]


def assert_matches_jax(got, want, err_msg=""):
    """got: kiln's output tree; want: jax's. Same structure, dtypes and
    shapes; values equal for bool/int, within the dtype's tolerance (as both
    atol and rtol) for floats; NaNs must agree."""
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree, f"{err_msg}\nstructure {got_tree} != {want_tree}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = np.asarray(g), np.asarray(w)
        where = f"{err_msg}\noutput {i}"
        assert g.dtype == w.dtype, f"{where}: dtype {g.dtype} != jax's {w.dtype}"
        assert g.shape == w.shape, f"{where}: shape {g.shape} != jax's {w.shape}"
        tol = tolerance(w.dtype)
        if tol == 0:
            np.testing.assert_array_equal(g, w, err_msg=where)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol,
                                       atol=tol, err_msg=where)
