#!/usr/bin/env python3
"""Golden data for tests/ir/test_ir_*.cc: the result types JAX's own primitives
give (CPU, x64 enabled), for kiln's shape/dtype rules to match.

Each case binds one lax primitive under jax.eval_shape with kiln-style
parameters converted to JAX's, and records either the output avals or
ERROR when JAX rejects the case. Writes, next to this script:

  ir_rules.txt    one case per line:
                  prim | input types | params (kiln text syntax) | output types or ERROR
  ir_control.txt  cond/while/scan: one kiln program text per line whose
                  control-flow results are declared with the types JAX's
                  cond_p/while_p/scan_p give for the same sub-programs (built
                  with make_jaxpr from lax primitives); kiln's parser checks
                  the declared types against kiln's rules.

Types are kiln's: "f32[4,8]", with "~" in front of a weak type.

Deliberate differences from JAX are not recorded: JAX's reshape rule does
not check the element count (a TODO in lax.py), kiln's does.

Run: python3 tests/golden/ir_rules.py   (deterministic; rerun when JAX changes)
"""
import os

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import ad_util  # noqa: E402
from jax._src.lax import control_flow as CF  # noqa: E402
from jax._src.lax import convolution as CV  # noqa: E402
from jax._src.lax import lax as L  # noqa: E402
from jax._src.lax import slicing as S  # noqa: E402
from jax._src.lax import special as SP  # noqa: E402
from jax._src.random import threefry2x32 as TF  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

SHORT = {"bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
         "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
         "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
LONG = {v: k for k, v in SHORT.items()}


def parse_type(t):
    weak = t.startswith("~")
    t = t.lstrip("~")
    dt, dims = t[:-1].split("[")
    shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    return jax.ShapeDtypeStruct(shape, jnp.dtype(LONG[dt]), weak_type=weak)


def type_str(s):
    dims = ",".join(str(d) for d in s.shape)
    return ("~" if s.weak_type else "") + SHORT[jnp.dtype(s.dtype).name] + "[" + dims + "]"


# ---- kiln params: python values -> kiln text and JAX kwargs ----

class Dtype(str):
    """A dtype param, printed by its numpy name."""


class Mode(str):
    """A GatherScatterMode param: CLIP, FILL_OR_DROP or PROMISE_IN_BOUNDS."""


class GDims(tuple):
    """GatherDimensionNumbers fields in kiln's order."""


class SDims(tuple):
    """ScatterDimensionNumbers fields in kiln's order."""


class DotDims(tuple):
    """((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))."""


class Padding(tuple):
    """padding_config: (lo, hi, interior) triples."""


class ConvDims(tuple):
    """ConvDimensionNumbers: (lhs_spec, rhs_spec, out_spec)."""


def tup(v):
    return "(" + ", ".join(str(x) for x in v) + ("," if len(v) == 1 else "") + ")"


GNAMES = ["offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
          "start_indices_batching_dims"]
SNAMES = ["update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
          "operand_batching_dims", "scatter_indices_batching_dims"]


def kiln_value(v):
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, Dtype):
        return str(v)
    if isinstance(v, Mode):
        return "GatherScatterMode." + v
    if isinstance(v, GDims):
        return "GatherDimensionNumbers(" + ", ".join(
            f"{n}={tup(d)}" for n, d in zip(GNAMES, v)) + ")"
    if isinstance(v, SDims):
        return "ScatterDimensionNumbers(" + ", ".join(
            f"{n}={tup(d)}" for n, d in zip(SNAMES, v)) + ")"
    if isinstance(v, DotDims):
        (lc, rc), (lb, rb) = v
        lst = lambda x: "[" + ", ".join(str(i) for i in x) + "]"  # noqa: E731
        return f"(({lst(lc)}, {lst(rc)}), ({lst(lb)}, {lst(rb)}))"
    if isinstance(v, ConvDims):
        return "ConvDimensionNumbers(" + ", ".join(
            f"{n}={tup(d)}" for n, d in zip(("lhs_spec", "rhs_spec", "out_spec"), v)) + ")"
    if isinstance(v, Padding):
        return "(" + ", ".join(tup(t) for t in v) + ("," if len(v) == 1 else "") + ")"
    if v is None:
        return "None"
    if isinstance(v, tuple):
        return tup(v)
    return repr(v)


def jax_value(v):
    if isinstance(v, Dtype):
        return np.dtype(str(v))
    if isinstance(v, Mode):
        return getattr(S.GatherScatterMode, str(v))
    if isinstance(v, GDims):
        return S.GatherDimensionNumbers(**dict(zip(GNAMES, v)))
    if isinstance(v, SDims):
        return S.ScatterDimensionNumbers(**dict(zip(SNAMES, v)))
    if isinstance(v, DotDims):
        return tuple(tuple(tuple(x) for x in pair) for pair in v)
    if isinstance(v, ConvDims):
        return CV.ConvDimensionNumbers(*v)
    return v


