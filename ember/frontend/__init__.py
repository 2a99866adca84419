"""Frontends: model formats into the graph IR (ONNX now)."""

from .onnx import from_onnx, load_model  # noqa: F401
