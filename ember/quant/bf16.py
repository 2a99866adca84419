"""``ember.compile(model, quantize="bf16")``: bfloat16 compute on the ``vdpbf16ps`` micro-kernel.

The model is compiled under the caller's ``PassContext`` with ``ToMixedPrecision`` (dtype
``bfloat16``, config ``ToMixedPrecision.bf16_gemm``) required and Winograd off (``winograd.tile = -1``: the direct convolution on
``vdpbf16ps`` does twice the fp32 FMA rate without the Winograd transforms' extra bf16
rounding). Convolutions, Gemm and MatMul with a constant weight whose reduction length is even
(``ToMixedPrecision.bf16_gemm_eligible``) get their weights packed as bf16 in the
K-pair-interleaved layout and accumulate in float32 (an odd channel count >= 3, the RGB stem,
gets a zero channel); their epilogues (bias, ReLU, residual add) are float32 arithmetic on the
accumulators; the activations between them are stored as bf16, rounded once by the producer's
epilogue; the model's outputs stay float32.

A target without AVX512_BF16 (``-mcpu`` without ``avx512bf16``, ``-isa=avx2``/``scalar``)
compiles the float32 model and says why in ``info["quantization"]``.
"""

from __future__ import annotations

import re

from ..graph.passes import PassContext
from ..target import Target
from ..tir.schedule.rules.gemm import BF16_FEATURES
UKR_PREFIX = "ember_ukr_gemm_avx512_bf16_"


def bf16_supported(target: Target) -> bool:
    """True when ``target`` runs the ``vdpbf16ps`` micro-kernel (AVX-512 with AVX512_BF16)."""
    return target.isa == "avx512" and BF16_FEATURES <= target.features


def compile_bf16(model, target, shapes, compile_fn):
    """Compile ``model`` with bf16 compute (see the module doc) by ``compile_fn(model, target,
    shapes)`` (the driver's ``compile`` without ``quantize``); ``info["quantization"]`` is ``{"dtype": "bf16",
    "applied": bool, "bf16_kernels": kernels calling a bf16 micro-kernel, "kernels": all,
    "reason": why not applied}``."""
    tgt = Target(target)
    if not bf16_supported(tgt):
        compiled = compile_fn(model, target, shapes)
        compiled.info["quantization"] = {
            "dtype": "bf16", "applied": False, "bf16_kernels": 0,
            "reason": f"target {tgt} has no AVX512_BF16 (vdpbf16ps): compiled in float32; "
                      f"float16 and bfloat16 are storage-only there (ToMixedPrecision)"}
        return compiled
    cur = PassContext.current()
    config = {**cur.config, "ToMixedPrecision.dtype": "bfloat16",
              "ToMixedPrecision.bf16_gemm": True, "winograd.tile": -1}
    ctx = PassContext(opt_level=cur.opt_level,
                      disabled_pass=set(cur.disabled_pass) - {"ToMixedPrecision"},
                      required_pass=set(cur.required_pass) | {"ToMixedPrecision"},
                      instruments=cur.instruments, config=config)
    with ctx:
        compiled = compile_fn(model, target, shapes)
    compiled.info["quantization"] = {"dtype": "bf16", "applied": True,
                                     **bf16_kernel_counts(compiled)}
    return compiled


def bf16_kernel_counts(compiled) -> dict:
    """``{"bf16_kernels": steps whose kernel calls a bf16 micro-kernel, "kernels": steps}`` of
    a compiled model, read from its generated C source (each kernel's entry ``int32_t
    SYMBOL(...)`` follows its outlined parallel bodies; the micro-kernels are defined before
    the first kernel)."""
    src = getattr(compiled, "source", "") or ""
    plan = getattr(compiled, "plan", None)
    steps = plan.get("steps", []) if isinstance(plan, dict) else []
    calls, prev = {}, 0
    for m in re.finditer(r"^int32_t (\w+)\(.*?^}", src, re.M | re.S):
        # a call (its first argument is a parenthesized address), not a definition
        calls[m.group(1)] = re.search(rf"\b{UKR_PREFIX}\w+\(\(", src[prev:m.end()]) is not None
        prev = m.end()
    return {"bf16_kernels": sum(1 for st in steps if calls.get(st["symbol"])),
            "kernels": len(steps)}
