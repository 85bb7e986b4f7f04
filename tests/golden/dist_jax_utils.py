"""Goldens for kiln's flax.jax_utils equivalents (tests/dist/test_dist_jax_utils.cc).

Runs flax.jax_utils.replicate / unreplicate and pad_shard_unpad around a
jax.pmap on 8 and on 2 CPU devices (each count in its own process) and
writes dist_jax_utils.txt next to this file, one record a line:
  devices|replicate|leaf|global shape|dtype|shards: "device@ranges" by ';'
  devices|unreplicate|leaf|shape|device|values
  devices|psu|b|min_device_batch|seen shapes (x;y)|leaf|shape|values
  devices|psu_static|b|min_device_batch|leaf|shape
The replicated tree is {'b': f32 3.0, 'i': arange(4) i32, 'w': arange(6)
* 0.5 as f32[2,3]}. pad_shard_unpad wraps pmap(f, static_broadcasted_argnums
=0) with static_argnums=(0,) and is called as (2.0, x, {'y': y}), x =
arange(3b) * 0.5 as f32[b,3], y = arange(b) i32, f(s, x, d) = {'a': x * s +
1, 'n': d['y'] * 2, 's': x.sum(-1)}; min_device_batch "-" is unset.
"""
import os
import sys

BATCHES = [0, 1, 7, 8, 9, 63]
MIN_DEVICE_BATCH = [None, 3]


def fmt(v):
    import numpy as np
    return " ".join("%g" % x for x in np.asarray(v).ravel())


def shape_str(s):
    return ",".join(map(str, s))


def records(n):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import jax_utils
    assert jax.local_device_count() == n
    out = []
    tree = {"b": np.float32(3.0), "i": np.arange(4, dtype=np.int32),
            "w": (np.arange(6, dtype=np.float32) * 0.5).reshape(2, 3)}
    rep = jax_utils.replicate(tree)
    for k in sorted(rep):
        x = rep[k]
        shards = sorted(x.addressable_shards, key=lambda s: s.device.id)
        parts = ["%d@%s" % (s.device.id, ",".join("%d:%d" % ix.indices(x.shape[d])[:2]
                                                   for d, ix in enumerate(s.index)))
                 for s in shards]
        out.append("%d|replicate|%s|%s|%s|%s" % (n, k, shape_str(x.shape), x.dtype, ";".join(parts)))
    un = jax_utils.unreplicate(rep)
    for k in sorted(un):
        x = un[k]
        out.append("%d|unreplicate|%s|%s|%d|%s" % (n, k, shape_str(x.shape),
                                                  list(x.devices())[0].id, fmt(x)))

    def f(s, x, d):
        return {"a": x * s + 1, "n": d["y"] * 2, "s": x.sum(-1)}

    pm = jax.pmap(f, static_broadcasted_argnums=0)
    seen = []

    def wrapped(s, x, d):
        seen.append("%s;%s" % (shape_str(x.shape), shape_str(d["y"].shape)))
        return pm(s, x, d)

    for static in (False, True):
        psu = jax_utils.pad_shard_unpad(wrapped, static_argnums=(0,), static_return=static)
        for b in BATCHES:
            for mdb in MIN_DEVICE_BATCH:
                x = (np.arange(3 * b, dtype=np.float32) * 0.5).reshape(b, 3)
                y = np.arange(b, dtype=np.int32)
                res = psu(2.0, x, {"y": y}, min_device_batch=mdb)
                m = "-" if mdb is None else str(mdb)
                for k in sorted(res):
                    if static:
                        out.append("%d|psu_static|%d|%s|%s|%s" % (n, b, m, k, shape_str(res[k].shape)))
                    else:
                        out.append("%d|psu|%d|%s|%s|%s|%s|%s" % (n, b, m, seen[-1], k,
                                                              shape_str(res[k].shape), fmt(res[k])))
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import multi_device
    multi_device.run(__file__, records, "dist_jax_utils.txt")
