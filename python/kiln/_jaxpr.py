"""Translation of a JAX jaxpr into kiln's IR text (the form kir_parse reads:
jaxpr-style, every param spelled out, sub-programs closed).

Calls (jit/pjit, closed_call, custom_jvp_call, custom_vjp_call, remat) are
inlined; a few JAX primitives kiln spells differently are lowered here
(integer_pow, square, copy, split, argsort-style sort); anything else kiln
lacks is an UnsupportedPrimitive naming the primitive and the equation."""
import numpy as np

from jax.extend import core as jcore

__all__ = ["UnsupportedPrimitive", "translate"]


class UnsupportedPrimitive(NotImplementedError):
    """A jaxpr primitive (or a param value) kiln has no counterpart for."""


_SHORT = {"bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
          "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
          "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}

# Primitives that keep JAX's name and take no params.
_PLAIN = set("""neg abs sign floor ceil exp exp2 expm1 log log1p sqrt rsqrt cbrt tanh logistic
sin cos tan asin acos atan sinh cosh asinh acosh atanh erf erf_inv is_finite not
population_count add sub mul div rem pow max min atan2 and or xor shift_left
shift_right_logical shift_right_arithmetic nextafter eq ne lt le gt ge select_n clamp
dynamic_update_slice""".split())
# Calls whose body is inlined, and the param holding it.
_CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr",
          "core_call": "call_jaxpr", "custom_jvp_call": "call_jaxpr",
          "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
          "remat": "jaxpr", "checkpoint": "jaxpr"}
# Params JAX carries that do not change the values kiln computes.
_IGNORED = {"sharding", "out_sharding", "unroll", "_split_transpose", "precision", "accumulation_type"}


def _dtype_name(d):
    name = np.dtype(d).name
    if name not in _SHORT:
        raise UnsupportedPrimitive(f"kiln has no dtype {name}")
    return name


def _type(aval):
    short = _SHORT.get(np.dtype(aval.dtype).name)
    if short is None:
        raise UnsupportedPrimitive(f"kiln has no dtype {np.dtype(aval.dtype).name} "
                                   f"(a value of type {aval.str_short()})")
    weak = "~" if getattr(aval, "weak_type", False) else ""
    return f"{weak}{short}[{','.join(str(int(d)) for d in aval.shape)}]"


def _ints(v):
    v = tuple(int(x) for x in v)
    return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"


def _bool(v):
    return "True" if v else "False"


def _scalar_text(value, aval):
    dt = np.dtype(aval.dtype)
    v = np.asarray(value).item()
    if dt == np.bool_:
        return _bool(v)
    if dt.kind == "f":
        v = float(v)
        return "nan" if v != v else repr(v)  # repr: shortest round-trip, inf and -inf
    return str(int(v))


class _Scope:
    """One kiln program being written: its invar binders, equation lines and
    the map from jaxpr vars to kiln atoms (names or literal text)."""

    def __init__(self, tr, top):
        self.tr, self.top = tr, top
        self.env, self.binders, self.lines = {}, [], []
        self.const_binders = []  # root only: array constants, inputs ahead of the arguments

    def new_var(self, aval):
        name = self.tr.fresh()
        return name, f"{name}:{_type(aval)}"

    def bind_invar(self, var):
        name, binder = self.new_var(var.aval)
        self.binders.append(binder)
        self.env[var] = name
        return name

    def atom(self, x):
        if isinstance(x, jcore.Literal):
            return self.literal(x.val, x.aval)
        return self.env[x]

    def literal(self, value, aval):
        return f"{_scalar_text(value, aval)}:{_type(aval)}"

    def bind_consts(self, constvars, consts, where):
        """Scalars become literals; arrays become inputs of the root program
        (sub-programs are closed and cannot take them)."""
        for var, val in zip(constvars, consts):
            if np.ndim(val) == 0:
                self.env[var] = self.literal(val, var.aval)
            elif self.top:
                name, binder = self.new_var(var.aval)
                self.const_binders.append(binder)
                self.env[var] = name
                self.tr.const_values.append(val)
            else:
                raise UnsupportedPrimitive(
                    f"{where}: a non-scalar constant {var.aval.str_short()} captured inside a "
                    f"control-flow body (kiln's sub-programs are closed); pass it as an argument")

    def emit(self, prim, params, ins, outvars):
        outs = []
        for v in outvars:
            name, binder = self.new_var(v.aval)
            if not isinstance(v, jcore.DropVar):
                self.env[v] = name
            outs.append(binder)
        p = ""
        if params:
            p = "[" + " ".join(f"{k}={params[k]}" for k in sorted(params)) + "]"
        self.lines.append(f"{' '.join(outs)} = {prim}{p} {' '.join(ins)}")

    def emit_value(self, prim, params, ins, aval):
        """An intermediate equation of a lowering: returns its result's name."""
        name, binder = self.new_var(aval)
        p = "[" + " ".join(f"{k}={params[k]}" for k in sorted(params)) + "]" if params else ""
        self.lines.append(f"{binder} = {prim}{p} {' '.join(ins)}")
        return name

    def text(self, outs):
        return ("{ lambda ; " + " ".join(self.const_binders + self.binders) + ". let\n  " + "\n  ".join(self.lines)
                + "\n in (" + ", ".join(outs) + ("," if len(outs) == 1 else "") + ") }")


