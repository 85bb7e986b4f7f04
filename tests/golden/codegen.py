"""Edge semantics of fused kernels, computed by JAX (CPU, x64 enabled).

Writes codegen.txt: one case per block of lines,

    case <name>
    program <a kiln IR program on one line>
    input <dtype> <n> <hex bits of each element>
    ...
    output <dtype> <n> <hex bits> [tol]

tests/codegen/test_codegen_*.cc compiles each program's group with the code generator
and compares the kernel's outputs with these bits (floats: NaN matches any
NaN; `tol` allows a relative difference for transcendental functions).
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

SHORT = {np.dtype(np.bool_): "bool", np.dtype(np.int8): "i8", np.dtype(np.int16): "i16",
         np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8",
         np.dtype(np.uint16): "u16", np.dtype(np.uint32): "u32", np.dtype(np.uint64): "u64",
         np.dtype(jnp.float16): "f16", np.dtype(jnp.bfloat16): "bf16",
         np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(a):
    a = np.asarray(a)
    return " ".join("%x" % v for v in a.reshape(-1).view(UINT[a.dtype.itemsize]))


def typ(a):
    a = np.asarray(a)
    return "%s[%s]" % (SHORT[a.dtype], ",".join(str(d) for d in a.shape))


cases = []


def case(name, prim_text, fn, *inputs, tol=0.0):
    """prim_text: the equation's right-hand side over operands a, b, c."""
    ins = [np.asarray(x) for x in inputs]
    out = np.asarray(fn(*ins))
    names = "abc"
    params = " ".join("%s:%s" % (names[i], typ(x)) for i, x in enumerate(ins))
    prog = "{ lambda ; %s. let z:%s = %s in (z,) }" % (params, typ(out), prim_text)
    lines = ["case " + name, "program " + prog]
    for x in ins:
        lines.append("input %s %d %s" % (SHORT[x.dtype], x.size, bits(x)))
    lines.append("output %s %d %s %g" % (SHORT[out.dtype], out.size, bits(out), tol))
    cases.append("\n".join(lines))


i32 = np.int32
mn = np.iinfo(i32).min
case("div_i32", "div a b", lax.div,
     np.array([7, -7, mn, mn, 5, 0, -9], i32), np.array([0, 0, -1, 1, -2, 0, 4], i32))
case("rem_i32", "rem a b", lax.rem,
     np.array([7, -7, mn, mn, 5, 0, -9], i32), np.array([0, 0, -1, 1, -2, 0, 4], i32))
case("div_u32", "div a b", lax.div,
     np.array([7, 0, 4294967295, 9], np.uint32), np.array([0, 0, 2, 4], np.uint32))
case("rem_u8", "rem a b", lax.rem,
     np.array([7, 0, 255, 9], np.uint8), np.array([0, 0, 2, 4], np.uint8))
for dt in (np.int8, np.uint8, np.int32, np.uint64):
    w = np.dtype(dt).itemsize * 8
    x = np.array([-8, 8, -1, 1, 100, -128, 5, 3], np.int64).astype(dt)
    s = np.array([w + 1, w, w - 1, 31 % w, 1, 1, -1, 0], np.int64).astype(dt)
    n = SHORT[np.dtype(dt)]
    case("shift_left_" + n, "shift_left a b", lax.shift_left, x, s)
    case("shift_right_logical_" + n, "shift_right_logical a b", lax.shift_right_logical, x, s)
    case("shift_right_arithmetic_" + n, "shift_right_arithmetic a b",
         lax.shift_right_arithmetic, x, s)
f32 = np.float32
edges = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7, 1e20, -1, 255.5, 256, -128.5,
                  0.0, -0.0], f32)
for dt in (np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.bool_):
    n = np.dtype(dt).name
    case("f32_to_" + SHORT[np.dtype(dt)],
         "convert_element_type[new_dtype=%s weak_type=False] a" % n,
         lambda a, dt=dt: lax.convert_element_type(a, dt), edges)
f64v = np.array([1 + 2.0**-11 + 2.0**-40, 1 + 2.0**-8 + 2.0**-40, 65519.99, 65520.0, 1e-8,
                 -(1 + 2.0**-11), np.nan], np.float64)
