"""Translation rules for calls (inlined), control flow and platform_index."""
import re

from ._jaxpr_ops import check_params
from ._jaxpr_text import TranslatorLacks, boolean

# Calls whose body is inlined, and the param holding it. custom_jvp_call and
# custom_vjp_call run their primal: a jaxpr JAX differentiated already
# applied the custom rules (kiln.jit(jax.grad(f))).
CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
         "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
         "custom_vjp_call_jaxpr": "fun_jaxpr", "custom_jvp_call_jaxpr": "fun_jaxpr",
         "remat": "jaxpr", "remat2": "jaxpr",
         "checkpoint": "jaxpr", "call": "call_jaxpr", "composite": "jaxpr",
         "compute_on": "jaxpr", "custom_vmap_call": "call", "linear_call": "callee"}


def _call(tr, s, eqn, ins, where):
    p = eqn.params
    body = p.get(CALLS[eqn.primitive.name])
    if body is None and eqn.primitive.name == "custom_vjp_call":
        body = p.get("fun_jaxpr")
    tr.inline(s, eqn, body, where)


_INT_LITERAL = re.compile(r"^(-?\d+|True|False):~?\w+\[\]$")


def _known_int(atom):
    """The value of an integer or bool literal atom, else None."""
    m = _INT_LITERAL.match(atom)
    if not m:
        return None
    v = m.group(1)
    return {"True": 1, "False": 0}[v] if v in ("True", "False") else int(v)


def _cond(tr, s, eqn, ins, where):
    check_params(eqn, {"branches"}, where)
    branches = eqn.params["branches"]
    known = _known_int(ins[0])
    if known is not None:
        # known while translating (platform_index's choice): only that branch
        i = min(max(known, 0), len(branches) - 1)
        tr.inline(s, eqn, branches[i], where, invars=eqn.invars[1:])
        return
    subs = [tr.sub(s, b, where) for b in branches]
    # every branch takes every branch's hoisted operands (the others unused)
    hoisted = [a for _, atoms in subs for a in atoms]
    leads = [[] for _ in subs]
    for j, (sub_j, _) in enumerate(subs):
        for i, (sub_i, _) in enumerate(subs):
            if i == j:
                leads[i] += sub_j.const_binders
            else:
                leads[i] += [sub_i.new_var(a)[1] for _, a in sub_j.extras]
    progs = " ".join(sub.text(lead=lead) for (sub, _), lead in zip(subs, leads))
    s.emit("cond", {"branches": f"({progs})"}, ins[:1] + hoisted + ins[1:], eqn.outvars)


def _any_lane_while(eqn):
    """A while whose predicate is batched (jax.vmap of a while_loop whose
    condition depends on the mapped value: cond_jaxpr returns bool[b]) as a
    jaxpr of one with a scalar predicate, as JAX's batching rule runs it: loop
    while any lane's predicate holds, and keep the body's results only in the
    lanes whose predicate holds (every carry is batched on its leading axis
    then). Same operands and results as eqn."""
    import jax
    import jax.numpy as jnp
    from jax.extend.core import jaxpr_as_fun

    p = eqn.params
    cn, bn = int(p["cond_nconsts"]), int(p["body_nconsts"])
    cond, body = jaxpr_as_fun(p["cond_jaxpr"]), jaxpr_as_fun(p["body_jaxpr"])

    def lanes(pred, x):
        return pred.reshape(pred.shape + (1,) * (x.ndim - pred.ndim))

    def loop(*args):
        cc, bc, carry = args[:cn], args[cn:cn + bn], args[cn + bn:]

        def step(c):
            pred = cond(*cc, *c)[0]
            new = body(*bc, *c)
            return tuple(jnp.where(lanes(pred, x), n, x) for n, x in zip(new, c))

        return jax.lax.while_loop(lambda c: jnp.any(cond(*cc, *c)[0]), step, tuple(carry))

    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
    return jax.make_jaxpr(loop)(*avals)


def _while(tr, s, eqn, ins, where):
    p = eqn.params
    check_params(eqn, {"cond_jaxpr", "body_jaxpr", "cond_nconsts", "body_nconsts"}, where)
    if p["cond_jaxpr"].out_avals[0].shape != ():
        tr.inline(s, eqn, _any_lane_while(eqn), where)
        return
    cn, bn = int(p["cond_nconsts"]), int(p["body_nconsts"])
    (cond, c_atoms), (body, b_atoms) = tr.sub(s, p["cond_jaxpr"], where), \
        tr.sub(s, p["body_jaxpr"], where)
    ins = c_atoms + ins[:cn] + b_atoms + ins[cn:]
    s.emit("while", {"cond_jaxpr": cond.text(), "body_jaxpr": body.text(),
                     "cond_nconsts": str(cn + len(c_atoms)),
                     "body_nconsts": str(bn + len(b_atoms))},
           ins, eqn.outvars)


def _scan(tr, s, eqn, ins, where):
    p = eqn.params
    check_params(eqn, {"jaxpr", "length", "num_carry", "num_consts", "reverse", "linear"}, where)
    body, atoms = tr.sub(s, p["jaxpr"], where)
    s.emit("scan", {"jaxpr": body.text(), "length": str(p["length"]),
                    "num_carry": str(p["num_carry"]),
                    "num_consts": str(int(p["num_consts"]) + len(atoms)),
                    "reverse": boolean(p["reverse"])}, atoms + ins, eqn.outvars)


# JAX's lowering-platform names of kiln's backends.
_PLATFORM_NAMES = {"cpu": ("cpu",), "cuda": ("cuda", "gpu")}


def _platform_index(tr, s, eqn, ins, where):
    """The branch for kiln's backend, chosen while translating (the index
    becomes a literal, and the cond it drives keeps only that branch)."""
    names = _PLATFORM_NAMES.get(tr.platform, (tr.platform,))
    platforms = eqn.params["platforms"]
    for i, group in enumerate(platforms):
        group = (group,) if isinstance(group, str) else tuple(group)
        if any(n in names for n in group):
            break
    else:
        if not eqn.params.get("has_default"):
            raise TranslatorLacks(f"platform_index has no branch for kiln's platform "
                                  f"{tr.platform} ({where})")
        i = len(platforms)
    s.bind_out(eqn.outvars[0], f"{i}:i32[]")


def _linear_solve(tr, s, eqn, ins, where):
    """lax.custom_linear_solve: its value is its solve jaxpr's on (solve's
    consts, b); matvec and the transposes only matter to autodiff, which
    JAX has done."""
    lengths = [int(n) for n in eqn.params["const_lengths"]]  # matvec, vecmat, solve, t_solve
    start = lengths[0] + lengths[1]
    invars = list(eqn.invars[start:start + lengths[2]]) + list(eqn.invars[sum(lengths):])
    tr.inline(s, eqn, eqn.params["jaxprs"].solve, where, invars=invars)


RULES = {name: _call for name in CALLS}
RULES["custom_linear_solve"] = _linear_solve
RULES.update({"cond": _cond, "while": _while, "scan": _scan, "platform_index": _platform_index})