# JAX primitives and the bind params kiln does not have.
def prim_of(name):
    if name.startswith("scatter"):
        return getattr(S, name.replace("-", "_") + "_p")
    if name == "stop_gradient":
        return ad_util.stop_gradient_p
    for mod in (L, S, SP, CF, TF, CV):
        p = getattr(mod, name + "_p", None)
        if p is not None:
            return p
    raise KeyError(name)


EXTRA = {
    "exp": {"accuracy": None}, "exp2": {"accuracy": None}, "expm1": {"accuracy": None},
    "log": {"accuracy": None}, "log1p": {"accuracy": None}, "sqrt": {"accuracy": None},
    "rsqrt": {"accuracy": None}, "cbrt": {"accuracy": None}, "tanh": {"accuracy": None},
    "logistic": {"accuracy": None}, "sin": {"accuracy": None}, "cos": {"accuracy": None},
    "tan": {"accuracy": None},
    "reduce_sum": {"out_sharding": None},
    "iota": {"sharding": None},
    "reshape": {"dimensions": None, "sharding": None},
    "broadcast_in_dim": {"sharding": None},
    "convert_element_type": {"sharding": None},
    "dot_general": {"precision": None, "out_sharding": None},
    "conv_general_dilated": {"precision": None, "out_sharding": None},
    "scatter-add": {"update_jaxpr": None, "update_consts": ()},
    "scatter": {"update_jaxpr": None, "update_consts": ()},
    "scatter-mul": {"update_jaxpr": None, "update_consts": ()},
    "scatter-min": {"update_jaxpr": None, "update_consts": ()},
    "scatter-max": {"update_jaxpr": None, "update_consts": ()},
}

# kiln-only primitives and param spellings that JAX expresses otherwise.
def bind(name, args, params):
    kw = {k: jax_value(v) for k, v in params.items()}
    if name == "round":
        kw["rounding_method"] = L.RoundingMethod(kw["rounding_method"])
    if name == "expand_dims":  # lax.expand_dims is a broadcast_in_dim
        x, = args
        dims = sorted(params["dimensions"])
        shape = list(x.shape)
        for d in dims:
            shape.insert(d, 1)
        if len(set(dims)) != len(dims) or any(d < 0 or d >= len(shape) for d in dims):
            raise ValueError("bad dims")
        keep = [i for i in range(len(shape)) if i not in dims]
        return L.broadcast_in_dim_p.bind(x, shape=tuple(shape), broadcast_dimensions=tuple(keep),
                                         sharding=None)
    kw.update(EXTRA.get(name, {}))
    out = prim_of(name).bind(*args, **kw)
    return out


CASES = []


def case(prim, ins, **params):
    CASES.append((prim, ins.split(), params))


# ---- elementwise ----
FLOAT_UNARY = ["floor", "ceil", "exp", "exp2", "expm1", "log", "log1p", "sqrt", "rsqrt", "cbrt",
               "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
               "asinh", "acosh", "atanh", "erf", "erf_inv", "is_finite"]
for p in FLOAT_UNARY:
    case(p, "f32[4,8]")
    case(p, "~f64[]")
    case(p, "bf16[3]")
    case(p, "i32[4]")
for p in ["neg", "sign"]:
    for t in ["f32[2,3]", "~i64[]", "u8[5]", "bool[2]", "f16[7]"]:
        case(p, t)
for t in ["f32[2]", "i16[3]", "~i32[]", "u32[4]", "bool[1]"]:
    case("abs", t)
for t in ["bool[3]", "u16[2]", "i64[]", "f32[2]"]:
    case("not", t)
for t in ["i8[3]", "u64[2]", "bool[2]", "f32[]"]:
    case("population_count", t)
for t in ["f32[2,3]", "~f32[]", "bf16[4]", "i32[3]", "bool[2]"]:
    case("stop_gradient", t)
case("round", "f32[3]", rounding_method=0)
case("round", "~f16[2,2]", rounding_method=1)
case("round", "i32[3]", rounding_method=1)
for p in ["erfc", "lgamma", "digamma", "bessel_i0e", "bessel_i1e"]:
    for t in ["f32[4,8]", "~f64[]", "bf16[3]", "i32[4]"]:
        case(p, t)
for p in ["square", "copy"]:
    for t in ["f32[2,3]", "~f32[]", "i16[3]", "u8[2]", "bool[2]"]:
        case(p, t)
for t, y in [("f32[3]", 3), ("~f32[]", -2), ("bf16[2]", 0), ("i32[2]", 2), ("u8[2]", 5),
             ("i32[2]", -1), ("bool[2]", 2)]:
    case("integer_pow", t, y=y)
for t, e, m in [("f32[3]", 5, 10), ("~f64[2]", 8, 7), ("bf16[2]", 11, 52), ("f16[]", 4, 0),
                ("i32[2]", 5, 10), ("f32[2]", 0, 3), ("f32[2]", 5, -1)]:
    case("reduce_precision", t, exponent_bits=e, mantissa_bits=m)

