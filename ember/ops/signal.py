"""Signal operators: discrete Fourier transforms (ONNX DFT) and short-time Fourier transforms
(ONNX STFT).

Signals are real (last dim 1) or complex (last dim 2: real, imaginary), as in ONNX. The kernels
evaluate the transform sums directly (``O(N^2)`` per axis, which the ONNX operators' sizes
allow): output bin ``k`` of a length-``N`` transform is ``sum_n x[n] * exp(-+2 pi i k n / N)``,
with the phase ``2 pi ((k n) mod N) / N`` reduced exactly in integers and evaluated in double
precision.
"""

from __future__ import annotations

import math

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..tir.expr import is_float
from .registry import REQUIRED, OpPattern, normalize_axis, register_op


ACC = "float64"  # transform sums accumulate in double precision


# dft -------------------------------------------------------------------------------------------

def _dft_geom(xshape, attrs):
    ax = normalize_axis(attrs["axis"], len(xshape) - 1)
    N = int(attrs["length"])
    inverse, onesided = bool(attrs["inverse"]), bool(attrs["onesided"])
    if inverse and onesided:  # half spectrum in, real signal out
        return ax, N, N, min(xshape[ax], N // 2 + 1), 1
    bins = N // 2 + 1 if onesided else N
    return ax, N, bins, min(xshape[ax], N), 2


def _dft_type(types, attrs):
    x = types[0]
    where = "signal.dft: "
    if x.ndim < 2 or x.shape[-1] not in (1, 2) or not is_float(x.dtype):
        raise ShapeMismatchError(f"{where}input {x.shape} {x.dtype} must be floating point with "
                                 f"a last dim of 1 (real) or 2 (complex)")
    if int(attrs["length"]) < 1:
        raise ShapeMismatchError(f"{where}dft length {attrs['length']} must be positive")
    ax, N, bins, _, last = _dft_geom(x.shape, attrs)
    shape = list(x.shape)
    shape[ax] = bins
    shape[-1] = last
    return [TensorType(tuple(shape), x.dtype)]


def _dft_ref(xs, attrs):
    """numpy's FFTs (pocketfft), an independent algorithm."""
    x = xs[0]
    ax, N, bins, _, last = _dft_geom(x.shape, attrs)
    z = x[..., 0].astype(np.float64)
    if x.shape[-1] == 2:
        z = z + 1j * x[..., 1].astype(np.float64)
    if attrs["inverse"] and attrs["onesided"]:
        y = np.fft.irfft(z, n=N, axis=ax)[..., None]
        return [y.astype(x.dtype)]
    y = np.fft.ifft(z, n=N, axis=ax) if attrs["inverse"] else np.fft.fft(z, n=N, axis=ax)
    y = np.take(y, np.arange(bins), axis=ax)
    return [np.stack([y.real, y.imag], -1).astype(x.dtype)]


def _phase(k, n, N):
    """cos and sin of 2 pi k n / N (k, n int64 expressions)."""
    m = te.truncmod(k * n, N)
    th = te.cast("float64", m) * (2.0 * math.pi / N)
    return te.cos(th), te.sin(th)


def _dft_compute(inputs, attrs, out_types):
    x = inputs[0]
    ax, N, bins, n_sum, last = _dft_geom(x.shape, attrs)
    inverse, onesided = bool(attrs["inverse"]), bool(attrs["onesided"])
    cplx = x.shape[-1] == 2
    acc = ACC
    rn = te.reduce_axis(n_sum, "dft")

    def at(i, n, part):
        return tuple(n if a == ax else (part if a == len(i) - 1 else v)
                     for a, v in enumerate(i))

    def f(*i):
        k, part = i[ax], i[-1]
        n = rn.var
        re = te.cast(acc, x[at(i, n, 0)])
        im = te.cast(acc, x[at(i, n, 1)]) if cplx else None
        c, s = _phase(k, n, N)
        if inverse and onesided:  # x[k] = 1/N sum_n w_n (Re X_n cos - Im X_n sin)
            w = te.select(te.eq(n, 0) | te.eq(n * 2, N), te.const(1.0, acc),
                          te.const(2.0, acc))
            v = re * c - im * s if cplx else re * c
            return te.sum(w * v, axis=rn)
        sign = 1.0 if inverse else -1.0
        # (re + i im)(c + i sign s)
        real = re * c - im * s * sign if cplx else re * c
        imag = re * s * sign + im * c if cplx else re * s * sign
        return te.sum(te.select(te.eq(part, 0), real, imag), axis=rn)
    y = te.compute(out_types[0].shape, f, name="dft_acc")
    scale = 1.0 / N if inverse else 1.0
    return [te.compute(y.shape, lambda *i: te.cast(x.dtype, y[i] * scale), name="dft")]


register_op("signal.dft", infer_type=_dft_type, reference=_dft_ref, compute=_dft_compute,
            pattern=OpPattern.OPAQUE,
            attrs={"axis": REQUIRED, "length": REQUIRED, "inverse": 0, "onesided": 0},
            doc="discrete Fourier transform of length `length` along `axis` (input zero-padded "
                "or truncated), real or complex input (last dim 1 or 2); onesided keeps bins "
                "[0, N/2]; inverse divides by N, inverse+onesided is the real inverse of a half "
                "spectrum (ONNX DFT-20)")


# stft ------------------------------------------------------------------------------------------

def _stft_geom(xshape, attrs):
    step, flen = int(attrs["frame_step"]), int(attrs["frame_length"])
    frames = 1 + (xshape[1] - flen) // step
    bins = flen // 2 + 1 if attrs["onesided"] else flen
    return step, flen, frames, bins


def _stft_type(types, attrs):
    x = types[0]
    where = "signal.stft: "
    if x.ndim != 3 or x.shape[-1] not in (1, 2) or not is_float(x.dtype):
        raise ShapeMismatchError(f"{where}signal {x.shape} {x.dtype} must be floating point "
                                 f"(batch, length, 1 or 2)")
    step, flen, frames, bins = _stft_geom(x.shape, attrs)
    if step < 1 or flen < 1 or flen > x.shape[1]:
        raise ShapeMismatchError(f"{where}frame_step {step} and frame_length {flen} must be "
                                 f"positive and the frame no longer than the signal "
                                 f"({x.shape[1]})")
    if len(types) > 1 and types[1].shape != (flen,):
        raise ShapeMismatchError(f"{where}window {types[1].shape} must be ({flen},)")
    if attrs["onesided"] and x.shape[-1] == 2:
        raise ShapeMismatchError(f"{where}onesided needs a real signal")
    return [TensorType((x.shape[0], frames, bins, 2), x.dtype)]


def _stft_ref(xs, attrs):
    x = xs[0]
    step, flen, frames, bins = _stft_geom(x.shape, attrs)
    z = x[..., 0].astype(np.float64)
    if x.shape[-1] == 2:
        z = z + 1j * x[..., 1].astype(np.float64)
    idx = np.arange(frames)[:, None] * step + np.arange(flen)
    fr = z[:, idx]  # (batch, frames, flen)
    if len(xs) > 1:
        fr = fr * xs[1].astype(np.float64)
    y = np.fft.fft(fr, axis=-1)[..., :bins]
    return [np.stack([y.real, y.imag], -1).astype(x.dtype)]


def _stft_compute(inputs, attrs, out_types):
    x = inputs[0]
    win = inputs[1] if len(inputs) > 1 else None
    step, flen, frames, bins = _stft_geom(x.shape, attrs)
    cplx = x.shape[-1] == 2
    acc = ACC
    rn = te.reduce_axis(flen, "stft")

    def f(b, fr, k, part):
        n = rn.var
        pos = fr * step + n
        re = te.cast(acc, x[b, pos, 0])
        im = te.cast(acc, x[b, pos, 1]) if cplx else None
        if win is not None:
            w = te.cast(acc, win[n])
            re = re * w
            im = im * w if cplx else None
        c, s = _phase(k, n, flen)
        real = re * c + im * s if cplx else re * c
        imag = im * c - re * s if cplx else re * s * -1.0
        return te.sum(te.select(te.eq(part, 0), real, imag), axis=rn)
    y = te.compute(out_types[0].shape, f, name="stft_acc")
    return [te.compute(y.shape, lambda *i: te.cast(x.dtype, y[i]), name="stft")]


register_op("signal.stft", infer_type=_stft_type, reference=_stft_ref, compute=_stft_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(1, 2),
            attrs={"frame_step": REQUIRED, "frame_length": REQUIRED, "onesided": 1},
            doc="short-time Fourier transform of signal (batch, length, 1|2) with an optional "
                "window (frame_length,): (batch, frames, bins, 2) (ONNX STFT-17)")
