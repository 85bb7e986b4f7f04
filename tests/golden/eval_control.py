#!/usr/bin/env python3
"""Golden data for tests/ir/test_eval_control.cc, computed by JAX itself (CPU).

Writes two files next to this script.

eval_control.txt: control flow (cond, while, scan), threefry2x32 and
debug_print inside loops. Each case is a JAX program that the C++ test
rebuilds as a kiln IR program under the same name (the comments on each
builder below say what the IR is); inputs and outputs are raw bytes:

  case NAME
  in  DTYPE SHAPE HEX         one per program input, in order
  out DTYPE SHAPE HEX         one per program output, in order
  line TEXT                   debug_print lines, in the order JAX printed them
  end

eval_control_print.txt: jax.debug.print's text for one format and values:

  print FMT                   a format JAX accepts ...
  value DTYPE SHAPE HEX       ... its values ...
  expect TEXT                 ... and the line it printed (no final newline)
  reject FMT                  a format JAX refuses at trace time (values follow)

DTYPE is kiln's short name (f32, i32, bool, ...), SHAPE "-" for a scalar or
the dimensions joined by commas; HEX is the little-endian storage bytes
("-" when empty). TEXT and FMT are escaped: backslash as \\\\, newline as \\n.
The arithmetic is exact (small integers and halves), so outputs compare bit
for bit whatever XLA fuses.

Run from anywhere: python3 tests/golden/eval_control.py
"""
import contextlib
import io
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.extend.core.primitives import cond_p
from jax.extend.random import threefry2x32_p

jax.config.update("jax_enable_x64", True)

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = {
    np.dtype(np.bool_): "bool", np.dtype(np.int8): "i8", np.dtype(np.int16): "i16",
    np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8",
    np.dtype(np.uint16): "u16", np.dtype(np.uint32): "u32", np.dtype(np.uint64): "u64",
    np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16",
    np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
}
f32, i32, u32 = np.float32, np.int32, np.uint32


