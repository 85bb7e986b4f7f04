"""kiln.Array: an immutable array on one of kiln's devices.

Its operators, indexing and astype run on the array's device through kiln:
each is a small kiln.jit of a jax.numpy function, traced once per signature
and cached, so they need JAX (`pip install kiln[jax]`). Python scalars mix
in weakly typed and dtypes promote as in JAX (not NumPy). Only repr/str,
item(), __array__ and the Python number conversions read the values on the
host (a copy for CUDA arrays)."""
import ctypes
import functools
import operator
import sys

import numpy as np

from . import Device, _dispatch, _dlpack, _dtype_from_name
from ._lib import KilnError, check, lib

_KDLCPU, _KDLCUDA = 1, 2
_ALLOW_COPY, _FORCE_COPY = 1, 2  # KILN_DLPACK_ALLOW_COPY, KILN_DLPACK_COPY

# DLPack consumers kiln knows, by the top-level package of the code that
# calls __dlpack__ (see __dlpack__): torch.from_dlpack ignores the read-only
# flag (its tensors are always writable), so it is given a copy; JAX's
# arrays are immutable (a donated one is not written through either), so it
# may view kiln's memory although it asks for the unversioned capsule.
_IGNORES_READ_ONLY = frozenset({"torch"})
_NEVER_WRITES = frozenset({"jax", "jaxlib"})


def _jnp():
    try:
        import jax.numpy as jnp
    except ImportError as e:
        raise ImportError("kiln.Array's operators, indexing and astype run through kiln.jit of "
                          "jax.numpy functions: install JAX (pip install 'kiln[jax]')") from e
    return jnp


def _ops_jit(fn, **kw):
    _jnp()
    from ._jit import jit
    return jit(fn, **kw)


@functools.lru_cache(maxsize=None)
def _op(name):
    """The cached kiln.jit of the jax.numpy function for one operator."""
    jnp = _jnp()
    fns = {
        "add": operator.add, "sub": operator.sub, "mul": operator.mul,
        "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
        "pow": operator.pow, "matmul": jnp.matmul, "and": operator.and_, "or": operator.or_,
        "xor": operator.xor, "lshift": operator.lshift, "rshift": operator.rshift,
        "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
        "gt": operator.gt, "ge": operator.ge,
        "neg": operator.neg, "pos": operator.pos, "abs": jnp.abs, "invert": operator.invert,
    }
    if name.startswith("r_"):
        f = fns[name[2:]]
        return _ops_jit(lambda a, b: f(b, a))
    return _ops_jit(fns[name])


def _is_operand(x):
    return isinstance(x, (Array, np.ndarray, np.generic, bool, int, float)) or \
        hasattr(x, "__dlpack__")


def _binary(name):
    def fwd(self, other):
        return _op(name)(self, other) if _is_operand(other) else NotImplemented

    def rev(self, other):
        return _op("r_" + name)(self, other) if _is_operand(other) else NotImplemented
    fwd.__name__, rev.__name__ = f"__{name}__", f"__r{name}__"
    return fwd, rev


def _unary(name):
    def op(self):
        return _op(name)(self)
    op.__name__ = f"__{name}__"
    return op


@functools.lru_cache(maxsize=256)
def _indexer(key):
    """The program for one basic-indexing pattern: integer indices are its
    arguments (one program serves x[0], x[1], ...), slices and None are
    part of it."""
    lax = _jnp() and __import__("jax").lax
    int_axes = [axis for axis, k in enumerate(k for k in key if k is not None) if k == "i"]
    rest = tuple(None if k is None else slice(*k) for k in key if k != "i")

    def index(x, *ints):
        for axis, i in reversed(list(zip(int_axes, ints))):
            x = lax.dynamic_index_in_dim(x, i, axis, keepdims=False)
        return x[rest] if rest else x
    return _ops_jit(index)


def _index_key(shape, idx):
    """NumPy's basic indexing, checked as NumPy checks it: the pattern (one
    entry per index item: "i" for an integer, (start, stop, step) for a
    slice, None for a new axis) and the integers, made non-negative."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    items = []
    for i in idx:
        if i is None or i is Ellipsis or isinstance(i, slice):
            items.append(i)
            continue
        if isinstance(i, (bool, np.bool_)) or not hasattr(i, "__index__"):
            raise IndexError("kiln.Array supports basic indexing only (integers, slices, None and "
                             f"Ellipsis), not {type(i).__name__}; use jnp.take or x[idx] inside "
                             "kiln.jit for gathers")
        items.append(operator.index(i))
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(i is not None and i is not Ellipsis for i in items)
    if used > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, but "
                         f"{used} were indexed")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (len(shape) - used)
    key, ints, axis = [], [], 0
    for i in items:
        if i is None:
            key.append(None)
            continue
        n = shape[axis]
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            key.append((start, stop if stop >= 0 else None, step))
        else:
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            key.append("i")
            ints.append(_index_array(i % n))
        axis += 1
    return tuple(key), ints


@functools.lru_cache(maxsize=4096)
def _index_array(i):
    """An integer index as a kiln int32 scalar (immutable, so shared): with
    every argument a kiln.Array, indexing takes jit's C call path."""
    from . import _from_host
    return _from_host(np.asarray(i, np.int32), None)


