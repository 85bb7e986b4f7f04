"""Translation of a JAX jaxpr into kiln's IR text (the form kir_parse reads:
jaxpr-style, every param spelled out, sub-programs closed).

The rules live by family: _jaxpr_ops (elementwise, shape, reductions, dot,
gather/scatter), _jaxpr_window (windows, convolution, top_k, cumulative),
_jaxpr_control (calls, which are inlined, cond/while/scan,
platform_index), _jaxpr_random (the PRNG primitives, traced from JAX's own
threefry implementation). _jaxpr_registry lists every primitive JAX
defines as translated or refused with a reason. A primitive kiln's IR
cannot express raises KilnLacks, one the translator does not map yet
TranslatorLacks; both are UnsupportedPrimitive and name the equation."""
import numpy as np
from jax.extend import core as jcore

from . import _jaxpr_control, _jaxpr_ops, _jaxpr_random, _jaxpr_window
from ._jaxpr_text import (KilnLacks, TranslatorLacks, UnsupportedPrimitive, is_key, params_text,
                          scalar_literal, type_text)

__all__ = ["KilnLacks", "TranslatorLacks", "UnsupportedPrimitive", "translate", "RULES"]

RULES = {}
for _m in (_jaxpr_ops, _jaxpr_window, _jaxpr_control, _jaxpr_random):
    assert not set(_m.RULES) & set(RULES), set(_m.RULES) & set(RULES)
    RULES.update(_m.RULES)


class _Scope:
    """One kiln program being written: its invar binders, equation lines and
    the map from jaxpr vars to kiln atoms (names or literal text).

    kiln's sub-programs are closed, so an array constant a control-flow body
    uses is hoisted: the root takes it as an input (const_binders, ahead of
    the arguments); a body takes it as a leading operand (extras), which the
    enclosing equation passes in (and hoists in turn)."""

    def __init__(self, tr, top):
        self.tr, self.top = tr, top
        self.env, self.binders, self.lines = {}, [], []
        self.const_binders = []  # root: constants as inputs; body: hoisted operands
        self.extras = []  # body only: (value, aval) of each hoisted operand
        self.outs = []

    def new_var(self, aval):
        name = self.tr.fresh()
        return name, f"{name}:{type_text(aval)}"

    def bind_invar(self, var):
        name, binder = self.new_var(var.aval)
        self.binders.append(binder)
        self.env[var] = name
        return name

    def atom(self, x):
        if isinstance(x, jcore.Literal):
            val = x.val
            if is_key(x.aval) or np.ndim(val) > 0:
                return self.hoist(_physical_value(val, x.aval), x.aval)
            return self.literal(val, x.aval)
        return self.env[x]

    def literal(self, value, aval):
        """A scalar constant, bit-exact: decimal text, which the IR reads
        back to the same value; a NaN other than the default quiet one (a
        sign or payload, which kiln's literals do not keep) is hoisted like
        an array constant."""
        text, exact = scalar_literal(value, aval)
        if not exact:
            return self.hoist(np.asarray(value).astype(aval.dtype), aval)
        return f"{text}:{type_text(aval)}"

    def hoist(self, val, aval):
        """An atom for constant val: an input of the root program, or a
        leading operand of this body that its equation supplies."""
        name, binder = self.new_var(aval)
        self.const_binders.append(binder)
        if self.top:
            self.tr.const_values.append(val)
        else:
            self.extras.append((val, aval))
        return name

    def bind_consts(self, constvars, consts, where):
        """Scalars become literals; arrays (and keys) are hoisted."""
        for var, val in zip(constvars, consts):
            if not is_key(var.aval) and np.ndim(val) == 0:
                self.env[var] = self.literal(val, var.aval)
            else:
                self.env[var] = self.hoist(_physical_value(val, var.aval), var.aval)

    def emit(self, prim, params, ins, outvars):
        outs = []
        for v in outvars:
            name, binder = self.new_var(v.aval)
            if not isinstance(v, jcore.DropVar):
                self.env[v] = name
            outs.append(binder)
        self.lines.append(f"{' '.join(outs)} = {prim}{params_text(params)} {' '.join(ins)}")

    def emit_value(self, prim, params, ins, aval):
        """An intermediate equation of a lowering: returns its result's name."""
        return self.emit_values(prim, params, ins, [aval])[0]

    def emit_values(self, prim, params, ins, avals):
        names, binders = zip(*[self.new_var(a) for a in avals])
        self.lines.append(f"{' '.join(binders)} = {prim}{params_text(params)} {' '.join(ins)}")
        return names

    def bind_out(self, var, atom):
        if not isinstance(var, jcore.DropVar):
            self.env[var] = atom

    def text(self, outs=None, lead=None):
        """The program; lead replaces the hoisted binders (cond's branches
        all take every branch's hoisted operands)."""
        outs = self.outs if outs is None else outs
        lead = self.const_binders if lead is None else lead
        return ("{ lambda ; " + " ".join(list(lead) + self.binders) + ". let\n  "
                + "\n  ".join(self.lines)
                + "\n in (" + ", ".join(outs) + ("," if len(outs) == 1 else "") + ") }")


