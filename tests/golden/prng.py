#!/usr/bin/env python3
"""Golden data for tests/prng/test_prng.cc, computed by JAX itself (CPU).

Writes tests/golden/prng.txt, one record per line, whitespace-separated:

  kat       K0 K1 X0 X1 Y0 Y1                   threefry2x32 block (hex words)
  seed64    SEED K0 K1                          PRNGKey(int64 seed), x64 on
  seed32    SEED K0 K1                          PRNGKey(int32 seed)
  split     K0 K1 N W...                        split(key, N) words, 2*N of them
  fold_in   K0 K1 DATA O0 O1
  bits      K0 K1 WIDTH       RANK DIMS... STEP : V...
  uniform   K0 K1 DTYPE LO HI RANK DIMS... STEP : V...
  normal    K0 K1 DTYPE       RANK DIMS... STEP : V...
  bernoulli K0 K1 DTYPE P     RANK DIMS... STEP : V...   (V is 0 or 1)
  erf_inv   DTYPE : X Y X Y ...

Keys and words are hex; floats (LO, HI, P) are float.hex() strings, which
strtod reads; every array element V is the raw bit pattern in hex, so that
bit-exact outputs are compared exactly. STEP > 1 means only the elements at
row-major indices 0, STEP, 2*STEP, ... are listed (keeps large shapes small).

Run from anywhere: python3 tests/golden/prng.py
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry_2x32

# PRNGKey of a Python int with x64 disabled (JAX's default) uses an int32
# seed; record it before enabling x64 to check seed32 against the real thing.
X64_OFF_KEYS = {s: np.asarray(jax.random.PRNGKey(s)) for s in (0, 1, 42, -1, -7, 2**31 - 1, -2**31)}

jax.config.update("jax_enable_x64", True)

PARTITIONABLE = jax.config.jax_threefry_partitionable
assert PARTITIONABLE, "kiln implements jax_threefry_partitionable=True (JAX's default)"

# Random123's known-answer vectors for threefry2x32_20 (kat_vectors):
# (key, counter) -> output.
KATS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]

SEEDS = [0, 1, 42, 2**32 + 5, -1, 2**62 + 12345, -(2**40) - 3]
SHAPES = [(), (7,), (3, 5), (2, 3, 4)]
BIG_SHAPE, BIG_STEP = (257, 256), 61  # > 2**16 elements, sampled
FLOATS = {"f16": jnp.float16, "bf16": jnp.bfloat16, "f32": jnp.float32, "f64": jnp.float64}
UINTS = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
RANGES = [(-1.3, 2.7), (0.1, 0.7), (-3.3, 100.1), (1e-3, 5e-3)]


def hexw(x):
    return format(int(x), "x")


def key_words(key):
    k = np.asarray(key, dtype=np.uint32)
    return hexw(k[0]), hexw(k[1])


def bit_patterns(a):
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return [str(int(v)) for v in a.ravel()]
    uint = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return [hexw(v) for v in a.view(uint).ravel()]


def array_record(kind, key, params, shape, values, step=1):
    vals = bit_patterns(values)[::step]
    head = [kind, *key_words(key), *map(str, params), str(len(shape)), *map(str, shape), str(step)]
    return " ".join(head + [":"] + vals)


def kat_records():
    out = []
    for key, ctr, expect in KATS:
        y = threefry_2x32(np.array(key, np.uint32), np.array(ctr, np.uint32))
        got = tuple(int(v) for v in np.asarray(y))
        assert got == expect, (key, ctr, [hex(v) for v in got])
        out.append(" ".join(["kat", *map(hexw, key + ctr + got)]))
    return out


def key_records():
    out = []
    for s in SEEDS:
        out.append(" ".join(["seed64", str(s), *key_words(jax.random.PRNGKey(s))]))
    for s, k in X64_OFF_KEYS.items():
        k32 = np.asarray(jax.random.PRNGKey(np.int32(s)))
        assert (k32 == k).all(), (s, k32, k)
        out.append(" ".join(["seed32", str(s), *key_words(k)]))
    for s in SEEDS:
        key = jax.random.PRNGKey(s)
        for n in (1, 2, 3, 5):
            words = np.asarray(jax.random.split(key, n)).ravel()
            out.append(" ".join(["split", *key_words(key), str(n), *map(hexw, words)]))
        for d in (0, 7, 2**31 + 3, 2**32 - 1):
            out.append(" ".join(["fold_in", *key_words(key), hexw(d),
                                 *key_words(jax.random.fold_in(key, d))]))
    # split into a shape is split into its element count.
    key = jax.random.PRNGKey(42)
    assert (np.asarray(jax.random.split(key, (2, 3))).reshape(6, 2)
            == np.asarray(jax.random.split(key, 6))).all()
    return out


def draw_records(key, shape, step=1):
    out = []
    for width, dt in UINTS.items():
        out.append(array_record("bits", key, [width], shape,
                                jax.random.bits(key, shape, dt), step))
    for name, dt in FLOATS.items():
        out.append(array_record("uniform", key, [name, "0x0.0p+0", "0x1.0000000000000p+0"], shape,
                                jax.random.uniform(key, shape, dt), step))
        out.append(array_record("normal", key, [name], shape,
                                jax.random.normal(key, shape, dt), step))
    for name in ("f32", "f64"):
        p = FLOATS[name](0.3)
        out.append(array_record("bernoulli", key, [name, float(p).hex()], shape,
                                jax.random.bernoulli(key, p, shape), step))
    return out


def range_records():
    """Uniform over non-trivial ranges: exercises XLA's rounding of u*span+lo."""
    out = []
    key = jax.random.PRNGKey(7)
    for name, dt in FLOATS.items():
        for lo, hi in RANGES:
            u = jax.random.uniform(key, (300,), dt, lo, hi)
            out.append(array_record("uniform", key, [name, lo.hex(), hi.hex()], (300,), u))
        for p in (0.05, 0.5, 0.999):
            pt = dt(p)
            out.append(array_record("bernoulli", key, [name, float(pt).hex()], (64,),
                                    jax.random.bernoulli(key, pt, (64,))))
    return out


def erf_inv_records():
    out = []
    for name, dt in (("f32", np.float32), ("f64", np.float64)):
        one_minus = np.nextafter(dt(1), dt(0))
        xs = [0.0, 1e-30, 1e-8, 0.1, -0.25, 0.5, 0.75, -0.9, 0.99, 0.995, 0.9966, 0.999,
              -0.99999, 0.9999999, 1 - 1e-12, 1 - 1e-15, 1.0, -1.0]
        x = np.concatenate([np.array(xs, dt), np.array([one_minus, -one_minus], dt),
                            np.linspace(-1, 1, 101, dtype=dt)[1:-1]])
        y = np.asarray(jax.lax.erf_inv(jnp.asarray(x)))
        pairs = [v for xy in zip(bit_patterns(x), bit_patterns(y)) for v in xy]
        out.append(" ".join(["erf_inv", name, ":"] + pairs))
    return out


def main():
    lines = [
        f"# Generated by tests/golden/prng.py with jax {jax.__version__} on CPU.",
        f"# jax_threefry_partitionable default: {PARTITIONABLE}; jax_enable_x64: True.",
    ]
    lines += kat_records() + key_records()
    for s in SEEDS:
        for shape in SHAPES:
            lines += draw_records(jax.random.PRNGKey(s), shape)
    lines += draw_records(jax.random.PRNGKey(3), BIG_SHAPE, BIG_STEP)
    lines += range_records() + erf_inv_records()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prng.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}: {len(lines)} records, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
