#!/usr/bin/env python3
"""Golden data for tests/ir/test_eval_reduce.cc and tests/ir/test_eval_dot.cc:
what JAX (CPU, x64 enabled) computes for the reduction family (reduce_sum,
reduce_prod, reduce_max, reduce_min, reduce_and, reduce_or, argmax, argmin,
cumsum, cumprod, cummax, cummin, sort) and for dot_general, so that the
reference evaluators in src/ir/reduce.c and src/ir/dot.c can be checked
against it.

Each case binds one lax primitive on arrays passed as arguments (never as
constants, which XLA would fold with its HLO evaluator instead of running
the CPU code). Writes, next to this script, one case per line:

  prim | params | tol | operand ; operand ... | result ; result ...

  params   kiln's parameter text ("axes=(0, 2)"), as kir_params_parse reads it
  tol      0: bit for bit (any NaN matches any NaN: XLA:CPU's NaN sign and
           payload are x86's, not semantics);
           "rtol atol": |got - want| <= atol + rtol * |want|, equal
           infinities, NaN where JAX has NaN. rtol is JAX's default
           tolerance for the dtype (public_test_util.default_tolerance);
           atol scales it by the sum of magnitudes that met in a result, the
           bound on a reordered float sum (XLA's order is its own choice).
  operand  "type v v v ...": a kiln type ("f32[2,3]") and the raw bit
  result   pattern of every element in C order, in hex (bool 0/1)

Files (each < 1 MB): eval_reduce.txt (reduce_*), eval_reduce_cum.txt
(cumsum, cumprod, cummax, cummin), eval_reduce_sort.txt (argmax, argmin,
sort), eval_dot.txt (dot_general).

What the data shows about XLA:CPU (and the evaluators follow):
- f16/bf16 arithmetic is f32 arithmetic rounded after every operation, and
  the CPU runtime runs with FTZ/DAZ (subnormal f32/f64/bf16 operands read as
  zero, subnormal results become zero);
- float sums/products are reduced in XLA's tree order (windows of 32) and
  cumulative ones in its two-level blocked scan (blocks of 16), in the
  dtype; reductions of one element are copies (-0 and subnormals kept), and
  so are cumulative sums/maxima/minima of one element, but not products nor
  bf16 ones (0 + -0 gives +0, subnormals flush);
- max/min propagate NaN and order -0 below +0; argmax/argmin return the
  first NaN, else the first extreme; sort orders NaNs last, -0 == +0;
- dot_general accumulates f16/bf16 in f32, converts operands to the result
  type only when it ranks above theirs, saturates floats to integers, and
  with K = 1 multiplies without a sum (0 * -1 stays -0).

Run: python3 tests/golden/eval_reduce.py [file.txt ...]   (deterministic;
rerun when JAX changes; it compiles a few thousand XLA programs, ~20 min)
"""
import os
import sys
import zlib

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = None  # seeded per file by main()

DTYPES = {"bool": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
          "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
          "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}
SHORT = {np.dtype(v).name: k for k, v in DTYPES.items()}
LONG = {k: np.dtype(v).name for k, v in DTYPES.items()}
FLOATS = ["f16", "bf16", "f32", "f64"]
SINTS = ["i8", "i16", "i32", "i64"]
UINTS = ["u8", "u16", "u32", "u64"]
INTS = SINTS + UINTS
NUM = INTS + FLOATS
ALL = ["bool"] + NUM
# jax._src.public_test_util.default_tolerance()
TOL = {"f16": 1e-3, "bf16": 1e-2, "f32": 1e-6, "f64": 1e-15}


# ---- arrays and text ----

def arr(vals, dt, shape=None):
    """vals (python numbers) as an array of kiln dtype dt."""
    if dt in FLOATS:
        a = np.array(vals, dtype=np.float64).astype(DTYPES[dt])
    elif dt == "bool":
        a = np.array(vals, dtype=bool)
    else:
        a = np.array([int(v) for v in np.ravel(np.array(vals, dtype=object))],
                     dtype=DTYPES[dt]).reshape(np.shape(vals))
    return a.reshape(shape) if shape is not None else a


def type_str(a):
    return SHORT[a.dtype.name] + "[" + ",".join(str(d) for d in a.shape) + "]"


def hex_str(a):
    a = np.asarray(a)
    a = np.ascontiguousarray(a).reshape(a.shape)  # (ascontiguousarray makes 0-d arrays 1-d)
    if a.dtype == np.bool_:
        vals = ["1" if v else "0" for v in a.ravel()]
    else:
        bits = a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])
        vals = ["%x" % int(v) for v in bits.ravel()]
    return " ".join([type_str(a)] + vals)