def escape(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n")


def array_line(tag, a):
    a = np.array(a, order="C", copy=True)
    shape = ",".join(str(d) for d in a.shape) if a.ndim else "-"
    data = a.tobytes().hex() or "-"
    return f"{tag} {NAMES[a.dtype]} {shape} {data}"


def run_printing(fn, *args):
    """fn jitted on args; its results and the lines jax.debug.print wrote."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        out = jax.block_until_ready(jax.jit(fn)(*args))
        jax.effects_barrier()
    lines = buf.getvalue().split("\n")
    assert lines[-1] == ""
    return out, lines[:-1]


# ---------------------------------------------------------------------------
# Control flow programs (the C++ builders mirror these)

def branches3():
    """The three branches of cond_raw / switch: (x+y, x), (x*y, y), (x-y, x*x)."""
    return [lambda x, y: (x + y, x), lambda x, y: (x * y, y), lambda x, y: (x - y, x * x)]


def cond_raw(i, x, y):
    # cond_p bound directly: XLA's Conditional picks the last branch for an
    # index out of range.
    jaxprs = tuple(jax.make_jaxpr(b)(x, y) for b in branches3())
    return cond_p.bind(i, x, y, branches=jaxprs)


def switch(i, x, y):
    # lax.switch clamps the index into range, then binds cond.
    return lax.switch(i, branches3(), x, y)


def while_count(n, w, x):
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2 + w), (i32(0), x))


def fori(n, x):
    return lax.fori_loop(0, n, lambda i, x: x * 2 + i.astype(f32), x)


def scan_cumsum(xs, reverse=False):
    return lax.scan(lambda c, x: (c + x, c + x), f32(0), xs, reverse=reverse)


def scan_consts(w, c0, xs, reverse=False):
    return lax.scan(lambda c, x: (c * w + x, c * w - x), c0, xs, reverse=reverse)


def scan_multi(k0, acc0, xs, js):
    def body(carry, x):
        k, acc = carry
        xv, j = x
        return (k + j, acc + xv), (acc, k * j, xv)
    (k, acc), (ys_acc, ys_kj, ys_x) = lax.scan(body, (k0, acc0), (xs, js))
    return k, acc, ys_acc, ys_kj, ys_x


def scan_empty(c0, xs):
    return lax.scan(lambda c, x: (c + x, c * x), c0, xs)


def while_nested_scan(n, xs, x):
    def body(c):
        i, v = c
        v, _ = lax.scan(lambda c, r: (c * 2 + r, c), v, xs)
        return i + 1, v
    return lax.while_loop(lambda c: c[0] < n, body, (i32(0), x))


def scan_nested_cond(c0, xs, ks):
    branches = tuple(jax.make_jaxpr(b)(f32(0), f32(0))
                     for b in (lambda c, x: c + x, lambda c, x: c * x, lambda c, x: c - x))

    def body(c, x):
        xv, k = x
        (c2,) = cond_p.bind(k, c, xv, branches=branches)
        return c2, c2
    return lax.scan(body, c0, (xs, ks))


def threefry(k1, k2, x1, x2):
    return threefry2x32_p.bind(k1, k2, x1, x2)


def scan_print(c0, xs):
    def body(c, x):
        jax.debug.print("c={} x={}", c, x)
        return c + x, None
    c, _ = lax.scan(body, c0, xs)
    return c


def while_print(v):
    def body(c):
        i, v = c
        jax.debug.print("i={} v={}", i, v)
        return i + 1, v * 2
    return lax.while_loop(lambda c: c[0] < 3, body, (i32(0), v))


def while_swap(a, b):
    # The body's outputs are its inputs swapped: the carry buffers must not alias.
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[2], c[1] + 1), (i32(0), a, b))


def scan_swap(a, b, xs):
    return lax.scan(lambda c, x: ((c[1] * x, c[0]), c[0]), (a, b), xs)


def cond_print(i, x):
    def branch(k):
        def f(x):
            jax.debug.print("branch " + str(k) + " got {}", x)
            return x + k
        return f
    jaxprs = tuple(jax.make_jaxpr(branch(k))(x) for k in (0, 1))
    return cond_p.bind(i, x, branches=jaxprs)


def control_cases():
    x3 = np.array([1.5, -2.0, 4.0], f32)
    y3 = np.array([0.5, 3.0, -1.0], f32)
    w3 = np.array([1.0, -0.5, 2.0], f32)
    xs43 = np.arange(12, dtype=f32).reshape(4, 3) / 2 - 2
    cases = []
    for i in (-1, 0, 1, 2, 3, 100):
        cases.append((f"cond_raw/{i}", cond_raw, [i32(i), x3, y3]))
    for i in (-5, 0, 1, 2, 9):
        cases.append((f"switch/{i}", switch, [i32(i), x3, y3]))
    for n in (0, 1, 5):
        cases.append((f"while_count/{n}", while_count, [i32(n), w3, x3]))
    for n in (0, 3):
        cases.append((f"fori_loop/{n}", fori, [i32(n), np.array([1.0, -0.5], f32)]))
    xs5 = np.array([1.0, 2.5, -3.0, 4.0, 0.5], f32)
    cases.append(("scan_cumsum", scan_cumsum, [xs5]))
    cases.append(("scan_cumsum_reverse", lambda xs: scan_cumsum(xs, True), [xs5]))
    cases.append(("scan_consts", scan_consts, [w3, x3, xs43]))
    cases.append(("scan_consts_reverse", lambda w, c, xs: scan_consts(w, c, xs, True), [w3, x3, xs43]))
    xs62 = np.arange(12, dtype=f32).reshape(6, 2) - 3
    cases.append(("scan_multi", scan_multi,
                  [i32(1), np.array([0.5, -1.0], f32), xs62, np.array([2, -1, 3, 0, 5, 1], i32)]))
    cases.append(("scan_empty", scan_empty, [x3, np.zeros((0, 3), f32)]))
    cases.append(("while_nested_scan", while_nested_scan,
                  [i32(3), np.array([[1, 0], [0.5, -1], [2, 2], [-1, 0.5]], f32),
                   np.array([1.0, -2.0], f32)]))
    cases.append(("scan_nested_cond", scan_nested_cond,
                  [f32(1.0), np.array([2, 3, 0.5, -1, 4], f32), np.array([0, 1, 2, 7, -1], i32)]))
    rng = np.random.default_rng(7)
    words = lambda *s: rng.integers(0, 2**32, s, dtype=np.uint64).astype(u32)
    cases.append(("threefry_vectors", threefry, [words(8), words(8), words(8), words(8)]))
    cases.append(("threefry_scalar_keys", threefry, [u32(0x13198A2E), u32(0x03707344), words(2, 3),
                                                     words(2, 3)]))
    cases.append(("threefry_broadcast", threefry, [words(2, 1), words(2, 1), words(1, 3),
                                                   words(2, 3)]))
    cases.append(("threefry_scalars", threefry, [u32(0), u32(0xFFFFFFFF), u32(7), u32(2**31)]))
    cases.append(("threefry_empty", threefry, [words(0), words(0), words(0), words(0)]))
    a2, b2 = np.array([1.0, 2.0], f32), np.array([-3.0, 0.5], f32)
    cases.append(("while_swap", while_swap, [a2, b2]))
    cases.append(("scan_swap", scan_swap, [a2, b2, np.array([2.0, -1.0, 0.5, 4.0], f32)]))
    for i in (0, 1, 5):
        cases.append((f"cond_print/{i}", cond_print, [i32(i), np.array([1.5, -2.0], f32)]))
    cases.append(("scan_print", scan_print, [f32(0.5), np.array([1.0, 2.0, -0.25], f32)]))
    cases.append(("while_print", while_print, [np.array([1.5, -3.0], f32)]))

    out = []
    for name, fn, args in cases:
        res, lines = run_printing(fn, *args)
        res = jax.tree_util.tree_leaves(res)
        out.append(f"case {name}")
        out += [array_line("in", np.asarray(a)) for a in args]
        out += [array_line("out", np.asarray(r)) for r in res]
        out += [f"line {escape(s)}" for s in lines]
        out.append("end")
    return out


# ---------------------------------------------------------------------------
# debug_print text

def bulk_cases():
    """Many floats per line, to pin the shortest-digit rules: powers of two
    (whose rounding interval is lopsided) and their neighbours, random bit
    patterns; as 0-d values (Python's float repr), as 1-element arrays
    (numpy's Dragon4 in the value's own type) and through the raw path
    (numpy's scalar str)."""
    rng = np.random.default_rng(11)
    floats = []
    for dt, ut, bits in ((np.float16, np.uint16, 16), (np.float32, np.uint32, 32),
                         (np.float64, np.uint64, 64)):
        info = np.finfo(dt)
        pows = [dt(2.0) ** k for k in range(info.minexp - info.nmant, info.maxexp)]
        near = [np.nextafter(p, dt(np.inf)) for p in pows] + [np.nextafter(p, dt(0)) for p in pows]
        rand = rng.integers(0, 2**bits - 1, 150, dtype=np.uint64).astype(ut).view(dt)
        step = len(pows) // 40 or 1
        # XLA:CPU runs host callbacks with denormals flushed (DAZ/FTZ), which
        # reaches numpy's own comparisons; kiln prints the stored value, so
        # f32/f64 subnormals are left out (f16 ones are widened first).
        normal = lambda v: np.isfinite(v) and (dt == np.float16 or v == 0 or abs(v) >= info.tiny)
        vals = [v for v in pows[::step] + near[::step] + list(rand) if normal(v)]
        floats.append(vals)
    out = []
    for vals in floats:
        for i in range(0, len(vals), 60):
            chunk = vals[i:i + 60]
            out.append(("{}" + " {}" * (len(chunk) - 1), chunk))
            out.append(("{}" + " {}" * (len(chunk) - 1), [np.array([v]) for v in chunk]))
            out.append(("{{str}}" + "{}" * len(chunk), chunk))
    return out


def print_cases():
    bf16 = ml_dtypes.bfloat16
    scalars = [f32(1.5), f32(0.1), f32(-0.0), f32(np.nan), f32(np.inf), f32(-np.inf), f32(1e16),
               f32(1e-5), f32(3.0), np.float16(0.1), np.float16(65504), np.float16(6e-8),
               bf16(0.1), bf16(3.0), bf16(1e10), np.float64(0.1), np.float64(1e22),
               np.float64(2.0**-1022), np.float64(2.0**-24), np.float64(1 / 3), np.float64(1e-4),
               np.int8(-128), np.int16(-300), i32(-3), np.int64(-2**63), np.uint8(255),
               np.uint16(65535), u32(2**32 - 1), np.uint64(2**64 - 1), np.bool_(True),
               np.bool_(False)]
    arrays = [
        np.array([1.5, 2, 3], f32), np.arange(3, dtype=i32), np.array([True, False]),
        np.array([0.1, 2, 3], np.float16), np.array([0.1, 2, 3], bf16),
        np.array([1e-5, 1], f32), np.array([1e8, 1]), np.array([1e6, 1], f32),
        np.array([999999, 1], f32), np.array([1000, 1], np.float16), np.array([999, 1], np.float16),
        np.array([np.float32(1e-4), 0.01], f32), np.array([1, 1000.5], f32),
        np.array([np.nan, 1, -np.inf], f32), np.array([np.nan, np.nan]), np.array([np.inf, -np.inf]),
        np.array([0.0, -0.0]), np.array([1 / 512, 1]), np.array([2.0**-24]),
        np.array([2.0**-96, 2.0**-95], f32), np.array([0.3, 1e-9], f32),
        np.array([-1.25e-7, 3e-3, 7.7e-7], np.float16), np.array([1e300, 1e-300]),
        np.zeros((0,), f32), np.zeros((2, 0), i32), np.arange(6, dtype=np.int64).reshape(2, 3) - 2,
        np.arange(24, dtype=f32).reshape(2, 3, 4) / 4, np.arange(30, dtype=f32) * 1.5,
        np.arange(100, dtype=np.uint8), np.arange(2000.0).reshape(2, 1000), np.arange(1001, dtype=i32),
        np.arange(7 ** 4, dtype=f32).reshape(7, 7, 7, 7), np.full((1,) * 8, 3.5, f32),
        np.arange(60, dtype=np.int64).reshape(3, 20) * 10**15,
        np.array([-128, 0, 127], np.int8), np.array([2**64 - 1, 0], np.uint64),
        np.linspace(0, 1, 40).astype(bf16),
    ]
    cases = [("{}", [v]) for v in scalars] + [("{}", [a]) for a in arrays]
    cases += [
        ("x={} y={}", [f32(1.5), np.arange(3, dtype=i32)]),
        ("{1} {0} {{}}", [f32(1.5), np.arange(3, dtype=i32)]),
        ("{0}{0}!", [i32(7)]),
        ("{{x}}", []),
        ("", []),
        ("plain text", []),
        ("a {{b}} {}", [f32(0.1)]),  # first brace escaped: printed raw, then str(x)
        ("{{}} {}", [np.float16(65504)]),
        ("{} {{b}} {}", [f32(1.5), np.array([1.0, 2.0], f32)]),
        ("λ={} ∑", [f32(2.0)]),
        ("{:} {:}", [i32(4), i32(5)]),  # an empty format spec is no spec
        ("{}\n{}", [np.arange(3, dtype=i32), f32(2.5)]),
        ("rows:\n{}", [np.arange(6, dtype=f32).reshape(3, 2)]),
    ]
    cases += bulk_cases()
    rejects = [
        ("{}", [f32(1), f32(2)]),        # a value left unused
        ("{} {}", [f32(1)]),             # an index out of range
        ("{", [f32(1)]),
        ("}", []),
        ("x } y", []),
        ("{0} {}", [f32(1), f32(2)]),    # manual then automatic numbering
        ("{} {1}", [f32(1), f32(2)]),    # automatic then manual
        ("{x}", [f32(1)]),               # a keyword
        ("{0{}", [f32(1)]),              # a brace inside a field name
        ("no placeholders", [f32(1)]),   # unused again
    ]
    out = []
    for fmt, vals in cases:
        args = [jnp.asarray(v) for v in vals]
        _, lines = run_printing(lambda *a: jax.debug.print(fmt, *a), *args)
        text = "\n".join(lines)
        out.append(f"print {escape(fmt)}")
        out += [array_line("value", np.asarray(a)) for a in args]
        out.append(f"expect {escape(text)}")
    for fmt, vals in rejects:
        args = [jnp.asarray(v) for v in vals]
        try:
            run_printing(lambda *a: jax.debug.print(fmt, *a), *args)
        except (ValueError, IndexError, KeyError):
            pass
        else:
            raise AssertionError(f"JAX accepted {fmt!r}")
        out.append(f"reject {escape(fmt)}")
        out += [array_line("value", np.asarray(v)) for v in vals]
    return out


def main():
    header = [f"# Generated by tests/golden/eval_control.py with jax {jax.__version__}, numpy "
              f"{np.__version__}, ml_dtypes {ml_dtypes.__version__} on CPU."]
    for name, lines in (("eval_control.txt", control_cases()),
                        ("eval_control_print.txt", print_cases())):
        with open(os.path.join(HERE, name), "w") as f:
            f.write("\n".join(header + lines) + "\n")


if __name__ == "__main__":
    main()
