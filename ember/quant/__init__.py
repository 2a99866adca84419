"""Post-training quantization (``ember.quantize``): calibration observers, the QDQ rewrite of the
graph IR, and the QDQ ONNX writer (``ember quantize`` on the command line)."""

from .observers import METHODS  # noqa: F401
from .ptq import QuantLayer, calibrate, quantize, quantize_with_report, select_layers  # noqa: F401
