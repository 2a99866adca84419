"""A grouped 1x1 convolution that reads its input through a channel shuffle (ShuffleNet), as one
operator: the shuffle costs no copy, it is the convolution's input indexing.

``nn.shuffled_group_conv(x, w[, b], group=gc, shuffle=gs)``, channels last: ``x`` (N, H, W, C),
``w`` (M, Cq, gs) with ``Cg = C / gc`` input channels per group and ``Cq = Cg / gs``, ``b``
(M,). It computes

    xs = channel_shuffle(x, gs)        xs[..., j * gs + i] = x[..., i * (C / gs) + j]
    y[..., m] = b[m] + sum_k xs[..., G * Cg + k] * w[m, k // gs, k % gs],   G = m // (M / gc)

i.e. an ordinary grouped 1x1 convolution of ``xs`` whose weight ``(M, Cg, 1, 1)`` is ``w``
reshaped. When ``gs`` divides ``Cg``, the input channel of reduction index ``k = q * gs + r``
is ``r * (C / gs) + G * Cq + q``: affine in the two reduction indices ``(r, q)``, so the
kernel is the packed-GEMM rule's grouped GEMM with a two-level reduction (``r`` strided by
``C / gs``, ``q`` contiguous) -- the shape of a KxK convolution's taps x channels -- and the
weights pack as any convolution's. ``FoldChannelShuffle`` (graph pass) produces it.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from .registry import OpPattern, register_op


def _geom(xshape, wshape, attrs):
    gc, gs = int(attrs["group"]), int(attrs["shuffle"])
    if len(xshape) != 4 or len(wshape) != 3:
        raise ShapeMismatchError(f"nn.shuffled_group_conv: x must be (N, H, W, C) and w "
                                 f"(M, Cq, shuffle); got {xshape} and {wshape}")
    C, (M, Cq, s) = xshape[3], wshape
    if gc < 1 or gs < 1 or C % gc or M % gc or (C // gc) % gs or s != gs \
            or Cq != C // gc // gs or C % gs:
        raise ShapeMismatchError(
            f"nn.shuffled_group_conv: group={gc}, shuffle={gs} do not fit x {xshape} and w "
            f"{wshape} (w must be (M, C / group / shuffle, shuffle))")
    return gc, gs, C, M, Cq


def _type(types, attrs):
    x, w = types[0], types[1]
    _, _, _, M, _ = _geom(x.shape, w.shape, attrs)
    if len(types) > 2 and tuple(types[2].shape) != (M,):
        raise ShapeMismatchError(f"nn.shuffled_group_conv: bias {types[2].shape} is not ({M},)")
    return [TensorType((*x.shape[:3], M), x.dtype)]


def shuffle_channels(x: np.ndarray, gs: int) -> np.ndarray:
    """The channel shuffle of a channels-last ``x``: ``out[..., j * gs + i] = x[..., i * (C /
    gs) + j]`` (ONNX's reshape (g, C/g) -> transpose -> reshape, on the last axis)."""
    C = x.shape[-1]
    return x.reshape(*x.shape[:-1], gs, C // gs).swapaxes(-1, -2).reshape(x.shape)


def _reference(xs, attrs):
    x, w = xs[0], xs[1]
    gc, gs, C, M, Cq = _geom(x.shape, w.shape, attrs)
    xsh = shuffle_channels(x.astype(np.float64), gs)
    Cg, Mg = C // gc, M // gc
    w2 = w.reshape(M, Cg).astype(np.float64)
    y = np.empty((*x.shape[:3], M), np.float64)
    for G in range(gc):
        y[..., G * Mg:(G + 1) * Mg] = xsh[..., G * Cg:(G + 1) * Cg] @ w2[G * Mg:(G + 1) * Mg].T
    if len(xs) > 2:
        y += xs[2]
    return [y.astype(x.dtype)]


def _compute(inputs, attrs, out_types):
    x, w = inputs[0], inputs[1]
    gc, gs, C, M, Cq = _geom(x.shape, w.shape, attrs)
    Mg = M // gc
    rr = te.reduce_axis(gs, "rr")
    rq = te.reduce_axis(Cq, "rq")
    shape = out_types[0].shape

    def f(n, h, ww, m):
        c = rr.var * (C // gs) + (m // Mg) * Cq + rq.var
        return te.sum(x[(n, h, ww, c)] * w[(m, rq.var, rr.var)], axis=[rr, rq])
    y = te.compute(shape, f, name="conv")
    if len(inputs) == 3:
        b = inputs[2]
        y = te.compute(shape, lambda n, h, ww, m: y[(n, h, ww, m)] + b[m], name="conv_bias")
    return [y]


register_op("nn.shuffled_group_conv", infer_type=_type, reference=_reference,
            compute=_compute, pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(2, 3),
            attrs={"group": 1, "shuffle": 1},
            doc="grouped 1x1 convolution (channels last) of the channel shuffle of x: w "
                "(M, C/group/shuffle, shuffle); see ember.ops.channel_shuffle")

__all__ = ["shuffle_channels"]