NUM_BINARY = ["add", "sub", "mul", "div", "rem", "max", "min"]
for p in NUM_BINARY:
    case(p, "f32[4,8] f32[4,8]")
    case(p, "f32[4,8] f32[8]")
    case(p, "f32[4,8] f32[]")
    case(p, "~f32[] ~f32[]")
    case(p, "~f32[] f32[3]")
    case(p, "i32[4,1] i32[1,5]")
    case(p, "f32[4] i32[4]")
    case(p, "bool[2] bool[2]")
    case(p, "u8[3,1,2] u8[3,4,1]")
    case(p, "f32[4,3] f32[3,4]")
for p in ["atan2", "nextafter"]:
    case(p, "f32[3] f32[3]")
    case(p, "~f64[] f64[2]")
    case(p, "i32[3] i32[3]")
for p in ["and", "or", "xor"]:
    case(p, "bool[3] bool[3]")
    case(p, "u32[2] ~u32[]")
    case(p, "f32[3] f32[3]")
    case(p, "i32[3] i64[3]")
for p in ["shift_left", "shift_right_logical", "shift_right_arithmetic"]:
    case(p, "i32[3] i32[3]")
    case(p, "u8[2,2] u8[]")
    case(p, "i32[3] u32[3]")
    case(p, "bool[2] bool[2]")
    case(p, "f32[2] f32[2]")
for p in ["eq", "ne", "lt", "le", "gt", "ge"]:
    case(p, "f32[4,8] f32[4,8]")
    case(p, "~f32[] ~f32[]")
    case(p, "~i32[] i32[5]")
    case(p, "bool[2] bool[2]")
    case(p, "f32[2] f64[2]")
    case(p, "f32[2] f32[3]")
case("pow", "f32[3] f32[3]")
case("pow", "f32[3] i32[3]")
case("pow", "~f64[] ~i64[]")
case("pow", "f32[3] f64[3]")
case("pow", "i32[3] i32[3]")
case("pow", "f16[2] u8[]")
case("select_n", "bool[3] f32[3] f32[3]")
case("select_n", "bool[] ~f32[2] ~f32[2]")
case("select_n", "i32[2] i8[2] i8[2] i8[2]")
case("select_n", "bool[2] f32[2] f32[2] f32[2]")
case("select_n", "f32[2] f32[2] f32[2]")
case("select_n", "bool[2] f32[2] f64[2]")
case("select_n", "bool[2] f32[3] f32[3]")
case("select_n", "u32[] f32[2,2]")
case("clamp", "f32[] f32[4] f32[]")
case("clamp", "f32[4] f32[4] f32[4]")
case("clamp", "~f32[] ~f32[4] ~f32[]")
case("clamp", "f32[3] f32[4] f32[]")
case("clamp", "i32[] f32[4] f32[]")
case("clamp", "bool[] bool[2] bool[]")
for nd in ["float16", "int8", "bool", "uint64", "bfloat16"]:
    case("convert_element_type", "f32[2,3]", new_dtype=Dtype(nd), weak_type=False)
case("convert_element_type", "~i32[]", new_dtype=Dtype("float32"), weak_type=True)
for src, nd in [("f32[2,3]", "int32"), ("f32[2]", "uint16"), ("u16[2,2]", "float32"),
                ("u16[2,3]", "float32"), ("f64[]", "uint8"), ("u8[8]", "float64"),
                ("bool[2]", "int8"), ("bool[2]", "bool"), ("~f32[3]", "int32"),
                ("i8[]", "uint8"), ("bf16[4]", "float16")]:
    case("bitcast_convert_type", src, new_dtype=Dtype(nd))

