"""kiln.jit of a JAX function: JAX traces it to a jaxpr (no device needed),
_jaxpr translates that to kiln IR, and kiln compiles and runs it.

Arguments are split as jax.jit splits them: static ones (static_argnums /
static_argnames) go into the cache key by value; the dynamic ones, positional
and keyword, are flattened as one pytree ((args, kwargs)) whose leaves may be
kiln.Arrays, NumPy arrays, JAX arrays, PyTorch tensors (any DLPack producer)
and Python scalars (weakly typed, as in JAX). JAX traces abstract values
(ShapeDtypeStructs), never the arguments themselves, so any producer works.

One kiln_jit per signature (pytree structure, static values, each leaf's
dtype, shape and weakness). A signature of flat positional arrays is also
handed to the C call path (_dispatch.c), which matches and calls it without
entering Python, as jax.jit's C++ fast path does; the Python path below
serves the rest and every first call."""
import ctypes
import inspect
import re

import numpy as np

from . import (Array, KilnError, _context, _default_device, _dispatch, _dtype_code, _from_host,
               from_dlpack)  # defined before this import
from ._lib import check, function_addresses, lib

_cache_miss = object()
_NO_DONATION = (frozenset(), frozenset())
_SCALARS = (bool, int, float, complex)


class _JitOptions(ctypes.Structure):
    """kiln_jit_options (include/kiln/jit.h)."""
    _fields_ = [("static_key", ctypes.c_void_p), ("static_key_size", ctypes.c_size_t),
                ("donate_argnums", ctypes.POINTER(ctypes.c_int)), ("num_donate", ctypes.c_int),
                ("device", ctypes.c_int),
                ("in_shardings", ctypes.c_void_p), ("num_in_shardings", ctypes.c_int),
                ("out_shardings", ctypes.c_void_p), ("num_out_shardings", ctypes.c_int)]


class _Compiled:
    """One signature's translated program, its kiln_jit and its constants."""

    __slots__ = ("func", "jit", "consts", "const_handles", "in_dtypes", "donated", "paths",
                 "out_tree", "out_avals", "n_out", "in_type", "out_type", "text", "__weakref__")

    def __init__(self, text, consts, in_dtypes, donated, paths, out_tree, out_avals, name):
        from . import asarray
        self.func = self.jit = None
        self.text, self.in_dtypes, self.out_tree = text, in_dtypes, out_tree
        self.donated, self.paths = donated, paths  # per dynamic leaf: donated?, its name
        self.out_avals, self.n_out = out_avals, len(out_avals)
        self.consts = [asarray(np.asarray(c)) for c in consts]
        self.const_handles = [c._handle for c in self.consts]
        # ctypes array types made once: making one per call costs more than the call.
        self.in_type = ctypes.c_void_p * max(len(consts) + len(in_dtypes), 1)
        self.out_type = ctypes.c_void_p * max(self.n_out, 1)
        f = ctypes.c_void_p()
        check(lib.kiln_func_from_ir(text.encode(), name.encode(), ctypes.byref(f)))
        self.func = f.value
        # The program's inputs are the constants then the leaves, each a
        # top-level argument of kiln_jit_call_arrays: donation is per leaf.
        idx = [len(consts) + i for i, d in enumerate(donated) if d]
        opts = _JitOptions()  # zeroed: kiln's defaults
        keep = (ctypes.c_int * max(len(idx), 1))(*idx)
        opts.donate_argnums, opts.num_donate = ctypes.cast(keep, ctypes.POINTER(ctypes.c_int)), len(idx)
        j = ctypes.c_void_p()
        check(lib.kiln_jit_new(_context(), self.func, ctypes.byref(opts), ctypes.byref(j)))
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


def _np_dtype(dt):
    """A NumPy dtype for a producer's dtype object (NumPy's, JAX's, or
    PyTorch's, whose torch.float32 NumPy does not take)."""
    try:
        return np.dtype(dt)
    except TypeError:
        from . import _dtype_from_name
        return _dtype_from_name(str(dt).rsplit(".", 1)[-1])


def _leaf_key(x):
    """The cache key of one dynamic leaf: (dtype, shape, weak). Python scalars
    are weakly typed in JAX: their kind, not a dtype, keys them."""
    t = type(x)
    if t in _SCALARS:
        return t
    if t is Array:
        return x.aval()
    return (_np_dtype(x.dtype), tuple(x.shape))


