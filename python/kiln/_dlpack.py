"""DLPack capsules: kiln arrays out to consumers, producers' tensors in."""
import ctypes

from ._lib import capsule_api, check, lib

_VERSIONED = b"dltensor_versioned"
_UNVERSIONED = b"dltensor"
# PyCapsule_SetName keeps the pointer, not a copy: these must live forever.
_USED = {_VERSIONED: b"used_dltensor_versioned", _UNVERSIONED: b"used_dltensor"}
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Offsets of `deleter` in the two managed structs (64-bit ABI).
_DELETER_OFFSET = {_VERSIONED: 16, _UNVERSIONED: 56}

# Called with the GIL held on a capsule being freed; the raw PyObject* is
# used because the object is mid-destruction.
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", capsule_api))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", capsule_api))


def call_deleter(managed, name=_VERSIONED):
    fn = ctypes.c_void_p.from_address(managed + _DELETER_OFFSET[name]).value
    if fn:
        _DELETER(fn)(managed)


@ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # A consumer renames the capsule "used_..." when it takes ownership; a
    # capsule that still has its name was never consumed, so kiln frees it.
    for name in (_VERSIONED, _UNVERSIONED):
        if _is_valid(capsule, name):
            call_deleter(_get_pointer(capsule, name), name)
            return


_DESTRUCTOR_ADDR = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


def export(handle, stream, versioned):
    out = ctypes.c_void_p()
    if versioned:
        check(lib.kiln_array_to_dlpack(handle, stream, ctypes.byref(out)))
    else:
        check(lib.kiln_array_to_dlpack_unversioned(handle, stream, ctypes.byref(out)))
    return capsule_api.PyCapsule_New(out.value, _VERSIONED if versioned else _UNVERSIONED,
                                     _DESTRUCTOR_ADDR)


# DLManagedTensorVersioned.flags (64-bit ABI) and the bits kiln sets there.
_FLAGS_OFFSET = 24
_READ_ONLY, _IS_COPIED = 1, 2  # DLPACK_FLAG_BITMASK_READ_ONLY, _IS_COPIED


def host_copy(handle, device):
    """A new kiln array (handle) holding a copy of a host (CPU) array: kiln's
    import with KILN_DLPACK_COPY of its own export. (On CUDA kiln's import
    copies only host-readable tensors: _array copies device arrays by jit.)"""
    own = ctypes.c_int64()
    check(lib.kiln_device_dlpack_stream(device, ctypes.byref(own)))
    out = ctypes.c_void_p()
    check(lib.kiln_array_to_dlpack(handle, own.value, ctypes.byref(out)))
    copy = ctypes.c_void_p()
    # The export's deleter runs once the copy is made, on success or failure.
    check(lib.kiln_array_from_dlpack(device, out.value, 1 | 2, ctypes.byref(copy)))
    return copy.value


def export_writable(handle, stream, versioned):
    """The capsule of an array no one else holds (a copy made for the
    consumer): the versioned one says IS_COPIED instead of READ_ONLY."""
    capsule = export(handle, stream, versioned)
    if versioned:
        flags = ctypes.c_uint64.from_address(
            capsule_api.PyCapsule_GetPointer(capsule, _VERSIONED) + _FLAGS_OFFSET)
        flags.value = (flags.value & ~_READ_ONLY) | _IS_COPIED
    return capsule


def import_capsule(device, capsule, flags):
    """Consumes a producer's capsule; returns a kiln array handle."""
    out = ctypes.c_void_p()
    for name, fn in ((_VERSIONED, lib.kiln_array_from_dlpack),
                     (_UNVERSIONED, lib.kiln_array_from_dlpack_unversioned)):
        if capsule_api.PyCapsule_IsValid(capsule, name):
            managed = capsule_api.PyCapsule_GetPointer(capsule, name)
            capsule_api.PyCapsule_SetName(capsule, _USED[name])  # kiln owns it now
            check(fn(device, managed, flags, ctypes.byref(out)))
            return out.value
    raise TypeError("expected a DLPack capsule named 'dltensor' or 'dltensor_versioned'")
