"""A seeded generator of small, well-typed jax.numpy programs: elementwise
chains with broadcasting and mixed dtypes (bf16 and f16 included), weak
Python scalars, reductions, cumulative sums, reshapes, transposes, slices,
concatenation, dots, iota, converts, and control flow (cond, scan,
fori_loop, while_loop).

A program is a list of steps over a growing list of values; every value's
shape and dtype are known (jax.eval_shape), so each step picks operands it
can take. Values are kept in a tame range (inputs are standard normal;
unbounded functions get bounded arguments) so that comparisons at JAX's
per-dtype tolerances are meaningful.

    python3 tests/python/progen.py --seed 17   # prints that program's jaxpr
"""
import argparse

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

FLOATS = [np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)]
INTS = [np.dtype(np.int32)]
DTYPES = FLOATS * 2 + INTS + [np.dtype(np.bool_)]

# Unary functions on floats, each safe on any finite input of moderate size.
F_UNARY = {
    "exp_tanh": lambda x: jnp.exp(jnp.tanh(x)),
    "tanh": jnp.tanh, "sin": jnp.sin, "cos": jnp.cos, "abs": jnp.abs, "neg": jnp.negative,
    "sqrt_abs": lambda x: jnp.sqrt(jnp.abs(x)), "log1p_abs": lambda x: jnp.log1p(jnp.abs(x)),
    "sigmoid": jax.nn.sigmoid, "relu": jax.nn.relu,
    "square_tanh": lambda x: jnp.square(jnp.tanh(x)),
    # Step functions amplify a last-bit difference at a step (tanh saturating
    # to -1 in one library and -0.99999994 in another, then ceil): shifted
    # and scaled, their steps sit away from the values such chains produce.
    "floor": lambda x: jnp.floor(x * 4.1 + 0.3), "ceil": lambda x: jnp.ceil(x * 4.1 + 0.3),
    "sign": lambda x: jnp.sign(x + 0.3),
    "rsqrt": lambda x: lax.rsqrt(jnp.abs(x) + 1), "erf": lax.erf,
}
I_UNARY = {"neg": jnp.negative, "abs": jnp.abs, "sign": jnp.sign, "sq": lambda x: x * x % 97}
BINARY = {
    "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "max": jnp.maximum,
    "min": jnp.minimum,
    "div": lambda a, b: a / (jnp.abs(b) + 1),  # floats only
}
COMPARE = {"lt": jnp.less, "gt": jnp.greater, "eq": jnp.equal, "ge": jnp.greater_equal}