def record(out, prim, params, tol, operands, results):
    if isinstance(tol, tuple):
        tol = "%.3g %.3g" % tol
    out.append(" | ".join([prim, params, str(tol), " ; ".join(hex_str(a) for a in operands),
                           " ; ".join(hex_str(np.asarray(r)) for r in results)]))


def run(fn, *xs):
    res = fn(*[jnp.asarray(x) for x in xs])
    res = res if isinstance(res, (tuple, list)) else [res]
    return [np.asarray(r) for r in res]


def dims_str(axes):
    return "(" + ", ".join(str(a) for a in axes) + ("," if len(axes) == 1 else "") + ")"


def finfo(dt):
    return ml_dtypes.finfo(DTYPES[dt])


def iinfo(dt):
    return np.iinfo(DTYPES[dt])


def random(dt, shape, kind="normal"):
    """Random data of dt: floats normal (kind "unit": near 1, for products),
    integers over their whole range, bools fair."""
    n = int(np.prod(shape))
    if dt == "bool":
        return RNG.integers(0, 2, n).astype(bool).reshape(shape)
    if dt in FLOATS:
        v = np.exp(RNG.normal(0, 0.05, n)) if kind == "unit" else RNG.normal(0, 3, n)
        return arr(v, dt, shape)
    info = iinfo(dt)
    return RNG.integers(int(info.min), int(info.max), n, endpoint=True,
                        dtype=DTYPES[dt]).reshape(shape)