# ---- structure ----
case("broadcast_in_dim", "f32[3]", shape=(2, 3), broadcast_dimensions=(1,))
case("broadcast_in_dim", "~f32[]", shape=(4, 5), broadcast_dimensions=())
case("broadcast_in_dim", "f32[1,3]", shape=(4, 3), broadcast_dimensions=(0, 1))
case("broadcast_in_dim", "f32[3,1]", shape=(2, 3, 4), broadcast_dimensions=(1, 2))
case("broadcast_in_dim", "f32[3,2]", shape=(2, 3), broadcast_dimensions=(1, 0))
case("broadcast_in_dim", "f32[3]", shape=(2, 4), broadcast_dimensions=(1,))
case("broadcast_in_dim", "f32[3]", shape=(3,), broadcast_dimensions=(1,))
case("broadcast_in_dim", "f32[3,3]", shape=(3, 3), broadcast_dimensions=(0, 0))
case("broadcast_in_dim", "f32[3]", shape=(2, 3), broadcast_dimensions=())
case("broadcast_in_dim", "f32[3,3]", shape=(3,), broadcast_dimensions=(0, 1))
case("reshape", "f32[4,5]", new_sizes=(20,))
case("reshape", "~i32[2,3,4]", new_sizes=(6, 4))
case("reshape", "f32[]", new_sizes=(1, 1))
case("reshape", "f32[0,3]", new_sizes=(3, 0))
case("reshape", "f32[4]", new_sizes=(-1, 4))
case("transpose", "f32[2,3,4]", permutation=(2, 0, 1))
case("transpose", "~bool[2,3]", permutation=(1, 0))
case("transpose", "f32[2,3]", permutation=(0, 0))
case("transpose", "f32[2,3]", permutation=(0,))
case("transpose", "f32[2,3]", permutation=(0, 2))
case("squeeze", "f32[1,3,1]", dimensions=(0, 2))
case("squeeze", "~f32[1]", dimensions=(0,))
case("squeeze", "f32[2,3]", dimensions=(0,))
case("squeeze", "f32[1,3]", dimensions=(2,))
case("squeeze", "f32[1,1]", dimensions=(0, 0))
case("expand_dims", "f32[2,3]", dimensions=(0,))
case("expand_dims", "~f32[2,3]", dimensions=(1, 3))
case("expand_dims", "f32[]", dimensions=(0, 1))
case("expand_dims", "f32[2]", dimensions=(2,))
case("rev", "f32[2,3]", dimensions=(0,))
case("rev", "~i32[2,3]", dimensions=(1, 0))
case("rev", "f32[2,3]", dimensions=(2,))
case("rev", "f32[2,3]", dimensions=(1, 1))
case("slice", "f32[4,3]", start_indices=(0, 0), limit_indices=(4, 3), strides=(2, 1))
case("slice", "f32[10]", start_indices=(1,), limit_indices=(8,), strides=(3,))
case("slice", "~f32[5,5]", start_indices=(1, 2), limit_indices=(3, 2), strides=(1, 1))
case("slice", "f32[4]", start_indices=(0,), limit_indices=(5,), strides=(1,))
case("slice", "f32[4]", start_indices=(3,), limit_indices=(2,), strides=(1,))
case("slice", "f32[4]", start_indices=(-1,), limit_indices=(2,), strides=(1,))
case("slice", "f32[4,4]", start_indices=(0,), limit_indices=(2,), strides=(1,))
case("dynamic_slice", "f32[4,5] i32[] i32[]", slice_sizes=(2, 2))
case("dynamic_slice", "~f32[4,5] ~i64[] ~i64[]", slice_sizes=(4, 0))
case("dynamic_slice", "f32[4,5] i32[] i64[]", slice_sizes=(2, 2))
case("dynamic_slice", "f32[4,5] i32[] i32[]", slice_sizes=(5, 2))
case("dynamic_slice", "f32[4,5] i32[2] i32[]", slice_sizes=(2, 2))
case("dynamic_slice", "f32[4,5] f32[] f32[]", slice_sizes=(2, 2))
case("dynamic_update_slice", "f32[4,5] f32[2,2] i32[] i32[]")
case("dynamic_update_slice", "~f32[4,5] ~f32[2,2] ~i32[] ~i32[]")
case("dynamic_update_slice", "~f32[4,5] ~f32[2,2] i32[] ~i32[]")
case("dynamic_update_slice", "f32[4,5] f32[5,2] i32[] i32[]")
case("dynamic_update_slice", "f32[4,5] f32[2] i32[] i32[]")
case("dynamic_update_slice", "f32[4,5] f64[2,2] i32[] i32[]")
case("dynamic_update_slice", "f32[4,5] f32[2,2] i32[]")
case("concatenate", "f32[2,3] f32[4,3]", dimension=0)
case("concatenate", "~f32[2,3] ~f32[2,1] ~f32[2,0]", dimension=1)
case("concatenate", "f32[2,3] ~f32[2,3]", dimension=1)
case("concatenate", "f32[2,3] f32[2,4]", dimension=0)
case("concatenate", "f32[2,3] i32[2,3]", dimension=0)
case("concatenate", "f32[2,3] f32[2,3]", dimension=2)
case("concatenate", "f32[2,3] f32[6]", dimension=0)
case("pad", "f32[4,3] f32[]", padding_config=Padding([(1, 2, 0), (0, 0, 1)]))
case("pad", "~f32[4] ~f32[]", padding_config=Padding([(-1, -2, 2)]))
case("pad", "f32[0] f32[]", padding_config=Padding([(1, 1, 3)]))
case("pad", "f32[4] f64[]", padding_config=Padding([(0, 0, 0)]))
case("pad", "f32[4] f32[1]", padding_config=Padding([(0, 0, 0)]))
case("pad", "f32[4] f32[]", padding_config=Padding([(0, 0, -1)]))
case("pad", "f32[4] f32[]", padding_config=Padding([(-3, -3, 0)]))
case("pad", "f32[4,2] f32[]", padding_config=Padding([(0, 0, 0)]))
case("iota", "", dtype=Dtype("int32"), shape=(5,), dimension=0)
case("iota", "", dtype=Dtype("float16"), shape=(2, 3), dimension=1)
case("iota", "", dtype=Dtype("bool"), shape=(2,), dimension=0)
case("iota", "", dtype=Dtype("int32"), shape=(2, 3), dimension=2)
# gather: embedding lookup, take_along_axis, a windowed slice, bad cases
EMB = GDims([(2,), (0,), (0,), (), ()])
case("gather", "f32[10,3] i32[2,4,1]", dimension_numbers=EMB, slice_sizes=(1, 3),
     mode=Mode("PROMISE_IN_BOUNDS"), fill_value=None, indices_are_sorted=False,
     unique_indices=False)
