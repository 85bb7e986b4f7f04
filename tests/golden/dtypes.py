#!/usr/bin/env python3
"""Golden data for tests/core/test_dtype.cc, computed by JAX (CPU, x64 enabled).

Writes, next to this script:
  promotion.txt          every (dtype, weak) x (dtype, weak) pair under the
                         'standard' and 'strict' jax_numpy_dtype_promotion modes:
                         the (dtype, weak) of a jnp binary op's result (what
                         jnp.add produces, i.e. dtypes.lattice_result_type) and
                         of dtypes.result_type(..., return_weak_type_flag=True),
                         or "error" where JAX raises TypePromotionError.
  float_conversions.txt  f16/bf16 -> f32 for a sample of bit patterns and
                         f32 -> f16/bf16 for boundary, special and random f32
                         values, converted by XLA (jnp.astype).

Run: python3 tests/golden/dtypes.py   (deterministic; rerun when JAX changes)
"""
import os

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import dtypes as jdt  # noqa: E402
from jax._src.lax import lax as lax_internal  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# kiln's dtypes in enum order, with the short (jaxpr) names kiln prints.
DTYPES = [
    ("bool", np.bool_), ("i8", np.int8), ("i16", np.int16), ("i32", np.int32),
    ("i64", np.int64), ("u8", np.uint8), ("u16", np.uint16), ("u32", np.uint32),
    ("u64", np.uint64), ("f16", np.float16), ("bf16", ml_dtypes.bfloat16),
    ("f32", np.float32), ("f64", np.float64),
]
SHORT = {np.dtype(t): s for s, t in DTYPES}


def weak_value(dt, weak):
    """A concrete scalar with the given weak flag (dtypes.result_type reads
    aval.weak_type; a ShapeDtypeStruct's weak flag is ignored there)."""
    dt = np.dtype(dt)
    return lax_internal._convert_element_type(jnp.zeros((), dt), dt, weak_type=weak)


def fmt(dt, weak):
    return f"{SHORT[np.dtype(dt)]} {int(bool(weak))}"


def op_result(a, b):
    """(dtype, weak) of jnp.add's result, or None if JAX refuses."""
    try:
        out = jax.eval_shape(jnp.add, jax.ShapeDtypeStruct((), a[0], weak_type=a[1]),
                             jax.ShapeDtypeStruct((), b[0], weak_type=b[1]))
    except jdt.TypePromotionError:
        return None
    lattice = jdt.lattice_result_type(weak_value(*a), weak_value(*b))
    assert (np.dtype(lattice[0]), bool(lattice[1])) == (out.dtype, bool(out.weak_type)), (a, b)
    return out.dtype, out.weak_type


def canonical_result(a, b):
    """dtypes.result_type(a, b, return_weak_type_flag=True), or None."""
    try:
        dt, weak = jdt.result_type(weak_value(*a), weak_value(*b), return_weak_type_flag=True)
    except jdt.TypePromotionError:
        return None
    return dt, weak


def promotion_table():
    lines = ["# mode a_dtype a_weak b_dtype b_weak : op_dtype op_weak : result_dtype result_weak",
             "# op = jnp.add's result (dtypes.lattice_result_type); result = dtypes.result_type",
             "# 'error -' where JAX raises TypePromotionError. JAX " + jax.__version__ + ", x64."]
    for mode in ("standard", "strict"):
        with jax.numpy_dtype_promotion(mode):
            for _, ta in DTYPES:
                for wa in (0, 1):
                    for _, tb in DTYPES:
                        for wb in (0, 1):
                            a, b = (np.dtype(ta), bool(wa)), (np.dtype(tb), bool(wb))
                            op, rt = op_result(a, b), canonical_result(a, b)
                            assert (op is None) == (rt is None), (mode, a, b)
                            if not wa and not wb and mode == "standard":
                                assert np.dtype(jnp.promote_types(ta, tb)) == op[0]
                            lines.append(" ".join([
                                mode, fmt(*a), fmt(*b), ":",
                                "error -" if op is None else fmt(*op), ":",
                                "error -" if rt is None else fmt(*rt)]))
    return lines


