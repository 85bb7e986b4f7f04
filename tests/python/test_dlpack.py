"""DLPack exchange between kiln and NumPy / JAX (and PyTorch where it is
installed): pointer identity, lifetimes, read-only, 0-d, zero-size and
non-contiguous inputs."""
import gc
import weakref

import numpy as np
import pytest

import kiln

jnp = pytest.importorskip("jax.numpy")


def _ptr(a):
    return np.from_dlpack(a).ctypes.data


def test_numpy_views_kiln_memory_read_only():
    k = kiln.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    n1, n2 = np.from_dlpack(k), np.asarray(k)
    assert n1.ctypes.data == n2.ctypes.data  # both views of kiln's buffer
    assert not n1.flags.writeable
    with pytest.raises(ValueError):
        n1[0, 0] = 1
    np.testing.assert_array_equal(n1, np.arange(6).reshape(2, 3))


def test_jax_views_kiln_memory():
    # kiln's own (64-byte aligned) memory: XLA copies less aligned buffers.
    k = kiln.from_dlpack(np.arange(4, dtype=np.int32), copy=True)
    j = jnp.from_dlpack(k)
    assert j.unsafe_buffer_pointer() == _ptr(k)
    np.testing.assert_array_equal(np.asarray(j), [0, 1, 2, 3])


def test_consumer_outlives_kiln_array():
    k = kiln.asarray(np.full((3,), 7.5, np.float64))
    n = np.from_dlpack(k)
    del k
    gc.collect()
    np.testing.assert_array_equal(n, [7.5, 7.5, 7.5])


def test_import_is_zero_copy_and_outlives_producer():
    src = np.arange(5, dtype=np.int16)
    alive = weakref.ref(src)
    k = kiln.from_dlpack(src)
    assert _ptr(k) == src.ctypes.data  # the same memory
    src[0] = 42  # zero-copy both ways: the producer's writes show
    del src
    gc.collect()
    assert alive() is not None  # kiln holds the producer's tensor
    np.testing.assert_array_equal(np.asarray(k), [42, 1, 2, 3, 4])
    del k
    gc.collect()
    assert alive() is None  # released: kiln called the producer's deleter


def test_copy_true_copies_and_frees_the_producer():
    src = np.arange(4, dtype=np.float32)
    alive = weakref.ref(src)
    k = kiln.from_dlpack(src, copy=True)
    assert _ptr(k) != src.ctypes.data
    src[:] = -1
    del src
    gc.collect()
    assert alive() is None
    np.testing.assert_array_equal(np.asarray(k), [0, 1, 2, 3])


def test_read_only_producer_imports_in_place():
    src = np.arange(6, dtype=np.float64).reshape(2, 3)
    src.flags.writeable = False
    k = kiln.from_dlpack(src)
    assert _ptr(k) == src.ctypes.data
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda x: x * 2)(k)), src * 2)


def test_jax_import_is_zero_copy():
    j = jnp.arange(8, dtype=jnp.float32)
    k = kiln.from_dlpack(j)
    assert _ptr(k) == j.unsafe_buffer_pointer()
    del j
    gc.collect()
    np.testing.assert_array_equal(np.asarray(k), np.arange(8))


def test_misaligned_view_is_copied():
    raw = np.zeros(17, np.uint8)
    view = raw[1:].view(np.float32)  # data one byte past an aligned address
    k = kiln.from_dlpack(view)
    assert _ptr(k) != view.ctypes.data
    np.testing.assert_array_equal(np.asarray(k), view)


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (1,), (2, 3, 4)])
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "float16", "float32",
                                   "float64", "bfloat16"])
def test_round_trip_shapes_and_dtypes(shape, dtype):
    dt = kiln._dtype_from_name(dtype)
    x = (np.arange(int(np.prod(shape)), dtype=np.int64) % 3).astype(dt).reshape(shape)
    for src in (x, jnp.asarray(x)):  # JAX without x64 narrows 64-bit types
        want = np.asarray(src)
        k = kiln.asarray(src)
        assert k.shape == shape and k.dtype == want.dtype
        back = np.asarray(k)
        assert back.dtype == want.dtype
        np.testing.assert_array_equal(back, want)


def test_non_contiguous_copied_or_refused():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    np.testing.assert_array_equal(np.asarray(kiln.asarray(x)), x)
    np.testing.assert_array_equal(np.asarray(kiln.asarray(x.T)), x.T)
    with pytest.raises(BufferError, match=r"copy=False.*non-compact layout strides \(4, 2\)"):
        kiln.from_dlpack(x, copy=False)


