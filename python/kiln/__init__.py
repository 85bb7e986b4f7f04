"""kiln: arrays on kiln's devices, exchanged with NumPy, JAX, PyTorch and
CuPy through DLPack, and kiln.jit of JAX functions."""
import ctypes
import os
import re

import numpy as np

from . import _dlpack
from ._lib import KilnError, check, lib

try:
    from importlib.metadata import PackageNotFoundError, version as _dist_version
    __version__ = _dist_version("kiln")
except PackageNotFoundError:  # a source tree on sys.path
    __version__ = lib.kiln_version().decode()

__all__ = ["Array", "Device", "KilnError", "UnsupportedPrimitive", "asarray", "from_dlpack",
           "devices", "jit"]

_KDLCPU, _KDLCUDA = 1, 2
_BACKEND_CUDA = 3  # KILN_BACKEND_CUDA
_ALLOW_COPY, _FORCE_COPY = 1, 2  # KILN_DLPACK_ALLOW_COPY, KILN_DLPACK_COPY
_ctx = None


def _context():
    """The process's kiln context, opened on first use from the KILN_*
    variables (KILN_BACKEND, KILN_NUM_CPU_DEVICES, ...)."""
    global _ctx
    if _ctx is None:
        # The frameworks this package exchanges with run on the host here;
        # KILN_BACKEND=cuda (or auto) picks the GPU explicitly.
        os.environ.setdefault("KILN_BACKEND", "cpu")
        handle = ctypes.c_void_p()
        check(lib.kiln_ctx_new(None, ctypes.byref(handle)))
        _ctx = handle
    return _ctx


class Device:
    """One of kiln's devices (borrowed from the context)."""

    def __init__(self, handle):
        self._handle = handle
        self.id = lib.kiln_device_index(handle)
        self.platform = "cuda" if lib.kiln_ctx_backend(_context()) == _BACKEND_CUDA else "cpu"
        self.ordinal = self.id  # kiln opens the GPUs in CUDA's order

    def __repr__(self):
        return f"Device({self.platform}:{self.id})"

    def __eq__(self, other):
        return isinstance(other, Device) and other._handle == self._handle

    def __hash__(self):
        return hash(self._handle)


def devices():
    ctx = _context()
    out = []
    for i in range(lib.kiln_device_count(ctx)):
        d = ctypes.c_void_p()
        check(lib.kiln_device_get(ctx, i, ctypes.byref(d)))
        out.append(Device(d.value))
    return out


def _dtype_from_name(name):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


from ._array import Array  # noqa: E402  (after Device and _dtype_from_name, which it uses)


def from_dlpack(x, device=None, copy=None):
    """Imports any object with __dlpack__ (NumPy, JAX, PyTorch, CuPy).

    Zero-copy where kiln's device can use the producer's memory as it is
    (host memory on CPU, the same GPU on CUDA, compact layout): the kiln
    array views it and keeps the producer's tensor alive until released.
    Otherwise the data is copied (strided inputs in order), unless
    copy=False, which refuses; copy=True always copies. On CUDA the producer
    is asked to make its data ready on kiln's compute stream."""
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"{type(x).__name__} has no __dlpack__")
    dev = device or _device_for(x)
    stream = None
    if dev.platform == "cuda" and x.__dlpack_device__()[0] == _KDLCUDA:
        s = ctypes.c_int64()
        check(lib.kiln_device_dlpack_stream(dev._handle, ctypes.byref(s)))
        stream = s.value
    kwargs = {"max_version": (1, 1)}
    if stream is not None:
        kwargs["stream"] = stream
    try:
        capsule = x.__dlpack__(**kwargs)
    except TypeError:  # a pre-1.0 producer
        kwargs.pop("max_version")
        capsule = x.__dlpack__(**kwargs)
    flags = {False: 0, None: _ALLOW_COPY, True: _ALLOW_COPY | _FORCE_COPY}[copy]
    try:
        return Array(_dlpack.import_capsule(dev._handle, capsule, flags))
    except KilnError as e:  # kiln's C flag, said as the Python argument
        m = re.search(r"from_dlpack\w*: (.*); pass KILN_DLPACK_ALLOW_COPY", str(e))
        if copy is False and m:
            raise BufferError(f"kiln.from_dlpack(copy=False): kiln cannot use this "
                              f"{type(x).__name__} in place ({m.group(1)}) and copy=False forbids "
                              "a copy; pass copy=None (copy when needed) or copy=True") from None
        raise


def _device_for(x):
    """kiln's device for a producer's tensor: the GPU of the same ordinal
    for CUDA memory when kiln runs on CUDA, else kiln's first device."""
    _default_device()
    devs = _devices
    kind, ordinal = x.__dlpack_device__()
    if kind == _KDLCUDA:
        for d in devs:
            if d.platform == "cuda" and d.ordinal == ordinal:
                return d
    return devs[0]


def asarray(x, device=None):
    """A kiln array from a kiln array, a DLPack producer or anything NumPy
    converts (lists, scalars)."""
    if isinstance(x, Array):
        return x
    if not hasattr(x, "__dlpack__"):
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        try:
            return from_dlpack(x, device=device)
        except BufferError:  # dtypes NumPy does not export (bool, bfloat16)
            return _from_host(x, device)
    return from_dlpack(x, device=device)


_dtype_codes = {}
_devices = None


def _default_device():
    global _devices
    if _devices is None:
        _devices = devices()
    return _devices[0]


def _dtype_code(dt):
    code = _dtype_codes.get(dt)
    if code is None:
        c = ctypes.c_int()
        check(lib.kiln_dtype_from_name(dt.name.encode(), ctypes.byref(c)))
        code = _dtype_codes[dt] = c.value
    return code


def _from_host(x, device):
    """A kiln array holding a copy of the NumPy array x."""
    if not x.flags.c_contiguous:
        x = np.require(x, requirements="C")  # (ascontiguousarray makes 0-d arrays 1-d)
    shape = (ctypes.c_int64 * max(x.ndim, 1))(*x.shape)
    out = ctypes.c_void_p()
    dev = (device or _default_device())._handle
    check(lib.kiln_array_from_host(dev, _dtype_code(x.dtype), x.ndim, shape, x.ctypes.data,
                                   x.nbytes, ctypes.byref(out)))
    return Array(out.value, (x.dtype, x.shape))


# After Array and _from_host, which the jit's call path uses.
from ._jit import jit  # noqa: E402
try:
    from ._jaxpr import UnsupportedPrimitive  # noqa: E402
except ImportError:  # no JAX: kiln.jit is unusable, the rest works
    class UnsupportedPrimitive(NotImplementedError):
        """A jaxpr primitive kiln has no counterpart for."""
