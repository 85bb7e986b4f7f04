#!/usr/bin/env python3
"""Golden data for tests/ir/test_eval_elementwise.cc: what JAX (CPU, x64
enabled) computes for every elementwise primitive of kiln's IR, so that the
reference evaluators in src/ir/elementwise.c can be checked against it.

Each case binds one lax primitive (checked with make_jaxpr) on arrays passed
as arguments, never as constants: XLA folds constants with its HLO evaluator,
whose arithmetic differs from the compiled CPU code in the edge cases this
data is about (subnormals are flushed to zero by XLA:CPU at run time).

Writes, next to this script, one case per line:

  prim | params | tol | operand | operand ... | result

  params   kiln's parameter text ("rounding_method=1",
           "new_dtype=float16 weak_type=False"), empty for none
  tol      0: the result must match bit for bit (any NaN matches any NaN:
           XLA:CPU's NaN sign and payload are x86's, not semantics);
           t > 0: |got - want| <= t + t * |want| (JAX's assert_allclose with
           its default tolerance per dtype, for the transcendental functions
           XLA:CPU computes with its own approximations), equal infinities,
           NaN where JAX has NaN
  operand  "type v v v ...": a kiln type ("f32[2,3]") and the raw bit
  result   pattern of every element in C order, in hex (bool 0/1)

Files (each < 1 MB): eval_elementwise_unary.txt, eval_elementwise_binary.txt,
eval_elementwise_compare.txt, eval_elementwise_misc.txt (select_n, clamp,
convert_element_type, bitcast_convert_type, broadcasting and shapes),
eval_elementwise_special.txt (square, integer_pow, erfc, lgamma, digamma,
reduce_precision, copy; drawn from their own seed).

Run: python3 tests/golden/eval_elementwise.py   (deterministic; rerun when
JAX changes)
"""
import os

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

