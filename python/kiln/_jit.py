"""kiln.jit of a JAX function: JAX traces it to a jaxpr (no device needed),
_jaxpr translates that to kiln IR, and kiln compiles and runs it.

One kiln_jit per input signature (the pytree structure and each leaf's
dtype and shape, as jax.jit keys its cache); the per-call path flattens the
arguments, turns leaves into kiln arrays and makes one C call."""
import ctypes

import numpy as np

from ._lib import check, lib

_cache_miss = object()


class _Compiled:
    """One signature's translated program, its kiln_jit and its constants."""

    __slots__ = ("func", "jit", "consts", "in_dtypes", "out_tree", "n_out", "text", "__weakref__")

    def __init__(self, text, consts, in_dtypes, out_tree, n_out, name):
        from . import _context, asarray
        self.func = self.jit = None
        self.text, self.in_dtypes, self.out_tree, self.n_out = text, in_dtypes, out_tree, n_out
        self.consts = [asarray(np.asarray(c)) for c in consts]
        f = ctypes.c_void_p()
        check(lib.kiln_func_from_ir(text.encode(), name.encode(), ctypes.byref(f)))
        self.func = f.value
        j = ctypes.c_void_p()
        check(lib.kiln_jit_new(_context(), self.func, None, ctypes.byref(j)))
        self.jit = j.value

    def __del__(self, _jit_free=lib.kiln_jit_free, _func_free=lib.kiln_func_free):
        if self.jit:
            _jit_free(self.jit)
        if self.func:
            _func_free(self.func)


def _leaf_key(x):
    # Python scalars are weakly typed in JAX: their kind, not a dtype, keys them.
    if isinstance(x, (bool, int, float)):
        return type(x)
    return (x.dtype, x.shape) if hasattr(x, "dtype") else type(x)


class Jitted:
    """The callable kiln.jit returns."""

    def __init__(self, fn, static_argnums=()):
        import jax
        self._jax = jax
        self._fn = fn
        self._static = tuple(static_argnums)
        self._cache = {}
        self.__name__ = getattr(fn, "__name__", "jax_fn")
        self.__doc__ = getattr(fn, "__doc__", None)

    def _compile(self, args, leaves, treedef, key):
        from ._jaxpr import translate
        jax = self._jax
        closed, out_shape = jax.make_jaxpr(self._fn, static_argnums=self._static,
                                           return_shape=True)(*args)
        text, consts = translate(closed, self.__name__)
        out_tree = jax.tree_util.tree_structure(out_shape)
        in_dtypes = [np.dtype(v.aval.dtype) for v in closed.jaxpr.invars]
        entry = _Compiled(text, consts, in_dtypes, out_tree, out_tree.num_leaves, self.__name__)
        self._cache[key] = entry
        return entry

    def _split(self, args):
        """(dynamic args, static values): static args go into the cache key."""
        if not self._static:
            return args, ()
        n = len(args)
        idx = {i % n for i in self._static}
        return tuple(a for i, a in enumerate(args) if i not in idx), tuple(args[i] for i in sorted(idx))

    def lower_text(self, *args):
        """The kiln IR text this function translates to for these arguments."""
        return self._entry(args)[0].text

    def _entry(self, args):
        dyn, static = self._split(args)
        leaves, treedef = self._jax.tree_util.tree_flatten(dyn)
        key = (treedef, static, tuple(_leaf_key(x) for x in leaves))
        entry = self._cache.get(key, _cache_miss)
        if entry is _cache_miss:
            entry = self._compile(args, leaves, treedef, key)
        return entry, leaves

    def __call__(self, *args):
        from . import Array, _from_host
        entry, leaves = self._entry(args)
        arrays = list(entry.consts)
        for x, dt in zip(leaves, entry.in_dtypes):
            if isinstance(x, Array) and x.dtype == dt:
                arrays.append(x)
            else:
                if not isinstance(x, np.ndarray) or x.dtype != dt:
                    x = np.asarray(x, dtype=dt)
                arrays.append(_from_host(x, None))
        n_in, n_out = len(arrays), entry.n_out
        ins = (ctypes.c_void_p * max(n_in, 1))(*[a._handle for a in arrays])
        outs = (ctypes.c_void_p * max(n_out, 1))()
        check(lib.kiln_jit_call_arrays(entry.jit, n_in, ins, n_out, outs))
        return entry.out_tree.unflatten([Array(outs[i]) for i in range(n_out)])


def jit(fn=None, *, static_argnums=()):
    """kiln.jit(f): f is a JAX function (jax.numpy / lax) over pytrees of
    arrays. Each new input signature is traced by JAX, translated to kiln IR
    and compiled by kiln; calls return kiln.Arrays in f's output structure.
    A jaxpr primitive kiln lacks raises kiln.UnsupportedPrimitive naming it."""
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if fn is None:
        return lambda f: Jitted(f, static_argnums)
    return Jitted(fn, static_argnums)