class Program:
    def __init__(self, seed):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.inputs, self.avals, self.steps, self.names = [], [], [], []
        self.sources = []  # per value: ("in", input index) or ("step", step index)

    # ---- values ----
    def add_input(self, shape, dtype):
        r = self.rng
        if dtype.kind == "f":
            v = r.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            v = r.random(shape) < 0.5
        else:
            v = r.integers(-20, 21, shape).astype(dtype)
        self.sources.append(("in", len(self.inputs)))
        self.inputs.append(np.asarray(v))
        self.avals.append(jax.ShapeDtypeStruct(shape, dtype))
        return len(self.avals) - 1

    def add_step(self, name, fn, idx):
        out = jax.eval_shape(fn, *[self.avals[i] for i in idx])
        self.sources.append(("step", len(self.steps)))
        self.steps.append((fn, tuple(idx)))
        self.names.append(name)
        self.avals.append(out)
        return len(self.avals) - 1

    def pick(self, pred=lambda a: True):
        c = [i for i, a in enumerate(self.avals) if pred(a)]
        return int(self.rng.choice(c)) if c else None

    def rand_shape(self, max_rank=3):
        rank = int(self.rng.integers(0, max_rank + 1))
        return tuple(int(d) for d in self.rng.integers(1, 6, rank))

    def broadcastable_to(self, shape):
        """A shape that broadcasts against `shape`: leading axes dropped,
        some axes set to 1."""
        drop = int(self.rng.integers(0, len(shape) + 1))
        return tuple(1 if self.rng.random() < 0.3 else d for d in shape[drop:])

    def float_operand(self):
        i = self.pick(lambda a: a.dtype.kind == "f")
        return i if i is not None else self.add_input(self.rand_shape(), FLOATS[0])

    # ---- steps ----
    def step(self):
        r = self.rng
        kind = r.choice(["unary", "binary", "binary", "scalar", "compare_where", "reduce", "cumsum",
                         "reshape", "transpose", "slice", "concat", "dot", "convert", "iota",
                         "cond", "scan", "fori", "while", "argmax"])
        getattr(self, "s_" + str(kind))()

    def s_unary(self):
        i = self.pick(lambda a: a.dtype != np.bool_) or self.float_operand()
        table = F_UNARY if self.avals[i].dtype.kind == "f" else I_UNARY
        name = str(self.rng.choice(sorted(table)))
        self.add_step(name, table[name], [i])

    def s_binary(self):
        i = self.pick(lambda a: a.dtype != np.bool_) or self.float_operand()
        a = self.avals[i]
        shape = self.broadcastable_to(a.shape)
        j = self.pick(lambda b: b.shape == shape and b.dtype != np.bool_)
        if j is None or self.rng.random() < 0.3:
            dt = a.dtype if self.rng.random() < 0.6 else self.rng.choice(FLOATS + INTS)
            j = self.add_input(shape, np.dtype(dt))
        names = sorted(BINARY)
        if a.dtype.kind != "f" and self.avals[j].dtype.kind != "f":
            names.remove("div")
        name = str(self.rng.choice(names))
        args = [i, j] if self.rng.random() < 0.5 else [j, i]
        self.add_step(name, BINARY[name], args)

    def s_scalar(self):
        i = self.pick(lambda a: a.dtype != np.bool_) or self.float_operand()
        c = float(np.round(self.rng.uniform(-3, 3), 2))
        if self.avals[i].dtype.kind != "f" or self.rng.random() < 0.3:
            c = int(self.rng.integers(-3, 4))  # a weak int scalar
        name = str(self.rng.choice(["add", "mul", "sub", "max"]))
        self.add_step(f"{name}_scalar({c})", lambda x: BINARY[name](x, c), [i])

    def s_compare_where(self):
        i = self.pick(lambda a: a.dtype != np.bool_) or self.float_operand()
        a = self.avals[i]
        j = self.pick(lambda b: b.shape == a.shape and b.dtype == a.dtype)
        name = str(self.rng.choice(sorted(COMPARE)))
        cmp_ = COMPARE[name]
        self.add_step(f"where_{name}", lambda x, y: jnp.where(cmp_(x, y), x, y * 2), [i, j])

    def axes(self, rank):
        k = int(self.rng.integers(0, rank + 1))
        return tuple(sorted(int(a) for a in self.rng.choice(rank, k, replace=False)))

    def s_reduce(self):
        i = self.pick(lambda a: a.ndim > 0)
        if i is None:
            return self.s_unary()
        a = self.avals[i]
        name = str(self.rng.choice(["sum", "max", "min", "mean", "any"]))
        ax, keep = self.axes(a.ndim), bool(self.rng.random() < 0.3)
        if name == "any":
            return self.add_step(f"any{ax}", lambda x: jnp.any(x > 0, axis=ax, keepdims=keep), [i])
        if a.dtype == np.bool_:
            name = "max"
        fn = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min, "mean": jnp.mean}[name]
        self.add_step(f"{name}{ax}", lambda x: fn(x, axis=ax, keepdims=keep), [i])

    def s_argmax(self):
        i = self.pick(lambda a: a.ndim > 0 and a.dtype.kind in "fi")
        if i is None:
            return self.s_unary()
        ax = int(self.rng.integers(0, self.avals[i].ndim))
        fn = jnp.argmax if self.rng.random() < 0.5 else jnp.argmin
        self.add_step(f"{fn.__name__}{ax}", lambda x: fn(x, axis=ax), [i])

    def s_cumsum(self):
        i = self.pick(lambda a: a.ndim > 0 and a.dtype.kind in "fi")
        if i is None:
            return self.s_unary()
        ax, rev = int(self.rng.integers(0, self.avals[i].ndim)), bool(self.rng.random() < 0.3)
        self.add_step(f"cumsum{ax}", lambda x: lax.cumsum(x, ax, reverse=rev), [i])

    def s_reshape(self):
        i = self.pick(lambda a: a.ndim > 0)
        if i is None:
            return self.s_unary()
        shape = self.avals[i].shape
        choice = self.rng.integers(0, 3)
        if choice == 0:
            new = (-1,)
        elif choice == 1:
            new = (1,) + tuple(shape)
        else:
            new = tuple(shape[:-2]) + (-1,) if len(shape) >= 2 else (1, -1)
        self.add_step(f"reshape{new}", lambda x: x.reshape(new), [i])

    def s_transpose(self):
        i = self.pick(lambda a: a.ndim > 1)
        if i is None:
            return self.s_reshape()
        perm = tuple(int(p) for p in self.rng.permutation(self.avals[i].ndim))
        self.add_step(f"transpose{perm}", lambda x: jnp.transpose(x, perm), [i])

    def s_slice(self):
        i = self.pick(lambda a: a.ndim > 0)
        if i is None:
            return self.s_unary()
        idx = []
        for d in self.avals[i].shape:
            lo = int(self.rng.integers(0, d))
            hi = int(self.rng.integers(lo + 1, d + 1))
            idx.append(slice(lo, hi, int(self.rng.integers(1, 3))))
        idx = tuple(idx)
        rev = bool(self.rng.random() < 0.2)
        self.add_step(f"slice{idx}", lambda x: x[idx][::-1] if rev else x[idx], [i])

    def s_concat(self):
        i = self.pick(lambda a: a.ndim > 0)
        if i is None:
            return self.s_unary()
        a = self.avals[i]
        j = self.pick(lambda b: b.shape == a.shape and b.dtype == a.dtype)
        ax = int(self.rng.integers(0, a.ndim))
        self.add_step(f"concat{ax}", lambda x, y: jnp.concatenate([x, y], axis=ax), [i, j])

    def s_dot(self):
        i = self.pick(lambda a: a.ndim in (1, 2) and a.dtype.kind == "f")
        if i is None:
            return self.s_binary()
        a = self.avals[i]
        k = a.shape[-1]
        shape = (k,) if self.rng.random() < 0.3 else (k, int(self.rng.integers(1, 6)))
        j = self.pick(lambda b: b.shape == shape and b.dtype == a.dtype)
        if j is None:
            j = self.add_input(shape, a.dtype)
        self.add_step("matmul", jnp.matmul, [i, j])

    def s_convert(self):
        i = self.pick()
        dt = np.dtype(self.rng.choice(DTYPES))
        src = self.avals[i].dtype
        if src.kind == "f" and dt.kind in "iu":  # keep float -> int conversions in range
            return self.add_step(f"astype({dt})", lambda x: jnp.clip(x * 4, -100, 100).astype(dt), [i])
        self.add_step(f"astype({dt})", lambda x: x.astype(dt), [i])

    def s_iota(self):
        i = self.pick(lambda a: a.ndim > 0 and a.dtype != np.bool_)
        if i is None:
            return self.s_unary()
        n, dt = self.avals[i].shape[-1], self.avals[i].dtype
        self.add_step("add_arange", lambda x: x + jnp.arange(n, dtype=dt), [i])

    def s_cond(self):
        i = self.float_operand()
        f, g = (F_UNARY[str(n)] for n in self.rng.choice(sorted(F_UNARY), 2))
        self.add_step("cond", lambda x: lax.cond(jnp.sum(x) > 0, f, g, x), [i])

    def s_scan(self):
        i = self.pick(lambda a: a.ndim > 0 and a.dtype.kind == "f")
        if i is None:
            return self.s_cond()
        f = F_UNARY[str(self.rng.choice(sorted(F_UNARY)))]
        rev = bool(self.rng.random() < 0.3)  # drawn now: tracing must not consume the rng

        def scan(x):
            def body(c, v):
                c = jnp.tanh(c + v)
                return c, f(c) * v
            return lax.scan(body, jnp.zeros_like(x[0]), x, reverse=rev)
        carry = self.add_step("scan", lambda x: scan(x)[0], [i])
        self.add_step("scan_ys", lambda x: scan(x)[1], [i])
        return carry

    def s_fori(self):
        i = self.float_operand()
        n = int(self.rng.integers(0, 5))
        self.add_step(f"fori{n}", lambda x: lax.fori_loop(0, n, lambda k, v: jnp.sin(v) + k, x), [i])

    def s_while(self):
        i = self.float_operand()

        def loop(x):
            def body(c):
                return c[0] + 1, c[1] * 0.5 + 1
            return lax.while_loop(lambda c: (c[0] < 6) & (jnp.max(c[1]) < 1.9), body, (0, x))[1]
        self.add_step("while", loop, [i])

    # ---- the program ----
    def build(self, n_steps=None):
        for _ in range(int(self.rng.integers(1, 4))):
            self.add_input(self.rand_shape(), np.dtype(self.rng.choice(DTYPES)))
        for _ in range(n_steps or int(self.rng.integers(2, 9))):
            self.step()
        produced = [v for v, src in enumerate(self.sources) if src[0] == "step"]
        k = min(len(produced), int(self.rng.integers(1, 3)))
        self.outputs = tuple(produced[-k:]) if produced else (0,)
        sources, steps, outputs = self.sources, self.steps, self.outputs

        def program(*inputs):
            # Values in creation order: inputs were added while steps were
            # generated, and a step reads only values made before it.
            vals = []
            for kind, k in sources:
                if kind == "in":
                    vals.append(inputs[k])
                else:
                    fn, idx = steps[k]
                    vals.append(fn(*[vals[j] for j in idx]))
            return tuple(vals[j] for j in outputs)
        self.fn = program
        return self


def describe(p):
    return f"seed {p.seed}: steps {p.names}\n{jax.make_jaxpr(p.fn)(*p.inputs)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    p = generate(ap.parse_args().seed)
    print(describe(p))


def generate(seed):
    return Program(seed).build()


if __name__ == "__main__":
    main()