DTYPES = {"bool": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
          "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
          "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}
NUMPY_NAME = {k: np.dtype(v).name for k, v in DTYPES.items()}
FLOATS = ["f16", "bf16", "f32", "f64"]
SINTS = ["i8", "i16", "i32", "i64"]
UINTS = ["u8", "u16", "u32", "u64"]
INTS = SINTS + UINTS
# jax._src.public_test_util.default_tolerance()
TOL = {"f16": 1e-3, "bf16": 1e-2, "f32": 1e-6, "f64": 1e-15}

# Primitives XLA:CPU computes exactly (IEEE operations, bit manipulation);
# the transcendental ones are compared with a tolerance.
EXACT_FLOAT = {"neg", "abs", "sign", "floor", "ceil", "round", "sqrt", "is_finite", "add", "sub",
               "mul", "div", "rem", "max", "min", "nextafter", "eq", "ne", "lt", "le", "gt", "ge",
               "select_n", "clamp", "convert_element_type", "bitcast_convert_type"}


def short(dtype):
    for k, v in DTYPES.items():
        if np.dtype(v) == np.dtype(dtype):
            return k
    raise KeyError(dtype)


def type_str(a):
    return short(a.dtype) + "[" + ",".join(str(d) for d in a.shape) + "]"


def bit_patterns(a):
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return [str(int(v)) for v in a.ravel()]
    uint = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return [format(int(v), "x") for v in a.view(uint).ravel()]


def array_str(a):
    return " ".join([type_str(a)] + bit_patterns(a))


def arr(values, dt, shape=None):
    """An array of dtype dt from Python numbers; integers wrap (two's
    complement), floats round as numpy casts from float64."""
    d = np.dtype(DTYPES[dt])
    if dt == "bool":
        a = np.array([bool(v) for v in values], d)
    elif dt in INTS:
        bits = d.itemsize * 8
        u = np.array([int(v) & ((1 << bits) - 1) for v in values], dtype="u%d" % d.itemsize)
        a = u.view(d)
    else:
        with np.errstate(over="ignore"):
            a = np.array(values, np.float64).astype(d)
    return a.reshape(shape if shape is not None else (len(values),))


# ---- values ----

def float_edges(dt):
    fi = ml_dtypes.finfo(DTYPES[dt])
    tiny, sub, mx, eps = float(fi.tiny), float(fi.smallest_subnormal), float(fi.max), float(fi.eps)
    return [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 0.1, -0.7, 2.0, 10.0, -123.456,
            1e4, float("nan"), float("inf"), -float("inf"), mx, -mx, tiny, -tiny, sub, -sub,
            sub * 37, tiny * 0.75, 1 + eps, 1 - eps / 2, mx / 3]


def float_pairs_values(dt):
    fi = ml_dtypes.finfo(DTYPES[dt])
    tiny, sub, mx = float(fi.tiny), float(fi.smallest_subnormal), float(fi.max)
    return [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.25, float("nan"), float("inf"),
            -float("inf"), mx, tiny, -tiny * 0.5, sub, 1.0 / 3]


def int_edges(dt):
    if dt == "bool":
        return [0, 1]
    info = np.iinfo(DTYPES[dt])
    bits = info.bits
    return [0, 1, -1, 2, 3, -7, 7, int(info.max), int(info.min), int(info.max) - 1,
            bits - 1, bits, bits + 1, 1 << (bits // 2), -(1 << (bits - 2)) - 5]


RNG = np.random.default_rng(20240531)


def domain_values(prim):
    """Random values where prim is interesting."""
    r = RNG
    if prim in ("log", "sqrt", "rsqrt", "cbrt"):
        return list(np.exp(r.uniform(-40, 40, 16))) + list(r.uniform(0, 3, 8))
    if prim == "log1p":
        return list(r.uniform(-1, 3, 12)) + list(np.exp(r.uniform(-30, 30, 12)))
    if prim in ("asin", "acos", "atanh", "erf_inv"):
        return list(r.uniform(-1, 1, 20)) + [0.999, -0.9999, 1e-5]
    if prim == "acosh":
        return list(1 + np.exp(r.uniform(-12, 6, 16))) + [1e10, 1.0000001]
    if prim in ("exp", "expm1", "exp2", "sinh", "cosh", "logistic", "tanh"):
        return list(r.uniform(-90, 90, 12)) + list(r.uniform(-2, 2, 12)) + [1e-5, -3e-7]
    if prim in ("sin", "cos", "tan"):
        return list(r.uniform(-40, 40, 16)) + list(r.uniform(-1.6, 1.6, 8))
    return list(r.normal(0, 4, 16)) + list(r.normal(0, 1e-3, 4))


# ---- primitives ----

UNARY = {
    "neg": lax.neg, "abs": lax.abs, "sign": lax.sign, "floor": lax.floor, "ceil": lax.ceil,
    "exp": lax.exp, "exp2": lax.exp2, "expm1": lax.expm1, "log": lax.log, "log1p": lax.log1p,
    "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "cbrt": lax.cbrt, "tanh": lax.tanh,
    "logistic": lax.logistic, "sin": lax.sin, "cos": lax.cos, "tan": lax.tan, "asin": lax.asin,
    "acos": lax.acos, "atan": lax.atan, "sinh": lax.sinh, "cosh": lax.cosh, "asinh": lax.asinh,
    "acosh": lax.acosh, "atanh": lax.atanh, "erf": lax.erf, "erf_inv": lax.erf_inv,
    "is_finite": lax.is_finite, "not": lax.bitwise_not, "population_count": lax.population_count,
}
UNARY_DTYPES = {"neg": FLOATS + INTS, "abs": FLOATS + SINTS, "sign": FLOATS + INTS,
                "not": ["bool"] + INTS, "population_count": INTS}

BINARY = {
    "add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
    "pow": lax.pow, "max": lax.max, "min": lax.min, "atan2": lax.atan2,
    "and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
    "shift_left": lax.shift_left, "shift_right_logical": lax.shift_right_logical,
    "shift_right_arithmetic": lax.shift_right_arithmetic, "nextafter": lax.nextafter,
}
NUM = FLOATS + INTS
BINARY_DTYPES = {"add": NUM, "sub": NUM, "mul": NUM, "div": NUM, "rem": NUM, "pow": FLOATS,
                 "max": ["bool"] + NUM, "min": ["bool"] + NUM, "atan2": FLOATS,
                 "and": ["bool"] + INTS, "or": ["bool"] + INTS, "xor": ["bool"] + INTS,
                 "shift_left": INTS, "shift_right_logical": INTS,
                 "shift_right_arithmetic": INTS, "nextafter": FLOATS}

COMPARE = {"eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge}

def run(prim, fn, *args, **kw):
    """fn(*args) under jit, after checking that it binds exactly `prim`."""
    jaxpr = jax.make_jaxpr(lambda *a: fn(*a, **kw))(*args)
    names = [e.primitive.name for e in jaxpr.eqns]
    assert names == [prim], (prim, names)
    return np.asarray(jax.jit(lambda *a: fn(*a, **kw))(*args))


def tol_for(prim, dt):
    if dt not in FLOATS or prim in EXACT_FLOAT:
        return 0
    return TOL[dt]


def record(out, prim, params, tol, operands, result):
    out.append(" | ".join([prim, params, repr(tol) if tol else "0"]
                          + [array_str(a) for a in operands] + [array_str(result)]))


# ---- unary ----

def unary_cases():
    out = []
    for prim, fn in UNARY.items():
        dts = UNARY_DTYPES.get(prim, FLOATS)
        for dt in dts:
            if dt in FLOATS:
                vals = float_edges(dt) + domain_values(prim)
                x = arr(vals, dt)
            else:
                x = arr(int_edges(dt) + [5, 0x55, -0x33, 1 << 6], dt)
            record(out, prim, "", tol_for(prim, dt), [x], run(prim, fn, x))
    for method in (0, 1):
        for dt in FLOATS:
            x = arr(float_edges(dt) + [0.5, -0.5, 1.5, -1.5, 2.5, 3.5, -4.5, 0.49999997,
                                       4503599627370497.0, 8388609.0, 2049.0, 257.0]
                    + list(RNG.uniform(-20, 20, 12)), dt)
            y = run("round", lax.round, x, rounding_method=lax.RoundingMethod(method))
            record(out, "round", "rounding_method=%d" % method, 0, [x], y)
    return out


# ---- binary and compare ----

def is_subnormal(a):
    f = np.abs(a.astype(np.float64))
    return (f > 0) & (f < float(ml_dtypes.finfo(a.dtype).tiny))


def pair_arrays(vals, dt):
    a = [x for x in vals for _ in vals]
    b = [y for _ in vals for y in vals]
    return arr(a, dt), arr(b, dt)


def binary_cases():
    out = []
    for prim, fn in BINARY.items():
        for dt in BINARY_DTYPES[prim]:
            if dt in FLOATS:
                x, y = pair_arrays(float_pairs_values(dt), dt)
                rx = arr(RNG.normal(0, 5, 24), dt)
                ry = arr(RNG.normal(0, 5, 24), dt)
                if prim == "pow":
                    rx = arr(np.abs(RNG.normal(0, 5, 24)), dt)
                x, y = np.concatenate([x, rx]), np.concatenate([y, ry])
                if prim == "atan2":
                    # XLA:CPU's atan2 polynomial, run under DAZ, is erratic on
                    # subnormal operands (atan2(-s, -s) is NaN, atan2(+s, -1)
                    # is -pi); kiln reads them as zeros, like the other ops.
                    keep = ~(is_subnormal(x) | is_subnormal(y))
                    x, y = x[keep], y[keep]
                if prim == "pow":
                    # Likewise, XLA's pow reads a negative subnormal base as
                    # -0 (pow(-s, -1) is -inf) yet still as negative where
                    # the power is not an integer (pow(-s, 0.5) is NaN).
                    keep = ~(is_subnormal(x) & (x < 0))
                    x, y = x[keep], y[keep]
            else:
                x, y = pair_arrays(int_edges(dt), dt)
            record(out, prim, "", tol_for(prim, dt), [x, y], run(prim, fn, x, y))
    # pow with integer exponents (converted to the base's dtype first)
    for dt in FLOATS:
        for et in ("i8", "i32", "i64", "u8", "u32", "u64"):
            bases = [2.0, -2.0, 0.0, -0.0, 0.5, -1.5, 3.0, float("nan"), float("inf"), 1.0]
            exps = [0, 1, 2, 3, -1, -2, 7, -3, 100, 255, 1 << 31, -(1 << 40), 65519]
            x = arr([b for b in bases for _ in exps], dt)
            y = arr([e for _ in bases for e in exps], et)
            record(out, "pow", "", tol_for("pow", dt), [x, y], run("pow", lax.pow, x, y))
    # subnormal results and operands (XLA:CPU flushes them in arithmetic)
    for dt in ("f32", "f64", "bf16", "f16"):
        fi = ml_dtypes.finfo(DTYPES[dt])
        tiny = float(fi.tiny)
        a = arr([tiny, tiny * 1.5, -tiny * 3, tiny * 0.3, tiny * 2, 1.0, tiny * (1 - 2.0 ** -30)],
                dt)
        b = arr([0.5, 0.75, 4.0, 1.0, 3.0, tiny, 1.0], dt)
        for prim in ("mul", "div", "add", "sub", "rem", "max", "min"):
            record(out, prim, "", 0, [a, b], run(prim, BINARY[prim], a, b))
    return out


def compare_cases():
    out = []
    for prim, fn in COMPARE.items():
        for dt in ["bool"] + INTS + FLOATS:
            vals = float_pairs_values(dt) if dt in FLOATS else int_edges(dt)
            x, y = pair_arrays(vals, dt)
            record(out, prim, "", 0, [x, y], run(prim, fn, x, y))
    return out


# ---- select_n, clamp, convert, bitcast ----

def select_cases():
    out = []
    for dt in ("f32", "i8", "bool", "bf16", "u64"):
        vals = float_edges(dt) if dt in FLOATS else int_edges(dt) * 8
        n = 12
        c0, c1, c2 = arr(vals[:n], dt), arr(vals[::-1][:n], dt), arr(vals[3:3 + n], dt)
        which_b = arr([i % 2 for i in range(n)], "bool")
        record(out, "select_n", "", 0, [which_b, c0, c1], run("select_n", lax.select_n, which_b, c0, c1))
        record(out, "select_n", "", 0, [which_b, c0], run("select_n", lax.select_n, which_b, c0))
        for wt in ("i32", "u8"):
            # out-of-range `which` is unspecified by lax; XLA's lowering (a
            # tree of `which < k` selects) clamps it to the first/last case
            w = arr([0, 1, 2, 2, 1, 0, -1, 3, 7, 0, 1, 2], wt)
            record(out, "select_n", "", 0, [w, c0, c1, c2],
                   run("select_n", lax.select_n, w, c0, c1, c2))
        ws = np.array(True)
        record(out, "select_n", "", 0, [ws, c0, c1], run("select_n", lax.select_n, ws, c0, c1))
    # five cases, 2-d
    cases = [arr(RNG.normal(0, 1, 6), "f64", (2, 3)) for _ in range(5)]
    w = arr([4, 0, 3, 1, 2, 4], "i16", (2, 3))
    record(out, "select_n", "", 0, [w] + cases, run("select_n", lax.select_n, w, *cases))
    return out


def clamp_cases():
    out = []
    for dt in ["bool"] + INTS + FLOATS:
        vals = float_pairs_values(dt) if dt in FLOATS else int_edges(dt)
        if dt == "bool":
            vals = [0, 1, 0, 1, 1, 0]
        x = arr(vals, dt)
        for lo_v, hi_v in ((vals[3], vals[2]), (vals[2], vals[3]), (vals[0], vals[-1])):
            lo, hi = arr([lo_v], dt, ()), arr([hi_v], dt, ())
            record(out, "clamp", "", 0, [lo, x, hi], run("clamp", lax.clamp, lo, x, hi))
        lo = arr(vals[::-1], dt)
        hi = arr(vals[len(vals) // 2:] + vals[:len(vals) // 2], dt)
        record(out, "clamp", "", 0, [lo, x, hi], run("clamp", lax.clamp, lo, x, hi))
    return out


def convert_sources(dt):
    if dt in FLOATS:
        return float_edges(dt) + [127.5, 128.0, -128.5, -129.0, 255.5, 256.0, 32767.5, 32768.0,
                                  65535.5, 65536.0, 65519.0, 65520.0, 2.0 ** 31, -2.0 ** 31 - 1,
                                  2.0 ** 32, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 1e20, -1e20,
                                  1 + 2.0 ** -11 + 2.0 ** -40, 1 + 2.0 ** -8 + 2.0 ** -40,
                                  1 + 2.0 ** -24 + 2.0 ** -60, 1e-40, 3e-45, 1e-310, -0.99,
                                  0.7, 2.0 ** 24 + 1]
    return int_edges(dt) + [127, 128, 255, 256, -129, 65535, 65536, 65519, 65520,
                            (1 << 24) + 1, (1 << 24) + 3 * (1 << 16) - 1, (1 << 53) + 1,
                            (1 << 60) + (1 << 36) + 1, -((1 << 60) + (1 << 36) + 1),
                            (1 << 63) + (1 << 39) + 1, (1 << 64) - 1]


def convert_cases():
    out = []
    for src in ["bool"] + INTS + FLOATS:
        x = arr(convert_sources(src), src)
        for dst in ["bool"] + INTS + FLOATS:
            if dst == src:  # JAX binds nothing for a same-type convert: the identity
                y = np.asarray(jax.jit(lax.convert_element_type, static_argnums=1)(x, x.dtype))
            else:
                y = run("convert_element_type", lax.convert_element_type, x,
                        new_dtype=DTYPES[dst])
            params = "new_dtype=%s weak_type=False" % NUMPY_NAME[dst]
            record(out, "convert_element_type", params, 0, [x], y)
    return out


def bitcast_cases():
    out = []
    dts = INTS + FLOATS
    for src in dts:
        for dst in dts:
            ssz, dsz = np.dtype(DTYPES[src]).itemsize, np.dtype(DTYPES[dst]).itemsize
            if ssz >= dsz:
                shape = (2, 3)
            else:
                shape = (2, dsz // ssz)
            n = int(np.prod(shape))
            words = RNG.integers(0, 1 << 63, n, dtype=np.int64).astype(np.uint64) * 3
            raw = words.astype("u%d" % ssz) if ssz < 8 else words
            x = raw.view(DTYPES[src]).reshape(shape)
            y = run("bitcast_convert_type", lax.bitcast_convert_type, x, new_dtype=DTYPES[dst])
            record(out, "bitcast_convert_type", "new_dtype=%s" % NUMPY_NAME[dst], 0, [x], y)
    x = arr([True, False, True], "bool")
    record(out, "bitcast_convert_type", "new_dtype=bool", 0, [x],
           run("bitcast_convert_type", lax.bitcast_convert_type, x, new_dtype=np.bool_))
    return out


# ---- broadcasting, ranks, empty and larger arrays ----

def rand_array(dt, shape):
    n = int(np.prod(shape))
    if dt in FLOATS:
        return arr(RNG.normal(0, 3, n), dt, shape)
    if dt == "bool":
        return arr(RNG.integers(0, 2, n), dt, shape)
    return arr(RNG.integers(-1000, 1000, n), dt, shape)


def run_broadcast(prim, fn, *args):
    """fn on operands that lax broadcasts. The expected values come from
    operands materialized at the result's shape: XLA rewrites x / broadcast(y)
    into x * broadcast(1 / y), which rounds twice, and kiln's div is the
    primitive's definition (one correctly rounded division); every other op
    gives the same either way."""
    shape = np.broadcast_shapes(*[np.shape(a) for a in args])
    full = [np.array(np.broadcast_to(a, shape)) for a in args]
    run(prim, fn, *args)  # binds `prim` on the unbroadcast operands
    return run(prim, fn, *full)


def shape_cases():
    out = []
    shapes = [((2, 3), ()), ((), (2, 3)), ((2, 1), (1, 3)), ((1, 3), (2, 1)), ((2, 3), (2, 3)),
              ((), ()), ((3, 1, 4), (3, 5, 1)), ((1, 1, 1), (2, 3, 4)), ((0, 3), (1, 3)),
              ((0,), ()), ((2, 0), (2, 1)), ((5, 1, 70), (1, 4, 70)), ((300, 1), (1, 4)),
              ((3, 300), (3, 300)), ((1, 2, 1, 3, 1, 2, 1, 2), (2, 1, 2, 1, 2, 1, 2, 1))]
    ops = [("add", lax.add, "f32"), ("sub", lax.sub, "i32"), ("div", lax.div, "f64"),
           ("max", lax.max, "bf16"), ("lt", lax.lt, "f16"), ("shift_left", lax.shift_left, "u16"),
           ("atan2", lax.atan2, "f32"), ("nextafter", lax.nextafter, "f64"),
           ("and", lax.bitwise_and, "bool")]
    for sa, sb in shapes:
        big = max(np.prod(sa), np.prod(sb)) > 100
        for prim, fn, dt in ops[:3] if big else ops:
            a, b = rand_array(dt, sa), rand_array(dt, sb)
            if prim == "shift_left":
                b = arr(np.abs(RNG.integers(0, 20, int(np.prod(sb)))), dt, sb)
            record(out, prim, "", tol_for(prim, dt), [a, b], run_broadcast(prim, fn, a, b))
    # pow: float base, integer exponent, broadcast both ways
    for sa, sb in [((2, 3), ()), ((), (4,)), ((3, 1), (1, 2))]:
        a = arr(np.abs(RNG.normal(0, 2, int(np.prod(sa)))), "f32", sa)
        b = arr(RNG.integers(-4, 5, int(np.prod(sb))), "i16", sb)
        record(out, "pow", "", tol_for("pow", "f32"), [a, b], run_broadcast("pow", lax.pow, a, b))
    # unary on rank 0, empty, rank 3 and > one chunk
    for shape in [(), (0,), (2, 0, 3), (3, 4, 5), (700,)]:
        for prim, dt in (("exp", "f32"), ("neg", "i64"), ("is_finite", "f16"), ("not", "bool")):
            x = rand_array(dt, shape)
            record(out, prim, "", tol_for(prim, dt), [x], run(prim, UNARY[prim], x))
        x = rand_array("f32", shape)
        y = run("convert_element_type", lax.convert_element_type, x, new_dtype=np.int16)
        record(out, "convert_element_type", "new_dtype=int16 weak_type=False", 0, [x], y)
    # clamp and select_n with scalar and full operands, rank 2
    x = rand_array("f32", (4, 5))
    lo, hi = arr([-1.0], "f32", ()), rand_array("f32", (4, 5))
    record(out, "clamp", "", 0, [lo, x, hi], run_broadcast("clamp", lax.clamp, lo, x, hi))
    w = rand_array("bool", (4, 5))
    record(out, "select_n", "", 0, [w, x, hi], run("select_n", lax.select_n, w, x, hi))
    e = rand_array("f32", (0, 2))
    record(out, "clamp", "", 0, [lo, e, lo], run("clamp", lax.clamp, lo, e, lo))
    record(out, "select_n", "", 0, [arr([1], "bool", ()), e, e],
           run("select_n", lax.select_n, arr([1], "bool", ()), e, e))
    return out


# ---- the primitives issue 11 added ----

SPECIAL_RNG = np.random.default_rng(20261127)
# jax's tests/lax_test.py tolerances for the special functions (XLA computes
# them with its own approximations); default_tolerance otherwise
SPECIAL_TOL = {"lgamma": {"f32": 1e-5, "f64": 1e-14}, "digamma": {"f32": 1e-5, "f64": 1e-14}}


def special_values(prim, dt):
    r = SPECIAL_RNG
    vals = float_edges(dt) + list(r.normal(0, 4, 16)) + list(r.uniform(-2, 2, 8))
    if prim in ("lgamma", "digamma"):
        vals += [-1.0, -2.0, -3.5, -0.25, 1.4616321449683622, 2.0, 1e-3, 30.5, 171.5, 1e6]
        vals += list(r.uniform(0, 40, 16))
    if prim == "erfc":
        vals += list(r.uniform(-6, 12, 16))
    if prim == "reduce_precision":
        vals += list(np.exp(r.uniform(-90, 90, 24)) * r.choice([-1, 1], 24))
        vals += [65504.0, 65520.0, 6.1e-5, 6.0e-5, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11]
    return vals


def special_cases():
    out = []
    for prim, fn in (("square", lax.square), ("copy", lambda x: jax.numpy.copy(x))):
        for dt in FLOATS + INTS:
            x = arr(special_values(prim, dt) if dt in FLOATS
                    else int_edges(dt) + [5, 0x55, -0x33, 1 << 6], dt)
            record(out, prim, "", 0, [x], run(prim, fn, x))
    for prim, fn in (("erfc", lax.erfc), ("lgamma", lax.lgamma), ("digamma", lax.digamma)):
        for dt in FLOATS:
            x = arr(special_values(prim, dt), dt)
            tol = SPECIAL_TOL.get(prim, {}).get(dt, TOL[dt])
            record(out, prim, "", tol, [x], run(prim, fn, x))
    for dt in FLOATS + SINTS + UINTS:
        x = arr(special_values("integer_pow", dt) if dt in FLOATS
                else int_edges(dt) + [5, -3, 1 << 6], dt)
        for y in (0, 1, 2, 3, 5, 8, 13, -1, -2, -3, -7):
            if y < 0 and dt not in FLOATS:
                continue
            record(out, "integer_pow", "y=%d" % y, 0, [x],
                   run("integer_pow", lax.integer_pow, x, y=y))
    for dt in FLOATS:
        x = arr(special_values("reduce_precision", dt), dt)
        for e, m in ((5, 10), (8, 7), (8, 23), (11, 52), (4, 3), (2, 1), (6, 0), (3, 12)):
            record(out, "reduce_precision", "exponent_bits=%d mantissa_bits=%d" % (e, m), 0, [x],
                   run("reduce_precision", lax.reduce_precision, x, exponent_bits=e,
                       mantissa_bits=m))
    return out


def write(name, lines):
    path = os.path.join(HERE, name)
    with open(path, "w") as f:
        f.write("# %s: generated by eval_elementwise.py with jax %s; do not edit\n"
                % (name, jax.__version__))
        f.write("\n".join(lines) + "\n")
    size = os.path.getsize(path)
    assert size < 1 << 20, (name, size)
    print("wrote %s: %d cases, %d bytes" % (path, len(lines), size))


def main():
    write("eval_elementwise_unary.txt", unary_cases())
    write("eval_elementwise_binary.txt", binary_cases())
    write("eval_elementwise_compare.txt", compare_cases())
    write("eval_elementwise_misc.txt", select_cases() + clamp_cases() + convert_cases()
          + bitcast_cases() + shape_cases())
    write("eval_elementwise_special.txt", special_cases())


if __name__ == "__main__":
    main()
