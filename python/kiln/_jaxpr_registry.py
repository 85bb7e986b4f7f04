"""Every primitive JAX defines, as the translator sees it: translated, or
refused with a reason, either because kiln's IR cannot express it
(KilnLacks) or because the translator does not map it yet (TranslatorLacks).

The list is JAX's own: the Primitive objects that exist once JAX's modules
are imported (found by walking those modules), not a list of examples.

    python3 -m kiln._jaxpr_registry      # prints the table"""
import gc
import importlib

from ._jaxpr_text import KilnLacks, TranslatorLacks

# Modules that define primitives (missing ones are skipped: JAX moves them).
MODULES = """jax._src.lax.lax jax._src.lax.slicing jax._src.lax.control_flow.loops
jax._src.lax.control_flow.conditionals jax._src.lax.control_flow.for_loop
jax._src.lax.control_flow.solves jax._src.lax.windowed_reductions jax._src.lax.convolution
jax._src.lax.parallel jax._src.lax.linalg jax._src.lax.fft jax._src.lax.special jax._src.lax.ann
jax._src.lax.other jax._src.lax.utils jax._src.prng jax._src.random jax._src.ad_util jax._src.pjit
jax._src.core jax._src.custom_derivatives jax._src.custom_transpose jax._src.ad_checkpoint
jax._src.dispatch jax._src.callback jax._src.debugging jax._src.interpreters.ad
jax._src.state.primitives jax._src.state.discharge jax._src.shard_map jax._src.lax.parallel
jax._src.numpy.ufuncs jax._src.nn.functions jax._src.cudnn.fused_attention_stablehlo
jax._src.lax.control_flow.common jax._src.checkify jax._src.api""".split()

_LINALG = "kiln lacks linear-algebra decompositions and solves"
_COMPLEX = "kiln lacks complex numbers"
_STATE = "kiln lacks mutable array references (jax's state primitives)"
_COLLECTIVE = ("kiln has this collective, but the translator maps no shard_map/pmap yet "
               "(kiln.jit runs single-device programs)")
