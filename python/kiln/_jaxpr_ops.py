"""Translation rules for elementwise, shape, reduction, dot, gather and
scatter equations. Shape rules also take PRNG key arrays, which kiln holds
as their u32 key data: the key's trailing dimension(s) ride along."""
from ._jaxpr_text import (KilnLacks, TranslatorLacks, boolean, dtype_name, ints, is_key,
                          physical_shape)

# Elementwise primitives kiln spells as JAX does, with no params: every
# elementwise record of src/ir/elementwise_*.def without params except copy
# and select_n, which have rules of their own below (tests/test_ops_records.cc
# checks this list against the records).
PLAIN = """neg abs sign floor ceil exp exp2 expm1 log log1p sqrt rsqrt cbrt tanh logistic
sin cos tan asin acos atan sinh cosh asinh acosh atanh erf erfc erf_inv lgamma digamma
bessel_i0e bessel_i1e
is_finite not population_count square stop_gradient add sub mul div rem pow max min atan2
and or xor shift_left shift_right_logical shift_right_arithmetic nextafter eq ne lt le gt ge
clamp""".split()
# Params JAX carries that do not change the values kiln computes.
IGNORED = {"sharding", "out_sharding", "unroll", "_split_transpose", "precision",
           "accumulation_type", "accuracy"}


def check_params(eqn, used, where):
    for k, v in eqn.params.items():
        if k in used or k in IGNORED or v is None:
            continue
        raise TranslatorLacks(f"the translator lacks param {k}={v!r} of {eqn.primitive.name} "
                              f"({where})")


def key_tail(aval):
    """The trailing physical dims of a key array (the impl's key shape)."""
    return tuple(aval.dtype._impl.key_shape) if is_key(aval) else ()


def _plain(tr, s, eqn, ins, where):
    if eqn.primitive.name == "mul" and eqn.params.get("out_dtype") is not None:
        raise TranslatorLacks(f"the translator lacks mul with out_dtype ({where})")
    check_params(eqn, {"out_dtype"}, where)
    if any(is_key(v.aval) for v in eqn.invars):
        raise TranslatorLacks(f"the translator lacks {eqn.primitive.name} of PRNG keys ({where})")
    s.emit(eqn.primitive.name, {}, ins, eqn.outvars)


def _add_any(tr, s, eqn, ins, where):
    s.emit("add", {}, ins, eqn.outvars)  # autodiff's sum of two cotangents


def _identity(tr, s, eqn, ins, where):
    for out, x in zip(eqn.outvars, ins):
        s.bind_out(out, x)


def _simple(param_fmt, prim=None):
    """A rule that renames JAX's params into kiln's spelling, one to one."""
    def rule(tr, s, eqn, ins, where):
        check_params(eqn, param_fmt, where)
        params = {k: fmt(eqn.params.get(k)) for k, fmt in param_fmt.items()}
        s.emit(prim or eqn.primitive.name, params, ins, eqn.outvars)
    return rule


def _convert(tr, s, eqn, ins, where):
    check_params(eqn, {"new_dtype", "weak_type"}, where)
    s.emit("convert_element_type", {"new_dtype": dtype_name(eqn.params["new_dtype"]),
                                    "weak_type": boolean(eqn.params["weak_type"])},
           ins, eqn.outvars)


def _select_n(tr, s, eqn, ins, where):
    out = eqn.outvars[0].aval
    pred = eqn.invars[0].aval
    if is_key(out) and pred.shape:
        # the predicate selects whole keys: broadcast it over the key data
        ins = [s.emit_value("broadcast_in_dim", {
            "shape": ints(physical_shape(out)),
            "broadcast_dimensions": ints(range(len(pred.shape)))},
            [ins[0]], pred.update(shape=physical_shape(out)))] + ins[1:]
    s.emit("select_n", {}, ins, eqn.outvars)


def _broadcast_in_dim(tr, s, eqn, ins, where):
    check_params(eqn, {"shape", "broadcast_dimensions"}, where)
    p, out = eqn.params, eqn.outvars[0].aval
    tail = key_tail(out)
    rank = len(p["shape"])
    dims = tuple(p["broadcast_dimensions"]) + tuple(range(rank, rank + len(tail)))
    s.emit("broadcast_in_dim", {"shape": ints(tuple(p["shape"]) + tail),
                                "broadcast_dimensions": ints(dims)}, ins[:1], eqn.outvars)


