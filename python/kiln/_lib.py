"""ctypes declarations of the C entry points the package calls."""
import ctypes
import os

c_int64_p = ctypes.POINTER(ctypes.c_int64)


class DeviceInfo(ctypes.Structure):
    """kiln_device_info (include/kiln/device.h)."""
    _fields_ = [("index", ctypes.c_int), ("platform", ctypes.c_int), ("name", ctypes.c_char * 128),
                ("compute_major", ctypes.c_int), ("compute_minor", ctypes.c_int),
                ("multiprocessors", ctypes.c_int), ("total_memory", ctypes.c_uint64)]


library_path = None  # the libkiln loaded


def _load():
    here = os.path.dirname(os.path.abspath(__file__))
    global library_path
    path = library_path = os.environ.get("KILN_LIBRARY", os.path.join(here, "libkiln.so"))
    lib = ctypes.CDLL(path)
    sig = {
        "kiln_last_error": (ctypes.c_char_p, []),
        "kiln_version": (ctypes.c_char_p, []),
        "kiln_device_info_get": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
        "kiln_options_init": (None, [ctypes.c_void_p]),
        "kiln_ctx_new": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
        "kiln_device_count": (ctypes.c_int, [ctypes.c_void_p]),
        "kiln_device_get": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_void_p)]),
        "kiln_device_index": (ctypes.c_int, [ctypes.c_void_p]),
        "kiln_ctx_backend": (ctypes.c_int, [ctypes.c_void_p]),
        "kiln_array_release": (None, [ctypes.c_void_p]),
        "kiln_array_is_deleted": (ctypes.c_int, [ctypes.c_void_p]),
        "kiln_array_block_until_ready": (ctypes.c_int, [ctypes.c_void_p]),
        "kiln_array_to_host": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]),
        "kiln_array_dtype": (ctypes.c_int, [ctypes.c_void_p]),
        "kiln_array_rank": (ctypes.c_int, [ctypes.c_void_p]),
        "kiln_array_shape": (c_int64_p, [ctypes.c_void_p]),
        "kiln_array_device": (ctypes.c_void_p, [ctypes.c_void_p]),
        "kiln_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
        "kiln_dtype_from_name": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
        "kiln_array_from_host": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                                c_int64_p, ctypes.c_void_p, ctypes.c_size_t,
                                                ctypes.POINTER(ctypes.c_void_p)]),
        "kiln_array_to_dlpack": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64,
                                                ctypes.POINTER(ctypes.c_void_p)]),
        "kiln_array_to_dlpack_unversioned": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64,
                                                            ctypes.POINTER(ctypes.c_void_p)]),
        "kiln_array_from_dlpack": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint,
                                                  ctypes.POINTER(ctypes.c_void_p)]),
        "kiln_array_from_dlpack_unversioned": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p,
                                                              ctypes.c_uint,
                                                              ctypes.POINTER(ctypes.c_void_p)]),
        "kiln_device_dlpack_stream": (ctypes.c_int, [ctypes.c_void_p, c_int64_p]),
        "kiln_func_from_ir": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p,
                                             ctypes.POINTER(ctypes.c_void_p)]),
        "kiln_func_free": (None, [ctypes.c_void_p]),
        "kiln_jit_new": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.POINTER(ctypes.c_void_p)]),
        "kiln_jit_free": (None, [ctypes.c_void_p]),
        "kiln_jit_call_arrays": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                                ctypes.c_size_t, ctypes.c_void_p]),
        "kiln_jit_compile_count": (ctypes.c_int64, [ctypes.c_void_p]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


lib = _load()


def function_addresses():
    """{name: address} of the functions declared above, for _dispatch.bind."""
    return {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
            for name in ("kiln_jit_call_arrays", "kiln_array_release", "kiln_array_dtype",
                         "kiln_array_rank", "kiln_array_shape", "kiln_array_from_host",
                         "kiln_array_from_dlpack", "kiln_last_error")}


class KilnError(RuntimeError):
    """A kiln call failed; the message is kiln's own."""


def check(status):
    if status != 0:
        raise KilnError(lib.kiln_last_error().decode())


# The C-API capsule helpers, typed for the capsules DLPack passes around.
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
capsule_api = _api