class Array(_dispatch.ArrayBase):
    """An immutable kiln array; owns one kiln reference. Array(handle,
    aval=None): the C base (_dispatch.c) holds the handle, releases it when
    the array dies and keeps the (dtype, shape) aval once known."""

    __slots__ = ()
    # NumPy's ufuncs and operators defer to kiln's (np_array + kiln_array
    # runs kiln's __radd__), as they do to JAX arrays.
    __array_ufunc__ = None
    __array_priority__ = 100

    def aval(self):
        """(numpy dtype, shape): immutable, so cached (jit's cache key)."""
        if self._aval is None:
            h = self._handle
            p = lib.kiln_array_shape(h)
            shape = tuple(p[i] for i in range(lib.kiln_array_rank(h)))
            dtype = _dtype_from_name(lib.kiln_dtype_name(lib.kiln_array_dtype(h)).decode())
            self._aval = (dtype, shape)
        return self._aval

    @property
    def shape(self):
        return self.aval()[1]

    @property
    def ndim(self):
        return len(self.aval()[1])

    @property
    def dtype(self):
        return self.aval()[0]

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def device(self):
        """The kiln.Device the array lives on."""
        return Device(lib.kiln_array_device(self._handle))

    def devices(self):
        return {self.device}

    def is_deleted(self):
        """True once the array was donated to a kiln.jit call (or deleted)."""
        return bool(lib.kiln_array_is_deleted(self._handle))

    def block_until_ready(self):
        """Waits for the work that computes the array; returns it."""
        check(lib.kiln_array_block_until_ready(self._handle))
        return self

    # ---- conversions to the host ----

    def __array__(self, dtype=None, copy=None):
        # Zero-copy and read-only on CPU, except for dtypes NumPy's DLPack
        # import lacks (bfloat16) and CUDA arrays: those are copied to host.
        if copy is False and (self.device.platform != "cpu" or self.dtype.name == "bfloat16"):
            raise ValueError(f"np.asarray(kiln.Array, copy=False): a {self.dtype} array on "
                             f"{self.device} cannot be viewed by NumPy without a copy")
        if self.device.platform == "cpu" and self.dtype.name != "bfloat16":
            a = np.from_dlpack(self)
        else:
            a = np.empty(self.shape, self.dtype)
            check(lib.kiln_array_to_host(self._handle, a.ctypes.data, a.nbytes))
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def item(self, *args):
        return np.asarray(self).item(*args)

    def tolist(self):
        return np.asarray(self).tolist()

    def _scalar(self, what):
        if self.size != 1:
            raise TypeError(f"only size-1 arrays can be converted to Python scalars ({what} of a "
                            f"kiln.Array of shape {self.shape})")
        return np.asarray(self).reshape(()).item()

    def __bool__(self):
        if self.size != 1:
            raise ValueError(f"The truth value of a kiln.Array of shape {self.shape} is ambiguous; "
                             "reduce it first (any / all)")
        return bool(self._scalar("bool"))

    def __int__(self):
        return int(self._scalar("int"))

    def __float__(self):
        return float(self._scalar("float"))

    def __complex__(self):
        return complex(self._scalar("complex"))

    def __index__(self):
        if self.ndim or self.dtype.kind not in "iu":
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return int(self._scalar("index"))

    def __repr__(self):
        dev = f"{self.device.platform}:{self.device.id}"
        if self.is_deleted():
            return f"kiln.Array(<deleted>, shape={self.shape}, dtype={self.dtype.name}, device={dev})"
        prefix = "kiln.Array("
        body = np.array2string(np.asarray(self), separator=", ", prefix=prefix)
        shape = f", shape={self.shape}" if self.size == 0 and self.ndim != 1 else ""
        return f"{prefix}{body}{shape}, dtype={self.dtype.name}, device={dev})"

    def __str__(self):
        if self.is_deleted():
            return "<deleted kiln.Array>"
        return np.array2string(np.asarray(self))

    def __format__(self, spec):
        if self.ndim == 0 and spec:
            return format(self.item(), spec)
        return format(str(self), spec)

    # ---- sequence protocol and indexing ----

    def __len__(self):
        if not self.ndim:
            raise TypeError("len() of unsized object (a 0-d kiln.Array)")
        return self.shape[0]

    def __iter__(self):
        if not self.ndim:
            raise TypeError("iteration over a 0-d kiln.Array")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, idx):
        key, ints = _index_key(self.shape, idx)
        if not ints and all(k is not None and k == (0, n, 1) for k, n in zip(key, self.shape)):
            return self  # the whole array: immutable, so itself
        return _indexer(key)(self, *ints)

    def __setitem__(self, idx, value):
        raise TypeError("kiln.Array is immutable: its elements cannot be assigned; compute a new "
                        "array instead (x.at[idx].set(v) or jnp.where inside kiln.jit)")

    # ---- arithmetic and comparisons: run by kiln (see _op) ----

    __add__, __radd__ = _binary("add")
    __sub__, __rsub__ = _binary("sub")
    __mul__, __rmul__ = _binary("mul")
    __truediv__, __rtruediv__ = _binary("truediv")
    __floordiv__, __rfloordiv__ = _binary("floordiv")
    __mod__, __rmod__ = _binary("mod")
    __pow__, __rpow__ = _binary("pow")
    __matmul__, __rmatmul__ = _binary("matmul")
    __and__, __rand__ = _binary("and")
    __or__, __ror__ = _binary("or")
    __xor__, __rxor__ = _binary("xor")
    __lshift__, __rlshift__ = _binary("lshift")
    __rshift__, __rrshift__ = _binary("rshift")
    __eq__, _ = _binary("eq")
    __ne__, _ = _binary("ne")
    __lt__, _ = _binary("lt")
    __le__, _ = _binary("le")
    __gt__, _ = _binary("gt")
    __ge__, _ = _binary("ge")
    __neg__ = _unary("neg")
    __pos__ = _unary("pos")
    __abs__ = _unary("abs")
    __invert__ = _unary("invert")
    __hash__ = None  # as NumPy's and JAX's arrays: == is elementwise

    @property
    def T(self):
        return self if self.ndim < 2 else _transpose()(self)

    def reshape(self, *shape):
        """Another shape of the same elements (-1 is inferred), by kiln."""
        shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return _reshape(tuple(operator.index(d) for d in shape))(self)

    def astype(self, dtype):
        """A copy converted to dtype (jax's convert_element_type), by kiln."""
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self
        return _astype(dtype)(self)

    # ---- DLPack ----

    def __dlpack_device__(self):
        d = self.device
        return (_KDLCUDA, d.id) if d.platform == "cuda" else (_KDLCPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Exports the array. kiln arrays are immutable, so the consumer gets
        kiln's memory only where it cannot write it: in a DLPack 1.x capsule
        marked read-only (the consumer passed max_version >= (1, 0) and
        honours the flag, as NumPy does), or to JAX, whose arrays are
        immutable. Everyone else gets a writable copy of their own: an
        unversioned capsule, which has no read-only flag, and PyTorch, which
        ignores it. copy=True always copies, copy=False refuses to."""
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"kiln.Array.__dlpack__: the array lives on "
                              f"{self.__dlpack_device__()}, not on the requested dl_device "
                              f"{tuple(dl_device)}; kiln exports on its own device only")
        versioned = max_version is not None and max_version[0] >= 1
        consumer = _consumer(sys._getframe(1))
        needs_copy = consumer in _IGNORES_READ_ONLY or \
            (not versioned and consumer not in _NEVER_WRITES)
        if needs_copy and copy is False:
            why = (f"{consumer} ignores DLPack's read-only flag" if consumer in _IGNORES_READ_ONLY
                   else "an unversioned (pre-1.0) DLPack capsule cannot mark it read-only")
            raise BufferError(f"kiln.Array.__dlpack__(copy=False): kiln arrays are immutable and "
                              f"{why}, so this consumer can only be given a copy; pass copy=None "
                              "or copy=True")
        # -1: no ordering at all; None on CUDA: the legacy default stream (the
        # array API's 1), which waits on kiln's ready event, not the host.
        if stream is None:
            stream = 1 if self.__dlpack_device__()[0] == _KDLCUDA else 0
        if copy or needs_copy:
            c = self._fresh_copy()  # the capsule holds its own reference
            return _dlpack.export_writable(c._handle, int(stream), versioned)
        return _dlpack.export(self._handle, int(stream), versioned)

    def _fresh_copy(self):
        """A copy on the same device that shares no memory with self."""
        if self.device.platform == "cpu":
            return Array(_dlpack.host_copy(self._handle, self.device._handle), self._aval)
        c = _copy_program()(self)
        if _data_pointer(c) == _data_pointer(self):  # (kiln's outputs never alias inputs)
            raise KilnError(f"kiln.Array: the copy of a {self.dtype} array on {self.device} "
                            "came back in the same memory")
        return c


@functools.lru_cache(maxsize=None)
def _copy_program():
    return _ops_jit(lambda x: _jnp().copy(x))


def _data_pointer(a):
    """The address of a's data (kiln's export, unsynchronised, freed at once)."""
    out = ctypes.c_void_p()
    check(lib.kiln_array_to_dlpack(a._handle, -1, ctypes.byref(out)))
    data = ctypes.c_void_p.from_address(out.value + 32).value  # .dl_tensor.data
    _dlpack.call_deleter(out.value)
    return data


@functools.lru_cache(maxsize=None)
def _transpose():
    return _ops_jit(lambda x: x.T)


@functools.lru_cache(maxsize=256)
def _reshape(shape):
    return _ops_jit(lambda x: x.reshape(shape))


@functools.lru_cache(maxsize=None)
def _astype(dtype):
    return _ops_jit(lambda x: x.astype(dtype))


def _consumer(frame):
    """The top-level package of the code calling __dlpack__ (NumPy's
    from_dlpack is C: the frame is then its caller's)."""
    return (frame.f_globals.get("__name__") or "").partition(".")[0]