def test_dlpack_device_and_unversioned_capsule():
    k = kiln.asarray(np.ones(2, np.float32))
    assert k.__dlpack_device__() == (1, 0)
    assert k.devices() == {kiln.devices()[0]}
    cap = k.__dlpack__()  # no max_version: a pre-1.0 consumer
    assert "dltensor" in repr(cap) and "versioned" not in repr(cap)
    del cap  # never consumed: the destructor frees kiln's reference


def test_refuses_foreign_device_requests():
    k = kiln.asarray(np.ones(2, np.float32))
    with pytest.raises(BufferError, match="dl_device"):
        k.__dlpack__(max_version=(1, 0), dl_device=(2, 0))


def _capsule_data(cap):
    """The data pointer a capsule carries (versioned or not) and its flags."""
    import ctypes
    from kiln._lib import capsule_api
    for name, data_at, flags_at in ((b"dltensor_versioned", 32, 24), (b"dltensor", 0, None)):
        if capsule_api.PyCapsule_IsValid(cap, name):
            m = capsule_api.PyCapsule_GetPointer(cap, name)
            flags = None if flags_at is None else ctypes.c_uint64.from_address(m + flags_at).value
            return ctypes.c_void_p.from_address(m + data_at).value, flags
    raise AssertionError(cap)


def test_read_only_flag_or_a_copy():
    # kiln's memory goes out only in a capsule marked read-only (1 = READ_ONLY);
    # copy=True and an unversioned request (no flag to carry) get a copy the
    # consumer may write (2 = IS_COPIED).
    k = kiln.from_dlpack(np.arange(4, dtype=np.float32), copy=True)
    assert _capsule_data(k.__dlpack__(max_version=(1, 0))) == (_ptr(k), 1)
    data, flags = _capsule_data(k.__dlpack__(max_version=(1, 1), copy=True))
    assert data != _ptr(k) and flags == 2
    data, flags = _capsule_data(k.__dlpack__())
    assert data != _ptr(k) and flags is None
    with pytest.raises(BufferError, match=r"__dlpack__\(copy=False\).*unversioned.*copy=None"):
        k.__dlpack__(copy=False)
    # NumPy asked for a copy gets a writable one; kiln's array is untouched.
    n = np.from_dlpack(k, copy=True)
    n[0] = 99
    np.testing.assert_array_equal(np.asarray(k), [0, 1, 2, 3])


def test_torch_cannot_write_a_kiln_array():
    # torch.from_dlpack ignores DLPack's read-only flag (its tensors are
    # always writable), so kiln gives torch a copy.
    torch = pytest.importorskip("torch")
    k = kiln.from_dlpack(np.arange(6, dtype=np.float32).reshape(2, 3), copy=True)
    t = torch.from_dlpack(k)
    assert t.data_ptr() != _ptr(k)
    t[0, 0] = 1234
    np.testing.assert_array_equal(np.asarray(k), np.arange(6).reshape(2, 3))
    with pytest.raises(BufferError, match=r"copy=False.*torch ignores DLPack's read-only flag"):
        torch.from_dlpack(k, copy=False)
    torch.as_tensor(k)[0, 1] = 77  # (through __array__: torch copies the read-only view)
    np.testing.assert_array_equal(np.asarray(k), np.arange(6).reshape(2, 3))
    bf = torch.from_dlpack(kiln.asarray(np.ones(3, jnp.bfloat16)))
    assert bf.dtype == torch.bfloat16 and bf.tolist() == [1, 1, 1]


def test_jax_views_kiln_memory_and_never_writes_it():
    # JAX asks for the unversioned capsule, but its arrays are immutable and
    # a donated one is not written through: it may view kiln's memory.
    jax = pytest.importorskip("jax")
    k = kiln.from_dlpack(np.arange(8, dtype=np.float32), copy=True)
    j = jnp.from_dlpack(k)
    assert j.unsafe_buffer_pointer() == _ptr(k)
    r = jax.jit(lambda a: a + 100, donate_argnums=0)(j)
    np.testing.assert_array_equal(np.asarray(r), np.arange(8) + 100)
    np.testing.assert_array_equal(np.asarray(k), np.arange(8))


def test_import_copy_false_speaks_python():
    with pytest.raises(BufferError, match=r"kiln.from_dlpack\(copy=False\).*strides.*copy=None"):
        kiln.from_dlpack(np.ones((4, 3), np.float32).T, copy=False)


def test_torch_round_trip():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    k = kiln.from_dlpack(t)
    assert _ptr(k) == t.data_ptr()  # imported in place
    back = torch.from_dlpack(k)  # a copy: see test_torch_cannot_write_a_kiln_array
    assert torch.equal(back, t)


