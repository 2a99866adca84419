"""Converters for ONNX signal operators: DFT (17, 20), STFT (17), the window generators
HannWindow, HammingWindow, BlackmanWindow (17) and MelWeightMatrix (17).

DFT and STFT compile to the ``signal.dft`` / ``signal.stft`` kernels. Their lengths, axis and
frame step are shape-like (compile-time) values. A window or a mel filter bank depends only on
scalar inputs, so it is computed once at compile time (a constant of the compiled graph).
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from ...ops.registry import normalize_axis
from ..dtypes import onnx_dtype
from . import converter


def _scalar(ctx, v, what):
    c = ctx.require_constant(v, what).reshape(-1)
    if c.size != 1:
        raise ShapeMismatchError(f"{what} must be a scalar, got {c.size} values")
    return c[0]


@converter("DFT", since=17)
def dft(ctx, node):
    """ONNX DFT-17/20: ``signal.dft`` of x ``(..., n, 1 or 2)`` (real or complex as the last dim)
    along ``axis`` (attribute before 20, input 2 from 20, default -2), with ``dft_length``,
    ``inverse`` and ``onesided``.

    Raises:
        ShapeMismatchError: ``axis`` naming the last (real/imaginary) dim, or a non-scalar
            length/axis.
        UnsupportedOpError: ``onesided=1`` on a complex input.
        RuntimeValueError: dft_length or axis only known at run time."""
    x = node.input(0)
    if node.opset >= 20:
        axis = int(_scalar(ctx, node.input(2), "input 2 (axis)")) if node.input(2) is not None \
            else -2
    else:
        axis = int(node.attr("axis", 1))
    rank = x.type.ndim
    if not -rank <= axis < rank - 1:
        raise ShapeMismatchError(f"DFT axis {axis} must name a signal dim of the input "
                                 f"{x.type.shape} (not its last, real/imaginary dim)")
    axis = normalize_axis(axis, rank)
    inverse, onesided = int(node.attr("inverse", 0)), int(node.attr("onesided", 0))
    if node.input(1) is not None and ctx.constant_value(node.input(1)) is not None and \
            ctx.constant_value(node.input(1)).size == 0:
        length = None
    else:
        length = int(_scalar(ctx, node.input(1), "input 1 (dft_length)")) \
            if node.input(1) is not None else None
    if length is None:
        n = x.type.shape[axis]
        length = 2 * (n - 1) if inverse and onesided else n
    if onesided and not inverse and x.type.shape[-1] == 2:
        raise UnsupportedOpError("DFT onesided=1 needs a real input (last dim 1)")
    return [ctx.call("signal.dft", [x], {"axis": axis, "length": length, "inverse": inverse,
                                         "onesided": onesided})]


@converter("STFT", since=17)
def stft(ctx, node):
    """ONNX STFT-17: ``signal.stft`` of ``(batch, length, 1 or 2)`` with constant ``frame_step``,
    optional window and ``frame_length``, and ``onesided``.

    Raises:
        ShapeMismatchError: neither a window nor a frame_length, or a non-scalar step/length.
        RuntimeValueError: frame_step or frame_length only known at run time."""
    x, win = node.input(0), node.input(2)
    step = int(_scalar(ctx, node.input(1), "input 1 (frame_step)"))
    if node.input(3) is not None:
        flen = int(_scalar(ctx, node.input(3), "input 3 (frame_length)"))
    elif win is not None:
        flen = win.type.shape[0]
    else:
        raise ShapeMismatchError("STFT needs a window or a frame_length")
    args = [x] + ([win] if win is not None else [])
    return [ctx.call("signal.stft", args, {"frame_step": step, "frame_length": flen,
                                           "onesided": int(node.attr("onesided", 1))})]


def _window(kind):
    def convert(ctx, node):
        size = int(_scalar(ctx, node.input(0), "input 0 (size)"))
        if size < 0:
            raise ShapeMismatchError(f"{kind} window size {size} must be non-negative")
        n = np.arange(size, dtype=np.float64)
        N = size if node.attr("periodic", 1) else size - 1
        with np.errstate(all="ignore"):
            if kind == "hann":
                w = np.sin(np.pi * n / N) ** 2
            elif kind == "hamming":
                a = 25.0 / 46.0
                w = a - (1 - a) * np.cos(2 * np.pi * n / N)
            else:
                w = 0.42 - 0.5 * np.cos(2 * np.pi * n / N) + 0.08 * np.cos(4 * np.pi * n / N)
        if N == 0:
            w = np.ones(size)  # a one-point symmetric window
        dt = onnx_dtype(node.attr("output_datatype", 1), f"{node.op_type} output_datatype: ")
        return [ctx.const(w.astype(dt))]
    return convert


converter("HannWindow", since=17)(_window("hann"))
converter("HammingWindow", since=17)(_window("hamming"))
converter("BlackmanWindow", since=17)(_window("blackman"))


def mel_weight_matrix(num_mel_bins: int, dft_length: int, sample_rate: int, lower_hz: float,
                      upper_hz: float) -> np.ndarray:
    """(dft_length // 2 + 1, num_mel_bins) triangular mel filter bank (ONNX MelWeightMatrix-17:
    ``num_mel_bins + 2`` points evenly spaced in mel between the edges, mapped to FFT bins
    ``floor((dft_length + 1) * hz / sample_rate)``)."""
    def to_mel(hz):
        return 2595.0 * np.log1p(hz / 700.0) / np.log(10.0)
    lo, hi = to_mel(lower_hz), to_mel(upper_hz)
    pts = np.arange(num_mel_bins + 2) * ((hi - lo) / (num_mel_bins + 2)) + lo
    hz = 700.0 * np.expm1(pts / 2595.0 * np.log(10.0))
    bins = np.floor_divide((dft_length + 1) * hz, sample_rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, num_mel_bins))
    for m in range(num_mel_bins):
        left, center, right = bins[m], bins[m + 1], bins[m + 2]
        if center == left:
            out[center, m] = 1.0
        else:
            j = np.arange(left, center + 1)
            out[j, m] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, m] = (right - j) / (right - center)
    return out


@converter("MelWeightMatrix", since=17)
def mel(ctx, node):
    """ONNX MelWeightMatrix-17: the constant ``(dft_length // 2 + 1, num_mel_bins)`` matrix of
    triangular mel filters between ``lower_edge_hertz`` and ``upper_edge_hertz`` (Hz) at
    ``sample_rate`` (Hz), in ``output_datatype``.

    Raises:
        ShapeMismatchError: a non-scalar input.
        RuntimeValueError: an input only known at run time."""
    vals = [_scalar(ctx, node.input(k), f"input {k} ({w})") for k, w in enumerate(
        ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"))]
    w = mel_weight_matrix(int(vals[0]), int(vals[1]), int(vals[2]), float(vals[3]),
                          float(vals[4]))
    dt = onnx_dtype(node.attr("output_datatype", 1), "MelWeightMatrix output_datatype: ")
    return [ctx.const(w.astype(dt))]