case("gather", "~f32[10,3] i64[5,1]", dimension_numbers=GDims([(1,), (0,), (0,), (), ()]),
     slice_sizes=(1, 3), mode=Mode("CLIP"), fill_value=None, indices_are_sorted=True,
     unique_indices=True)
case("gather", "f32[4,5] i32[4,2,1]", dimension_numbers=GDims([(), (1,), (1,), (0,), (0,)]),
     slice_sizes=(1, 1), mode=Mode("FILL_OR_DROP"), fill_value=float("nan"),
     indices_are_sorted=False, unique_indices=False)
case("gather", "f32[6,7] i32[3,2]", dimension_numbers=GDims([(1, 2), (), (0, 1), (), ()]),
     slice_sizes=(2, 3), mode=Mode("CLIP"), fill_value=None, indices_are_sorted=False,
     unique_indices=False)
case("gather", "f32[10,3] f32[2,1]", dimension_numbers=GDims([(1,), (0,), (0,), (), ()]),
     slice_sizes=(1, 3), mode=Mode("CLIP"), fill_value=None, indices_are_sorted=False,
     unique_indices=False)
case("gather", "f32[10,3] i32[2,2]", dimension_numbers=GDims([(1,), (0,), (0,), (), ()]),
     slice_sizes=(1, 3), mode=Mode("CLIP"), fill_value=None, indices_are_sorted=False,
     unique_indices=False)
case("gather", "f32[10,3] i32[2,1]", dimension_numbers=GDims([(1,), (0,), (0,), (), ()]),
     slice_sizes=(2, 3), mode=Mode("CLIP"), fill_value=None, indices_are_sorted=False,
     unique_indices=False)
case("gather", "f32[10,3] i32[2,1]", dimension_numbers=GDims([(1,), (0,), (0,), (), ()]),
     slice_sizes=(1, 4), mode=Mode("CLIP"), fill_value=None, indices_are_sorted=False,
     unique_indices=False)
case("gather", "f32[10,3] i32[2,1]", dimension_numbers=GDims([(0,), (0,), (0,), (), ()]),
     slice_sizes=(1, 3), mode=Mode("CLIP"), fill_value=None, indices_are_sorted=False,
     unique_indices=False)
case("gather", "f32[4,5] i32[3,2,1]", dimension_numbers=GDims([(), (1,), (1,), (0,), (0,)]),
     slice_sizes=(1, 1), mode=Mode("CLIP"), fill_value=None, indices_are_sorted=False,
     unique_indices=False)
case("scatter-add", "f32[10,3] i32[2,4,1] f32[2,4,3]",
     dimension_numbers=SDims([(2,), (0,), (0,), (), ()]), mode=Mode("PROMISE_IN_BOUNDS"),
     indices_are_sorted=False, unique_indices=False)
case("scatter-add", "~f32[4,5] i32[4,2,1] f32[4,2]",
     dimension_numbers=SDims([(), (1,), (1,), (0,), (0,)]), mode=Mode("FILL_OR_DROP"),
     indices_are_sorted=False, unique_indices=False)
case("scatter-add", "f32[10,3] i32[2,1] f32[2,3]",
     dimension_numbers=SDims([(1,), (0,), (0,), (), ()]), mode=Mode("CLIP"),
     indices_are_sorted=True, unique_indices=True)
case("scatter-add", "f32[10,3] i32[2,1] f64[2,3]",
     dimension_numbers=SDims([(1,), (0,), (0,), (), ()]), mode=Mode("CLIP"),
     indices_are_sorted=False, unique_indices=False)
case("scatter-add", "f32[10,3] i32[2,1] f32[3,3]",
     dimension_numbers=SDims([(1,), (0,), (0,), (), ()]), mode=Mode("CLIP"),
     indices_are_sorted=False, unique_indices=False)
case("scatter-add", "f32[10,3] i32[2,1] f32[2,4]",
     dimension_numbers=SDims([(1,), (0,), (0,), (), ()]), mode=Mode("CLIP"),
     indices_are_sorted=False, unique_indices=False)
case("scatter-add", "f32[10,3] i32[2,1] f32[2,3,1]",
     dimension_numbers=SDims([(1,), (0,), (0,), (), ()]), mode=Mode("CLIP"),
     indices_are_sorted=False, unique_indices=False)
case("scatter-add", "f32[4,5] i32[3,2,1] f32[3,2]",
     dimension_numbers=SDims([(), (1,), (1,), (0,), (0,)]), mode=Mode("CLIP"),
     indices_are_sorted=False, unique_indices=False)

# ---- reductions ----
for p in ["reduce_sum", "reduce_max", "reduce_min", "reduce_prod"]:
    case(p, "f32[4,8]", axes=(1,))
    case(p, "~f32[2,3,4]", axes=(0, 2))
    case(p, "i32[3]", axes=())
    case(p, "bool[3]", axes=(0,))
    case(p, "f16[4,8]", axes=(0, 1))
    case(p, "f32[4,8]", axes=(2,))
    case(p, "f32[4,8]", axes=(1, 1))
