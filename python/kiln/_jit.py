"""kiln.jit of a JAX function: JAX traces it to a jaxpr (no device needed),
_jaxpr translates that to kiln IR, and kiln compiles and runs it.

One kiln_jit per input signature (the pytree structure and each leaf's
dtype and shape, as jax.jit keys its cache). A signature of flat positional
arrays is also handed to the C call path (_dispatch.c), which matches and
calls it without entering Python, as jax.jit's C++ fast path does; the
Python path below serves the rest (pytrees, scalars, static arguments) and
every first call."""
import ctypes

import numpy as np

from . import (Array, KilnError, _context, _default_device, _dispatch, _dtype_code, _from_host,
               asarray, from_dlpack)  # defined before this import
from ._lib import check, function_addresses, lib

_cache_miss = object()


class _Compiled:
    """One signature's translated program, its kiln_jit and its constants."""

    __slots__ = ("func", "jit", "consts", "const_handles", "in_dtypes", "out_tree", "out_avals",
                 "n_out", "in_type", "out_type", "text", "__weakref__")

    def __init__(self, text, consts, in_dtypes, out_tree, out_avals, name):
        self.func = self.jit = None
        self.text, self.in_dtypes, self.out_tree = text, in_dtypes, out_tree
        self.out_avals, self.n_out = out_avals, len(out_avals)
        self.consts = [asarray(np.asarray(c)) for c in consts]
        self.const_handles = [c._handle for c in self.consts]
        # ctypes array types made once: making one per call costs more than the call.
        self.in_type = ctypes.c_void_p * max(len(consts) + len(in_dtypes), 1)
        self.out_type = ctypes.c_void_p * max(self.n_out, 1)
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


# Inputs at least this large are imported zero-copy (DLPack); smaller ones
# are copied, which costs less than the capsule exchange.
_ZERO_COPY_BYTES = 1 << 16

_dispatch.bind(function_addresses(), KilnError, Array, np.ndarray, _ZERO_COPY_BYTES)


def _leaf_key(x, _scalars=(bool, int, float)):
    # Python scalars are weakly typed in JAX: their kind, not a dtype, keys them.
    if type(x) in _scalars:
        return type(x)
    aval = getattr(x, "aval", None)
    if aval is not None and callable(aval):  # a kiln.Array
        return aval()
    return (x.dtype, x.shape) if hasattr(x, "dtype") else type(x)


class Jitted(_dispatch.Dispatcher):
    """The callable kiln.jit returns: calling it runs the C call path
    (Dispatcher), which falls back to _call_slow."""

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
        out_leaves, out_tree = jax.tree_util.tree_flatten(out_shape)
        in_dtypes = [np.dtype(v.aval.dtype) for v in closed.jaxpr.invars]
        out_avals = [(np.dtype(o.dtype), tuple(o.shape)) for o in out_leaves]
        entry = _Compiled(text, consts, in_dtypes, out_tree, out_avals, self.__name__)
        self._cache[key] = entry
        self._register(entry, leaves, treedef, key)
        return entry

    def _register(self, entry, leaves, treedef, key):
        """Hands a signature of flat positional arrays to the C call path."""
        tu = self._jax.tree_util
        if self._static or treedef != tu.tree_structure((0,) * len(leaves)):
            return
        # Python scalars (weakly typed) and dtypes JAX narrows (int64 without
        # x64) need the Python path's conversion.
        if not all(type(k) is tuple and k[0] == dt for k, dt in zip(key[2], entry.in_dtypes)):
            return
        in_types = [(_dtype_code(dt), tuple(shape)) for dt, shape in key[2]]
        n = entry.n_out
        flat = entry.out_tree == tu.tree_structure(0 if n == 1 else (0,) * n)
        self._add_signature(entry, entry.jit, _default_device()._handle, list(entry.const_handles),
                            in_types, tuple(entry.out_avals), None if flat else entry.out_tree)

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

    def _call_slow(self, *args):
        entry, leaves = self._entry(args)
        handles, keep = list(entry.const_handles), []
        for x, dt in zip(leaves, entry.in_dtypes):
            if type(x) is Array and x.aval()[0] == dt:
                handles.append(x._handle)
                continue
            if not isinstance(x, np.ndarray) or x.dtype != dt:
                x = np.asarray(x, dtype=dt)
            a = from_dlpack(x) if x.nbytes >= _ZERO_COPY_BYTES and x.dtype.kind != "b" \
                else _from_host(x, None)
            keep.append(a)
            handles.append(a._handle)
        outs = entry.out_type()
        if lib.kiln_jit_call_arrays(entry.jit, len(handles), entry.in_type(*handles), entry.n_out,
                                    outs):
            check(-1)
        avals = entry.out_avals
        return entry.out_tree.unflatten([Array(outs[i], avals[i]) for i in range(entry.n_out)])


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
