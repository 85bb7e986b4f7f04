"""Goldens for kiln's sharded arrays (tests/dist/test_dist_arrays.cc).

Runs jax.device_put of host data onto named shardings on 8 and on 2 CPU
devices (each count in its own process: XLA reads the device count once)
and writes, for each mesh, partition spec and global shape, every shard in
mesh order: the device, its index ranges and its values. Output:
dist_arrays.txt next to this file, one case a line:
  devices | mesh | axis names | spec | global shape | shards
shards are separated by ';', each "device@start:stop,...=v v v" (row-major
values of the shard). The host data is arange(size) * 0.5 as float32.
"""
import os
import sys

SPECS_1D = ["", "data", "None"]
SPECS_2D = SPECS_1D + ["data, None", "None, data", "data, model", "model, data",
                       "(data, model)", "(model, data)", "None, (data, model)", "model"]
SHAPES = [(), (16,), (8, 8), (16, 8)]


def meshes(n):
    return [((n,), ("data",)), ((2, n // 2), ("data", "model")), ((n // 2, 2), ("data", "model"))]


def spec_of(text, P):
    entries = []
    for part in [p.strip() for p in text.split(",")] if text else []:
        entries.append(part)
    # re-join tuples such as "(data, model)"
    out, i = [], 0
    while i < len(entries):
        e = entries[i]
        if e.startswith("("):
            group = [e[1:]]
            while not entries[i].endswith(")"):
                i += 1
                group.append(entries[i])
            group[-1] = group[-1][:-1]
            out.append(tuple(group))
        else:
            out.append(None if e == "None" else e)
        i += 1
    return P(*out)


def cases(n):
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    devs = jax.devices()
    assert len(devs) == n, devs
    lines = []
    for mshape, names in meshes(n):
        mesh = Mesh(np.array(devs).reshape(mshape), names)
        flat = list(mesh.devices.flat)
        for shape in SHAPES:
            for text in SPECS_2D:
                spec = spec_of(text, P)
                if len(spec) > len(shape) or (len(mshape) == 1 and "model" in text):
                    continue
                host = (np.arange(int(np.prod(shape)), dtype=np.float32) * 0.5).reshape(shape)
                try:
                    x = jax.device_put(host, NamedSharding(mesh, spec))
                except ValueError:
                    continue  # an uneven split: dist_sharding.txt covers the errors
                by_dev = {s.device: s for s in x.addressable_shards}
                parts = []
                for d in flat:
                    s = by_dev[d]
                    rng = ",".join("%d:%d" % ix.indices(shape[k])[:2] for k, ix in enumerate(s.index))
                    vals = " ".join("%g" % v for v in np.asarray(s.data).ravel())
                    parts.append("%d@%s=%s" % (d.id, rng, vals))
                lines.append("%d|%s|%s|%s|%s|%s" % (n, "x".join(map(str, mshape)), ",".join(names),
                                                    text, ",".join(map(str, shape)), ";".join(parts)))
    return lines


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import multi_device
    multi_device.run(__file__, cases, "dist_arrays.txt")