def _reshape(tr, s, eqn, ins, where):
    check_params(eqn, {"new_sizes", "dimensions"}, where)
    aval = eqn.invars[0].aval
    tail = key_tail(aval)
    dims, x = eqn.params.get("dimensions"), ins[0]
    if dims is not None and tuple(dims) != tuple(range(len(dims))):
        # reshape's `dimensions` transposes the operand first.
        perm = tuple(dims) + tuple(range(len(dims), len(dims) + len(tail)))
        x = s.emit_value("transpose", {"permutation": ints(perm)}, [x],
                         aval.update(shape=tuple(aval.shape[d] for d in dims)))
    s.emit("reshape", {"new_sizes": ints(tuple(eqn.params["new_sizes"]) + tail)}, [x], eqn.outvars)


def _transpose(tr, s, eqn, ins, where):
    perm = tuple(eqn.params["permutation"])
    perm += tuple(range(len(perm), len(perm) + len(key_tail(eqn.invars[0].aval))))
    s.emit("transpose", {"permutation": ints(perm)}, ins, eqn.outvars)


def _slice(tr, s, eqn, ins, where):
    p = eqn.params
    tail = key_tail(eqn.invars[0].aval)
    strides = p["strides"] or (1,) * len(p["start_indices"])
    s.emit("slice", {"start_indices": ints(tuple(p["start_indices"]) + (0,) * len(tail)),
                     "limit_indices": ints(tuple(p["limit_indices"]) + tail),
                     "strides": ints(tuple(strides) + (1,) * len(tail))}, ins, eqn.outvars)


def _zero_indices(s, eqn, tail, first_index):
    if not tail:
        return []
    aval = eqn.invars[first_index].aval if len(eqn.invars) > first_index else None
    dt = aval.dtype.name if aval is not None else "int32"
    short = {"int32": "i32", "int64": "i64", "uint32": "u32", "int16": "i16", "int8": "i8"}[dt]
    return [f"0:{short}[]"] * len(tail)


def _dynamic_slice(tr, s, eqn, ins, where):
    check_params(eqn, {"slice_sizes"}, where)
    tail = key_tail(eqn.invars[0].aval)
    s.emit("dynamic_slice", {"slice_sizes": ints(tuple(eqn.params["slice_sizes"]) + tail)},
           ins + _zero_indices(s, eqn, tail, 1), eqn.outvars)


def _dynamic_update_slice(tr, s, eqn, ins, where):
    check_params(eqn, (), where)
    tail = key_tail(eqn.invars[0].aval)
    s.emit("dynamic_update_slice", {}, ins + _zero_indices(s, eqn, tail, 2), eqn.outvars)


def _pad(tr, s, eqn, ins, where):
    if is_key(eqn.invars[0].aval):
        raise TranslatorLacks(f"the translator lacks pad of PRNG keys ({where})")
    cfg = ", ".join(f"({int(lo)}, {int(hi)}, {int(it)})"
                    for lo, hi, it in eqn.params["padding_config"])
    if len(eqn.params["padding_config"]) == 1:
        cfg += ","
    s.emit("pad", {"padding_config": f"({cfg})"}, ins, eqn.outvars)


def _split(tr, s, eqn, ins, where):
    """split (JAX's one-to-many slice) as one slice per piece."""
    axis, sizes = int(eqn.params["axis"]), eqn.params["sizes"]
    shape, start = physical_shape(eqn.invars[0].aval), 0
    for size, out in zip(sizes, eqn.outvars):
        lo, hi = [0] * len(shape), list(shape)
        lo[axis], hi[axis] = start, start + size
        start += size
        s.emit("slice", {"start_indices": ints(lo), "limit_indices": ints(hi),
                         "strides": ints([1] * len(shape))}, ins, [out])


def _stack(tr, s, eqn, ins, where):
    """stack: each operand reshaped with a 1 at axis, then concatenated."""
    axis = int(eqn.params["axis"])
    pieces = []
    for x, v in zip(ins, eqn.invars):
        logical = tuple(v.aval.shape[:axis]) + (1,) + tuple(v.aval.shape[axis:])
        piece = v.aval.update(shape=logical)
        pieces.append(s.emit_value("reshape", {"new_sizes": ints(physical_shape(piece))}, [x],
                                   piece))
    s.emit("concatenate", {"dimension": str(axis)}, pieces, eqn.outvars)