def test_torch_cuda_import_uses_kiln_stream():
    torch = pytest.importorskip("torch")
    cuda = [d for d in kiln.devices() if d.platform == "cuda"]
    if not torch.cuda.is_available() or not cuda:
        pytest.skip("needs a GPU seen by both torch and kiln (KILN_BACKEND=cuda)")
    t = torch.arange(1 << 20, dtype=torch.float32, device="cuda") * 3  # queued on torch's stream
    k = kiln.from_dlpack(t)
    assert _ptr_cuda(k) == t.data_ptr()
    np.testing.assert_array_equal(np.asarray(k), np.arange(1 << 20, dtype=np.float32) * 3)


def test_cupy_import_in_place():
    cupy = pytest.importorskip("cupy")
    cuda = [d for d in kiln.devices() if d.platform == "cuda"]
    if not cuda:
        pytest.skip("needs kiln on CUDA (KILN_BACKEND=cuda)")
    c = cupy.arange(10, dtype=cupy.float32)
    k = kiln.from_dlpack(c)
    assert _ptr_cuda(k) == c.data.ptr
    np.testing.assert_array_equal(np.asarray(k), np.arange(10, dtype=np.float32))


def _kiln_cuda_or_skip():
    cuda = [d for d in kiln.devices() if d.platform == "cuda"]
    if not cuda:
        pytest.skip("needs kiln on CUDA (KILN_BACKEND=cuda)")
    return cuda[0]


def test_torch_cuda_copies_kiln_jit_result():
    # The result of a kernel kiln queued: the copy kiln makes for torch is
    # ordered after it, and torch's stream after the copy.
    torch = pytest.importorskip("torch")
    dev = _kiln_cuda_or_skip()
    if not torch.cuda.is_available():
        pytest.skip("needs torch with CUDA")
    x = np.arange(1 << 22, dtype=np.float32)
    k = kiln.jit(lambda a: a * 2 + 1)(kiln.asarray(x, device=dev))
    t = torch.from_dlpack(k)  # a copy on the GPU: torch ignores the read-only flag
    assert t.is_cuda and t.data_ptr() != _ptr_cuda(k)
    np.testing.assert_array_equal(t.cpu().numpy(), x * 2 + 1)
    t[0] = -5
    np.testing.assert_array_equal(np.asarray(k)[:2], [1, 3])
    del k
    gc.collect()  # torch's copy is its own
    np.testing.assert_array_equal((t + 0).cpu().numpy()[1:], (x * 2 + 1)[1:])


def test_cupy_cuda_import_outlives_producer_reference():
    # kiln holds CuPy's buffer until kiln's own last use of it has run.
    cupy = pytest.importorskip("cupy")
    dev = _kiln_cuda_or_skip()
    c = cupy.arange(1 << 20, dtype=cupy.float32)
    k = kiln.from_dlpack(c, device=dev)
    del c
    gc.collect()
    y = kiln.jit(lambda a: a + 1)(k)
    del k
    gc.collect()
    np.testing.assert_array_equal(np.asarray(y), np.arange(1 << 20, dtype=np.float32) + 1)


def test_jax_gpu_reads_kiln_cuda_array():
    jax = pytest.importorskip("jax")
    dev = _kiln_cuda_or_skip()
    if jax.devices()[0].platform != "gpu":
        pytest.skip("needs jax on the GPU")
    x = np.linspace(-1, 1, 4096, dtype=np.float32)
    k = kiln.jit(lambda a: a * a)(kiln.asarray(x, device=dev))
    j = jax.dlpack.from_dlpack(k)
    np.testing.assert_array_equal(np.asarray(j), x * x)


def _ptr_cuda(a):
    """The device address a kiln CUDA array exports."""
    import ctypes
    from kiln import _lib
    out = ctypes.c_void_p()
    _lib.check(_lib.lib.kiln_array_to_dlpack(a._handle, -1, ctypes.byref(out)))
    managed = out.value
    data = ctypes.c_void_p.from_address(managed + 32).value  # DLManagedTensorVersioned.dl_tensor.data
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.c_void_p.from_address(managed + 16).value)(managed)
    return data


def test_device_copy_for_consumers_is_new_memory():
    # CUDA arrays are copied for a consumer by a kiln.jit copy program (kiln's
    # DLPack import copies only host-readable tensors); the same program runs
    # here on the CPU, where it must not hand back the input's memory either.
    from kiln import _array
    k = kiln.from_dlpack(np.arange(5, dtype=np.int16), copy=True)
    c = _array._copy_program()(k)
    assert _array._data_pointer(c) != _array._data_pointer(k) == _ptr(k)
    np.testing.assert_array_equal(np.asarray(c), np.arange(5))
    assert _array._data_pointer(k._fresh_copy()) != _ptr(k)