for p in ["reduce_and", "reduce_or"]:
    case(p, "bool[4,8]", axes=(1,))
    case(p, "~i32[3,3]", axes=(0,))
    case(p, "f32[3]", axes=(0,))
for p in ["argmax", "argmin"]:
    case(p, "f32[4,8]", axes=(1,), index_dtype=Dtype("int32"))
    case(p, "~f32[4,8]", axes=(0,), index_dtype=Dtype("uint8"))
    case(p, "bool[3]", axes=(0,), index_dtype=Dtype("int64"))
    case(p, "f32[4,8]", axes=(0, 1), index_dtype=Dtype("int32"))
    case(p, "f32[4,0]", axes=(1,), index_dtype=Dtype("int32"))
    case(p, "f32[4,8]", axes=(1,), index_dtype=Dtype("float32"))
for p in ["cumsum", "cumprod", "cummax", "cummin"]:
    case(p, "f32[4,8]", axis=1, reverse=False)
    case(p, "~i32[5]", axis=0, reverse=True)
    case(p, "bool[5]", axis=0, reverse=False)
    case(p, "f32[4,8]", axis=2, reverse=False)
case("sort", "f32[4,5]", dimension=0, is_stable=True, num_keys=1)
case("sort", "f32[4,5] ~i32[4,5]", dimension=1, is_stable=False, num_keys=1)
case("sort", "f32[4,5] i32[4,5] u8[4,5]", dimension=1, is_stable=True, num_keys=2)
case("sort", "f32[4,5] i32[4,4]", dimension=0, is_stable=True, num_keys=1)

# ---- dot ----
MM = DotDims([((1,), (0,)), ((), ())])
case("dot_general", "f32[4,3] f32[3,5]", dimension_numbers=MM, preferred_element_type=None)
case("dot_general", "~f32[4,3] ~f32[3,5]", dimension_numbers=MM, preferred_element_type=None)
case("dot_general", "bf16[4,3] bf16[3,5]", dimension_numbers=MM,
     preferred_element_type=Dtype("float32"))
case("dot_general", "i8[4,3] i8[3,5]", dimension_numbers=MM,
     preferred_element_type=Dtype("int32"))
case("dot_general", "i32[4,3] i32[3,5]", dimension_numbers=MM,
     preferred_element_type=Dtype("int8"))
case("dot_general", "f32[4,3] f16[3,5]", dimension_numbers=MM, preferred_element_type=None)
case("dot_general", "bf16[4,3] f16[3,5]", dimension_numbers=MM, preferred_element_type=None)
case("dot_general", "i8[4,3] u8[3,5]", dimension_numbers=MM, preferred_element_type=None)
case("dot_general", "i32[4,3] f32[3,5]", dimension_numbers=MM, preferred_element_type=None)
case("dot_general", "f32[7,4,3] f32[7,3,5]",
     dimension_numbers=DotDims([((2,), (1,)), ((0,), (0,))]), preferred_element_type=None)
case("dot_general", "f32[2,7,3] f32[3,9,7]",
     dimension_numbers=DotDims([((2,), (0,)), ((1,), (2,))]), preferred_element_type=None)
case("dot_general", "f32[4,3] f32[5]", dimension_numbers=DotDims([((), ()), ((), ())]),
     preferred_element_type=None)
case("dot_general", "f32[4,3] f32[4,5]", dimension_numbers=MM, preferred_element_type=None)
case("dot_general", "f32[4,3] f32[3,5]", dimension_numbers=DotDims([((2,), (0,)), ((), ())]),
     preferred_element_type=None)
case("dot_general", "f32[7,4,3] f32[6,3,5]",
     dimension_numbers=DotDims([((2,), (1,)), ((0,), (0,))]), preferred_element_type=None)
case("dot_general", "f32[4,3] f32[3,5]", dimension_numbers=DotDims([((1,), (0,)), ((1,), (1,))]),
     preferred_element_type=None)
case("dot_general", "f32[4,3] f32[3,5]", dimension_numbers=MM,
     preferred_element_type=Dtype("float16"))

# ---- convolution: padding (lo, hi) pairs print as a Padding of pairs ----
NCHW = ConvDims([(0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3)])
NHWC = ConvDims([(0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2)])


def conv(ins, dn=NCHW, strides=(1, 1), pad=((0, 0), (0, 0)), ld=(1, 1), rd=(1, 1), fg=1, bg=1,
         pref=None):
    case("conv_general_dilated", ins, window_strides=strides, padding=Padding(pad),
         lhs_dilation=ld, rhs_dilation=rd, dimension_numbers=dn, feature_group_count=fg,
         batch_group_count=bg, preferred_element_type=pref)