def bits_to_f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def narrow_patterns(exp_bits, man_bits, stride):
    """A sample of a 16-bit float's patterns: every stride-th one, both ends of
    each exponent, and every NaN/infinity edge, with both signs."""
    man_mask = (1 << man_bits) - 1
    inf = ((1 << exp_bits) - 1) << man_bits
    pats = set(range(0, 1 << 16, stride))
    for e in range(1 << exp_bits):
        pats |= {e << man_bits, (e << man_bits) | man_mask, (e << man_bits) | 1}
    pats |= {inf, inf | 1, inf | (1 << (man_bits - 1)), inf | man_mask, inf | 0x15}
    pats |= {p | 0x8000 for p in pats}
    return sorted(pats)


def widen_lines(tag, pats, np_type):
    out = np.asarray(jnp.asarray(np.asarray(pats, np.uint16).view(np_type)).astype(jnp.float32))
    return [f"{tag} {p:04x} {int(v):08x}" for p, v in zip(pats, out.view(np.uint32))]


def boundary_f32(np_type, exp_bits, man_bits, stride, rng):
    """Midpoints between adjacent finite patterns (and the virtual pattern
    past the largest finite, for overflow), each +-1 f32 ulp, both signs."""
    inf = ((1 << exp_bits) - 1) << man_bits
    lows = list(range(0, inf, stride)) + [0, 1, (1 << man_bits) - 1, 1 << man_bits, inf - 1]
    vals = []
    for lo in lows:
        a = float(np.asarray(lo, np.uint16).view(np_type).astype(np.float64))
        hi = lo + 1
        if hi == inf:  # value the next pattern would have with a wider exponent
            emax = (1 << (exp_bits - 1)) - 1
            b = 2.0 ** (emax + 1)
        else:
            b = float(np.asarray(hi, np.uint16).view(np_type).astype(np.float64))
        mid = np.float32((a + b) / 2)  # exact: one more bit than the narrow type
        assert float(mid) == (a + b) / 2
        for v in (mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0))):
            vals.append(v if rng.random() < 0.5 else -v)
    return vals


def narrow_lines(rng):
    vals = []
    vals += boundary_f32(np.float16, 5, 10, 97, rng)
    vals += boundary_f32(ml_dtypes.bfloat16, 8, 7, 97, rng)
    specials = [0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
                0x7f800001, 0xff800001, 0x7fc00001, 0x7f801000, 0x7f812345, 0x7fbfffff,
                0x7fffffff, 0xffffffff, 0x7f7fffff, 0xff7fffff, 0x00000001, 0x007fffff,
                0x00800000, 0x00400000, 0x00008000, 0x00018000, 0x00028000, 0x807fffff,
                0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x33000000, 0x33000001,
                0x32ffffff, 0x38800000, 0x387fc000, 0x387fe000, 0x387fffff, 0x7f7f8000,
                0x7f7f7fff, 0x7f7f8001]
    vals += list(bits_to_f32(specials))
    vals += list(bits_to_f32(rng.integers(0, 1 << 32, 1500, dtype=np.uint64)))
    vals += list(bits_to_f32(rng.integers(0, 1 << 23, 100, dtype=np.uint64)))  # f32 subnormals
    x = np.asarray(vals, np.float32)
    h = np.asarray(jnp.asarray(x).astype(jnp.float16)).view(np.uint16)
    b = np.asarray(jnp.asarray(x).astype(jnp.bfloat16)).view(np.uint16)
    return [f"f32 {int(v):08x} {int(hv):04x} {int(bv):04x}"
            for v, hv, bv in zip(x.view(np.uint32), h, b)]


def conversion_table():
    rng = np.random.default_rng(20240611)
    lines = ["# f16 <f16 bits> <f32 bits> | bf16 <bf16 bits> <f32 bits> | "
             "f32 <f32 bits> <f16 bits> <bf16 bits>",
             "# converted by XLA (jnp.astype) on CPU, JAX " + jax.__version__]
    lines += widen_lines("f16", narrow_patterns(5, 10, 61), np.float16)
    lines += widen_lines("bf16", narrow_patterns(8, 7, 61), ml_dtypes.bfloat16)
    lines += narrow_lines(rng)
    return lines


def write(name, lines):
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    write("promotion.txt", promotion_table())
    write("float_conversions.txt", conversion_table())
