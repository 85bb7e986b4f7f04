"""Goldens for kiln_shard_map, kiln_pmap and the collectives inside them
(tests/dist/test_spmd.cc).

Runs every collective (psum, pmax, pmin, pmean, all_gather, psum_scatter,
ppermute, all_to_all, axis_index) over every axis combination of the 1-D
and 2-D meshes of 8 CPU devices (8, 2x4, 4x2) and of 2 devices (2, 1x2,
2x1), inside jax.shard_map with sharded and replicated outputs, plus pmap
with in_axes/out_axes, and writes one case per line to spmd_shard_map.txt:
  name|mesh shape|mesh names|in spec|out spec|op|params|dtype|global shape|
  input|result shape|result
Specs use kiln_pspec_parse's text ("a, b", "(a, b)", ""); params are
key=value pairs separated by ';', several axes joined by '+'. Values are
the global arrays in C order, ',' between elements. A result of "ERROR" is
a case JAX rejects (the replication check).
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

jax.config.update("jax_platforms", "cpu")

MESHES = [((8,), ("i",)), ((2, 4), ("a", "b")), ((4, 2), ("a", "b")),
          ((2,), ("i",)), ((1, 2), ("a", "b")), ((2, 1), ("a", "b"))]


def axis_combos(names):
    if len(names) == 1:
        return [(names[0],)]
    a, b = names
    return [(a,), (b,), (a, b), (b, a)]


def size_of(shape, names, axes):
    n = 1
    for ax in axes:
        n *= shape[names.index(ax)]
    return n


def spec_text(spec):
    parts = []
    for e in spec:
        if e is None:
            parts.append("None")
        elif isinstance(e, tuple):
            parts.append("(" + ", ".join(e) + ")")
        else:
            parts.append(e)
    return ", ".join(parts)


def fmt(a):
    a = np.asarray(a)
    if a.dtype == jnp.bfloat16:
        a = a.astype(np.float32)
    return ",".join(repr(v.item()) for v in a.reshape(-1))


def values(shape, dtype, rng):
    if dtype in ("int32", "int8"):
        return rng.integers(-50, 50, shape).astype(dtype)
    x = rng.standard_normal(shape).astype(np.float32) * 4
    return x.astype(jnp.bfloat16) if dtype == "bfloat16" else x.astype(dtype)


def ax(axes):
    return axes[0] if len(axes) == 1 else tuple(axes)


def body(op, prm):
    axes = ax(prm["axes"])
    if op in ("psum", "pmax", "pmin", "pmean"):
        return lambda x: getattr(jax.lax, op)(x, axes)
    if op == "all_gather":
        return lambda x: jax.lax.all_gather(x, axes, axis=prm["axis"], tiled=prm["tiled"])
    if op == "psum_scatter":
        return lambda x: jax.lax.psum_scatter(x, axes, scatter_dimension=prm["dim"],
                                              tiled=prm["tiled"])
    if op == "ppermute":
        return lambda x: jax.lax.ppermute(x, axes, prm["perm"])
    if op == "all_to_all":
        return lambda x: jax.lax.all_to_all(x, axes, prm["split"], prm["concat"],
                                            tiled=prm["tiled"])
    if op == "axis_index":
        return lambda x: x + jax.lax.axis_index(axes)
    raise ValueError(op)


def params_text(prm):
    out = []
    for k, v in prm.items():
        if k == "axes":
            v = "+".join(v)
        elif k == "perm":
            v = "+".join(f"{a}>{b}" for a, b in v)
        elif isinstance(v, bool):
            v = int(v)
        out.append(f"{k}={v}")
    return ";".join(out)


def run_case(lines, name, mshape, mnames, in_spec, out_spec, op, prm, dtype, gshape, rng,
             check=False):
    devs = np.array(jax.devices()[:int(np.prod(mshape))]).reshape(mshape)
    mesh = Mesh(devs, mnames)
    x = values(gshape, dtype, rng)
    f = jax.shard_map(body(op, prm), mesh=mesh, in_specs=(in_spec,), out_specs=out_spec,
                      check_vma=check)
    try:
        y = np.asarray(jax.jit(f)(x))
        res, rshape = fmt(y), ",".join(map(str, y.shape))
    except Exception:  # the replication check
        res, rshape = "ERROR", ""
    lines.append("|".join([name, ",".join(map(str, mshape)), ",".join(mnames),
                           spec_text(in_spec), spec_text(out_spec), op, params_text(prm), dtype,
                           ",".join(map(str, gshape)), fmt(x), rshape, res]))


def perms(n):
    """A cyclic shift and a partial permutation (some devices get zeros)."""
    return [[(i, (i + 1) % n) for i in range(n)], [(0, n - 1)] if n > 1 else [(0, 0)]]


def shard_map_cases(lines, rng):
    for mshape, mnames in MESHES:
        tag = "x".join(map(str, mshape))
        in_spec = P(*mnames)
        for axes in axis_combos(mnames):
            g = size_of(mshape, mnames, axes)
            base = dict(axes=axes)

            def case(op, prm, shard, dtype="float32", out_spec=in_spec, check=False):
                gshape = tuple(s * (mshape[d] if d < len(mshape) else 1) for d, s in enumerate(shard))
                nm = f"{op}_{tag}_{'+'.join(axes)}"
                run_case(lines, nm, mshape, mnames, in_spec, out_spec, op, prm, dtype, gshape, rng,
                         check)

            for op in ("psum", "pmax", "pmin", "pmean", "axis_index"):
                case(op, dict(base), (2, 3))
            for dt in ("bfloat16", "int32", "int8"):
                case("psum", dict(base), (2, 3), dtype=dt)
            case("pmean", dict(base), (2, 3), dtype="int32")
            for axis in (0, 1, 2):
                case("all_gather", dict(base, axis=axis, tiled=False), (2, 3))
            for axis in (0, 1):
                case("all_gather", dict(base, axis=axis, tiled=True), (2, 3))
            case("psum_scatter", dict(base, dim=0, tiled=True), (2 * g, 3))
            case("psum_scatter", dict(base, dim=1, tiled=True), (2, 2 * g))
            case("psum_scatter", dict(base, dim=0, tiled=False), (g, 2, 3))
            case("psum_scatter", dict(base, dim=1, tiled=False), (2, g, 3))
            for perm in perms(g):
                case("ppermute", dict(base, perm=perm), (2, 3))
            case("all_to_all", dict(base, split=0, concat=0, tiled=True), (2 * g, 3))
            case("all_to_all", dict(base, split=0, concat=1, tiled=True), (2 * g, 3))
            case("all_to_all", dict(base, split=1, concat=0, tiled=True), (2, 2 * g))
            case("all_to_all", dict(base, split=0, concat=1, tiled=False), (g, 3))
            case("all_to_all", dict(base, split=1, concat=0, tiled=False), (2, g))
            # Replicated outputs: the spec leaves out the reduced / gathered axes.
            rest = tuple(n for n in mnames if n not in axes)
            rep = P(*[n if n in rest else None for n in mnames])
            case("psum", dict(base), (2, 3), out_spec=rep, check=True)
            case("all_gather", dict(base, axis=0, tiled=True), (2, 3), out_spec=rep, check=True)
            # Not replicated: JAX's check (and kiln's check_rep) rejects it.
            case("axis_index", dict(base), (2, 3), out_spec=rep, check=True)


def pmap_cases(lines, rng):
    """pmap over n devices: f(x, y) = psum(x * y) + axis_index, x mapped on
    in_axes[0], y on in_axes[1] (None: broadcast), results on out_axes."""
    for n in (8, 2):
        for in_axes, out_axes in (((0, None), 0), ((1, 0), 0), ((0, 0), 1), ((1, None), None)):
            def f(x, y):
                s = jax.lax.psum(x * y, "i")
                return s + jax.lax.axis_index("i") if out_axes is not None else s
            x = values((n, 3) if in_axes[0] == 0 else (3, n), "float32", rng)
            y = values((n, 3) if in_axes[1] == 0 else (3,), "float32", rng)
            if in_axes[1] is None and in_axes[0] == 1:
                y = values((3,), "float32", rng)
            g = jax.pmap(f, "i", in_axes=in_axes, out_axes=out_axes, devices=jax.devices()[:n])
            out = np.asarray(g(x, y))
            ia = "+".join("N" if a is None else str(a) for a in in_axes)
            oa = "N" if out_axes is None else str(out_axes)
            lines.append("|".join([f"pmap_{n}_{ia}_{oa}", str(n), "i", ia, oa, "pmap", "",
                                   "float32", ",".join(map(str, x.shape)), fmt(x),
                                   ",".join(map(str, y.shape)), fmt(y),
                                   ",".join(map(str, out.shape)), fmt(out)]))


def main():
    rng = np.random.default_rng(11)
    lines = []
    shard_map_cases(lines, rng)
    pmap_cases(lines, rng)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spmd_shard_map.txt")
    with open(path, "w") as f:
        f.write("# generated by spmd_shard_map.py (jax %s, 8 CPU devices)\n" % jax.__version__)
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} cases")


if __name__ == "__main__":
    main()