class _Translator:
    def __init__(self):
        self.count = 0
        self.const_values = []

    def fresh(self):
        self.count += 1
        return f"v{self.count}"

    def program(self, jaxpr, consts, top, where):
        s = _Scope(self, top)
        s.bind_consts(jaxpr.constvars, consts, where)
        for v in jaxpr.invars:
            s.bind_invar(v)
        self.body(s, jaxpr)
        return s.text([s.atom(v) for v in jaxpr.outvars])

    def closed(self, cj, where):
        return self.program(cj.jaxpr, cj.consts, False, where)

    def body(self, s, jaxpr):
        for eqn in jaxpr.eqns:
            self.eqn(s, eqn)

    def eqn(self, s, eqn):
        name, p = eqn.primitive.name, eqn.params
        ins = [s.atom(x) for x in eqn.invars]
        where = f"{name} in `{eqn}`".replace("\n", " ")
        if len(where) > 300:
            where = where[:300] + "...`"
        if name in _CALLS:
            return self.inline(s, eqn, p[_CALLS[name]], where)
        rule = _RULES.get(name)
        if rule is None and name not in _PLAIN:
            raise UnsupportedPrimitive(f"kiln has no primitive {name!r} (equation: {where})")
        if name == "mul" and p.get("out_dtype") is not None:
            raise UnsupportedPrimitive(f"mul with out_dtype ({where})")
        if rule is None:
            _check_ignored(p, (), where)
            return s.emit(name, {}, ins, eqn.outvars)
        return rule(self, s, eqn, ins, where)

    def inline(self, s, eqn, body, where):
        jaxpr, consts = (body.jaxpr, body.consts) if hasattr(body, "consts") else (body, ())
        # custom_vjp/jvp calls may carry consts ahead of the operands.
        s.bind_consts(jaxpr.constvars, consts, where)
        for inner, outer in zip(jaxpr.invars, eqn.invars):
            s.env[inner] = s.atom(outer)
        self.body(s, jaxpr)
        for outer, inner in zip(eqn.outvars, jaxpr.outvars):
            if not isinstance(outer, jcore.DropVar):
                s.env[outer] = s.atom(inner)


def _check_ignored(p, used, where):
    for k, v in p.items():
        if k in used or k in _IGNORED or v is None:
            continue
        raise UnsupportedPrimitive(f"param {k}={v!r} is not supported ({where})")


def _simple(param_fmt):
    """A rule that renames JAX's params into kiln's spelling, one to one."""
    def rule(tr, s, eqn, ins, where):
        _check_ignored(eqn.params, param_fmt, where)
        params = {k: fmt(eqn.params.get(k)) for k, fmt in param_fmt.items()}
        s.emit(eqn.primitive.name, params, ins, eqn.outvars)
    return rule


def _reshape(tr, s, eqn, ins, where):
    _check_ignored(eqn.params, {"new_sizes", "dimensions"}, where)
    dims, x = eqn.params.get("dimensions"), ins[0]
    if dims is not None and tuple(dims) != tuple(range(len(dims))):
        # reshape's `dimensions` transposes the operand first.
        aval = eqn.invars[0].aval
        x = s.emit_value("transpose", {"permutation": _ints(dims)}, [x],
                         aval.update(shape=tuple(aval.shape[d] for d in dims)))
    s.emit("reshape", {"new_sizes": _ints(eqn.params["new_sizes"])}, [x], eqn.outvars)


