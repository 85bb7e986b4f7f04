"""A fuzz case: a progen program (by seed), optionally cut down and wrapped
in a JAX transform, as a function and its arguments ready for kiln.jit and
jax.jit.

A case is what regenerates it: the seed, the steps that are cut (their
value becomes an argument holding what JAX computed for it in the full
program, so everything downstream keeps its shapes, dtypes and value
ranges), which values are the outputs, and the wrapper (None, "grad",
"vmap" or "jvp"). Steps no output needs are dropped. Cases are what the
shrinker (shrink.py) reduces and what tests/python/regressions/*.json hold.
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

import progen

WRAPPERS = ("grad", "vmap", "jvp")
BATCH = 3  # vmap's batch size


@dataclasses.dataclass(frozen=True)
class Case:
    seed: int
    cut: tuple = ()        # step indices whose value is an argument instead
    outputs: tuple = None  # value indices; None: the program's own
    wrapper: str = None

    def to_json(self):
        return {"seed": self.seed, "cut": list(self.cut), "outputs": list(self.outputs or ()),
                "wrapper": self.wrapper}

    @staticmethod
    def from_json(d):
        return Case(int(d["seed"]), tuple(d["cut"]), tuple(d["outputs"]) or None, d["wrapper"])


def draw_wrapper(seed):
    """The transform a random program is wrapped in (about 24% are), drawn
    from its own stream so programs are the same as without wrapping."""
    r = np.random.default_rng([seed, 7]).random()
    return "grad" if r < 0.08 else "vmap" if r < 0.16 else "jvp" if r < 0.24 else None


@functools.lru_cache(maxsize=8)
def program(seed):
    return progen.generate(seed)


@functools.lru_cache(maxsize=8)
def _all_values(seed):
    """Every value of the full program as JAX computes it (feeds cut steps)."""
    p = program(seed)

    def run(*inputs):
        vals = []
        for kind, k in p.sources:
            if kind == "in":
                vals.append(inputs[k])
            else:
                fn, idx = p.steps[k]
                vals.append(fn(*[vals[j] for j in idx]))
        return vals
    return [np.asarray(v) for v in jax.jit(run)(*p.inputs)]


class Built:
    """A case made concrete: fn(*args) is what both jits run."""

    def __init__(self, case):
        p = program(case.seed)
        self.case, self.p = case, p
        outputs = tuple(case.outputs or p.outputs)
        cut = set(case.cut)
        needed, stack = set(), list(outputs)
        while stack:
            v = stack.pop()
            if v in needed:
                continue
            needed.add(v)
            kind, k = p.sources[v]
            if kind == "step" and k not in cut:
                stack.extend(p.steps[k][1])
        self.params = sorted(v for v in needed if p.sources[v][0] == "in" or p.sources[v][1] in cut)
        self.live = sorted(p.sources[v][1] for v in needed if v not in self.params)
        self.outputs = outputs
        params, order = self.params, sorted(needed)

        def fn(*xs):
            vals = dict(zip(params, xs))
            for v in order:
                if v not in vals:
                    f, idx = p.steps[p.sources[v][1]]
                    vals[v] = f(*[vals[j] for j in idx])
            return tuple(vals[o] for o in outputs)
        args = []
        for v in params:
            kind, k = p.sources[v]
            args.append(p.inputs[k] if kind == "in" else _all_values(case.seed)[v])
        self.fn, self.args = fn, tuple(args)
        if case.wrapper:
            w = wrap(case.wrapper, fn, self.args, case.seed)
            if w is None:
                raise ValueError(f"seed {case.seed}: {case.wrapper} does not apply")
            self.fn, self.args = w

    def describe(self):
        p, c = self.p, self.case
        steps = [f"{k}:{p.names[k]}" for k in self.live]
        return (f"seed {c.seed} wrapper {c.wrapper} cut {list(c.cut)} "
                f"outputs {list(self.outputs)}\n"
                f"steps {steps}\nargs {[(a.shape, str(a.dtype)) for a in self.args]}\n"
                f"{jax.make_jaxpr(self.fn)(*self.args)}")


def _batched(x):
    """BATCH members derived from x, so a cut value's range is kept."""
    if x.dtype.kind == "f":
        m = [x, (x.astype(np.float32) * 0.5 - 0.25).astype(x.dtype), -x]
    elif x.dtype.kind == "b":
        m = [x, ~x, x]
    else:
        m = [x, x + 1, -x]
    return np.stack(m)


def wrap(kind, fn, args, seed):
    """(wrapped fn, its args), or None where the transform does not apply
    (nothing float to differentiate, or JAX itself refuses, e.g. reverse-mode
    through while_loop)."""
    fl = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    outs = jax.eval_shape(fn, *args)
    fo = [i for i, o in enumerate(outs) if o.dtype.kind == "f"]
    if kind == "vmap":
        w, wargs = jax.vmap(fn), tuple(_batched(a) for a in args)
    elif not fl or not fo:
        return None
    elif kind == "grad":
        def loss(*xs):
            o = fn(*xs)
            return sum(jnp.sum(o[i].astype(jnp.float32)) for i in fo)
        w, wargs = jax.grad(loss, argnums=tuple(fl)), args
    else:
        rng = np.random.default_rng([seed, 3])
        tangents = tuple(rng.standard_normal(args[i].shape).astype(args[i].dtype) for i in fl)
        n = len(args)

        def w(*xt):
            xs = list(xt[:n])

            def f(*fx):
                full = list(xs)
                for i, v in zip(fl, fx):
                    full[i] = v
                o = fn(*full)
                return tuple(o[i] for i in fo)
            return jax.jvp(f, tuple(xs[i] for i in fl), tuple(xt[n:]))
        wargs = args + tangents
    try:
        jax.eval_shape(w, *wargs)
    except Exception:  # noqa: BLE001 -- JAX cannot transform it: left unwrapped
        return None
    return w, wargs


def random_case(seed):
    """The case test_random_programs runs for a seed: the whole program,
    wrapped as draw_wrapper says where that transform applies."""
    kind = draw_wrapper(seed)
    if kind:
        case = Case(seed, wrapper=kind)
        try:
            return Built(case)
        except ValueError:
            pass
    return Built(Case(seed))
