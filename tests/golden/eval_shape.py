#!/usr/bin/env python3
"""Golden data for tests/ir/test_eval_shape.cc: results of JAX's structural
primitives (CPU, x64 enabled) for kiln's reference evaluators to match bit
for bit.

Each case binds one lax primitive (broadcast_in_dim, reshape, transpose,
squeeze, expand_dims -- a broadcast_in_dim in JAX --, rev, slice,
dynamic_slice, dynamic_update_slice, concatenate, pad, iota, gather,
scatter-add) on concrete inputs and records, one case per line:

  name | prim | params (kiln text syntax) | inputs | output

where inputs and output are `type:hex` (the C-order bytes of the array in
kiln's storage form, little endian; `-` for no bytes) and types are kiln's
("f32[4,8]"). Every operand is an input of the one-equation program,
start indices and padding values included.

The gather/scatter forms kiln's tracer emits (embedding lookup, take along
axis, take_along_axis and the scatter-add transpose of take) are also
checked here against jnp.take / jnp.take_along_axis / x.at[].add, so the
dimension numbers mean what the tracer thinks they mean.

Run: python3 tests/golden/eval_shape.py   (deterministic; rerun when JAX changes)
"""
import os

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "eval_shape.txt")

SHORT = {"bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
         "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
         "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
DTYPES = list(SHORT)
NUMERIC = [d for d in DTYPES if d != "bool"]
GD, SD, MODE = lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers, lax.GatherScatterMode
rng = np.random.RandomState(0)


def npdt(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


# Float bit patterns worth moving around: NaNs with payloads and signs, -0.0,
# infinities, subnormals (data movement must keep every bit).
SPECIAL_BITS = {
    "float16": [0x7E01, 0xFE00, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x03FF],
    "bfloat16": [0x7FC1, 0xFFC0, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x007F],
    "float32": [0x7FC00123, 0xFFC00000, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001],
    "float64": [0x7FF8000000000123, 0xFFF8000000000000, 0x8000000000000000,
                0x7FF0000000000000, 0x0000000000000001],
}


def data(dtype, shape, special=True):
    """Deterministic values over the dtype's range, with special floats."""
    dt = npdt(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "bool":
        return (rng.randint(0, 2, size=n) == 1).reshape(shape)
    if dt.kind in "iu":  # uniform bits: the whole range
        return np.frombuffer(rng.bytes(n * dt.itemsize), dtype=dt).copy().reshape(shape)
    v = (rng.randn(n) * 100).round(2).astype(dt)
    if special and n:
        bits = SPECIAL_BITS[dtype]
        utype = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
        sp = np.array(bits, dtype=utype).view(dt)
        k = min(len(sp), max(1, n // 3))
        pos = rng.choice(n, size=k, replace=False)
        v[pos] = sp[:k]
    return v.reshape(shape)


def ints(dtype, values, shape=None):
    """Integers of dtype from Python ints, wrapped to its width (2**64 - 1 as u64)."""
    a = np.array([int(v) % (1 << (8 * npdt(dtype).itemsize)) for v in values], dtype=np.uint64)
    a = a.astype(npdt(dtype).str.replace("i", "u")).view(npdt(dtype))
    return a.reshape(shape if shape is not None else (len(values),))


def type_str(a):
    a = np.asarray(a)
    return SHORT[a.dtype.name] + "[" + ",".join(str(d) for d in a.shape) + "]"


def enc(a):
    a = np.asarray(a)
    h = a.tobytes(order="C").hex()
    return type_str(a) + ":" + (h if h else "-")


# ---- kiln param text ----

def tup(v):
    return "(" + ", ".join(str(x) for x in v) + ("," if len(v) == 1 else "") + ")"


def named(kind, names, v):
    return kind + "(" + ", ".join(f"{n}={tup(getattr(v, n))}" for n in names) + ")"


GNAMES = ["offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
          "start_indices_batching_dims"]
SNAMES = ["update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
          "operand_batching_dims", "scatter_indices_batching_dims"]


def text(v):
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, GD):
        return named("GatherDimensionNumbers", GNAMES, v)
    if isinstance(v, SD):
        return named("ScatterDimensionNumbers", SNAMES, v)
    if isinstance(v, MODE):
        return "GatherScatterMode." + v.name
    if isinstance(v, np.dtype):
        return v.name
    if v is None:
        return "None"
    if isinstance(v, tuple) and v and isinstance(v[0], tuple):  # padding_config
        return "(" + ", ".join(tup(t) for t in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, tuple):
        return tup(v)
    return repr(v)


def params_text(params):
    return " ".join(f"{k}={text(params[k])}" for k in sorted(params))


CASES = []
NAMES = set()


def case(name, prim, params, fn, *args):
    assert name not in NAMES, name
    NAMES.add(name)
    args = [np.asarray(a) for a in args]
    out = np.asarray(fn(*[jnp.asarray(a) for a in args]))
    CASES.append(" | ".join([name, prim, params_text(params), " ".join(enc(a) for a in args),
                             enc(out)]))
    return out


# ---- broadcast_in_dim, reshape, transpose, squeeze, expand_dims, rev ----

def broadcast(name, x, shape, dims):
    case(name, "broadcast_in_dim", {"shape": tuple(shape), "broadcast_dimensions": tuple(dims)},
         lambda a: lax.broadcast_in_dim(a, shape, dims), x)


for dt in DTYPES:
    broadcast(f"broadcast_row_{dt}", data(dt, (3,)), (2, 3), (1,))
broadcast("broadcast_size1", data("float32", (3, 1)), (3, 4), (0, 1))
broadcast("broadcast_scalar", data("int32", ()), (2, 2), ())
broadcast("broadcast_middle", data("float64", (2, 1)), (2, 3, 4), (0, 2))
broadcast("broadcast_rank5", data("uint16", (2, 3)), (2, 1, 3, 2, 2), (0, 2))
broadcast("broadcast_zero", data("float32", (0, 3)), (2, 0, 3), (1, 2))
broadcast("broadcast_to_zero", data("int8", (1,)), (0,), (0,))
broadcast("broadcast_same", data("bfloat16", (2, 3)), (2, 3), (0, 1))


def reshape(name, x, sizes):
    case(name, "reshape", {"new_sizes": tuple(sizes)}, lambda a: lax.reshape(a, sizes), x)


reshape("reshape_2d", data("float32", (2, 3, 4)), (4, 6))
reshape("reshape_scalar", data("float64", ()), (1, 1))
reshape("reshape_to_scalar", data("int64", (1, 1)), ())
reshape("reshape_zero", data("uint8", (0, 3)), (3, 0))
reshape("reshape_bool", data("bool", (6,)), (2, 3))


def transpose(name, x, perm):
    case(name, "transpose", {"permutation": tuple(perm)}, lambda a: lax.transpose(a, perm), x)


for dt in DTYPES:
    transpose(f"transpose_{dt}", data(dt, (2, 3, 4)), (2, 0, 1))
transpose("transpose_2d", data("float32", (3, 5)), (1, 0))
transpose("transpose_scalar", data("int16", ()), ())
transpose("transpose_zero", data("float32", (0, 2)), (1, 0))
transpose("transpose_rank6", data("int32", (2, 1, 3, 2, 2, 3)), (5, 3, 0, 4, 2, 1))
transpose("transpose_identity", data("float16", (2, 3)), (0, 1))


def squeeze(name, x, dims):
    case(name, "squeeze", {"dimensions": tuple(dims)}, lambda a: lax.squeeze(a, dims), x)


squeeze("squeeze_ends", data("float32", (1, 3, 1)), (0, 2))
squeeze("squeeze_to_scalar", data("bool", (1,)), (0,))
squeeze("squeeze_zero", data("int32", (1, 0)), (0,))
squeeze("squeeze_none", data("uint32", (2, 2)), ())


def expand_dims(name, x, dims):
    case(name, "expand_dims", {"dimensions": tuple(dims)},
         lambda a: lax.expand_dims(a, dims), x)


expand_dims("expand_dims_around", data("float32", (3,)), (0, 2))
expand_dims("expand_dims_scalar", data("float64", ()), (0,))
expand_dims("expand_dims_zero", data("int8", (0, 2)), (1,))


def rev(name, x, dims):
    case(name, "rev", {"dimensions": tuple(dims)}, lambda a: lax.rev(a, dims), x)


for dt in DTYPES:
    rev(f"rev_{dt}", data(dt, (2, 3, 4)), (0, 2))
rev("rev_none", data("float32", (2, 3)), ())
rev("rev_all", data("int64", (3, 2)), (0, 1))
rev("rev_zero", data("float32", (0, 3)), (0, 1))
rev("rev_scalar", data("float32", ()), ())


# ---- slice, dynamic_slice, dynamic_update_slice ----

def slice_(name, x, start, limit, strides):
    case(name, "slice", {"start_indices": tuple(start), "limit_indices": tuple(limit),
                         "strides": tuple(strides)},
         lambda a: lax.slice(a, start, limit, strides), x)


for dt in DTYPES:
    slice_(f"slice_{dt}", data(dt, (4, 5)), (1, 0), (4, 5), (2, 2))
slice_("slice_stride3", data("float32", (10,)), (1,), (9,), (3,))
slice_("slice_empty", data("float32", (4, 3)), (2, 1), (2, 3), (1, 1))
slice_("slice_scalar", data("int32", ()), (), (), ())
slice_("slice_rank3", data("float64", (6, 4, 3)), (1, 1, 0), (6, 4, 3), (1, 3, 2))
slice_("slice_big_stride", data("uint8", (5,)), (1,), (5,), (7,))


def dynamic_slice(name, x, starts, sizes):
    case(name, "dynamic_slice", {"slice_sizes": tuple(sizes)},
         lambda a, *s: lax.dynamic_slice_p.bind(a, *s, slice_sizes=tuple(sizes)), x, *starts)


def dynamic_update_slice(name, x, u, starts):
    case(name, "dynamic_update_slice", {},
         lambda a, b, *s: lax.dynamic_update_slice_p.bind(a, b, *s), x, u, *starts)


# Start indices of every integer dtype, in range and out of it on both sides.
START_VALUES = {
    "int8": [(-1, 4), (2, 127), (-128, 1)], "int16": [(1, 2), (-300, 300)],
    "int32": [(0, 3), (2**31 - 1, -(2**31))], "int64": [(2**32 + 1, -(2**40)), (3, -1)],
    "uint8": [(255, 0), (1, 2)], "uint16": [(65535, 3)],
    "uint32": [(2**32 - 1, 2**31 + 2), (4, 1)], "uint64": [(2**64 - 1, 2**63 + 5), (2, 2)],
}
for it, pairs in START_VALUES.items():
    for k, (a, b) in enumerate(pairs):
        starts = [ints(it, [a], ()), ints(it, [b], ())]
        dynamic_slice(f"dynamic_slice_{it}_{k}", data("float32", (5, 6)), starts, (2, 3))
        dynamic_update_slice(f"dynamic_update_slice_{it}_{k}", data("int16", (5, 6)),
                             data("int16", (2, 3)), starts)
for dt in DTYPES:
    starts = [ints("int32", [v], ()) for v in (1, 7, -2)]
    dynamic_slice(f"dynamic_slice_{dt}", data(dt, (3, 4, 2)), starts, (2, 2, 1))
    dynamic_update_slice(f"dynamic_update_slice_{dt}", data(dt, (3, 4, 2)), data(dt, (2, 2, 1)),
                         starts)
dynamic_slice("dynamic_slice_scalar", data("float32", ()), [], ())
dynamic_slice("dynamic_slice_zero_size", data("float32", (4, 3)),
              [ints("int32", [v], ()) for v in (9, 1)], (0, 2))
dynamic_slice("dynamic_slice_whole", data("float64", (3, 2)),
              [ints("int64", [v], ()) for v in (5, -5)], (3, 2))
dynamic_update_slice("dynamic_update_slice_scalar", data("float32", ()), data("float32", ()), [])
dynamic_update_slice("dynamic_update_slice_empty_update", data("int32", (3, 3)),
                     data("int32", (0, 2)), [ints("int32", [v], ()) for v in (1, 1)])
dynamic_update_slice("dynamic_update_slice_whole", data("float32", (2, 3)),
                     data("float32", (2, 3)), [ints("uint8", [v], ()) for v in (1, 200)])


# ---- concatenate, pad, iota ----

def concatenate(name, xs, dim):
    case(name, "concatenate", {"dimension": dim}, lambda *a: lax.concatenate(a, dim), *xs)


for dt in DTYPES:
    concatenate(f"concatenate_{dt}", [data(dt, (2, 1, 2)), data(dt, (2, 3, 2)),
                                      data(dt, (2, 0, 2)), data(dt, (2, 2, 2))], 1)
concatenate("concatenate_dim0", [data("float32", (1, 3)), data("float32", (2, 3))], 0)
concatenate("concatenate_last", [data("int32", (2, 2)), data("int32", (2, 1))], 1)
concatenate("concatenate_one", [data("float64", (3,))], 0)
concatenate("concatenate_all_empty", [data("float32", (0, 2)), data("float32", (0, 2))], 0)


def pad(name, x, value, config):
    config = tuple(tuple(c) for c in config)
    case(name, "pad", {"padding_config": config}, lambda a, v: lax.pad(a, v, config), x, value)


for dt in DTYPES:
    pad(f"pad_{dt}", data(dt, (4, 3)), data(dt, ()), ((1, 2, 0), (0, 1, 1)))
pad("pad_negative", data("float32", (4, 3)), np.float32(-1), ((-1, 2, 1), (2, -3, 2)))
pad("pad_crop_all", data("float32", (5,)), np.float32(7), ((-2, -1, 1),))
pad("pad_crop_beyond", data("int32", (3,)), np.int32(9), ((-4, 2, 0),))
pad("pad_crop_high", data("int32", (3, 2)), np.int32(-9), ((0, -2, 0), (1, -3, 0)))
pad("pad_interior_only", data("float64", (3, 2)), np.float64(0), ((0, 0, 2), (0, 0, 1)))
pad("pad_empty_operand", data("float32", (0, 2)), np.float32(3), ((1, 1, 3), (0, 0, 0)))
pad("pad_scalar", data("int8", ()), np.int8(5), ())
pad("pad_to_empty", data("float32", (3,)), np.float32(1), ((-2, -1, 0),))
pad("pad_nan_value", data("float32", (2,)), np.array(0x7FC00042, np.uint32).view(np.float32),
    ((1, 1, 1),))
pad("pad_rank3", data("uint16", (2, 2, 3)), np.uint16(1), ((1, 0, 1), (-1, 1, 0), (2, -2, 2)))


def iota(name, dtype, shape, dim):
    dt = npdt(dtype)
    case(name, "iota", {"dtype": dt, "shape": tuple(shape), "dimension": dim},
         lambda: lax.broadcasted_iota(dt, shape, dim))


for dt in NUMERIC:
    iota(f"iota_{dt}", dt, (5,), 0)
    iota(f"iota_{dt}_2d", dt, (2, 3), 1)
iota("iota_rank3", "int32", (3, 2, 4), 0)
iota("iota_middle", "float32", (2, 3, 2), 1)
iota("iota_zero", "float32", (0, 3), 1)
iota("iota_int8_wraps", "int8", (300,), 0)
iota("iota_uint8_wraps", "uint8", (260,), 0)
iota("iota_float16_rounds", "float16", (2100,), 0)
iota("iota_bfloat16_rounds", "bfloat16", (300,), 0)


# ---- gather ----

def assert_same(out, check):
    out, check = np.asarray(out), np.asarray(check)
    if out.dtype.kind not in "biu":  # ml_dtypes' NaNs confuse numpy's comparison
        out, check = out.astype(np.float64), check.astype(np.float64)
    np.testing.assert_array_equal(out, check)


def gather(name, x, idx, dnums, slice_sizes, mode, fill=None, check=None):
    params = {"dimension_numbers": dnums, "slice_sizes": tuple(slice_sizes), "mode": mode,
              "fill_value": fill, "indices_are_sorted": False, "unique_indices": False}
    fn = lambda a, i: lax.gather(a, i, dnums, tuple(slice_sizes), mode=mode,  # noqa: E731
                                 fill_value=fill)
    out = case(name, "gather", params, fn, x, idx)
    if check is not None:
        assert_same(out, check)
    return out


def take_dnums(rank, axis, idx_rank):
    """kiln_take's dimension numbers: x.shape[:a] + idx.shape + x.shape[a+1:]."""
    offset = tuple(d if d < axis else d - 1 + idx_rank for d in range(rank) if d != axis)
    return GD(offset_dims=offset, collapsed_slice_dims=(axis,), start_index_map=(axis,))


def take(name, x, idx, axis, mode, fill=None):
    x, idx = np.asarray(x), np.asarray(idx)
    sizes = tuple(1 if d == axis else s for d, s in enumerate(x.shape))
    jmode = {MODE.CLIP: "clip", MODE.FILL_OR_DROP: "fill"}.get(mode)
    check = None
    if jmode and fill is None:  # jnp's "fill" wraps negative indices first
        cidx = np.where(idx < 0, x.shape[axis], idx) if jmode == "fill" else idx
        check = jnp.take(jnp.asarray(x), jnp.asarray(cidx), axis=axis, mode=jmode)
    gather(name, x, idx[..., None], take_dnums(x.ndim, axis, idx.ndim), sizes, mode, fill, check)


def take_along_dnums(rank, axis):
    other = tuple(d for d in range(rank) if d != axis)
    return GD(offset_dims=(), collapsed_slice_dims=(axis,), start_index_map=(axis,),
              operand_batching_dims=other, start_indices_batching_dims=other)


def take_along(name, x, idx, axis, mode):
    x, idx = np.asarray(x), np.asarray(idx)
    jmode = {MODE.CLIP: "clip", MODE.FILL_OR_DROP: "fill"}.get(mode)
    check = None
    if jmode:  # jnp wraps negative indices first; the primitive does not
        n = x.shape[axis]
        cidx = np.clip(idx, 0, n - 1) if jmode == "clip" else np.where(idx < 0, n, idx)
        check = jnp.take_along_axis(jnp.asarray(x), jnp.asarray(cidx), axis=axis, mode=jmode)
    gather(name, x, idx[..., None], take_along_dnums(x.ndim, axis), (1,) * x.ndim, mode,
           check=check)


MODES = {"clip": MODE.CLIP, "fill": MODE.FILL_OR_DROP, "promise": MODE.PROMISE_IN_BOUNDS}
EMB_IDX = ints("int32", [0, 9, -1, 10, 3, 100, -100, 9], (2, 4))
for mname, mode in MODES.items():
    take(f"gather_embedding_{mname}", data("float32", (10, 3)), EMB_IDX, 0, mode)
    take(f"gather_take_axis1_{mname}", data("float64", (3, 5, 2)),
         ints("int32", [4, 0, 5, -1], (4,)), 1, mode)
    take(f"gather_take_last_{mname}", data("int16", (3, 4)), ints("int64", [3, -2, 7], (3,)), 1,
         mode)
    take_along(f"gather_take_along_{mname}", data("float32", (4, 5)),
               ints("int32", [0, 4, 5, -1, 2, 2, 9, 1, 3, 0, -7, 4], (4, 3)), 1, mode)
    take_along(f"gather_take_along_axis0_{mname}", data("int32", (3, 2, 4)),
               ints("int32", list(range(-3, 37)), (5, 2, 4)) % 7 - 2, 0, mode)
take("gather_embedding_fill_value", data("float32", (10, 3)), EMB_IDX, 0, MODE.FILL_OR_DROP,
     fill=-7.5)
take("gather_embedding_fill_f16", data("float16", (10, 3)), EMB_IDX, 0, MODE.FILL_OR_DROP,
     fill=0.1)
take("gather_embedding_fill_int", data("int32", (10, 3)), EMB_IDX, 0, MODE.FILL_OR_DROP, fill=-7.0)
take("gather_embedding_fill_trunc", data("int64", (10, 3)), EMB_IDX, 0, MODE.FILL_OR_DROP,
     fill=-2.5)
for dt in DTYPES:  # every dtype with JAX's default fill
    take(f"gather_embedding_fill_{dt}", data(dt, (6, 2)), ints("int32", [5, 6, -1, 0], (4,)), 0,
         MODE.FILL_OR_DROP)
    take(f"gather_embedding_clip_{dt}", data(dt, (6, 2)), ints("int32", [5, 6, -1, 0], (4,)), 0,
         MODE.CLIP)
# Index dtypes: clamping is exact; FILL_OR_DROP first converts to int32 (2**32 + 1 -> 1).
GATHER_INDEX_VALUES = {
    "int8": [-128, 127, 3], "int16": [-1, 4, 300], "int64": [2**32 + 1, -(2**40), 2],
    "uint8": [255, 0, 4], "uint16": [65535, 1], "uint32": [2**32 - 1, 2**31 + 2, 3],
    "uint64": [2**64 - 1, 2**63 + 5, 2**32 + 2, 1],
}
for it, vals in GATHER_INDEX_VALUES.items():
    for mname, mode in MODES.items():
        take(f"gather_index_{it}_{mname}", data("float32", (5, 2)), ints(it, vals), 0, mode)
# Windows of several dims from index vectors of two entries; partial windows.
WIN_IDX = ints("int32", [0, 0, 4, 5, 5, 4, -1, 2, 1, 9], (5, 2))
# Batch dims (3, 2, 4) paired with operand dims (1, 0) of a [2, 3, 5] operand.
BATCH_IDX = ints("int32", [0, 4, 3, -1, 2, 9, 1, 1, 0, 3, 2, 4, 4, 3, 2, 1, 0, 5, 6, 2, 2, 2, 1, 3],
                 (3, 2, 4, 1))
for mname, mode in MODES.items():
    gather(f"gather_window_{mname}", data("float32", (6, 7)), WIN_IDX,
           GD(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0, 1)), (2, 3), mode)
    gather(f"gather_window_swapped_{mname}", data("int32", (6, 7)), WIN_IDX,
           GD(offset_dims=(0,), collapsed_slice_dims=(1,), start_index_map=(1, 0)), (3, 1), mode)
    gather(f"gather_batching_{mname}", data("float32", (2, 3, 5)),
           BATCH_IDX,
           GD(offset_dims=(3,), collapsed_slice_dims=(), start_index_map=(2,),
              operand_batching_dims=(0, 1), start_indices_batching_dims=(1, 0)),
           (1, 1, 2), mode)
gather("gather_offset_first", data("float32", (4, 6)), ints("int32", [1, 5, 3], (3, 1)),
       GD(offset_dims=(0,), collapsed_slice_dims=(1,), start_index_map=(1,)), (4, 1), MODE.CLIP)
gather("gather_no_index", data("float32", (3, 2)), np.zeros((2, 0), np.int32),
       GD(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=()), (2, 2), MODE.CLIP)
gather("gather_scalar_operand", data("float32", ()), np.zeros((3, 0), np.int32),
       GD(offset_dims=(), collapsed_slice_dims=(), start_index_map=()), (), MODE.FILL_OR_DROP)
gather("gather_empty_indices", data("float32", (10, 3)), np.zeros((0, 1), np.int32),
       take_dnums(2, 0, 1), (1, 3), MODE.CLIP)
gather("gather_empty_window", data("float32", (10, 3)), ints("int32", [1, 2], (2, 1)),
       take_dnums(2, 0, 1), (1, 0), MODE.FILL_OR_DROP)
gather("gather_rank1_indices", data("float32", (6, 2)), ints("int32", [4], (1,)),
       GD(offset_dims=(0,), collapsed_slice_dims=(0,), start_index_map=(0,)), (1, 2), MODE.CLIP)


# ---- scatter-add ----

def scatter_add(name, x, idx, u, dnums, mode, check=None):
    params = {"dimension_numbers": dnums, "mode": mode, "indices_are_sorted": False,
              "unique_indices": False}
    fn = lambda a, i, b: lax.scatter_add(a, i, b, dnums, mode=mode)  # noqa: E731
    out = case(name, "scatter-add", params, fn, x, idx, u)
    if check is not None:
        assert_same(out, check)


def take_transpose(name, x, idx, u, axis, mode):
    """kiln_scatter_add: the transpose of take, x.at[idx].add(u) along axis."""
    x, idx = np.asarray(x), np.asarray(idx)
    ir = idx.ndim
    window = tuple(d if d < axis else d - 1 + ir for d in range(x.ndim) if d != axis)
    dnums = SD(update_window_dims=window, inserted_window_dims=(axis,),
               scatter_dims_to_operand_dims=(axis,))
    check = None
    if mode == MODE.FILL_OR_DROP and axis == 0 and idx.dtype == np.int32:
        cidx = np.where(idx < 0, x.shape[0], idx)  # jnp wraps negative indices first
        check = jnp.asarray(x).at[jnp.asarray(cidx)].add(jnp.asarray(u), mode="drop")
    scatter_add(name, x, idx[..., None], u, dnums, mode, check)


DUP_IDX = ints("int32", [0, 9, -1, 10, 3, 3, 0, 9], (2, 4))
for mname, mode in MODES.items():
    take_transpose(f"scatter_embedding_{mname}", data("float32", (10, 3), special=False),
                   DUP_IDX, data("float32", (2, 4, 3), special=False), 0, mode)
    take_transpose(f"scatter_axis1_{mname}", data("float64", (3, 5, 2), special=False),
                   ints("int32", [4, 0, 5, -1, 4], (5,)), data("float64", (3, 5, 2), False), 1,
                   mode)
for dt in NUMERIC:
    take_transpose(f"scatter_{dt}", data(dt, (6, 2), special=False),
                   ints("int32", [5, 0, 5, 6, 5, 0], (6,)), data(dt, (6, 2), special=False), 0,
                   MODE.FILL_OR_DROP)
# Per-add rounding, wrap-around, order of duplicates, inf + -inf.
ROUND_IDX = ints("int32", [0, 0, 0, 1], (4,))
take_transpose("scatter_f16_rounds_each_add", np.array([2048, 1], np.float16), ROUND_IDX,
               np.array([1, 1, 1, 0.5], np.float16), 0, MODE.CLIP)
take_transpose("scatter_bf16_rounds_each_add", np.array([256, 1], ml_dtypes.bfloat16), ROUND_IDX,
               np.array([1, 1, 1, 0.5], ml_dtypes.bfloat16), 0, MODE.CLIP)
take_transpose("scatter_f32_in_order", np.array([0, 0], np.float32), ints("int32", [0] * 4 + [1]),
               np.array([1e8, 1, -1e8, 1, 5], np.float32), 0, MODE.CLIP)
take_transpose("scatter_f32_inf", np.array([1, 2], np.float32), ints("int32", [0, 0, 1]),
               np.array([np.inf, -np.inf, -0.0], np.float32), 0, MODE.CLIP)
take_transpose("scatter_int8_wraps", np.array([127, -128], np.int8), ints("int32", [0, 1, 0]),
               np.array([1, -1, 127], np.int8), 0, MODE.CLIP)
take_transpose("scatter_uint8_wraps", np.array([255, 0], np.uint8), ints("int32", [0, 1]),
               np.array([1, 255], np.uint8), 0, MODE.CLIP)
take_transpose("scatter_int64_wraps", np.array([2**63 - 1], np.int64), ints("int32", [0]),
               np.array([1], np.int64), 0, MODE.CLIP)
for it, vals in GATHER_INDEX_VALUES.items():
    for mname, mode in MODES.items():
        take_transpose(f"scatter_index_{it}_{mname}", data("int32", (5, 2)), ints(it, vals),
                       data("int32", (len(vals), 2)), 0, mode)
# take_along_axis's transpose: batching dims.
for mname, mode in MODES.items():
    scatter_add(f"scatter_batching_{mname}", data("float32", (4, 5), special=False),
                ints("int32", [0, 4, 5, -1, 2, 2, 9, 1, 3, 0, 0, 4], (4, 3, 1)),
                data("float32", (4, 3), special=False),
                SD(update_window_dims=(), inserted_window_dims=(1,),
                   scatter_dims_to_operand_dims=(1,), operand_batching_dims=(0,),
                   scatter_indices_batching_dims=(0,)), mode)
    scatter_add(f"scatter_batching2_{mname}", data("int64", (2, 3, 5)),
                BATCH_IDX, data("int64", (3, 2, 4, 2)),
                SD(update_window_dims=(3,), inserted_window_dims=(),
                   scatter_dims_to_operand_dims=(2,), operand_batching_dims=(0, 1),
                   scatter_indices_batching_dims=(1, 0)), mode)
    # Windows of two dims, partly out of bounds: CLIP moves them, the others drop them.
    scatter_add(f"scatter_window_{mname}", data("float32", (6, 7), special=False), WIN_IDX,
                data("float32", (5, 2, 3), special=False),
                SD(update_window_dims=(1, 2), inserted_window_dims=(),
                   scatter_dims_to_operand_dims=(0, 1)), mode)
    # Window dims between scatter dims; a window smaller than the operand.
    scatter_add(f"scatter_interleaved_{mname}", data("float64", (10, 3), special=False),
                ints("int32", [1, 9, 3, 3, 0, 8, 2, -2], (2, 4, 1)),
                data("float64", (2, 2, 4), special=False),
                SD(update_window_dims=(1,), inserted_window_dims=(0,),
                   scatter_dims_to_operand_dims=(0,)), mode)
scatter_add("scatter_empty_indices", data("float32", (10, 3)), np.zeros((0, 1), np.int32),
            np.zeros((0, 3), np.float32), SD((1,), (0,), (0,)), MODE.FILL_OR_DROP)
scatter_add("scatter_rank1_indices", data("int32", (6, 2)), ints("int32", [4], (1,)),
            data("int32", (2,)), SD((0,), (0,), (0,)), MODE.CLIP)


def main():
    with open(OUT, "w") as f:
        f.write("# name | prim | params | inputs type:hex | output type:hex "
                "(tests/golden/eval_shape.py)\n")
        for line in CASES:
            f.write(line + "\n")
    print(f"{len(CASES)} cases -> {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
