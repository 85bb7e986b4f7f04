#!/usr/bin/env python3
"""Golden data for tests/nn/test_nn_layers.cc: flax.linen's BatchNorm, Embed and
MultiHeadDotProductAttention, computed by Flax itself.

Writes tests/golden/nn_layers.txt, records "NAME : V..." with every float32
(and every integer, as a float32) as the hex of its bits:

  embed_key S / embed_init S   the raw key Flax hands Embed(10, 6)'s
                        embedding_init under init(PRNGKey(S)), and the
                        embedding it makes (default_embed_init)
  embed_ids / embed_y   i32[2,4] ids (one negative, one out of range) and
                        Embed(10, 6).apply with embed_init 0
  embed_q / embed_attend   f32[3,6] queries and Embed.attend
  mha_key S NAME / mha_init S NAME   the key Flax hands the kernel_init of
                        MultiHeadDotProductAttention(2, qkv_features=8,
                        out_features=3)'s NAME ('query', 'key', 'value',
                        'out') under init(PRNGKey(S), xq, xkv), and the kernel
  mha_pS NAME.bias      the biases the forward cases use with mha_init S's
                        kernels, drawn at random (Flax's are zeros); seed 0
                        is cross-attention's params, 1 self-attention's
  mha_xq / mha_xkv      f32[2,5,8] queries, f32[2,7,6] keys/values
  mha_self / mha_causal   self-attention of xq (no mask / make_causal_mask)
  mha_causal_mask       make_causal_mask of i32[2,5]
  mha_cross_mask / mha_cross / mha_cross_nomask   a bool[2,1,5,7] mask (as
                        0/1) and cross-attention of xq over xkv with and
                        without it
  mha_grad_x / mha_grad NAME   jax.grad of sum(sin(mha_causal)) in xq and in
                        every param (NAME as 'query.kernel')
  bn_x, bn_scale, bn_bias, bn_mean, bn_var   x f32[4,3,5], params, batch_stats
  bn_y / bn_new_mean / bn_new_var   BatchNorm() training step (momentum
                        0.99, epsilon 1e-5, use_running_average=False)
  bn_eval               BatchNorm(use_running_average=True)
  bn_grad_x / bn_grad_scale / bn_grad_bias   jax.grad of sum(sin(y) * x)
  bnp_x / bnp_y / bnp_new_mean / bnp_new_var   BatchNorm(axis_name='batch')
                        under jax.pmap over 4 of 8 CPU devices, x f32[4,6,5]

Run from anywhere: python3 tests/golden/nn_layers.py
"""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def hexes(x):
    return " ".join("%08x" % v for v in np.asarray(x, np.float32).view(np.uint32).ravel())


def raw_key(k):
    if jnp.issubdtype(k.dtype, jax.dtypes.prng_key):
        k = jax.random.key_data(k)
    return np.asarray(k, np.uint32)


def recording(init, seen):
    """init, noting the key and shape it is called with."""
    def wrapped(key, shape, dtype=jnp.float32):
        seen.append((raw_key(key), shape))
        return init(key, shape, dtype)
    return wrapped


def embed_cases(lines, rng):
    for seed in (0, 1, 42):
        seen = []
        mod = nn.Embed(10, 6, embedding_init=recording(nn.linear.default_embed_init, seen))
        p = mod.init(jax.random.PRNGKey(seed), jnp.zeros((1,), jnp.int32))["params"]
        lines.append("embed_key %d : %s" % (seed, hexes(seen[0][0].view(np.float32))))
        lines.append("embed_init %d : %s" % (seed, hexes(p["embedding"])))
        if seed == 0:
            table = p
    ids = np.array([[0, 3, 9, -1], [10, 2, 2, 5]], np.int32)
    mod = nn.Embed(10, 6)
    y = mod.apply({"params": table}, ids)
    q = rng.normal(size=(3, 6)).astype(np.float32)
    att = mod.apply({"params": table}, q, method=nn.Embed.attend)
    lines += ["embed_ids : " + hexes(ids.astype(np.float32)), "embed_y : " + hexes(y),
              "embed_q : " + hexes(q), "embed_attend : " + hexes(att)]


NAMES = ("query", "key", "value", "out")