def _unstack(tr, s, eqn, ins, where):
    """unstack: a slice per index along axis, that axis reshaped away."""
    axis = int(eqn.params["axis"])
    aval = eqn.invars[0].aval
    shape = physical_shape(aval)
    piece = aval.update(shape=tuple(aval.shape[:axis]) + (1,) + tuple(aval.shape[axis + 1:]))
    for i, out in enumerate(eqn.outvars):
        lo, hi = [0] * len(shape), list(shape)
        lo[axis], hi[axis] = i, i + 1
        part = s.emit_value("slice", {"start_indices": ints(lo), "limit_indices": ints(hi),
                                      "strides": ints([1] * len(shape))}, ins, piece)
        s.emit("reshape", {"new_sizes": ints(physical_shape(out.aval))}, [part], [out])


def _tile(tr, s, eqn, ins, where):
    """tile: broadcast to (r0, s0, r1, s1, ...), then merge each pair."""
    aval = eqn.invars[0].aval
    if is_key(aval):
        raise TranslatorLacks(f"the translator lacks tile of PRNG keys ({where})")
    reps = tuple(int(r) for r in eqn.params["reps"])
    shape = tuple(aval.shape)
    if len(reps) < len(shape):
        reps = (1,) * (len(shape) - len(reps)) + reps
    shape = (1,) * (len(reps) - len(shape)) + shape
    x = ins[0]
    if len(shape) != len(aval.shape):
        x = s.emit_value("reshape", {"new_sizes": ints(shape)}, [x], aval.update(shape=shape))
    pairs = tuple(k for r, d in zip(reps, shape) for k in (r, d))
    b = s.emit_value("broadcast_in_dim", {"shape": ints(pairs), "broadcast_dimensions": ints(
        range(1, 2 * len(shape), 2))}, [x], aval.update(shape=pairs))
    s.emit("reshape", {"new_sizes": ints(eqn.outvars[0].aval.shape)}, [b], eqn.outvars)


def _zeros(tr, s, eqn, ins, where):
    """empty/empty2/zeros_like: zeros (empty's contents are unspecified)."""
    out = eqn.outvars[0]
    if is_key(out.aval):
        raise TranslatorLacks(f"the translator lacks {eqn.primitive.name} of PRNG keys ({where})")
    zero = s.literal(0, out.aval.update(shape=(), weak_type=False))
    if out.aval.shape:
        s.emit("broadcast_in_dim", {"shape": ints(out.aval.shape), "broadcast_dimensions": "()"},
               [zero], [out])
    else:
        s.bind_out(out, zero)


def _last(tr, s, eqn, ins, where):
    s.bind_out(eqn.outvars[0], ins[-1])  # tie(x, y) is y


def _nothing(tr, s, eqn, ins, where):
    pass  # dce_sink: a use, no value


def _approx_top_k(tr, s, eqn, ins, where):
    """approx_max_k/approx_min_k, computed exactly (as JAX does off TPU):
    top_k along the last axis, of the negation for min."""
    p = eqn.params
    aval = eqn.invars[0].aval
    dim = int(p["reduction_dimension"]) % len(aval.shape)
    if dim != len(aval.shape) - 1 or p.get("reduction_input_size_override", -1) not in (-1, None) \
            or not p.get("aggregate_to_topk", True):
        raise TranslatorLacks(f"the translator lacks approx_top_k other than over the last axis, "
                              f"aggregated ({where})")
    k = str(int(p["k"]))
    axis = str(dim)
    if p["is_max_k"]:
        s.emit("top_k", {"k": k, "axis": axis}, ins, eqn.outvars)
        return
    neg = s.emit_value("neg", {}, ins, aval)
    vals, idx = eqn.outvars
    v, i = s.emit_values("top_k", {"k": k, "axis": axis}, [neg], [vals.aval, idx.aval])
    s.emit("neg", {}, [v], [vals])
    s.bind_out(idx, i)


def _clz(tr, s, eqn, ins, where):
    """Count leading zeros: smear the highest set bit rightwards, then
    count the zeros left (population_count of the complement)."""
    aval = eqn.invars[0].aval
    bits = aval.dtype.itemsize * 8
    short = {8: "8", 16: "16", 32: "32", 64: "64"}[bits]
    kind = "u" if aval.dtype.kind == "u" else "i"
    x = ins[0]
    shift = 1
    while shift < bits:
        amount = f"{shift}:{kind}{short}[]"
        if aval.shape:
            amount = s.emit_value("broadcast_in_dim", {"shape": ints(aval.shape),
                                                       "broadcast_dimensions": "()"}, [amount], aval)
        shifted = s.emit_value("shift_right_logical", {}, [x, amount], aval)
        x = s.emit_value("or", {}, [x, shifted], aval)
        shift *= 2
    inverted = s.emit_value("not", {}, [x], aval)
    s.emit("population_count", {}, [inverted], eqn.outvars)


