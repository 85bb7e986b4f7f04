"""The text pieces of kiln's IR that the jaxpr translator writes: dtype
names, types, parameter values and exact scalar literals."""
import numpy as np


class UnsupportedPrimitive(NotImplementedError):
    """A jaxpr primitive (or a param value) kiln.jit cannot run: either kiln's
    IR has no counterpart (KilnLacks) or the translator does not map it yet
    (TranslatorLacks)."""


class KilnLacks(UnsupportedPrimitive):
    """kiln's IR cannot express this (FFT, linear algebra, complex numbers)."""


class TranslatorLacks(UnsupportedPrimitive):
    """kiln's IR could express this, but the translator does not map it yet."""


_SHORT = {"bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
          "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
          "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
_FLOATS = {"float16", "bfloat16", "float32", "float64"}


def is_key(aval):
    """Whether aval holds PRNG keys (an extended dtype with an impl)."""
    return hasattr(getattr(aval, "dtype", None), "_impl")


def physical_shape(aval):
    """aval's shape as kiln stores it: a key array is its u32 key data, with
    the impl's key shape ((2,) for threefry2x32) appended."""
    shape = tuple(int(d) for d in aval.shape)
    if is_key(aval):
        shape += tuple(aval.dtype._impl.key_shape)
    return shape


def dtype_name(d):
    name = np.dtype(d).name
    if name not in _SHORT:
        raise KilnLacks(f"kiln lacks dtype {name}")
    return name


def type_text(aval):
    if is_key(aval):
        return f"u32[{','.join(map(str, physical_shape(aval)))}]"
    name = np.dtype(aval.dtype).name
    short = _SHORT.get(name)
    if short is None:
        raise KilnLacks(f"kiln lacks dtype {name} (a value of type {aval.str_short()})")
    weak = "~" if getattr(aval, "weak_type", False) else ""
    return f"{weak}{short}[{','.join(str(int(d)) for d in aval.shape)}]"


def ints(v):
    v = tuple(int(x) for x in v)
    return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"


def pairs(v):
    """((lo, hi), ...): reduce_window's and conv's padding."""
    body = ", ".join(f"({int(lo)}, {int(hi)})" for lo, hi in v)
    return "(" + body + ("," if len(v) == 1 else "") + ")"


def boolean(v):
    return "True" if v else "False"


def params_text(params):
    if not params:
        return ""
    return "[" + " ".join(f"{k}={params[k]}" for k in sorted(params)) + "]"


def float_text(x):
    """A Python float as a literal the IR's strtod reads back to the same
    double: repr is the shortest round-trip form (inf, -inf, -0.0 too);
    NaN keeps its sign."""
    if x != x:
        return "-nan" if np.signbit(x) else "nan"
    return repr(x)


def scalar_literal(value, aval):
    """(text, exact): the literal's text, and whether kiln's literal keeps
    value's bits: every number does (repr round-trips through strtod, and
    f16/bf16/f32 values are doubles); of the NaNs only the default quiet
    one does (kiln writes every NaN literal as that one)."""
    dt = np.dtype(aval.dtype)
    v = np.asarray(value)
    v = v.astype(dt) if v.dtype != dt else v
    if dt == np.bool_:
        return boolean(bool(v)), True
    if dt.name in _FLOATS:
        x = float(v)
        if x != x:
            return float_text(x), v.tobytes() == np.asarray(np.nan).astype(dt).tobytes()
        return float_text(x), True
    return str(int(v)), True