def _argnums_and_names(fn, nums, names, what):
    """jax.jit's inference: argnums given alone name their parameters, names
    given alone number theirs (positional-or-keyword parameters only)."""
    nums = (nums,) if isinstance(nums, int) else tuple(nums or ())
    names = (names,) if isinstance(names, str) else tuple(names or ())
    for n in nums:
        if not isinstance(n, int):
            raise TypeError(f"kiln.jit: {what}_argnums must be ints, got {n!r}")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins, some callables
        return nums, names
    positional = [p.name for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    named = [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    if nums and not names:
        names = tuple(positional[n] for n in nums
                      if -len(positional) <= n < len(positional) and positional[n] in named)
    elif names and not nums:
        nums = tuple(positional.index(n) for n in names if n in positional)
    has_var_kw = any(p.kind == p.VAR_KEYWORD for p in params)
    for n in names:
        if n not in named and not has_var_kw and \
                n not in [p.name for p in params if p.kind == p.KEYWORD_ONLY]:
            raise ValueError(f"kiln.jit: {what}_argnames names {n!r}, which is not a parameter "
                             f"of {getattr(fn, '__name__', fn)}{inspect.signature(fn)}")
    return nums, names


class Jitted(_dispatch.Dispatcher):
    """The callable kiln.jit returns: calling it runs the C call path
    (Dispatcher), which falls back to _call_slow."""

    def __init__(self, fn, static_argnums=(), static_argnames=(), donate_argnums=(),
                 donate_argnames=()):
        import jax
        self._jax = jax
        self._fn = fn
        self._static_nums, self._static_names = _argnums_and_names(
            fn, static_argnums, static_argnames, "static")
        self._donate_nums, self._donate_names = _argnums_and_names(
            fn, donate_argnums, donate_argnames, "donate")
        both = set(self._static_nums) & set(self._donate_nums) or \
            set(self._static_names) & set(self._donate_names)
        if both:
            raise ValueError(f"kiln.jit: argument {sorted(both)[0]!r} is both static and donated")
        try:
            self._params = [p.name for p in inspect.signature(fn).parameters.values()
                            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            self._params = []
        self._special = bool(self._static_nums or self._static_names or self._donate_nums or
                             self._donate_names)
        self._cache = {}
        self.__name__ = getattr(fn, "__name__", "jax_fn")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __repr__(self):
        return f"<kiln.jit of {self.__qualname__}>"

    # ---- arguments ----

    def _split(self, args, kwargs):
        """(dynamic args, dynamic kwargs, static key, donated positions):
        static values go into the cache key by value, as jax.jit's do."""
        n = len(args)
        if not self._special:
            return args, kwargs, (n, ()), _NO_DONATION, ()
        snums = {i % n for i in self._static_nums if -n <= i < n}
        dnums = {i % n for i in self._donate_nums if -n <= i < n}
        static = []
        for i in sorted(snums):
            static.append((i, _hashable(args[i], self._arg_name(i))))
        for k in sorted(kwargs):
            if k in self._static_names:
                static.append((k, _hashable(kwargs[k], k)))
        dyn_args = tuple(a for i, a in enumerate(args) if i not in snums)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_names}
        # Donation by position in dyn_args, and by keyword.
        shift = [sum(1 for s in snums if s < i) for i in range(n)]
        donated = ({i - shift[i] for i in dnums},
                   {k for k in dyn_kwargs if k in self._donate_names})
        return dyn_args, dyn_kwargs, (n, tuple(static)), donated, sorted(snums)

    def _arg_name(self, i):
        return self._params[i] if i < len(self._params) else f"args[{i}]"

    def _paths(self, dyn_args, dyn_kwargs, snums):
        """Each leaf's argument as a user reads it: x, params['w'][0], args[3]."""
        tu = self._jax.tree_util
        # positional index in dyn_args -> index in the call's args
        orig = [i for i in range(len(dyn_args) + len(snums)) if i not in snums]
        out = []
        for path, _ in tu.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]:
            top, rest = path[0].idx, path[1:]
            if top == 0:
                i = orig[rest[0].idx]
                head = self._params[i] if i < len(self._params) else f"args[{i}]"
            else:
                head = rest[0].key
            out.append(head + tu.keystr(rest[1:]))
        return out

    def _entry(self, args, kwargs):
        tu = self._jax.tree_util
        dyn_args, dyn_kwargs, static, donated, snums = self._split(args, kwargs)
        leaves, treedef = tu.tree_flatten((dyn_args, dyn_kwargs))
        try:
            sig = tuple(_leaf_key(x) for x in leaves)
        except (AttributeError, TypeError):
            sig = None
        key = (treedef, static, sig, frozenset(donated[0]), frozenset(donated[1]))
        entry = self._cache.get(key, _cache_miss) if sig is not None else _cache_miss
        if entry is _cache_miss:
            paths = self._paths(dyn_args, dyn_kwargs, snums)
            if sig is None:
                for x, p in zip(leaves, paths):
                    _spec(self._jax, x, p, self.__name__)  # raises, naming the bad one
            entry = self._compile(args, kwargs, static, snums, dyn_args, dyn_kwargs, leaves,
                                  treedef, paths, donated, key)
        return entry, leaves

    def _compile(self, args, kwargs, static, snums, dyn_args, dyn_kwargs, leaves, treedef, paths,
                 donated, key):
        from ._jaxpr import translate
        jax, tu, fn = self._jax, self._jax.tree_util, self._fn
        specs = [_spec(jax, x, p, self.__name__) for x, p in zip(leaves, paths)]
        s_args = {i: args[i] for i in snums}
        s_kwargs = {k: v for k, v in kwargs.items() if k in self._static_names}
        n = len(args)

        def flat_fn(d_args, d_kwargs):
            it = iter(d_args)
            full = [s_args[i] if i in s_args else next(it) for i in range(n)]
            return fn(*full, **d_kwargs, **s_kwargs)

        closed, out_shape = jax.make_jaxpr(flat_fn, return_shape=True)(
            *tu.tree_unflatten(treedef, specs))
        text, consts = translate(closed, self.__name__)
        out_leaves, out_tree = tu.tree_flatten(out_shape)
        in_dtypes = [np.dtype(v.aval.dtype) for v in closed.jaxpr.invars]
        out_avals = [(np.dtype(o.dtype), tuple(o.shape)) for o in out_leaves]
        # Which leaves belong to donated arguments.
        pos, kw = donated
        marks = tu.tree_unflatten(treedef, [False] * len(leaves))
        marks = (tuple(tu.tree_map(lambda _: i in pos, a) for i, a in enumerate(marks[0])),
                 {k: tu.tree_map(lambda _: k in kw, v) for k, v in marks[1].items()})
        leaf_donated = tu.tree_leaves(marks)
        entry = _Compiled(text, consts, in_dtypes, leaf_donated, paths, out_tree, out_avals,
                          self.__name__)
        self._cache[key] = entry
        self._register(entry, key, treedef, len(leaves), kwargs or static[1])
        return entry

    def _register(self, entry, key, treedef, n, not_flat):
        """Hands a signature of flat positional arrays to the C call path."""
        tu = self._jax.tree_util
        if not_flat or treedef != tu.tree_structure(((0,) * n, {})):
            return
        # Python scalars (weakly typed) and dtypes JAX narrows (int64 without
        # x64) need the Python path's conversion.
        if not all(type(k) is tuple and k[0] == dt for k, dt in zip(key[2], entry.in_dtypes)):
            return
        in_types = [(_dtype_code(dt), tuple(shape)) for dt, shape in key[2]]
        k = entry.n_out
        flat = entry.out_tree == tu.tree_structure(0 if k == 1 else (0,) * k)
        self._add_signature(entry, entry.jit, _default_device()._handle, list(entry.const_handles),
                            in_types, tuple(entry.out_avals), None if flat else entry.out_tree,
                            list(entry.donated))

    # ---- calls ----

    def lower_text(self, *args, **kwargs):
        """The kiln IR text this function translates to for these arguments."""
        return self._entry(args, kwargs)[0].text

    def _call_slow(self, *args, **kwargs):
        entry, leaves = self._entry(args, kwargs)
        handles, keep = list(entry.const_handles), []
        for i, (x, dt, donate) in enumerate(zip(leaves, entry.in_dtypes, entry.donated)):
            if type(x) is Array and x.aval()[0] == dt:
                handles.append(x._handle)
                continue
            try:
                a = _to_kiln(x, dt, donate)
            except (TypeError, ValueError, BufferError, RuntimeError, OverflowError) as e:
                where = entry.paths[i]
                raise type(e)(f"kiln.jit({self.__name__}): argument {where}: {e}") from e
            keep.append(a)
            handles.append(a._handle)
        outs = entry.out_type()
        if lib.kiln_jit_call_arrays(entry.jit, len(handles), entry.in_type(*handles), entry.n_out,
                                    outs):
            _raise_call_error(self.__name__, entry)
        avals = entry.out_avals
        return entry.out_tree.unflatten([Array(outs[i], avals[i]) for i in range(entry.n_out)])


def _raise_call_error(fname, entry):
    """kiln's error, said in the Python arguments' names where it is about one."""
    msg = lib.kiln_last_error().decode()
    m = re.search(r"argument (\d+) \(.*\) is donated but views another framework's memory", msg)
    if m and 0 <= int(m.group(1)) - len(entry.consts) < len(entry.paths):
        path = entry.paths[int(m.group(1)) - len(entry.consts)]
        raise ValueError(f"kiln.jit({fname}): argument {path} is donated, but it is a kiln.Array "
                         "viewing another framework's memory (a zero-copy import such as "
                         "kiln.asarray of a large NumPy array), which kiln cannot take over; donate "
                         "a kiln-owned array (kiln.from_dlpack(x, copy=True) or a kiln.jit result) "
                         "or do not donate it")
    raise KilnError(msg)


def _hashable(v, name):
    try:
        hash(v)
    except TypeError as e:
        raise ValueError(f"kiln.jit: static argument {name} of type {type(v).__name__} is not "
                         f"hashable ({e}); static arguments are part of the cache key, as in "
                         "jax.jit") from None
    return v


def _spec(jax, x, path, fname):
    """The abstract value JAX traces for one leaf."""
    t = type(x)
    if t in _SCALARS:
        if t is bool:
            return jax.ShapeDtypeStruct((), np.bool_)
        dt = {int: np.int64, float: np.float64, complex: np.complex128}[t]
        return jax.ShapeDtypeStruct((), jax.dtypes.canonicalize_dtype(dt), weak_type=True)
    dt, shape = getattr(x, "dtype", None), getattr(x, "shape", None)
    if dt is None or shape is None:
        name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
        raise TypeError(f"kiln.jit({fname}): argument {path} of type {name}"
                        " is not an array or a scalar (pass it through static_argnums/"
                        "static_argnames, or make it a pytree of arrays)")
    try:
        dt = jax.dtypes.canonicalize_dtype(_np_dtype(dt))
        if dt.kind not in "biuf" and dt.name != "bfloat16":
            raise TypeError("not a boolean, integer or floating-point dtype")
    except (TypeError, ValueError) as e:
        raise TypeError(f"kiln.jit({fname}): argument {path} has dtype {dt}, which kiln does not "
                        f"hold ({e})") from None
    return jax.ShapeDtypeStruct(tuple(shape), dt)


def _to_kiln(x, dt, donate):
    """A kiln array of dtype dt for one argument leaf: zero-copy (DLPack)
    where the producer exports it and the leaf is large, else one copy.
    Donated leaves are always copied: kiln cannot take over memory that
    another framework owns (JAX likewise donates only its own buffers)."""
    t = type(x)
    if isinstance(x, Array):
        # A dtype JAX narrows (64-bit without jax_enable_x64), as jax.jit
        # narrows NumPy's: converted on the host, JAX having no f64 program.
        return _from_host(np.asarray(x).astype(dt), None)
    if t in _SCALARS or isinstance(x, np.generic):
        return _from_host(np.asarray(x, dtype=dt), None)
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
        # JAX arrays, PyTorch tensors, CuPy...: by DLPack, in their dtype.
        try:
            same = _np_dtype(x.dtype) == dt
        except TypeError:
            same = False
        if same:
            return from_dlpack(x, copy=True if donate else None)
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    if x.dtype != dt:
        x = x.astype(dt)
    # NumPy exports neither bool nor bfloat16 by DLPack: those are copied.
    if donate or x.nbytes < _ZERO_COPY_BYTES or x.dtype.kind == "b" or x.dtype.kind == "V" \
            or x.dtype.name == "bfloat16":
        return _from_host(x, None)
    return from_dlpack(x)


def jit(fn=None, *, static_argnums=None, static_argnames=None, donate_argnums=None,
        donate_argnames=None):
    """kiln.jit(f) as jax.jit(f): f is a JAX function (jax.numpy / lax) over
    pytrees of arrays. Each new signature is traced by JAX, translated to
    kiln IR and compiled by kiln; calls return kiln.Arrays in f's output
    structure. static_argnums/static_argnames are hashed into the cache key;
    donated arguments' kiln.Arrays are deleted by the call and their memory
    may hold its results. A jaxpr primitive kiln lacks raises
    kiln.UnsupportedPrimitive naming it."""
    kw = dict(static_argnums=static_argnums, static_argnames=static_argnames,
              donate_argnums=donate_argnums, donate_argnames=donate_argnames)
    if fn is None:
        return lambda f: Jitted(f, **kw)
    if not callable(fn):
        raise TypeError(f"kiln.jit: expected a function, got {type(fn).__name__}")
    return Jitted(fn, **kw)
