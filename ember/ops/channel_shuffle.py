"""A grouped 1x1 convolution that reads its input through a channel shuffle (ShuffleNet), as one
operator: the shuffle costs no copy, it is the convolution's input indexing.

``nn.shuffled_group_conv(x, w[, b], group=gc, shuffle=gs)``, channels last: ``x`` (N, H, W, C)
viewed per pixel as a (gs, C / gs) matrix, ``w`` (M, Q, gs), ``b`` (M,). Output channel ``m``
of group ``G = m // (M / gc)`` reads the ``gs x Q`` block of that matrix starting at column
``j0(G) = G * Cg // gs`` (``Cg = C / gc``):

    y[..., m] = b[m] + sum_{q < Q, r < gs} x[..., r * (C / gs) + j0(G) + q] * w[m, q, r]

Where ``xs = channel_shuffle(x, gs)`` (``xs[..., j * gs + i] = x[..., i * (C / gs) + j]``),
the grouped 1x1 convolution of ``xs`` with weight ``W (M, Cg)`` is this operator with
``w[m, q, r] = W[m, (j0 + q) * gs + r - G * Cg]`` where that column is in group ``G``'s slice
and 0 elsewhere (``Q = Cg / gs`` and no zeros when ``gs`` divides ``Cg``): group ``G``'s shuffled
channels ``G * Cg + k = j * gs + i`` are ``x``'s channels ``i * (C / gs) + j``. The input channel
is affine in the two reduction indices ``(r, q)``, so the kernel is the packed-GEMM rule's
grouped GEMM with a two-level reduction (``r`` strided by ``C / gs``, ``q`` contiguous) -- the
shape of a KxK convolution's taps x channels -- and the weights pack as any convolution's.
``FoldChannelShuffle`` (graph pass) produces it; ``shuffled_weight`` builds ``w``.
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
                                 f"(M, Q, shuffle); got {xshape} and {wshape}")
    C, (M, Q, s) = xshape[3], wshape
    if gc < 1 or gs < 1 or C % gc or M % gc or C % gs or s != gs or Q < 1 \
            or (gc - 1) * (C // gc) // gs + Q > C // gs:
        raise ShapeMismatchError(
            f"nn.shuffled_group_conv: group={gc}, shuffle={gs} do not fit x {xshape} and w "
            f"{wshape} (w must be (M, Q, shuffle), each group's block inside the C / shuffle "
            f"columns)")
    return gc, gs, C, M, Q


def shuffled_blocks(C: int, gc: int, gs: int) -> tuple[list, int]:
    """``(j0 per group, Q)``: where each group's ``gs x Q`` block of the (gs, C / gs) view
    starts, and the block width that covers every group's shuffled channels."""
    Cg = C // gc
    j0 = [G * Cg // gs for G in range(gc)]
    return j0, max(-(-((G + 1) * Cg) // gs) - j0[G] for G in range(gc))


def shuffled_weight(w: np.ndarray, C: int, gc: int, gs: int) -> np.ndarray:
    """``w`` (M, Q, gs) of ``nn.shuffled_group_conv`` equal to the grouped 1x1 convolution
    with weight ``w`` (M, C / gc[, 1, 1]) of ``channel_shuffle(x, gs)`` (see the module doc)."""
    M, Cg = w.shape[0], w.shape[1]
    w2 = w.reshape(M, Cg)
    Mg = M // gc
    j0, Q = shuffled_blocks(C, gc, gs)
    out = np.zeros((M, Q, gs), w.dtype)
    for m in range(M):
        G = m // Mg
        c = G * Cg + np.arange(Cg)
        out[m, c // gs - j0[G], c % gs] = w2[m]
    return out


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
    gc, gs, C, M, Q = _geom(x.shape, w.shape, attrs)
    Cg, Mg = C // gc, M // gc
    xm = x.astype(np.float64).reshape(*x.shape[:3], gs, C // gs)
    y = np.empty((*x.shape[:3], M), np.float64)
    for G in range(gc):
        j0 = G * Cg // gs
        blk = xm[..., j0:j0 + Q].swapaxes(-1, -2)  # (.., Q, gs)
        wg = w[G * Mg:(G + 1) * Mg].astype(np.float64)  # (Mg, Q, gs)
        y[..., G * Mg:(G + 1) * Mg] = np.einsum("...qr,mqr->...m", blk, wg)
    if len(xs) > 2:
        y += xs[2]
    return [y.astype(x.dtype)]


def _compute(inputs, attrs, out_types):
    x, w = inputs[0], inputs[1]
    gc, gs, C, M, Q = _geom(x.shape, w.shape, attrs)
    Mg, Cg = M // gc, C // gc
    rr = te.reduce_axis(gs, "rr")
    rq = te.reduce_axis(Q, "rq")
    shape = out_types[0].shape

    def f(n, h, ww, m):
        j0 = (m // Mg) * (Cg // gs) if Cg % gs == 0 else (m // Mg) * Cg // gs
        c = rr.var * (C // gs) + j0 + rq.var
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
                "(M, Q, shuffle); see ember.ops.channel_shuffle")

__all__ = ["shuffle_channels", "shuffled_blocks", "shuffled_weight"]
