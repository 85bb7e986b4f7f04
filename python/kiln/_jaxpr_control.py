"""Translation rules for calls (inlined), control flow and platform_index."""
import re

from ._jaxpr_ops import check_params
from ._jaxpr_text import TranslatorLacks, boolean

# Calls whose body is inlined, and the param holding it. custom_jvp_call and
# custom_vjp_call run their primal: a jaxpr JAX differentiated already
# applied the custom rules (kiln.jit(jax.grad(f))).
CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
         "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
         "custom_vjp_call_jaxpr": "fun_jaxpr", "custom_jvp_call_jaxpr": "fun_jaxpr", "remat": "jaxpr", "remat2": "jaxpr",
         "checkpoint": "jaxpr", "call": "call_jaxpr", "composite": "jaxpr",
         "compute_on": "jaxpr", "custom_vmap_call": "call"}


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
    progs = " ".join(tr.closed(b, where) for b in branches)
    s.emit("cond", {"branches": f"({progs})"}, ins, eqn.outvars)


def _while(tr, s, eqn, ins, where):
    p = eqn.params
    check_params(eqn, {"cond_jaxpr", "body_jaxpr", "cond_nconsts", "body_nconsts"}, where)
    s.emit("while", {"cond_jaxpr": tr.closed(p["cond_jaxpr"], where),
                     "body_jaxpr": tr.closed(p["body_jaxpr"], where),
                     "cond_nconsts": str(p["cond_nconsts"]), "body_nconsts": str(p["body_nconsts"])},
           ins, eqn.outvars)


def _scan(tr, s, eqn, ins, where):
    p = eqn.params
    check_params(eqn, {"jaxpr", "length", "num_carry", "num_consts", "reverse", "linear"}, where)
    s.emit("scan", {"jaxpr": tr.closed(p["jaxpr"], where), "length": str(p["length"]),
                    "num_carry": str(p["num_carry"]), "num_consts": str(p["num_consts"]),
                    "reverse": boolean(p["reverse"])}, ins, eqn.outvars)


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


RULES = {name: _call for name in CALLS}
RULES.update({"cond": _cond, "while": _while, "scan": _scan, "platform_index": _platform_index})