def _physical_value(val, aval):
    """A constant as kiln holds it: a key array as its u32 key data."""
    if is_key(aval):
        import jax
        return np.asarray(jax.random.key_data(val))
    return val


class _Translator:
    def __init__(self, platform):
        self.count = 0
        self.const_values = []
        self.platform = platform

    def fresh(self):
        self.count += 1
        return f"v{self.count}"

    def program(self, jaxpr, consts, top, where):
        """The scope of a translated (Closed)Jaxpr; .text() writes it."""
        s = _Scope(self, top)
        s.bind_consts(jaxpr.constvars, consts, where)
        for v in jaxpr.invars:
            s.bind_invar(v)
        self.body(s, jaxpr)
        s.outs = [s.atom(v) for v in jaxpr.outvars]
        return s

    def sub(self, parent, cj, where):
        """A control-flow body: (its scope, the parent's atoms for the
        operands it hoisted, which lead its invars)."""
        jaxpr, consts = (cj.jaxpr, cj.consts) if hasattr(cj, "consts") else (cj, ())
        s = self.program(jaxpr, consts, False, where)
        return s, [parent.hoist(v, a) for v, a in s.extras]

    def body(self, s, jaxpr):
        for eqn in jaxpr.eqns:
            self.eqn(s, eqn)

    def eqn(self, s, eqn):
        name = eqn.primitive.name
        where = f"{name} in `{eqn}`".replace("\n", " ")
        if len(where) > 300:
            where = where[:300] + "...`"
        rule = RULES.get(name)
        if rule is None:
            from ._jaxpr_registry import refusal
            raise refusal(name, where)
        try:
            ins = [s.atom(x) for x in eqn.invars]
            return rule(self, s, eqn, ins, where)
        except UnsupportedPrimitive as e:
            if "(equation" in str(e) or f"({where})" in str(e):
                raise
            raise type(e)(f"{e} (equation: {where})") from None

    def inline(self, s, eqn, body, where, invars=None):
        """Writes body's equations into s in place of eqn (a call)."""
        jaxpr, consts = (body.jaxpr, body.consts) if hasattr(body, "consts") else (body, ())
        s.bind_consts(jaxpr.constvars, consts, where)
        outer = eqn.invars if invars is None else invars
        for inner, o in zip(jaxpr.invars, outer):
            s.env[inner] = s.atom(o)
        self.body(s, jaxpr)
        for o, inner in zip(eqn.outvars, jaxpr.outvars):
            s.bind_out(o, s.atom(inner))


def _default_platform():
    from . import _default_device
    return _default_device().platform


def translate(closed_jaxpr, name="jax_fn", platform=None):
    """kiln IR text for a ClosedJaxpr, and the constants (non-scalar) that the
    program takes as its leading inputs, in order. platform ('cpu' or
    'cuda', default kiln's default device's) picks platform_index's branch."""
    tr = _Translator(platform or _default_platform())
    text = tr.program(closed_jaxpr.jaxpr, closed_jaxpr.consts, True, name).text()
    return text, tr.const_values