# What kiln's IR cannot express, by primitive name.
KILN_LACKS = {
    "fft": "kiln lacks FFTs",
    **{n: _LINALG for n in """cholesky cholesky_update eig eigh lu lu_pivots_to_permutation qr
       householder_product svd triangular_solve tridiagonal tridiagonal_solve schur hessenberg
       geqrf geqp3 orgqr symmetric_product""".split()},
    **{n: _COMPLEX for n in "real imag complex conj".split()},
    **{n: f"kiln lacks the special function {n}" for n in """igamma igammac igamma_grad_a
       random_gamma_grad bessel_i1 bessel_i0 polygamma zeta
       regularized_incomplete_beta""".split()},
    "reduce_xor": "kiln lacks reduce_xor",
    "rng_bit_generator": "kiln lacks rng_bit_generator (XLA's RBG/Philox generators); "
                         "threefry2x32 keys, JAX's default, work",
    "rng_uniform": "kiln lacks rng_uniform (XLA's stateful generator)",
    **{n: _STATE for n in "get swap addupdate run_state ref mutable_array freeze array_ref "
                         "ref_get ref_swap ref_addupdate empty_ref".split()},
    "ragged_dot_general": "kiln lacks ragged dots",
    **{n: "kiln has only the threefry2x32 PRNG (JAX's default)" for n in
       "threefry4x32 philox2x32 philox4x32".split()},
    **{n: "kiln lacks symbolic (shape-polymorphic) dimensions" for n in
       "dim_as_value dimension_size shape_assertion eq_to le_to lt_to".split()},
    **{n: "kiln cannot call XLA custom calls or foreign functions" for n in
       "ffi_call call_exported cudnn_fusion custom_partitioning tpu_custom_call".split()},
    **{n: _STATE for n in "new_ref free_ref accum_grad_in_ref box_get box_set new_box log_extend "
                         "log_read new_log".split()},
    "ormqr": _LINALG,
    **{n: "kiln lacks block-scaled (fp8/MX) matmuls" for n in
       "scaled_dot scaled_matmul scaled_matmul_wrapper".split()},
    **{n: "kiln lacks cuDNN's fused attention" for n in """dot_product_attention_fwd_wrapper
       dot_product_attention_bwd_wrapper dot_product_attention_fp8_fwd dot_product_attention_fp8_bwd
       dot_product_attention_fp8_fwd_wrapper dot_product_attention_fp8_bwd_wrapper""".split()},
    "core_map": "kiln lacks Pallas kernels",

    "ragged_all_to_all": "kiln lacks ragged collectives",
    "dot_product_attention_fwd": "kiln lacks cuDNN's fused attention",
    "dot_product_attention_bwd": "kiln lacks cuDNN's fused attention",
}
# What kiln has but the translator does not map yet, with why.
TRANSLATOR_LACKS = {
    **{n: _COLLECTIVE for n in """psum pmax pmin pmean all_gather all_gather_invariant
       reduce_scatter psum_scatter ppermute all_to_all axis_index pbroadcast pvary
       psum_invariant pcast shard_map xla_pmap all_gather_done all_gather_reduced
       all_gather_reduced_start all_gather_start all_to_all_done all_to_all_start pbroadcast_done
       pbroadcast_start ppermute_done ppermute_start precv psend preduced psum_done
       psum_invariant_start psum_start reduce_scatter_done reduce_scatter_start
       reduced_vary_cast_p unreduced_psum unreduced_psum_start unreduced_reduce_scatter
       unreduced_reduce_scatter_start vary_unreduced_cast_p""".split()},
    "custom_lin": "appears only inside JAX's linearize, never in a traced program",
    "check": "checkify's checks are not mapped (kiln has no error channel from a program)",
    "debug_callback": "kiln has debug_print/host_callback; the translator does not map "
                      "Python callbacks yet",
    "pure_callback": "kiln has host_callback; the translator does not map Python callbacks yet",
    "io_callback": "kiln has host_callback; the translator does not map Python callbacks yet",
    "select_and_scatter": "kiln has select_and_scatter_add only (max-pool's gradient)",
}


def _walk():
    """{name: primitive} of every Primitive in JAX's modules."""
    from jax._src import core
    for m in MODULES:
        try:
            importlib.import_module(m)
        except Exception:  # noqa: BLE001 -- JAX moves modules between versions
            pass
    prims = {}
    for obj in gc.get_objects():
        try:
            if isinstance(obj, core.Primitive):
                prims.setdefault(obj.name, obj)
        except ReferenceError:
            continue
    return prims


def coverage():
    """{name: (status, reason)}: status 'translated', 'kiln lacks' or
    'translator lacks', for every primitive JAX defines."""
    from ._jaxpr import RULES
    table = {}
    for name in sorted(_walk()):
        if name in RULES:
            table[name] = ("translated", "")
        elif name in KILN_LACKS:
            table[name] = ("kiln lacks", KILN_LACKS[name])
        else:
            table[name] = ("translator lacks", TRANSLATOR_LACKS.get(
                name, "no translation rule yet"))
    return table


def refusal(name, where):
    """The exception for a primitive with no rule."""
    if name in KILN_LACKS:
        return KilnLacks(f"{KILN_LACKS[name]}: primitive {name!r} cannot run in kiln "
                         f"(equation: {where})")
    why = TRANSLATOR_LACKS.get(name, "kiln.jit's translator has no rule for it yet")
    return TranslatorLacks(f"the translator lacks primitive {name!r}: {why} (equation: {where})")


def main():
    table = coverage()
    width = max(map(len, table))
    for status in ("translated", "kiln lacks", "translator lacks"):
        names = [n for n, (st, _) in table.items() if st == status]
        print(f"## {status} ({len(names)})")
        for n in names:
            print(f"  {n:<{width}}  {table[n][1]}".rstrip())


if __name__ == "__main__":
    main()