def _slice(tr, s, eqn, ins, where):
    p = eqn.params
    strides = p["strides"] or (1,) * len(p["start_indices"])
    s.emit("slice", {"start_indices": _ints(p["start_indices"]),
                     "limit_indices": _ints(p["limit_indices"]), "strides": _ints(strides)},
           ins, eqn.outvars)


def _dot_general(tr, s, eqn, ins, where):
    _check_ignored(eqn.params, {"dimension_numbers", "preferred_element_type"}, where)
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lst = lambda v: "[" + ", ".join(str(int(x)) for x in v) + "]"  # noqa: E731
    pet = eqn.params.get("preferred_element_type")
    s.emit("dot_general", {
        "dimension_numbers": f"(({lst(lc)}, {lst(rc)}), ({lst(lb)}, {lst(rb)}))",
        "preferred_element_type": "None" if pet is None else _dtype_name(pet)}, ins, eqn.outvars)


def _pad(tr, s, eqn, ins, where):
    cfg = ", ".join(f"({int(lo)}, {int(hi)}, {int(it)})" for lo, hi, it in eqn.params["padding_config"])
    if len(eqn.params["padding_config"]) == 1:
        cfg += ","
    s.emit("pad", {"padding_config": f"({cfg})"}, ins, eqn.outvars)


def _round(tr, s, eqn, ins, where):
    s.emit("round", {"rounding_method": str(int(eqn.params["rounding_method"]))}, ins, eqn.outvars)


def _cond(tr, s, eqn, ins, where):
    _check_ignored(eqn.params, {"branches"}, where)
    progs = " ".join(tr.closed(b, where) for b in eqn.params["branches"])
    s.emit("cond", {"branches": f"({progs})"}, ins, eqn.outvars)


def _while(tr, s, eqn, ins, where):
    p = eqn.params
    s.emit("while", {"cond_jaxpr": tr.closed(p["cond_jaxpr"], where),
                     "body_jaxpr": tr.closed(p["body_jaxpr"], where),
                     "cond_nconsts": str(p["cond_nconsts"]), "body_nconsts": str(p["body_nconsts"])},
           ins, eqn.outvars)


def _scan(tr, s, eqn, ins, where):
    p = eqn.params
    _check_ignored(p, {"jaxpr", "length", "num_carry", "num_consts", "reverse", "linear"}, where)
    s.emit("scan", {"jaxpr": tr.closed(p["jaxpr"], where), "length": str(p["length"]),
                    "num_carry": str(p["num_carry"]), "num_consts": str(p["num_consts"]),
                    "reverse": _bool(p["reverse"])}, ins, eqn.outvars)


def _integer_pow(tr, s, eqn, ins, where):
    """x**y by squaring, the multiplication chain XLA's lowering uses, so the
    rounding matches; negative y takes the reciprocal at the end."""
    y, aval = int(eqn.params["y"]), eqn.outvars[0].aval
    n, acc, base = abs(y), None, ins[0]
    one = s.literal(1, aval.update(shape=(), weak_type=aval.weak_type))
    if aval.shape:
        one = s.emit_value("broadcast_in_dim", {"shape": _ints(aval.shape),
                                                "broadcast_dimensions": "()"}, [one], aval)
    if n == 0:
        s.env[eqn.outvars[0]] = one
        return
    while True:
        if n & 1:
            acc = base if acc is None else s.emit_value("mul", {}, [acc, base], aval)
        n >>= 1
        if not n:
            break
        base = s.emit_value("mul", {}, [base, base], aval)
    if y < 0:
        acc = s.emit_value("div", {}, [one, acc], aval)
    s.env[eqn.outvars[0]] = acc


def _square(tr, s, eqn, ins, where):
    s.emit("mul", {}, [ins[0], ins[0]], eqn.outvars)


def _copy(tr, s, eqn, ins, where):
    s.env[eqn.outvars[0]] = ins[0]


def _split(tr, s, eqn, ins, where):
    axis, sizes = int(eqn.params["axis"]), eqn.params["sizes"]
    shape, start = eqn.invars[0].aval.shape, 0
    for size, out in zip(sizes, eqn.outvars):
        lo = [0] * len(shape)
        hi = list(shape)
        lo[axis], hi[axis] = start, start + size
        start += size
        s.emit("slice", {"start_indices": _ints(lo), "limit_indices": _ints(hi),
                         "strides": _ints([1] * len(shape))}, ins, [out])