def _mulhi(tr, s, eqn, ins, where):
    """The high half of an integer product: JAX's own lax implementation
    (widening through 64 bits where it can), traced and inlined."""
    import jax
    from jax._src.lax import lax as lax_internal
    impl = getattr(lax_internal, "_mulhi_impl", None)
    if impl is None:
        raise TranslatorLacks(f"this JAX has no lax._mulhi_impl to trace ({where})")
    closed = jax.make_jaxpr(impl)(*[jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype)
                                    for v in eqn.invars])
    tr.inline(s, eqn, closed, where)


def _dot_general(tr, s, eqn, ins, where):
    check_params(eqn, {"dimension_numbers", "preferred_element_type", "out_sharding"}, where)
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lst = lambda v: "[" + ", ".join(str(int(x)) for x in v) + "]"  # noqa: E731
    pet = eqn.params.get("preferred_element_type")
    s.emit("dot_general", {
        "dimension_numbers": f"(({lst(lc)}, {lst(rc)}), ({lst(lb)}, {lst(rb)}))",
        "preferred_element_type": "None" if pet is None else dtype_name(pet)}, ins, eqn.outvars)


def _round(tr, s, eqn, ins, where):
    s.emit("round", {"rounding_method": str(int(eqn.params["rounding_method"]))}, ins, eqn.outvars)


# The single-operand reductions kiln has, by the add/max/... of a generic
# reduce's body.
_REDUCER_OF = {"add": "reduce_sum", "max": "reduce_max", "min": "reduce_min",
               "mul": "reduce_prod", "and": "reduce_and", "or": "reduce_or"}


def _reduce(tr, s, eqn, ins, where):
    """lax.reduce with a body that is one add/max/min/mul/and/or (what
    jnp and flax emit through it) and its identity as the init."""
    p = eqn.params
    body = p["jaxpr"].jaxpr if hasattr(p["jaxpr"], "jaxpr") else p["jaxpr"]
    eqns = body.eqns
    if len(eqn.outvars) == 1 and len(eqns) == 1 and eqns[0].primitive.name in _REDUCER_OF \
            and list(eqns[0].outvars) == list(body.outvars):
        prim = _REDUCER_OF[eqns[0].primitive.name]
        out = eqn.outvars[0].aval
        x = s.emit_value(prim, {"axes": ints(p["dimensions"])}, [ins[0]], out)
        init = ins[1]
        if out.shape:
            init = s.emit_value("broadcast_in_dim", {"shape": ints(out.shape),
                                                     "broadcast_dimensions": "()"}, [init], out)
        # fold the init in (usually the identity, but it need not be)
        s.emit(eqns[0].primitive.name, {}, [x, init], eqn.outvars)
        return
    raise TranslatorLacks(f"the translator lacks reduce with a body other than one add, max, "
                          f"min, mul, and or or ({where})")


_GATHER_FIELDS = ("offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
                  "start_indices_batching_dims")
_SCATTER_FIELDS = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                   "operand_batching_dims", "scatter_indices_batching_dims")
_MODES = ("CLIP", "FILL_OR_DROP", "PROMISE_IN_BOUNDS")


def _dimension_numbers(kind, fields, dn, extra=None):
    extra = extra or {}
    return kind + "(" + ", ".join(f"{f}={ints(tuple(getattr(dn, f)) + extra.get(f, ()))}"
                                  for f in fields) + ")"


def _mode(mode, where):
    name = getattr(mode, "name", str(mode).rsplit(".", 1)[-1])
    if name not in _MODES:
        raise KilnLacks(f"kiln lacks GatherScatterMode.{name} ({where})")
    return f"GatherScatterMode.{name}"


def _gather(tr, s, eqn, ins, where):
    p = eqn.params
    check_params(eqn, {"dimension_numbers", "fill_value", "indices_are_sorted", "mode",
                       "slice_sizes", "unique_indices"}, where)
    fill = p["fill_value"]
    tail = key_tail(eqn.invars[0].aval)
    out_rank = len(eqn.outvars[0].aval.shape)
    extra = {"offset_dims": tuple(range(out_rank, out_rank + len(tail)))}
    s.emit("gather", {
        "dimension_numbers": _dimension_numbers("GatherDimensionNumbers", _GATHER_FIELDS,
                                                p["dimension_numbers"], extra),
        "fill_value": "None" if fill is None else repr(float(fill)),
        "indices_are_sorted": boolean(p["indices_are_sorted"]), "mode": _mode(p["mode"], where),
        "slice_sizes": ints(tuple(p["slice_sizes"]) + tail),
        "unique_indices": boolean(p["unique_indices"])}, ins, eqn.outvars)


