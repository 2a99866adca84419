"""ember: a deep-learning compiler written in Python.

ONNX model -> graph IR -> loop IR (one PrimFunc per operator) -> C -> shared library -> executor.

    import ember
    model = ember.compile("model.onnx", target="llvm")
    outputs = model.run({"input": x})
    model.save("model.ember"); model = ember.load("model.ember")
"""

from . import errors  # noqa: F401
from .driver import build, compile  # noqa: F401,A004
from .graph.passes import PassContext  # noqa: F401
from .ops import register_op  # noqa: F401
from .ops import register_shape_func  # noqa: F401  (symbolic shape functions, docs/dynamic_shapes.md)
from .runtime.artifact import load_artifact as load  # noqa: F401
from .target import Target  # noqa: F401
from . import frontend  # noqa: F401,E402

__version__ = "0.1.0"

from .quant import quantize  # noqa: F401,E402  (post-training int8 quantization)


def __getattr__(name):
    # ember.npu (the NPU target, docs/npu.md) is imported on first use only.
    if name == "npu":
        import importlib
        return importlib.import_module(".npu", __name__)
    raise AttributeError(f"module 'ember' has no attribute {name!r}")
