"""The int8 convolution kernel (``qnn.conv2d``, ``ember.ops.qnn_conv``) rebuilt for the target:
the operator's compute builds it with the portable scalar ``qconv`` micro-kernel; this rule
swaps in the AVX-512 VNNI one (``vpdpbusd``) when the target has AVX-512 F/BW/VL and VNNI (for
the channels-last ``qgemm`` kernels also the AVX2 one, ``vpmaddwd``, on AVX2), and keeps the
scalar kernel otherwise (``-isa=scalar``, AVX2-only CPUs); both give bit-identical
results (``ember.codegen.microkernel_qconv``)."""

from __future__ import annotations

from ....errors import ScheduleError
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


def _geometry(func: PrimFunc):
    """``(n, in_dtype, QConvGeometry)`` of a ``qnn.conv2d`` kernel, or ``None``."""
    geo = func.attrs.get("qconv")
    if geo is None:
        return None
    from ....ops.qnn_conv import QConvGeometry
    g = dict(geo)
    n, in_dtype = g.pop("n"), g.pop("in_dtype")
    return n, in_dtype, QConvGeometry(**g)


def qnn_knobs(func: PrimFunc, target: Target) -> dict | None:
    """The tuning space of ``qnn_rule`` (``RULE_KNOBS``): on AVX-512 VNNI, the channels-last
    kernel's register block ``tile`` ``[mr, nv]`` and pixel tile ``pixels``
    (``ember.ops.qnn_conv.qgemm_knobs``, the default first); ``None`` elsewhere (the AVX2
    and scalar kernels have one block shape)."""
    found = _geometry(func)
    if found is None or qgemm_isa(target) != "avx512vnni":
        return None
    from ....ops.qnn_conv import qgemm_knobs
    return qgemm_knobs(found[2])


def qnn_rule(func: PrimFunc, target: Target, cfg: dict | None = None) -> Schedule | None:
    """The ``qnn.conv2d`` kernel for ``target``'s ISA; ``None`` for other kernels. ``cfg``
    overrides the channels-last kernel's register block and pixel tile (``qnn_knobs``).

    Raises:
        ScheduleError: a ``cfg`` out of range, or for the NCHW kernel."""
    found = _geometry(func)
    if found is None:
        return None
    from ....ops.qnn_conv import qconv_body, retile
    n, in_dtype, g = found
    blocked = g.w_layout == "blocked"
    isa = qgemm_isa(target) if blocked else qconv_isa(target)
    if cfg:
        if not blocked:
            raise ScheduleError("qnn_rule: the NCHW qconv kernel has no tuning knobs")
        try:
            g = retile(g, cfg)
        except ValueError as e:
            raise ScheduleError(f"qnn_rule: {e}") from None
    body = qconv_body(n, g, in_dtype, list(func.params), isa)
    return Schedule(PrimFunc(func.name, list(func.params), body, dict(func.attrs)))
