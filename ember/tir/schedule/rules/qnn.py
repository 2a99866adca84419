"""The int8 convolution kernel (``qnn.conv2d``, ``ember.ops.qnn_conv``) rebuilt for the target:
the operator's compute builds it with the portable scalar ``qconv`` micro-kernel; this rule
swaps in the AVX-512 VNNI one (``vpdpbusd``) when the target has AVX-512 F/BW/VL and VNNI (for
the channels-last ``qgemm`` kernels also the AVX2 one, ``vpmaddwd``, on AVX2), and keeps the
scalar kernel otherwise (``-isa=scalar``, AVX2-only CPUs); both give bit-identical
results (``ember.codegen.microkernel_qconv``)."""

from __future__ import annotations

from ....target import Target
from ...stmt import PrimFunc
from ..schedule import Schedule

VNNI_FEATURES = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512vnni"})


def qconv_isa(target: Target) -> str:
    """The ``qconv`` micro-kernel ISA for ``target``: ``avx512vnni`` or ``scalar``."""
    if target.isa == "avx512" and VNNI_FEATURES <= target.features:
        return "avx512vnni"
    return "scalar"


def qgemm_isa(target: Target) -> str:
    """The channels-last ``qgemm`` micro-kernel ISA for ``target``: ``avx512vnni``, ``avx2``
    (``vpmaddwd``, AVX2 or AVX-512 without VNNI) or ``scalar``."""
    if target.isa == "avx512" and VNNI_FEATURES <= target.features:
        return "avx512vnni"
    return "avx2" if target.isa in ("avx512", "avx2") else "scalar"


def qnn_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """The ``qnn.conv2d`` kernel for ``target``'s ISA; ``None`` for other kernels."""
    geo = func.attrs.get("qconv")
    if geo is None:
        return None
    from ....ops.qnn_conv import QConvGeometry, qconv_body
    g = dict(geo)
    n, in_dtype = g.pop("n"), g.pop("in_dtype")
    isa = qgemm_isa(target) if g.get("w_layout") == "blocked" else qconv_isa(target)
    body = qconv_body(n, QConvGeometry(**g), in_dtype, list(func.params), isa)
    return Schedule(PrimFunc(func.name, list(func.params), body, dict(func.attrs)))
