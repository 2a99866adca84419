"""Graph passes: the pass infrastructure, the standard passes and each target's pipeline.

Every pass lives in its own module and registers itself by name; ``get_pass(name)`` gives a
fresh instance, ``PIPELINES`` (``pipeline.py``) lists each target's passes in order.

    from ember.graph.passes import PassContext, Sequential, FoldConstant, FuseOps
    with PassContext(opt_level=3):
        mod = Sequential([FoldConstant(), FuseOps()])(mod)
"""

import importlib

from .pass_manager import (CONFIG_KEYS, ModulePass, Pass, PassContext, PassInfo,  # noqa: F401
                           Sequential, function_pass, get_pass, list_passes, module_pass,
                           register_config)
from .instrument import DumpIR, PassInstrument, PassTimingInstrument, PrintIR  # noqa: F401
from .bind_params import bind_params, lift_constants  # noqa: F401
from .infer_type import InferType  # noqa: F401
from .fold_constant import FoldConstant  # noqa: F401
from .eliminate_dead_code import EliminateDeadCode  # noqa: F401
from .eliminate_common_subexpr import EliminateCommonSubexpr  # noqa: F401
from .simplify_inference import SimplifyInference  # noqa: F401
from .simplify_expr import SimplifyExpr  # noqa: F401
from .canonicalize_ops import CanonicalizeOps  # noqa: F401
from .fold_explicit_padding import FoldExplicitPadding  # noqa: F401
from .fuse_ops import FuseOps  # noqa: F401

# passes that may be absent (built on other branches) or were added later: loaded on demand
_OPTIONAL = ["fold_scale_axis", "combine_parallel_conv2d", "combine_parallel_dense",
             "dynamic_to_static", "to_mixed_precision", "convert_layout", "fuse_layer_norm",
             "winograd", "fuse_inverted_residual", "realize_qnn", "decompose_attention",
             "qnn_epilogue", "split_dense", "fuse_attention", "pad_conv_channels",
             "elementwise_through_concat", "fold_channel_shuffle"]
_loaded = False


def _load_all():
    """Import every pass module present, so each registers its pass."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for m in _OPTIONAL:
        try:
            importlib.import_module(f"{__name__}.{m}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{m}":
                raise


from .pipeline import PIPELINES, build_pipeline, optimize, pipeline_names  # noqa: F401,E402


def __getattr__(name):
    """Pass factories of the optional modules (``from ember.graph.passes import
    FoldScaleAxis``) once their module is present."""
    from .pass_manager import _PASSES
    _load_all()
    if name in _PASSES:
        return _PASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