def group_abs_sum(x, axes):
    """The largest sum of |x| over the reduced axes (the scale of sum errors)."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    if x.size == 0:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.sum(x, axis=tuple(axes)) if axes else x
    s = np.asarray(s)
    finite = s[np.isfinite(s)]
    return float(finite.max()) if finite.size else 0.0


def sum_tol(dt, x, axes):
    if dt not in FLOATS:
        return 0
    return (TOL[dt], TOL[dt] * group_abs_sum(x, axes))


def prod_tol(dt, n):
    """Products: relative error grows with the number of factors."""
    if dt not in FLOATS:
        return 0
    eps = float(finfo(dt).eps)
    return (max(TOL[dt], 2 * n * eps), 0.0)


# ---- reductions ----

REDUCE = {"reduce_sum": (lax.reduce_sum, NUM), "reduce_prod": (lax.reduce_prod, NUM),
          "reduce_max": (lax.reduce_max, ALL), "reduce_min": (lax.reduce_min, ALL),
          "reduce_and": (lax.reduce_and, ["bool"] + INTS),
          "reduce_or": (lax.reduce_or, ["bool"] + INTS)}

SHAPES = [((), ()), ((5,), (0,)), ((3, 4), ()), ((3, 4), (0,)), ((3, 4), (1,)),
          ((3, 4), (1, 0)), ((2, 3, 4), (0, 2)), ((2, 3, 4), (1,)), ((4, 1), (1,)),
          ((1, 1), (0, 1)),
          # empty operands: identities where something is reduced
          ((0,), (0,)), ((2, 0), (1,)), ((0, 3), (1,)), ((2, 0, 3), (0, 1))]

# Longer float reductions: XLA's tree order (one and several windowed axes).
LONG_SHAPES = [((100,), (0,)), ((33,), (0,)), ((1100,), (0,)), ((4, 100), (1,)),
               ((100, 4), (0,)), ((40, 40), (0, 1)), ((2, 20, 40), (1, 2)),
               ((35, 2, 40), (0, 2)), ((5, 7, 9), (0, 1, 2))]


def reduce_tol(prim, dt, x, axes):
    if prim == "reduce_sum":
        return sum_tol(dt, x, axes)
    if prim == "reduce_prod":
        n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        return prod_tol(dt, n)
    return 0


def float_specials(dt):
    """Small vectors that probe one float edge each."""
    fi = finfo(dt)
    tiny, mx, eps = float(fi.tiny), float(fi.max), float(fi.eps)
    nan, inf = float("nan"), float("inf")
    return [[nan, 1.0, 2.0], [1.0, 2.0, nan], [inf, -inf], [inf, 1.0], [-inf, -1.0, 3.0],
            [-0.0, -0.0], [-0.0], [0.0, -0.0], [-0.0, 0.0], [-0.0, -0.0, -0.0],
            [tiny / 2, tiny / 2], [tiny / 2], [-tiny / 4, tiny], [tiny, -tiny / 2, 0.5],
            [mx, mx], [mx, -mx], [mx, mx, -mx], [1.0, eps / 2, eps / 2], [2.0, 0.5, mx],
            [tiny, 0.5, 4.0], [nan, inf, -inf]]


def int_specials(dt):
    info = iinfo(dt)
    lo, hi = int(info.min), int(info.max)
    return [[hi, 1], [lo, -1 if lo < 0 else 0], [hi, hi, hi], [lo, lo], [16, 16, 16, 16],
            [lo, hi], [hi, lo, 0, 5], [-1 if lo < 0 else hi, 7], [0x55, 0x0f, 0x3c]]


def reduce_cases():
    out = []
    for prim, (fn, dts) in REDUCE.items():
        for dt in dts:
            kind = "unit" if prim == "reduce_prod" else "normal"
            for shape, axes in SHAPES:
                x = random(dt, shape, kind)
                tol = reduce_tol(prim, dt, x, axes)
                record(out, prim, "axes=" + dims_str(axes), tol, [x],
                       run(lambda a: fn(a, axes), x))
            if dt in FLOATS and prim in ("reduce_sum", "reduce_prod"):
                for shape, axes in LONG_SHAPES:
                    x = random(dt, shape, kind)
                    record(out, prim, "axes=" + dims_str(axes), reduce_tol(prim, dt, x, axes),
                           [x], run(lambda a: fn(a, axes), x))
            specials = (float_specials(dt) if dt in FLOATS else
                        int_specials(dt) if dt in INTS else [[True, False], [True, True]])
            for v in specials:
                x = arr(v, dt)
                record(out, prim, "axes=(0,)", reduce_tol(prim, dt, x, (0,)), [x],
                       run(lambda a: fn(a, (0,)), x))
    return out


# ---- argmax / argmin ----

ARG = {"argmax": lax.argmax, "argmin": lax.argmin}


def arg_specials(dt):
    if dt == "bool":
        return [[False, True, True], [False, False], [True, False, True]]
    if dt in INTS:
        info = iinfo(dt)
        lo, hi = int(info.min), int(info.max)
        return [[lo, hi, hi, lo], [5, 5, 1, 5], [lo, lo], [hi, 0, hi]]
    fi = finfo(dt)
    tiny = float(fi.tiny)
    nan, inf = float("nan"), float("inf")
    return [[1.0, nan, 5.0, nan], [nan, nan], [-inf, -inf], [inf, inf], [0.0, -0.0, 0.0],
            [-0.0, 0.0], [5.0, 5.0, 1.0, 1.0], [-inf, nan], [nan, -inf, inf],
            [0.0, tiny / 2, tiny / 4], [-tiny / 2, 0.0], [2.0, -inf, inf, 2.0, -inf, inf]]


def arg_cases():
    out = []
    shapes = [((7,), 0), ((3, 5), 0), ((3, 5), 1), ((2, 3, 4), 1), ((2, 3, 4), 2), ((1,), 0),
              ((3, 0), 0), ((4, 1), 1), ((2, 40), 1)]
    for prim, fn in ARG.items():
        for dt in ALL:
            for shape, axis in shapes:
                x = random(dt, shape)
                if dt in INTS or dt == "bool":  # plenty of ties
                    x = (x % 4).astype(x.dtype) if dt != "bool" else x
                params = "axes=(%d,) index_dtype=int32" % axis
                record(out, prim, params, 0, [x], run(lambda a: fn(a, axis, jnp.int32), x))
            for v in arg_specials(dt):
                x = arr(v, dt)
                record(out, prim, "axes=(0,) index_dtype=int32", 0, [x],
                       run(lambda a: fn(a, 0, jnp.int32), x))
        for it in ("int8", "uint8", "int16", "int64", "uint64", "uint32"):
            x = random("f32", (2, 300))
            record(out, prim, "axes=(1,) index_dtype=%s" % it, 0, [x],
                   run(lambda a: fn(a, 1, np.dtype(it)), x))
    return out


# ---- cumulative ----

CUM = {"cumsum": lax.cumsum, "cumprod": lax.cumprod, "cummax": lax.cummax, "cummin": lax.cummin}


def cum_tol(prim, dt, x, axis):
    if dt not in FLOATS:
        return 0
    if prim == "cumsum":
        return sum_tol(dt, x, (axis,))
    if prim == "cumprod":
        return prod_tol(dt, x.shape[axis])
    return 0


def cum_cases():
    out = []
    shapes = [((5,), 0), ((3, 4), 0), ((3, 4), 1), ((2, 3, 4), 1), ((1,), 0), ((1, 3), 0),
              ((0, 3), 0), ((3, 0), 0), ((2, 17), 1)]
    long_shapes = [((17,), 0), ((33,), 0), ((100,), 0), ((1000,), 0), ((3, 50), 1), ((50, 3), 0)]
    for prim, fn in CUM.items():
        for dt in NUM:
            kind = "unit" if prim == "cumprod" else "normal"
            for reverse in (False, True):
                params = "axis=%d reverse=" + ("True" if reverse else "False")
                cases = [(random(dt, s, kind), a) for s, a in shapes]
                if dt in FLOATS and prim in ("cumsum", "cumprod"):
                    cases += [(random(dt, s, kind), a) for s, a in long_shapes]
                specials = (float_specials(dt) if dt in FLOATS else int_specials(dt))
                cases += [(arr(v, dt), 0) for v in specials]
                for x, axis in cases:
                    record(out, prim, params % axis, cum_tol(prim, dt, x, axis), [x],
                           run(lambda a: fn(a, axis, reverse=reverse), x))
    x = random("f16", (4096,))
    record(out, "cumsum", "axis=0 reverse=False", cum_tol("cumsum", "f16", x, 0), [x],
           run(lambda a: lax.cumsum(a, 0), x))
    return out


# ---- sort ----

def sort_keys(dt):
    if dt == "bool":
        return [True, False, True, False, False, True]
    if dt in INTS:
        info = iinfo(dt)
        lo, hi = int(info.min), int(info.max)
        return [3, lo, hi, 0, 3, 1, lo, 7, hi, 2]
    fi = finfo(dt)
    tiny = float(fi.tiny)
    nan, inf = float("nan"), float("inf")
    return [nan, 1.0, -nan, -0.0, 0.0, inf, -inf, -1.0, tiny / 2, -tiny / 2, 0.5, 1.0, -0.0,
            nan, 2.0, -inf]


def sort_params(dimension, stable, num_keys):
    return "dimension=%d is_stable=%s num_keys=%d" % (dimension, "True" if stable else "False",
                                                      num_keys)


def sort_cases():
    out = []

    def case(ops, dimension=0, stable=True, num_keys=1):
        res = run(lambda *a: lax.sort(a, dimension=dimension, is_stable=stable,
                                      num_keys=num_keys), *ops)
        record(out, "sort", sort_params(dimension, stable, num_keys), 0, ops, res)

    for dt in ALL:
        k = arr(sort_keys(dt), dt)
        case([k])
        case([k, np.arange(k.size, dtype=np.int32)])  # argsort: ties keep their order
        x = random(dt, (3, 5))
        if dt in INTS:
            x = (x % 3).astype(x.dtype)
        case([x], dimension=0)
        case([x, random("f32", (3, 5))], dimension=1)
        case([random(dt, (2, 0, 3))], dimension=1)
        case([random(dt, (0,))])
    # two keys, a payload: lexicographic with ties in the first key
    a = arr([2, 1, 2, 1, 0, 2, 1, 0], "i32")
    b = arr([0.5, -1.0, -0.5, float("nan"), 3.0, -0.5, -1.0, 0.0], "f32")
    c = arr(list(range(8)), "u8")
    case([a, b, c], num_keys=2)
    case([b, a, c], num_keys=2)
    case([a, b, c], num_keys=3)
    case([a, b, c], num_keys=1)
    x = random("bf16", (4, 6))
    case([x, random("i64", (4, 6)), random("bool", (4, 6))], dimension=0)
    # unstable sorts on keys without ties (any valid order is the same)
    for dt in ("f32", "i16", "f16", "u64"):
        k = RNG.permutation(np.arange(-20, 20) if dt[0] != "u" else np.arange(40)).astype(
            np.float64)
        if dt in FLOATS:
            k = k / 4
        k = arr(k, dt, (5, 8))
        case([k, random("f64", (5, 8))], dimension=1, stable=False)
        case([k], dimension=0, stable=False)
    # longer lines (merge passes)
    for dt in ("f32", "i32"):
        x = random(dt, (3, 257))
        if dt == "i32":
            x = (x % 50).astype(np.int32)
        case([x, np.broadcast_to(np.arange(257, dtype=np.int32), (3, 257)).copy()],
             dimension=1)
    return out


# ---- dot_general ----

def dot_params(lc, rc, lb, rb, pref=None):
    lst = lambda v: "[" + ", ".join(str(i) for i in v) + "]"  # noqa: E731
    return "dimension_numbers=((%s, %s), (%s, %s)) preferred_element_type=%s" % (
        lst(lc), lst(rc), lst(lb), lst(rb), LONG[pref] if pref else "None")


def dot_tol(a, b, res, lc, rc, lb, rb):
    """Float results: JAX's tolerance for the result dtype, scaled by the
    largest sum of |a| |b| products met in one result (the scale of
    reordering and rounding errors)."""
    out_dt = SHORT[res.dtype.name]
    if out_dt not in FLOATS:
        return 0
    fa = np.abs(np.asarray(a, dtype=np.float64))
    fb = np.abs(np.asarray(b, dtype=np.float64))
    scale = np.asarray(lax.dot_general(jnp.asarray(fa), jnp.asarray(fb), ((lc, rc), (lb, rb))))
    finite = scale[np.isfinite(scale)] if scale.size else scale
    s = float(finite.max()) if finite.size else 0.0
    tol = max([TOL[out_dt]] + [TOL[SHORT[x.dtype.name]] for x in (a, b)
                               if SHORT[x.dtype.name] in FLOATS])
    return (tol, tol * s)


def dot_values(dt, shape):
    """Operands whose products and sums are exact in every float dtype
    (small integers and halves), so results are exact; random for ints."""
    if dt == "bool":
        return random("bool", shape)
    if dt in FLOATS:
        return arr(RNG.integers(-8, 9, int(np.prod(shape))) / 2.0, dt, shape)
    return random(dt, shape)


DOT_LAYOUTS = [
    # lhs shape, rhs shape, lhs contracting, rhs contracting, lhs batch, rhs batch
    ((3, 4), (4, 5), [1], [0], [], []),          # matmul
    ((3, 4), (5, 4), [1], [1], [], []),          # x @ w.T (rhs transposed)
    ((4, 3), (4, 5), [0], [0], [], []),          # lhs transposed
    ((4, 3), (5, 4), [0], [1], [], []),          # both transposed
    ((2, 3, 4), (2, 4, 5), [2], [1], [0], [0]),  # batched
    ((2, 3, 4), (2, 5, 4), [2], [2], [0], [0]),  # attention scores
    ((3, 2, 4), (4, 2, 5), [2], [0], [1], [1]),  # batch dims not leading
    ((2, 3, 4), (3, 4, 5), [1, 2], [0, 1], [], []),  # two contracting dims
    ((2, 3, 4), (4, 3, 5), [1, 2], [1, 0], [], []),  # contracting dims swapped
    ((2, 3, 4, 5), (2, 3, 5, 6), [3], [2], [0, 1], [0, 1]),  # two batch dims
    ((2, 3, 4), (3, 2, 4), [2], [2], [0, 1], [1, 0]),  # batch dims swapped
    ((3,), (4,), [], [], [], []),                # outer product
    ((5,), (5,), [0], [0], [], []),              # vector dot
    ((), (), [], [], [], []),                    # scalars
    ((3, 4), (4,), [1], [0], [], []),            # matrix-vector
    ((4,), (4, 3), [0], [0], [], []),            # vector-matrix
    ((3, 0), (0, 4), [1], [0], [], []),          # K = 0: zeros
    ((0, 4), (4, 5), [1], [0], [], []),          # M = 0
    ((2, 3, 0), (2, 0, 2), [2], [1], [0], [0]),  # batched K = 0
    ((0, 2, 3), (0, 3, 2), [2], [1], [0], [0]),  # no batches
    ((2, 1, 3), (3, 1), [2], [0], [], []),       # unit dims
]


def dot_cases():
    out = []

    def case(a, b, lc, rc, lb, rb, pref=None):
        pdt = DTYPES[pref] if pref else None
        res = run(lambda x, y: lax.dot_general(x, y, ((lc, rc), (lb, rb)),
                                               preferred_element_type=pdt), a, b)[0]
        record(out, "dot_general", dot_params(lc, rc, lb, rb, pref),
               dot_tol(a, b, res, lc, rc, lb, rb), [a, b], [res])

    for dt in ALL:
        for ls, rs, lc, rc, lb, rb in DOT_LAYOUTS:
            case(dot_values(dt, ls), dot_values(dt, rs), lc, rc, lb, rb)
    # random floats: accumulation order and rounding, in tolerance
    for dt in FLOATS:
        case(random(dt, (16, 64)), random(dt, (64, 24)), [1], [0], [], [])
        case(random(dt, (3, 8, 40)), random(dt, (3, 16, 40)), [2], [2], [0], [0])
        case(random(dt, (200,)), random(dt, (200,)), [0], [0], [], [])
    # preferred_element_type and mixed operand dtypes (XLA's compute dtype)
    mm = ((3, 4), (4, 5), [1], [0], [], [])
    prefs = [("bf16", "bf16", "f32"), ("f16", "f16", "f32"), ("f32", "f32", "f64"),
             ("i8", "i8", "i32"), ("u8", "u8", "i16"), ("i8", "i8", "u16"), ("i8", "i8", "u8"),
             ("u8", "u8", "i8"), ("bool", "bool", "i32"), ("bool", "bool", "f32"),
             ("i16", "i16", "bf16"), ("i8", "i8", "f16"), ("i32", "i32", "f32"),
             ("i32", "i32", "i64"), ("u32", "u32", "u64"), ("i8", "u8", "i32"),
             ("i8", "f16", None), ("bool", "i8", None), ("u8", "i8", None), ("f32", "f16", None),
             ("bf16", "f16", None), ("f16", "bf16", "f32"), ("f64", "f32", None)]
    for ld, rd, pref in prefs:
        case(dot_values(ld, mm[0]), dot_values(rd, mm[1]), *mm[2:], pref=pref)
    # narrowing or sideways preferred types: computed in the operands' type
    for ld, pref in [("f32", "bf16"), ("bf16", "f16"), ("f16", "bf16"), ("f64", "f32"),
                     ("f32", "f16"), ("f64", "bf16")]:
        case(random(ld, (6, 32)), random(ld, (32, 5)), [1], [0], [], [], pref=pref)
    # lossy operand rounding f16 -> bf16, and f32 -> integers (truncate, saturate, NaN -> 0)
    case(arr([1.0 + 2 ** -9, 2 ** -9 + 2 ** -18], "f16"), arr([1.0, 1.0], "f16"),
         [0], [0], [], [], pref="bf16")
    big = arr([[1.5, 2.25], [3e9, 1.0], [-3e9, 1.0], [float("nan"), 1.0], [-0.75, 0.0],
               [300.7, 0.0], [-3.0, 0.0]], "f32")
    for pref in ("i32", "u8", "i8", "u64", "i64", "bool"):
        case(big, arr([1.0, 1.0], "f32"), [1], [0], [], [], pref=pref)
    case(arr([2 ** 31 - 1, 5], "i32"), arr([2, 1], "i32"), [0], [0], [], [], pref="f32")
    # edge values
    fcase = lambda dt, a, b: case(arr(a, dt), arr(b, dt), [0], [0], [], [])  # noqa: E731
    for dt in FLOATS:
        fi = finfo(dt)
        tiny, mx = float(fi.tiny), float(fi.max)
        inf, nan = float("inf"), float("nan")
        fcase(dt, [inf, 1.0], [0.0, 1.0])       # inf * 0 = NaN
        fcase(dt, [nan, 1.0], [0.0, 1.0])
        fcase(dt, [inf, 1.0], [1.0, -inf])
        fcase(dt, [-0.0, -0.0], [1.0, 1.0])
        fcase(dt, [mx, mx, -mx], [1.0, 1.0, 1.0])  # f16/bf16 accumulate in f32
        fcase(dt, [tiny / 2, tiny / 2], [1.0, 1.0])  # DAZ
        fcase(dt, [tiny, tiny], [0.5, 0.25])   # FTZ
        fcase(dt, [tiny * 4, 1.0], [0.125, 0.0])
        case(arr([[tiny / 2, 1.0], [1.0, 2.0]], dt), arr([[1.0, 1.0], [1.0, tiny / 4]], dt),
             [1], [0], [], [])
    for dt in INTS:
        info = iinfo(dt)
        fcase(dt, [int(info.max), int(info.max)], [2, 1])
        fcase(dt, [int(info.min), 1], [int(info.max), int(info.min)])
    fcase("bool", [True, False, True], [False, True, False])
    fcase("bool", [True, False, True], [True, True, False])
    return out


def write(name, lines):
    path = os.path.join(HERE, name)
    with open(path, "w") as f:
        f.write("# %s: generated by eval_reduce.py with jax %s; do not edit\n"
                % (name, jax.__version__))
        f.write("# prim | params | tol | operands | results (see eval_reduce.py)\n")
        for line in lines:
            f.write(line + "\n")
    size = os.path.getsize(path)
    assert size < 1 << 20, (name, size)
    print("%s: %d cases, %d bytes" % (name, len(lines), size))


FILES = {"eval_dot.txt": lambda: dot_cases(),
         "eval_reduce_sort.txt": lambda: arg_cases() + sort_cases(),
         "eval_reduce_cum.txt": lambda: cum_cases(),
         "eval_reduce.txt": lambda: reduce_cases()}


def main():
    global RNG
    for name in sys.argv[1:] or FILES:  # all files, or the ones named
        RNG = np.random.default_rng(zlib.crc32(name.encode()))  # each file on its own
        write(name, FILES[name]())


if __name__ == "__main__":
    main()