def _scatter(tr, s, eqn, ins, where, prim=None):
    p, name = eqn.params, eqn.primitive.name
    check_params(eqn, {"dimension_numbers", "indices_are_sorted", "mode", "unique_indices",
                       "update_jaxpr", "update_consts"}, where)
    if is_key(eqn.invars[0].aval):
        raise TranslatorLacks(f"the translator lacks {name} of PRNG keys ({where})")
    if name == "scatter" and p.get("update_jaxpr") is not None:
        body = p["update_jaxpr"]
        body = getattr(body, "jaxpr", body)
        # lax.scatter's combiner returns the update; anything else is scatter_apply
        if body.eqns or list(body.outvars) != list(body.invars[1:2]):
            raise TranslatorLacks(f"the translator lacks scatter with a custom update "
                                  f"computation ({where})")
    s.emit(prim or name, {
        "dimension_numbers": _dimension_numbers("ScatterDimensionNumbers", _SCATTER_FIELDS,
                                                p["dimension_numbers"]),
        "indices_are_sorted": boolean(p["indices_are_sorted"]), "mode": _mode(p["mode"], where),
        "unique_indices": boolean(p["unique_indices"])}, ins, eqn.outvars)


def _scatter_sub(tr, s, eqn, ins, where):
    """scatter-sub: scatter-add of the negated updates."""
    neg = s.emit_value("neg", {}, [ins[2]], eqn.invars[2].aval)
    _scatter(tr, s, eqn, ins[:2] + [neg], where, prim="scatter-add")


def _iota(tr, s, eqn, ins, where):
    check_params(eqn, {"dtype", "shape", "dimension"}, where)
    s.emit("iota", {"dtype": dtype_name(eqn.params["dtype"]), "shape": ints(eqn.params["shape"]),
                    "dimension": str(int(eqn.params["dimension"]))}, ins, eqn.outvars)


def _sort(tr, s, eqn, ins, where):
    check_params(eqn, {"dimension", "is_stable", "num_keys"}, where)
    p = eqn.params
    s.emit("sort", {"dimension": str(int(p["dimension"])), "is_stable": boolean(p["is_stable"]),
                    "num_keys": str(int(p["num_keys"]))}, ins, eqn.outvars)


_axes = {"axes": ints}
RULES = {name: _plain for name in PLAIN}
RULES.update({
    "add_any": _add_any,
    "copy": _identity, "copy_p": _identity, "optimization_barrier": _identity,
    "convert_element_type": _convert,
    "bitcast_convert_type": _simple({"new_dtype": dtype_name}),
    "integer_pow": _simple({"y": str}),
    "reduce_precision": _simple({"exponent_bits": str, "mantissa_bits": str}),
    "select_n": _select_n,
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "transpose": _transpose,
    "squeeze": _simple({"dimensions": ints}),
    "rev": _simple({"dimensions": ints}),
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "concatenate": _simple({"dimension": str}),
    "pad": _pad,
    "split": _split,
    "stack": _stack,
    "unstack": _unstack,
    "tile": _tile,
    "empty": _zeros, "empty2": _zeros, "zeros_like": _zeros,
    "tie": _last, "dce_sink": _nothing, "approx_top_k": _approx_top_k,
    # placement and naming, the identity on one device
    "name": _identity, "sharding_constraint": _identity, "reshard": _identity,
    "layout_constraint": _identity, "shard_alike": _identity, "device_put": _identity,
    "iota": _iota,
    "gather": _gather,
    "scatter": _scatter, "scatter-add": _scatter, "scatter-mul": _scatter,
    "scatter-min": _scatter, "scatter-max": _scatter, "scatter-sub": _scatter_sub,
    "reduce_sum": _simple(_axes), "reduce_max": _simple(_axes), "reduce_min": _simple(_axes),
    "reduce_prod": _simple(_axes), "reduce_and": _simple(_axes), "reduce_or": _simple(_axes),
    "reduce": _reduce,
    "argmax": _simple({"axes": ints, "index_dtype": dtype_name}),
    "argmin": _simple({"axes": ints, "index_dtype": dtype_name}),
    "sort": _sort,
    "dot_general": _dot_general,
    "round": _round,
    "clz": _clz,
    "mulhi": _mulhi,
})