conv("f32[2,3,7,6] f32[4,3,3,2]", strides=(2, 1), pad=((1, 2), (0, -1)), ld=(1, 2), rd=(2, 1))
conv("f32[2,7,6,3] f32[3,2,3,4]", dn=NHWC, pad=((1, 1), (1, 1)))
conv("bf16[2,4,5,5] bf16[8,2,3,3]", fg=2, pref=Dtype("float32"))
conv("f32[4,3,5,5] f32[6,3,2,2]", bg=2)
conv("i8[2,3,5,5] i8[4,3,3,3]", pref=Dtype("int32"))
conv("f32[2,3,5,5] f32[4,2,3,3]")  # feature counts differ
conv("f32[2,6,5,5] f32[4,2,3,3]", fg=4)  # groups do not divide the features
conv("f32[3,2,5,5] f32[4,2,3,3]", bg=2)  # nor the batch
conv("f32[2,3,5,5] f16[4,3,3,3]")  # dtypes differ
conv("f32[2,3,5,5] f32[4,3,3,3]", pad=((-4, -4), (0, 0)))  # negative size
conv("f32[2,3,5,5] f32[4,3,3,3]", pref=Dtype("float16"))  # narrowing

# ---- rng ----
case("threefry2x32", "u32[] u32[] u32[3] u32[3]")
case("threefry2x32", "u32[2,1] u32[] u32[2,3] u32[1,3]")
case("threefry2x32", "u32[] u32[] i32[3] u32[3]")
case("threefry2x32", "u32[] u32[] u32[3] u32[4]")


# ---- control flow: (kiln text with @0, @1, ... for the results' types, JAX thunk) ----

def weak(v, dt):
    return L._convert_element_type(v, np.dtype(dt), weak_type=True)


def closed(f, *types):
    return jax.make_jaxpr(f)(*[parse_type(t) for t in types])


CONTROL = []


def control(text, types, fn):
    CONTROL.append((text, types, fn))


# cond: results take branch 0's types, weak flags included.
control("{ lambda ; a:i32[] b:f32[4] c:~f32[]. let d:@0 e:@1 = cond[branches=("
        "{ lambda ; f:f32[4] g:~f32[]. let h:f32[4] = mul f g in (h, g) } "
        "{ lambda ; i:f32[4] j:~f32[]. let k:~f32[] = add j 1.0:~f32[] in (i, k) })] a b c "
        "in (d, e) }",
        ["i32[]", "f32[4]", "~f32[]"],
        lambda i, x, y: CF.cond_p.bind(i, x, y, branches=(
            closed(lambda x, y: (L.mul_p.bind(x, y), y), "f32[4]", "~f32[]"),
            closed(lambda x, y: (x, L.add_p.bind(y, weak(1.0, "float32"))), "f32[4]", "~f32[]"))))
control("{ lambda ; a:i32[] b:f32[4] c:~f32[]. let d:@0 = cond[branches=("
        "{ lambda ; e:f32[4] f:~f32[]. let  in (f,) } "
        "{ lambda ; g:f32[4] h:~f32[]. let i:f32[] = reduce_sum[axes=(0,)] g in (i,) })] a b c "
        "in (d,) }",
        ["i32[]", "f32[4]", "~f32[]"],
        lambda i, x, y: CF.cond_p.bind(i, x, y, branches=(
            closed(lambda x, y: (y,), "f32[4]", "~f32[]"),
            closed(lambda x, y: (L.reduce_sum_p.bind(x, axes=(0,), out_sharding=None),),
                   "f32[4]", "~f32[]"))))
# while: results take body_jaxpr's output types.
control("{ lambda ; a:i32[] b:i32[] c:~f32[3]. let d:@0 e:@1 = while["
        "body_jaxpr={ lambda ; f:i32[] g:~f32[3]. let h:i32[] = add f 1:~i32[] "
        "i:~f32[3] = mul g 2.0:~f32[] in (h, i) } body_nconsts=0 "
        "cond_jaxpr={ lambda ; j:i32[] k:i32[] l:~f32[3]. let m:bool[] = lt k j in (m,) } "
        "cond_nconsts=1] a b c in (d, e) }",
        ["i32[]", "i32[]", "~f32[3]"],
        lambda n, k, v: CF.while_p.bind(
            n, k, v, cond_nconsts=1, body_nconsts=0,
            cond_jaxpr=closed(lambda n, k, v: L.lt_p.bind(k, n), "i32[]", "i32[]", "~f32[3]"),
            body_jaxpr=closed(lambda k, v: (L.add_p.bind(k, weak(1, "int32")),
                                            L.mul_p.bind(v, weak(2.0, "float32"))),
                              "i32[]", "~f32[3]")))
# scan: the carry takes the operands' types, ys are stacked body outputs.
control("{ lambda ; a:f32[3] b:~f32[] c:f32[5,3]. let d:@0 e:@1 f:@2 = scan["
        "jaxpr={ lambda ; g:f32[3] h:~f32[] i:f32[3]. let j:~f32[] = add h 1.0:~f32[] "
        "k:f32[3] = mul i g in (j, k, h) } length=5 num_carry=1 num_consts=1 reverse=False] "
        "a b c in (d, e, f) }",
        ["f32[3]", "~f32[]", "f32[5,3]"],
        lambda w, c, xs: CF.scan_p.bind(
            w, c, xs, length=5, reverse=False, num_consts=1, num_carry=1, unroll=1,
            jaxpr=closed(lambda w, c, x: (L.add_p.bind(c, weak(1.0, "float32")),
                                          L.mul_p.bind(x, w), c),
                         "f32[3]", "~f32[]", "f32[3]")))
