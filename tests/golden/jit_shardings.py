"""Goldens for jit over sharded arguments (tests/dist/test_jit_shardings.cc).

jax.jit with in_shardings/out_shardings over meshes of the first 8 and of
the first 2 CPU devices, for functions whose equations are elementwise or
keep the sharded dimensions, and jax.shard_map called on arguments laid
out otherwise than its in_specs ask (replicated, split along another
dimension). One case per line in jit_shardings.txt:
  name|devices|mesh shape|mesh names|function|in specs|out spec|shapes|
  inputs|result spec|result shape|result
Specs use kiln_pspec_parse's text ("a, None", "" for P()), several
separated by ';'; an out spec of '-' means out_shardings unset. The result
spec is the one JAX gives the result (trailing Nones dropped). Values are
float32 in C order, ',' between elements, ';' between arguments.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import spmd_shard_map

jax.config.update("jax_platforms", "cpu")


def spec_text(spec):
    """kiln_pspec_parse's text without trailing Nones (JAX's equality)."""
    text = spmd_shard_map.spec_text(spec)
    while text == "None" or text.endswith(", None"):
        text = text[:-len(", None")] if text != "None" else ""
    return text


def parse_spec(text):
    if not text:
        return P()
    return P(*[None if t == "None" else t for t in (s.strip() for s in text.split(","))])


def fmt(a):
    return ",".join(repr(float(v)) for v in np.asarray(a, np.float32).reshape(-1))


FUNCS = {
    "sin_mul_add": lambda x, y: jnp.sin(x) * y + 1.0,
    "row_sumsq": lambda x: jnp.sum(x * x, axis=1),
    "bias_t": lambda x, b: (x * 2.0 + b[None, :]).T,
    "exp_sub": lambda x: jnp.exp(x) - x,
}


def smap_body(x):
    return jnp.sin(x) + jax.lax.psum(x, "data")


def inputs(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]


def jit_case(lines, name, n, mesh_shape, names, fn, in_specs, out_spec, shapes, seed):
    mesh = Mesh(np.array(jax.devices()[:n]).reshape(mesh_shape), names)
    shard = [NamedSharding(mesh, parse_spec(s)) for s in in_specs]
    xs = inputs(shapes, seed)
    args = [jax.device_put(x, s) for x, s in zip(xs, shard)]
    kw = {"in_shardings": tuple(shard)}
    if out_spec != "-":
        kw["out_shardings"] = NamedSharding(mesh, parse_spec(out_spec))
    y = jax.jit(FUNCS[fn], **kw)(*args)
    lines.append("|".join([
        name, str(n), ",".join(map(str, mesh_shape)), ",".join(names), fn, ";".join(in_specs),
        out_spec, ";".join(",".join(map(str, s)) for s in shapes), ";".join(fmt(x) for x in xs),
        spec_text(y.sharding.spec), ",".join(map(str, y.shape)), fmt(y)]))


def smap_case(lines, name, n, arg_spec, seed):
    mesh = Mesh(np.array(jax.devices()[:n]), ("data",))
    x = inputs([(2 * n, n)], seed)[0]
    arg = jax.device_put(x, NamedSharding(mesh, parse_spec(arg_spec)))
    f = jax.jit(jax.shard_map(smap_body, mesh=mesh, in_specs=P("data", None),
                              out_specs=P("data", None)))
    y = f(arg)
    lines.append("|".join([
        name, str(n), str(n), "data", "shard_map", arg_spec, "-", f"{2 * n},{n}", fmt(x),
        spec_text(y.sharding.spec), ",".join(map(str, y.shape)), fmt(y)]))


def main():
    lines = []
    for n, m2 in ((8, (4, 2)), (2, (2, 1))):
        jit_case(lines, f"sin_mul_add_{n}", n, (n,), ("data",), "sin_mul_add",
                 ["data, None", "data, None"], "-", [(8, 4), (8, 4)], 1)
        jit_case(lines, f"row_sumsq_{n}", n, (n,), ("data",), "row_sumsq", ["data, None"], "-",
                 [(8, 6)], 2)
        jit_case(lines, f"bias_t_{n}", n, (n,), ("data",), "bias_t", ["data, None", ""], "-",
                 [(8, 4), (4,)], 3)
        jit_case(lines, f"exp_sub_2d_{n}", n, m2, ("a", "b"), "exp_sub", ["a, b"], "b, None",
                 [(8, 4)], 4)
        jit_case(lines, f"replicated_out_{n}", n, (n,), ("data",), "sin_mul_add",
                 ["data, None", "data, None"], "", [(8, 4), (8, 4)], 5)
        for arg_spec in ("", "None, data", "data, None"):
            smap_case(lines, f"shard_map_from_[{arg_spec}]_{n}", n, arg_spec, 6)
    header = ("# jit over sharded arguments and shard_map on other layouts, from JAX "
              f"{jax.__version__} (tests/golden/jit_shardings.py)\n")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jit_shardings.txt")
    with open(path, "w") as f:
        f.write(header + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