_GATHER_FIELDS = ("offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
                  "start_indices_batching_dims")
_SCATTER_FIELDS = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                   "operand_batching_dims", "scatter_indices_batching_dims")
_MODES = ("CLIP", "FILL_OR_DROP", "PROMISE_IN_BOUNDS")


def _dimension_numbers(kind, fields, dn):
    return kind + "(" + ", ".join(f"{f}={_ints(getattr(dn, f))}" for f in fields) + ")"


def _mode(mode, where):
    name = getattr(mode, "name", str(mode).rsplit(".", 1)[-1])
    if name not in _MODES:
        raise UnsupportedPrimitive(f"kiln has no GatherScatterMode.{name} ({where})")
    return f"GatherScatterMode.{name}"


def _gather(tr, s, eqn, ins, where):
    p = eqn.params
    fill = p["fill_value"]
    s.emit("gather", {
        "dimension_numbers": _dimension_numbers("GatherDimensionNumbers", _GATHER_FIELDS,
                                                p["dimension_numbers"]),
        "fill_value": "None" if fill is None else repr(float(fill)),
        "indices_are_sorted": _bool(p["indices_are_sorted"]), "mode": _mode(p["mode"], where),
        "slice_sizes": _ints(p["slice_sizes"]), "unique_indices": _bool(p["unique_indices"])},
        ins, eqn.outvars)


def _scatter_add(tr, s, eqn, ins, where):
    p = eqn.params
    s.emit("scatter-add", {
        "dimension_numbers": _dimension_numbers("ScatterDimensionNumbers", _SCATTER_FIELDS,
                                                p["dimension_numbers"]),
        "indices_are_sorted": _bool(p["indices_are_sorted"]), "mode": _mode(p["mode"], where),
        "unique_indices": _bool(p["unique_indices"])}, ins, eqn.outvars)


_dims = _ints
_RULES = {
    "gather": _gather,
    "scatter-add": _scatter_add,
    "convert_element_type": _simple({"new_dtype": _dtype_name, "weak_type": _bool}),
    "bitcast_convert_type": _simple({"new_dtype": _dtype_name}),
    "broadcast_in_dim": _simple({"shape": _ints, "broadcast_dimensions": _dims}),
    "reshape": _reshape,
    "transpose": _simple({"permutation": _dims}),
    "squeeze": _simple({"dimensions": _dims}),
    "rev": _simple({"dimensions": _dims}),
    "slice": _slice,
    "dynamic_slice": _simple({"slice_sizes": _ints}),
    "concatenate": _simple({"dimension": str}),
    "pad": _pad,
    "iota": _simple({"dtype": _dtype_name, "shape": _ints, "dimension": str}),
    "reduce_sum": _simple({"axes": _dims}),
    "reduce_max": _simple({"axes": _dims}),
    "reduce_min": _simple({"axes": _dims}),
    "reduce_prod": _simple({"axes": _dims}),
    "reduce_and": _simple({"axes": _dims}),
    "reduce_or": _simple({"axes": _dims}),
    "argmax": _simple({"axes": _dims, "index_dtype": _dtype_name}),
    "argmin": _simple({"axes": _dims, "index_dtype": _dtype_name}),
    "cumsum": _simple({"axis": str, "reverse": _bool}),
    "cumprod": _simple({"axis": str, "reverse": _bool}),
    "cummax": _simple({"axis": str, "reverse": _bool}),
    "cummin": _simple({"axis": str, "reverse": _bool}),
    "sort": _simple({"dimension": str, "is_stable": _bool, "num_keys": str}),
    "dot_general": _dot_general,
    "round": _round,
    "cond": _cond,
    "while": _while,
    "scan": _scan,
    "integer_pow": _integer_pow,
    "square": _square,
    "copy": _copy,
    "copy_p": _copy,
    "stop_gradient": _copy,  # forward evaluation only: the identity
    "split": _split,
}


def translate(closed_jaxpr, name="jax_fn"):
    """kiln IR text for a ClosedJaxpr, and the constants (non-scalar) that the
    program takes as its leading inputs, in order."""
    tr = _Translator()
    text = tr.program(closed_jaxpr.jaxpr, closed_jaxpr.consts, True, name)
    return text, tr.const_values
