"""Translation rules for the PRNG primitives. kiln holds a key array as its
u32 key data; random_seed/split/fold_in/bits are traced from the key's own
PRNG implementation (jax._src.prng's *_impl_base, what JAX lowers them
with) on that data and inlined, so the bits are JAX's: threefry2x32, the
default, becomes kiln's threefry2x32 primitive. A different impl (rbg)
traces to rng_bit_generator, which kiln lacks."""
import jax

try:  # jax._src.random.prng since JAX 0.8 or so, jax._src.prng before
    from jax._src.random import prng
    from jax._src.random import core as _jrandom
except ImportError:  # pragma: no cover
    from jax._src import prng
    from jax._src import random as _jrandom

from ._jaxpr_ops import check_params
from ._jaxpr_text import TranslatorLacks, ints, physical_shape


def _physical(aval):
    """The ShapeDtypeStruct kiln holds aval as."""
    if hasattr(aval.dtype, "_impl"):
        return jax.ShapeDtypeStruct(physical_shape(aval), "uint32")
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype)


def _inline_traced(tr, s, eqn, fn, where):
    """Inlines JAX's own implementation fn over the physical operands."""
    closed = jax.make_jaxpr(fn)(*[_physical(v.aval) for v in eqn.invars])
    tr.inline(s, eqn, closed, where)


def _impl(aval, where):
    impl = getattr(aval.dtype, "_impl", None)
    if impl is None:
        raise TranslatorLacks(f"expected PRNG keys ({where})")
    return impl


def _seed(tr, s, eqn, ins, where):
    impl = eqn.params["impl"]
    _inline_traced(tr, s, eqn, lambda seeds: prng.random_seed_impl_base(seeds, impl=impl), where)


def _split(tr, s, eqn, ins, where):
    keys = eqn.invars[0].aval
    impl, shape = _impl(keys, where), tuple(eqn.params["shape"])
    _inline_traced(tr, s, eqn, lambda k: prng.random_split_impl_base(
        impl, k, len(keys.shape), shape=shape), where)


def _fold_in(tr, s, eqn, ins, where):
    keys = eqn.invars[0].aval
    impl = _impl(keys, where)
    _inline_traced(tr, s, eqn, lambda k, m: prng.random_fold_in_impl_base(
        impl, k, m, tuple(keys.shape)), where)


def _bits(tr, s, eqn, ins, where):
    keys = eqn.invars[0].aval
    impl, p = _impl(keys, where), eqn.params
    _inline_traced(tr, s, eqn, lambda k: prng.random_bits_impl_base(
        impl, k, len(keys.shape), bit_width=p["bit_width"], shape=tuple(p["shape"])), where)


def _same_data(tr, s, eqn, ins, where):
    """wrap/unwrap/clone: the key data is unchanged."""
    s.bind_out(eqn.outvars[0], ins[0])


def _iota_2x32(tr, s, eqn, ins, where):
    """The 64-bit linear index of each element of shape, as (hi, lo) u32
    words: kiln's arrays have fewer than 2**32 elements, so hi is 0."""
    shape = tuple(int(d) for d in eqn.params["shape"])
    size = 1
    for d in shape:
        size *= d
    if size >= 1 << 32:
        raise TranslatorLacks(f"iota_2x32_shape over 2**32 elements or more ({where})")
    hi, lo = eqn.outvars
    flat = s.emit_value("iota", {"dtype": "uint32", "shape": ints((size,)), "dimension": "0"}, [],
                        lo.aval.update(shape=(size,)))
    s.emit("reshape", {"new_sizes": ints(shape)}, [flat], [lo])
    s.emit("broadcast_in_dim", {"shape": ints(shape), "broadcast_dimensions": "()"}, ["0:u32[]"],
           [hi])


def _threefry(tr, s, eqn, ins, where):
    check_params(eqn, (), where)
    s.emit("threefry2x32", {}, ins, eqn.outvars)


def _gamma(tr, s, eqn, ins, where):
    """random_gamma: JAX's rejection sampler (a while loop over threefry)."""
    impl = getattr(_jrandom, "_gamma_impl", None)
    if impl is None:
        raise TranslatorLacks(f"this JAX has no jax._src.random._gamma_impl to trace ({where})")
    log_space = eqn.params["log_space"]
    key_aval = eqn.invars[0].aval
    data = jax.ShapeDtypeStruct(physical_shape(key_aval), "uint32")
    a = eqn.invars[1].aval
    kimpl = _impl(key_aval, where)

    def fn(k, x):
        keys = prng.random_wrap(k, impl=kimpl)
        return impl(keys, x, log_space=log_space, use_vmap=False)
    closed = jax.make_jaxpr(fn)(data, jax.ShapeDtypeStruct(a.shape, a.dtype))
    tr.inline(s, eqn, closed, where)


RULES = {
    "random_seed": _seed, "random_split": _split, "random_fold_in": _fold_in,
    "random_bits": _bits, "random_wrap": _same_data, "random_unwrap": _same_data,
    "random_clone": _same_data, "threefry2x32": _threefry,
    "iota_2x32_shape": _iota_2x32, "random_gamma": _gamma,
}
