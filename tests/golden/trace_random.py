#!/usr/bin/env python3
"""Golden data for tests/trace/test_trace_random.cc beyond tests/golden/prng.txt.

Writes tests/golden/trace_random.txt in prng.txt's record format:

  uniform   K0 K1 DTYPE LO HI RANK DIMS... STEP : V...
  fold_scan K0 K1 N : V...     V[i] = bits(fold_in(key, i), (), uint32)
  chain     K0 K1 : V...       normal(split(fold_in(key, 5), 3)[2], (4,), float32)

Keys are hex words, LO/HI float.hex() strings, V raw bit patterns in hex.

The uniform records pin down how XLA:CPU rounds uniform's u * span + lo for
float32 and float64: one fused multiply-add. Two float32 ones are built so
that the f64 sum u * span + lo lands exactly on a float32 half-way point
while the exact value does not, where rounding that f64 sum to float32 would
round the wrong way.

Run from anywhere: python3 tests/golden/trace_random.py
"""
import os
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)
assert jax.config.jax_threefry_partitionable


def hexw(x):
    return format(int(x), "x")


def key_words(key):
    k = np.asarray(key, dtype=np.uint32)
    return hexw(k[0]), hexw(k[1])


def bit_patterns(a):
    a = np.asarray(a)
    uint = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return [hexw(v) for v in a.view(uint).ravel()]


def uniform_record(key, lo, hi, n, dtype=np.float32):
    lo_d, hi_d = dtype(lo), dtype(hi)
    u = np.asarray(jax.random.uniform(key, (n,), dtype, lo_d, hi_d))
    name = {np.float32: "f32", np.float64: "f64"}[dtype]
    head = ["uniform", *key_words(key), name, float(lo_d).hex(), float(hi_d).hex(), "1", str(n), "1"]
    return " ".join(head + [":"] + bit_patterns(u)), u


def round_f32(x):
    # float(x) rounds to f64 once; refine to a correctly rounded f32 by
    # comparing with both f32 neighbours of the f64 value.
    c = np.float32(float(x))
    best = c
    for cand in (np.nextafter(c, np.float32(-np.inf)), np.nextafter(c, np.float32(np.inf))):
        d_best, d_cand = abs(Fraction(float(best)) - x), abs(Fraction(float(cand)) - x)
        if d_cand < d_best or (d_cand == d_best and int(cand.view(np.uint32)) % 2 == 0):
            best = cand
    return best


def double_rounding_ranges(key, n):
    """(lo, hi) pairs where RN_f32(RN_f64(u*span + lo)) != RN_f32(u*span + lo).

    With span = S 2^-24 (S a 24-bit integer), u = k 2^-23 and
    lo = L 2^-63 (L = 2^23 +- 1), u*span + lo = M + d with M an odd multiple
    of 2^-25 (a float32 half-way point in [0.5, 1)) and |d| = 2^-63 when
    k S = (2j + 1) 2^22 - 2^7: the f64 sum is M exactly, so the wrong
    rounding happens for one of the two signs of d.
    """
    u = np.asarray(jax.random.uniform(key, (n,), jnp.float32))
    for i in range(n):
        k = int(round(float(u[i]) * 2**23))
        if k < 2**22 or k % 2 == 0:
            continue
        # k S = 2^7 ((2j + 1) 2^15 - 1): pick the odd multiplier m = 2j + 1
        # with k | 2^7 (m 2^15 - 1) and S in [2^23, 2^24).
        inv = pow(2**15, -1, k)  # m = 2^-15 (mod k), made odd below
        for m in range(inv, inv + 4 * k, k):
            if m % 2 == 0:
                continue
            num = 2**7 * (m * 2**15 - 1)
            if num % k:
                continue
            S = num // k
            if 2**23 <= S < 2**24:
                span = np.float32(S * 2.0**-24)
                for L in (2**23 + 1, 2**23 - 1):
                    lo = np.float32(L * 2.0**-63)
                    yield i, float(lo), float(span)


def uniform_records():
    out = []
    key = jax.random.PRNGKey(11)
    n = 64
    found = 0
    for i, lo, hi in double_rounding_ranges(key, n):
        rec, got = uniform_record(key, lo, hi, n)
        lo32, hi32 = np.float32(lo), np.float32(hi)
        span = np.float32(hi32 - lo32)
        u = np.asarray(jax.random.uniform(key, (n,), jnp.float32))
        want = round_f32(Fraction(float(u[i])) * Fraction(float(span)) + Fraction(float(lo32)))
        naive = np.float32(np.float64(u[i]) * np.float64(span) + np.float64(lo32))
        assert got[i] == want, ("XLA:CPU no longer fuses u*span+lo", got[i], want)
        if naive != want:
            out.append(rec)
            found += 1
        if found == 2:
            break
    assert found == 2, "no double-rounding case found"
    # Wide-exponent ranges, where plain ops and the fused form disagree.
    for lo, hi in ((1000.0, 1000.001), (-5e6, -4.9999993e6), (1e-30, 0.3), (-2.5, 1e-20)):
        out.append(uniform_record(key, lo, hi, 200)[0])
    for lo, hi in ((1000.0, 1000.001), (1e-30, 0.3), (-2.5, 1e-20), (-1e300, 1e300),
                   (-0.1, 1e-200), (3e-250, 7.000000000001e-250)):
        out.append(uniform_record(key, lo, hi, 200, np.float64)[0])
    return out


def fold_scan_record(key, n):
    vals = [jax.random.bits(jax.random.fold_in(key, i), (), jnp.uint32) for i in range(n)]
    return " ".join(["fold_scan", *key_words(key), str(n), ":"] + [hexw(v) for v in vals])


def chain_record(key):
    k = jax.random.split(jax.random.fold_in(key, 5), 3)[2]
    v = jax.random.normal(k, (4,), jnp.float32)
    return " ".join(["chain", *key_words(key), ":"] + bit_patterns(v))


def main():
    lines = [f"# Generated by tests/golden/trace_random.py with jax {jax.__version__} on CPU."]
    lines += uniform_records()
    for seed in (0, 42, -3):
        key = jax.random.PRNGKey(seed)
        lines += [fold_scan_record(key, 6), chain_record(key)]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trace_random.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}: {len(lines)} records, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
