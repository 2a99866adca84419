"""The PyTorch frontend: ``torch.export`` programs and ``torch.compile`` graphs into graph IR.

- ``from_exported_program(ep)``: an ``ExportedProgram`` (decomposed to core ATen) to
  ``(IRModule, params)``, one converter per ATen overload (``registry.py``, ``convert_*.py``).
- ``compile_module(module, example_inputs)``: what ``ember.compile(module, example_inputs=...)``
  calls (``module.py``; TorchScript through torch's TorchScript ONNX exporter).
- ``ember_backend``: the ``torch.compile(backend="ember")`` backend (``dynamo.py``).
- ``register_op("ns::op", compute=..., shape_func=..., reference=...)``: carry a
  ``torch.library.custom_op`` to an ember operator (``custom.py``); ``register_converter`` maps
  any other overload.

This package imports ``torch`` lazily where it can; importing it without torch installed
fails only when a function that needs torch is called.
"""

from . import convert_math, convert_nn, convert_tensor  # noqa: F401  (register converters)
from .custom import register_op, unregister_op  # noqa: F401
from .importer import from_exported_program  # noqa: F401
from .module import compile_module  # noqa: F401
from .registry import register_converter, supported_overloads  # noqa: F401


def ember_backend(gm, example_inputs, **kwargs):
    """``torch.compile(model, backend="ember")``: see ``ember.frontend.torch.dynamo``."""
    from .dynamo import ember_backend as backend
    return backend(gm, example_inputs, **kwargs)
