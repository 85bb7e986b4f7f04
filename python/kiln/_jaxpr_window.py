"""Translation rules for windowed reductions (pooling and their gradients),
convolution, top_k and the cumulative family."""
from ._jaxpr_ops import check_params
from ._jaxpr_text import TranslatorLacks, dtype_name, ints, pairs

_WINDOW = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")


def _window_params(p, names=_WINDOW):
    return {k: pairs(p[k]) if k == "padding" else ints(p[k]) for k in names}


def _reduce_window_named(tr, s, eqn, ins, where):
    check_params(eqn, _WINDOW, where)
    s.emit(eqn.primitive.name, _window_params(eqn.params), ins, eqn.outvars)


_MONOID = {"add": "reduce_window_sum", "max": "reduce_window_max", "min": "reduce_window_min"}


def _reduce_window(tr, s, eqn, ins, where):
    """lax.reduce_window with a one-equation add/max/min body: padding is
    filled with the init value, which max/min absorb and add must be 0 for."""
    p = eqn.params
    body = getattr(p["jaxpr"], "jaxpr", p["jaxpr"])
    op = body.eqns[0].primitive.name if len(body.eqns) == 1 else None
    init = eqn.invars[1] if len(eqn.invars) == 2 else None
    ok = len(eqn.outvars) == 1 and op in _MONOID and \
        list(body.eqns[0].outvars) == list(body.outvars)
    if ok and op == "add":
        val = getattr(init, "val", None)
        ok = val is not None and float(val) == 0.0
    if not ok:
        raise TranslatorLacks(f"the translator lacks reduce_window other than one operand under "
                              f"add (with init 0), max or min ({where})")
    out = eqn.outvars[0].aval
    x = s.emit_value(_MONOID[op], _window_params(p), [ins[0]], out)
    if op == "add":
        s.bind_out(eqn.outvars[0], x)
        return
    init_atom = ins[1]
    if out.shape:
        init_atom = s.emit_value("broadcast_in_dim", {
            "shape": ints(out.shape), "broadcast_dimensions": "()"}, [init_atom], out)
    s.emit(op, {}, [x, init_atom], eqn.outvars)


def _select_prim(p, where):
    name = getattr(p["select_prim"], "name", str(p["select_prim"]))
    if name not in ("ge", "le", "gt", "lt"):
        raise TranslatorLacks(f"the translator lacks select_prim={name} ({where})")
    return name


def _select_and_gather_add(tr, s, eqn, ins, where):
    check_params(eqn, _WINDOW + ("select_prim",), where)
    params = _window_params(eqn.params)
    params["select_prim"] = _select_prim(eqn.params, where)
    s.emit("select_and_gather_add", params, ins, eqn.outvars)


def _select_and_scatter_add(tr, s, eqn, ins, where):
    names = ("window_dimensions", "window_strides", "padding")
    check_params(eqn, names + ("select_prim",), where)
    params = _window_params(eqn.params, names)
    params["select_prim"] = _select_prim(eqn.params, where)
    s.emit("select_and_scatter_add", params, ins, eqn.outvars)


def _conv(tr, s, eqn, ins, where):
    p = eqn.params
    check_params(eqn, {"window_strides", "padding", "lhs_dilation", "rhs_dilation",
                       "dimension_numbers", "feature_group_count", "batch_group_count",
                       "preferred_element_type"}, where)
    dn = p["dimension_numbers"]
    pet = p.get("preferred_element_type")
    s.emit("conv_general_dilated", {
        "window_strides": ints(p["window_strides"]), "padding": pairs(p["padding"]),
        "lhs_dilation": ints(p["lhs_dilation"]), "rhs_dilation": ints(p["rhs_dilation"]),
        "dimension_numbers": f"ConvDimensionNumbers(lhs_spec={ints(dn.lhs_spec)}, "
                             f"rhs_spec={ints(dn.rhs_spec)}, out_spec={ints(dn.out_spec)})",
        "feature_group_count": str(int(p["feature_group_count"])),
        "batch_group_count": str(int(p["batch_group_count"])),
        "preferred_element_type": "None" if pet is None else dtype_name(pet)}, ins, eqn.outvars)


def _top_k(tr, s, eqn, ins, where):
    check_params(eqn, {"k", "axis"}, where)
    rank = len(eqn.invars[0].aval.shape)
    axis = eqn.params.get("axis", -1)
    axis = rank - 1 if axis is None else int(axis) % rank
    s.emit("top_k", {"k": str(int(eqn.params["k"])), "axis": str(axis)}, ins, eqn.outvars)


def _cumulative(tr, s, eqn, ins, where):
    check_params(eqn, {"axis", "reverse"}, where)
    s.emit(eqn.primitive.name, {"axis": str(int(eqn.params["axis"])),
                                "reverse": "True" if eqn.params["reverse"] else "False"},
           ins, eqn.outvars)


RULES = {
    "reduce_window_sum": _reduce_window_named,
    "reduce_window_max": _reduce_window_named,
    "reduce_window_min": _reduce_window_named,
    "reduce_window": _reduce_window,
    "select_and_gather_add": _select_and_gather_add,
    "select_and_scatter_add": _select_and_scatter_add,
    "conv_general_dilated": _conv,
    "top_k": _top_k,
    "cumsum": _cumulative, "cumprod": _cumulative, "cummax": _cumulative, "cummin": _cumulative,
    "cumlogsumexp": _cumulative,
}