def mha_cases(lines, rng):
    xq = rng.normal(size=(2, 5, 8)).astype(np.float32)
    xkv = rng.normal(size=(2, 7, 6)).astype(np.float32)
    params = {}
    for seed in (0, 1):  # 0: cross-attention (xq over xkv), 1: self-attention
        seen = []
        mod = nn.MultiHeadDotProductAttention(
            2, qkv_features=8, out_features=3,
            kernel_init=recording(nn.initializers.lecun_normal(), seen))
        p = mod.init(jax.random.PRNGKey(seed), xq, *((xkv,) if seed == 0 else ()))["params"]
        p = jax.tree_util.tree_map(np.asarray, p)
        # Flax calls the kernel inits in the order query, key, value, out.
        for name, (key, _) in zip(NAMES, seen):
            lines.append("mha_key %d %s : %s" % (seed, name, hexes(key.view(np.float32))))
            lines.append("mha_init %d %s : %s" % (seed, name, hexes(p[name]["kernel"])))
        for name in NAMES:
            b = p[name]["bias"]
            p[name]["bias"] = (rng.normal(size=b.shape) * 0.1).astype(np.float32)
            lines.append("mha_p%d %s.bias : %s" % (seed, name, hexes(p[name]["bias"])))
        params[seed] = p
    lines += ["mha_xq : " + hexes(xq), "mha_xkv : " + hexes(xkv)]
    mod = nn.MultiHeadDotProductAttention(2, qkv_features=8, out_features=3)
    v = {"params": params[1]}
    causal = nn.make_causal_mask(jnp.zeros((2, 5), jnp.int32))
    lines.append("mha_causal_mask : " + hexes(causal))
    lines.append("mha_self : " + hexes(mod.apply(v, xq)))
    lines.append("mha_causal : " + hexes(mod.apply(v, xq, mask=causal)))
    cmask = rng.random(size=(2, 1, 5, 7)) < 0.6
    cmask[..., 0] = True
    lines.append("mha_cross_mask : " + hexes(cmask.astype(np.float32)))
    v0 = {"params": params[0]}
    lines.append("mha_cross : " + hexes(mod.apply(v0, xq, xkv, mask=cmask)))
    lines.append("mha_cross_nomask : " + hexes(mod.apply(v0, xq, xkv)))

    def loss(params, x):
        return jnp.sum(jnp.sin(mod.apply({"params": params}, x, mask=causal)))
    gp, gx = jax.grad(loss, argnums=(0, 1))(params[1], xq)
    lines.append("mha_grad_x : " + hexes(gx))
    for name in NAMES:
        for leaf in ("kernel", "bias"):
            lines.append("mha_grad %s.%s : %s" % (name, leaf, hexes(gp[name][leaf])))


def bn_cases(lines, rng):
    x = (rng.normal(size=(4, 3, 5)) * 2 + 0.5).astype(np.float32)
    scale = (1 + rng.normal(size=5) * 0.1).astype(np.float32)
    bias = (rng.normal(size=5) * 0.1).astype(np.float32)
    mean = (rng.normal(size=5) * 0.3).astype(np.float32)
    var = (1 + rng.random(size=5)).astype(np.float32)
    v = {"params": {"scale": scale, "bias": bias}, "batch_stats": {"mean": mean, "var": var}}
    y, upd = nn.BatchNorm(use_running_average=False).apply(v, x, mutable=["batch_stats"])
    ev = nn.BatchNorm(use_running_average=True).apply(v, x)
    lines += ["bn_x : " + hexes(x), "bn_scale : " + hexes(scale), "bn_bias : " + hexes(bias),
              "bn_mean : " + hexes(mean), "bn_var : " + hexes(var), "bn_y : " + hexes(y),
              "bn_new_mean : " + hexes(upd["batch_stats"]["mean"]),
              "bn_new_var : " + hexes(upd["batch_stats"]["var"]), "bn_eval : " + hexes(ev)]

    def loss(params, x):
        y, _ = nn.BatchNorm(use_running_average=False).apply(
            {"params": params, "batch_stats": v["batch_stats"]}, x, mutable=["batch_stats"])
        return jnp.sum(jnp.sin(y) * x)
    gp, gx = jax.grad(loss, argnums=(0, 1))(v["params"], x)
    lines += ["bn_grad_x : " + hexes(gx), "bn_grad_scale : " + hexes(gp["scale"]),
              "bn_grad_bias : " + hexes(gp["bias"])]

    xp = (rng.normal(size=(4, 6, 5)) * 1.5 - 0.25).astype(np.float32)
    xp[2] += 1.0  # the devices' batches differ, so the pmean matters

    def step(x):
        return nn.BatchNorm(use_running_average=False, axis_name="batch").apply(
            v, x, mutable=["batch_stats"])
    yp, updp = jax.pmap(step, axis_name="batch", devices=jax.devices()[:4])(xp)
    lines += ["bnp_x : " + hexes(xp), "bnp_y : " + hexes(yp),
              "bnp_new_mean : " + hexes(updp["batch_stats"]["mean"][0]),
              "bnp_new_var : " + hexes(updp["batch_stats"]["var"][0])]


def main():
    import flax
    lines = ["# generated by tests/golden/nn_layers.py with flax %s, jax %s"
             % (flax.__version__, jax.__version__)]
    rng = np.random.default_rng(7)
    embed_cases(lines, rng)
    mha_cases(lines, rng)
    bn_cases(lines, rng)
    with open(os.path.join(HERE, "nn_layers.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