case("f64_to_f16", "convert_element_type[new_dtype=float16 weak_type=False] a",
     lambda a: lax.convert_element_type(a, jnp.float16), f64v)
case("f64_to_bf16", "convert_element_type[new_dtype=bfloat16 weak_type=False] a",
     lambda a: lax.convert_element_type(a, jnp.bfloat16), f64v)
case("i64_to_bf16", "convert_element_type[new_dtype=bfloat16 weak_type=False] a",
     lambda a: lax.convert_element_type(a, jnp.bfloat16),
     np.array([2**24 + 2**16 + 1, 2**24 + 1, -(2**40 + 2**32 + 1), 7], np.int64))
mx_a = np.array([np.nan, 1, -0.0, 0.0, -np.inf, 2], f32)
mx_b = np.array([1, np.nan, 0.0, -0.0, 3, 2], f32)
case("max_f32", "max a b", lax.max, mx_a, mx_b)
case("min_f32", "min a b", lax.min, mx_a, mx_b)
case("max_bf16", "max a b", lax.max, mx_a.astype(jnp.bfloat16), mx_b.astype(jnp.bfloat16))
case("select_n_i32", "select_n a b c", lambda w, x, y: lax.select_n(w, x, y),
     np.array([-1, 0, 1, 2, 7], i32), np.full(5, 10, f32), np.full(5, 20, f32))
case("clamp_f32", "clamp a b c", lax.clamp, np.array([0, np.nan, 0, -1], f32),
     np.array([np.nan, 0.5, 2, -0.0], f32), np.array([1, 1, 1, 0.0], f32))
case("sign_f32", "sign a", lax.sign, np.array([np.nan, -0.0, 0.0, -3, 5, -np.inf], f32))
rv = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.7], f32)
case("round_away", "round[rounding_method=0] a", lambda a: lax.round(a, 0), rv)
case("round_even", "round[rounding_method=1] a", lambda a: lax.round(a, 1), rv)
case("population_count_i8", "population_count a", lax.population_count,
     np.array([-1, 0, 1, -128, 85], np.int8))
case("population_count_i64", "population_count a", lax.population_count,
     np.array([-1, 0, 2**40 + 3], np.int64))
h = np.array([1, 0, -0.0, 65504, 6e-8, -1], jnp.float16)
hb = np.array([2, -1, 1, np.inf, 0, -2], jnp.float16)
case("nextafter_f16", "nextafter a b", lax.nextafter, h, hb)
case("nextafter_bf16", "nextafter a b", lax.nextafter, h.astype(jnp.bfloat16),
     hb.astype(jnp.bfloat16))
case("exp2_f16", "exp2 a", lax.exp2, np.array([10, 3, -2, 0.5, 15], jnp.float16), tol=1e-3)
case("logistic_f16", "logistic a", lax.logistic,
     np.array([-100, 0, 1.5, 10, -3], jnp.float16), tol=1e-3)
case("pow_f16_int", "pow a b", lax.pow, np.array([2, -2, 1.5, 3], jnp.float16),
     np.array([4097, 3, -2, 11], i32), tol=1e-3)
case("abs_i32", "abs a", lax.abs, np.array([mn, -5, 5, 0], i32))
case("neg_i8", "neg a", lax.neg, np.array([-128, 127, 0, -1], np.int8))
case("mul_i32_wraps", "mul a b", lax.mul, np.array([65536, mn, 7], i32),
     np.array([65536, -1, -3], i32))
case("reduce_max_f32", "reduce_max[axes=(1,)] a", lambda a: lax.reduce_max(a, (1,)),
     np.array([[1, np.nan, 3], [-0.0, 0.0, -0.0], [-np.inf, -np.inf, -np.inf]], f32))
case("reduce_min_f32", "reduce_min[axes=(1,)] a", lambda a: lax.reduce_min(a, (1,)),
     np.array([[1, np.nan, 3], [0.0, -0.0, 0.0], [5, 2, 9]], f32))

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "codegen.txt")
with open(path, "w") as f:
    f.write("# Generated by tests/golden/codegen.py with jax %s; do not edit.\n" % jax.__version__)
    f.write("\n\n".join(cases) + "\n")
print("wrote", path, len(cases), "cases")