control("{ lambda ; a:f32[] b:i64[2,4]. let c:@0 d:@1 = scan["
        "jaxpr={ lambda ; e:~f32[] f:i64[4]. let g:i64[] = reduce_max[axes=(0,)] f "
        "in (e, g) } length=2 num_carry=1 num_consts=0 reverse=True] a b in (c, d) }",
        ["f32[]", "i64[2,4]"],
        lambda c, xs: CF.scan_p.bind(
            c, xs, length=2, reverse=True, num_consts=0, num_carry=1, unroll=1,
            jaxpr=closed(lambda c, x: (c, L.reduce_max_p.bind(x, axes=(0,))), "~f32[]", "i64[4]")))
control("{ lambda ; . let a:@0 = scan[jaxpr={ lambda ; . let  in (1.0:~f64[],) } length=0 "
        "num_carry=0 num_consts=0 reverse=True] in (a,) }",
        [],
        lambda: CF.scan_p.bind(length=0, reverse=True, num_consts=0, num_carry=0, unroll=1,
                               jaxpr=closed(lambda: weak(1.0, "float64"))))


def run_control(text, types, fn):
    out = jax.eval_shape(fn, *[parse_type(t) for t in types])
    outs = out if isinstance(out, (list, tuple)) else [out]
    for k, o in enumerate(outs):
        text = text.replace(f"@{k}", type_str(o))
    return text


# ---- the scatter family, top_k, cumlogsumexp, optimization_barrier (helper "scatter") ----
for sp in ("scatter", "scatter-mul", "scatter-min", "scatter-max"):
    case(sp, "f32[10,3] i32[2,4,1] f32[2,4,3]",
         dimension_numbers=SDims([(2,), (0,), (0,), (), ()]), mode=Mode("FILL_OR_DROP"),
         indices_are_sorted=False, unique_indices=False)
    case(sp, "~i32[4,5] i32[4,2,1] i32[4,2]",
         dimension_numbers=SDims([(), (1,), (1,), (0,), (0,)]), mode=Mode("CLIP"),
         indices_are_sorted=True, unique_indices=True)
    if sp != "scatter-mul":  # the primitive takes bool, lax.scatter_mul (and kiln) do not
        case(sp, "bool[4] i32[2,1] bool[2]", dimension_numbers=SDims([(), (0,), (0,), (), ()]),
             mode=Mode("CLIP"), indices_are_sorted=False, unique_indices=False)
    case(sp, "f32[10,3] i32[2,1] i32[2,3]", dimension_numbers=SDims([(1,), (0,), (0,), (), ()]),
         mode=Mode("CLIP"), indices_are_sorted=False, unique_indices=False)
    case(sp, "f32[10,3] i32[2,2] f32[2,3]", dimension_numbers=SDims([(1,), (0,), (0,), (), ()]),
         mode=Mode("CLIP"), indices_are_sorted=False, unique_indices=False)
case("top_k", "f32[3,8]", k=3, axis=1)
case("top_k", "~i32[5,2]", k=5, axis=0)
case("top_k", "f32[4]", k=5, axis=0)
case("top_k", "f32[4]", k=-1, axis=0)
case("top_k", "f32[4,2]", k=1, axis=2)
case("cumlogsumexp", "f32[3,8]", axis=1, reverse=True)
case("cumlogsumexp", "~bf16[4]", axis=0, reverse=False)
case("cumlogsumexp", "f32[3]", axis=1, reverse=False)
case("optimization_barrier", "f32[3,8] ~i32[] bool[2]")
case("optimization_barrier", "f16[0]")

def run(prim, ins, params):
    args = [parse_type(t) for t in ins]
    try:
        out = jax.eval_shape(lambda *a: bind(prim, a, params), *args)
    except Exception:  # noqa: BLE001 - any rejection by JAX is the golden answer
        return "ERROR"
    outs = out if isinstance(out, (list, tuple)) else [out]
    return " ".join(type_str(o) for o in outs)


def main():
    lines = []
    for prim, ins, params in CASES:
        text = " ".join(f"{k}={kiln_value(v)}" for k, v in sorted(params.items()))
        lines.append(f"{prim} | {' '.join(ins)} | {text} | {run(prim, ins, params)}")
    with open(os.path.join(HERE, "ir_rules.txt"), "w") as f:
        f.write("# prim | inputs | params | outputs or ERROR (tests/golden/ir_rules.py)\n")
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} cases, {sum('ERROR' in l for l in lines)} errors")
    with open(os.path.join(HERE, "ir_control.txt"), "w") as f:
        f.write("# kiln programs typed by JAX's control-flow rules (tests/golden/ir_rules.py)\n")
        for text, types, fn in CONTROL:
            f.write(run_control(text, types, fn) + "\n")
    print(f"{len(CONTROL)} control-flow programs")


if __name__ == "__main__":
    main()
