"""ONNX equivalents of the signal operators for ``test_op_references.py`` (imported at its end)."""

from __future__ import annotations

import numpy as np

from test_op_references import ONNX_OPS, onnx_op


@onnx_op("signal.dft", "DFT", 20)
def _dft(xs, a):
    return [xs[0], np.asarray(a["length"], np.int64), np.asarray(a["axis"], np.int64)], \
        {"inverse": a["inverse"], "onesided": a["onesided"]}


@onnx_op("signal.stft", "STFT", 17)
def _stft(xs, a):
    win = xs[1] if len(xs) > 1 else None
    return [xs[0], np.asarray(a["frame_step"], np.int64), win,
            np.asarray(a["frame_length"], np.int64)], {"onesided": a["onesided"]}


__all__ = ["ONNX_OPS"]
