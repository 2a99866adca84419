"""The pass pipeline of each target: one readable list per target.

``build_pipeline(target)`` turns the list into a ``Sequential``; each pass runs when the current
``PassContext`` enables it (its ``opt_level`` at most the context's, not disabled, or
required). A name whose module is not present (``ConvertLayout`` before its module lands) is
skipped.
"""

from __future__ import annotations

from ..ir import IRModule
from .pass_manager import PassContext, Sequential, get_pass, _PASSES

# level: 0 InferType | 1 SimplifyInference RealizeQnn SimplifyExpr FuseLayerNorm FoldExplicitPadding
# EliminateDeadCode FuseOps | 2 FoldConstant CanonicalizeOps DynamicToStatic ConvertLayout
# FoldChannelShuffle PadConvChannels ElementwiseThroughConcat FuseInvertedResidual WinogradConv
# FuseAttention | 3
# EliminateCommonSubexpr FoldScaleAxis CombineParallelConv2D CombineParallelDense | 4
# ToMixedPrecision
PIPELINES: dict[str, list[str]] = {
    "llvm": [
        "InferType",
        "DynamicToStatic",
        "SimplifyInference",
        "RealizeQnn",
        "FoldConstant",
        "SimplifyExpr",
        "FuseLayerNorm",
        "CanonicalizeOps",
        "FoldExplicitPadding",
        "EliminateCommonSubexpr",
        "FoldScaleAxis",
        "CombineParallelConv2D",
        "CombineParallelDense",
        "FuseAttention",
        "FoldConstant",
        "SimplifyExpr",
        "ConvertLayout",
        "FoldChannelShuffle",
        "PadConvChannels",
        "ElementwiseThroughConcat",
        "QnnEpilogue",
        "FuseInvertedResidual",
        "WinogradConv",
        "ToMixedPrecision",
        "FoldConstant",
        "EliminateDeadCode",
        "InferType",
        "FuseOps",
    ],
}


# GPU (webgpu): the CPU list without its CPU-layout and micro-kernel rewrites (NHWC layout,
# inverted-residual fusion, Winograd, int8 kernels: QDQ models keep their quantize/dequantize
# steps in float32) and mixed precision (WGSL kernels are float32)
PIPELINES["webgpu"] = [n for n in PIPELINES["llvm"] if n not in (
    "ConvertLayout", "PadConvChannels", "ElementwiseThroughConcat", "FoldChannelShuffle",
    "FuseInvertedResidual", "WinogradConv", "ToMixedPrecision", "RealizeQnn", "QnnEpilogue",
    "FuseAttention")]
# CUDA: the webgpu list plus ToMixedPrecision (opt-in: opt_level 4 or ``required_pass``, e.g.
# ``ember.compile(m, target="nvidia/h200", quantize="fp16")``): float16 / bfloat16 storage that
# the tensor-core rule (``rules/cuda_tensorcore.py``) computes with wmma
PIPELINES["cuda"] = [n for n in PIPELINES["llvm"] if n not in (
    "ConvertLayout", "PadConvChannels", "ElementwiseThroughConcat", "FoldChannelShuffle",
    "FuseInvertedResidual", "WinogradConv", "RealizeQnn", "QnnEpilogue", "FuseAttention")]
# both: ONNX Attention as matmul / softmax-like graph operators (its CPU kernel is built of
# micro-kernel calls): ember/graph/passes/decompose_attention.py
for _kind in ("webgpu", "cuda"):
    PIPELINES[_kind].insert(PIPELINES[_kind].index("SimplifyInference"), "DecomposeAttention")
# both: dense weights over one storage-buffer binding split along the output features, after
# the last FoldConstant (weights are constants, CombineParallelDense has run) and before
# FuseOps: ember/graph/passes/split_dense.py (budget: the target's
# max_storage_buffer_binding_size or the SplitDense.max_weight_bytes config)
for _kind in ("webgpu", "cuda"):
    PIPELINES[_kind].insert(PIPELINES[_kind].index("EliminateDeadCode"), "SplitDense")


def pipeline_names(target="llvm") -> list[str]:
    """The pass names of ``target``'s pipeline (its kind: ``llvm`` for the CPU)."""
    kind = getattr(target, "kind", None) or str(target).split()[0]
    if kind not in PIPELINES:
        kind = "llvm"
    return list(PIPELINES[kind])


def build_pipeline(target="llvm") -> Sequential:
    """A ``Sequential`` of ``target``'s pipeline (missing optional passes left out)."""
    from . import _load_all
    _load_all()
    return Sequential([get_pass(n) for n in pipeline_names(target) if n in _PASSES],
                      name="pipeline")


def optimize(mod: IRModule, target="llvm", params=None,
             consume: bool = False) -> tuple[IRModule, dict]:
    """Run ``target``'s pipeline on ``mod`` under the current ``PassContext`` with ``params``
    bound as constants; large constants are lifted back out. ``consume``: empty the ``params``
    dict once they are bound (the caller hands them over), so a weight a pass replaces is
    freed.

    Returns:
        ``(optimized module, params)`` ready for lowering.
    """
    from .bind_params import bind_params, lift_constants
    from .winograd import algorithm_scope
    mod = bind_params(mod, params)
    if consume and params is not None:
        params.clear()
    with algorithm_scope(None, str(target)):  # what a recorded algorithm choice is keyed by
        mod = build_pipeline(target)(mod)
    mod, lifted = lift_constants(mod)
    return mod, lifted


__all__ = ["PIPELINES", "pipeline_names", "build_pipeline", "optimize", "PassContext"]
