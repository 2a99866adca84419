"""Frontends: model formats into the graph IR (ONNX; PyTorch programs in ``frontend.torch``)."""

from .onnx import from_onnx, load_model  # noqa: F401


def from_exported_program(ep, decompose: bool = True, input_names=None, dynamic_shapes=None):
    """``torch.export.ExportedProgram`` -> ``(IRModule, params)``; see
    ``ember.frontend.torch.from_exported_program`` (needs ``torch``)."""
    from .torch import from_exported_program as imp
    return imp(ep, decompose=decompose, input_names=input_names, dynamic_shapes=dynamic_shapes)
