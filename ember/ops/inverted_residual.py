"""``nn.inverted_residual``: MobileNetV2's block (Sandler et al., "MobileNetV2: Inverted
Residuals and Linear Bottlenecks", CVPR 2018, arXiv:1801.04381) as one operator, channels-last:

    e = act_expand(x @ w_expand + b_expand)          # 1x1 convolution, (N, H, W, Ce); optional
    d = act_dw(depthwise3x3(e, w_dw, stride, pads) + b_dw)            # (N, OH, OW, Ce)
    y = d @ w_project + b_project [+ x]              # 1x1 convolution, (N, OH, OW, Cout)

Inputs (float32): ``x (N, H, W, Cin)``, ``w_expand (Cin, Ce)`` (only with ``expand``),
``w_dw (3, 3, Ce)`` (tap-major), ``w_project (Ce, Cout)``, ``bias`` = the concatenation
``[b_expand (Ce), if expand] + b_dw (Ce) + b_project (Cout)``. Attributes: ``stride`` (1 or 2),
``pads`` ``(top, left, bottom, right)`` each 0 or 1, ``expand``, ``residual`` (add ``x``:
stride 1 and ``Cin == Cout``), ``act_expand`` / ``act_dw``: ``(lo, hi)`` clamps (ReLU6
``(0, 6)``, ReLU ``(0, None)``), ``band`` (output rows per band of the kernel, 0: chosen).

The ``FuseInvertedResidual`` pass (``ember.graph.passes.fuse_inverted_residual``) creates it
from the convolution chain; its kernel (``ember.tir.schedule.rules.inverted_residual``) keeps
the expanded and depthwise activations in per-thread scratch that stays in L2.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import LoweringError, ShapeMismatchError
from ..graph.ir import TensorType
from .imperative import imperative_kernel
from .registry import OpPattern, register_op

OP = "nn.inverted_residual"


def _geometry(types, attrs):
    """The kernel geometry (``IRGeometry``) of inputs ``types`` and ``attrs``.

    Raises:
        ShapeMismatchError: the inputs do not have the shapes of the module doc."""
    from ..tir.schedule.rules.inverted_residual import IRGeometry
    expand = bool(attrs["expand"])
    want = 5 if expand else 4
    if len(types) != want:
        raise ShapeMismatchError(f"{OP}: expected {want} inputs (x, {'w_expand, ' if expand else ''}"
                                 f"w_dw, w_project, bias), got {len(types)}")
    x, wd, w2, bias = types[0], types[-3], types[-2], types[-1]
    if x.ndim != 4 or wd.ndim != 3 or tuple(wd.shape[:2]) != (3, 3) or w2.ndim != 2:
        raise ShapeMismatchError(f"{OP}: x must be (N, H, W, Cin), w_dw (3, 3, Ce), w_project "
                                 f"(Ce, Cout); got {x.shape}, {wd.shape}, {w2.shape}")
    nb, h, w, cin = x.shape
    ce, cout = wd.shape[2], w2.shape[1]
    if expand and tuple(types[1].shape) != (cin, ce):
        raise ShapeMismatchError(f"{OP}: w_expand is {types[1].shape}, expected {(cin, ce)}")
    if not expand and cin != ce:
        raise ShapeMismatchError(f"{OP}: without expand the depthwise channels {ce} must be "
                                 f"the input's {cin}")
    if w2.shape[0] != ce or tuple(bias.shape) != ((ce if expand else 0) + ce + cout,):
        raise ShapeMismatchError(f"{OP}: w_project {w2.shape} / bias {bias.shape} do not match "
                                 f"Ce={ce}, Cout={cout}")
    if any(t.dtype != "float32" for t in types):
        raise ShapeMismatchError(f"{OP}: float32 only, got {[t.dtype for t in types]}")
    s = int(attrs["stride"])
    pads = tuple(int(p) for p in attrs["pads"])
    if s not in (1, 2) or len(pads) != 4 or any(p not in (0, 1) for p in pads):
        raise ShapeMismatchError(f"{OP}: stride must be 1 or 2 and pads four 0/1 values; got "
                                 f"stride {s}, pads {pads}")
    if int(attrs["band"]) < 0:
        raise ShapeMismatchError(f"{OP}: band (output rows per band) must be >= 0 (0: chosen "
                                 f"by the schedule rule), got {attrs['band']}")
    oh = (h + pads[0] + pads[2] - 3) // s + 1
    ow = (w + pads[1] + pads[3] - 3) // s + 1
    if oh < 1 or ow < 1:
        raise ShapeMismatchError(f"{OP}: a 3x3 window does not fit {x.shape} with pads {pads}")
    if attrs["residual"] and (oh, ow, cout) != (h, w, cin):
        raise ShapeMismatchError(f"{OP}: residual needs the output shape {(oh, ow, cout)} to be "
                                 f"the input's {(h, w, cin)}")
    return IRGeometry(nb, h, w, cin, ce, cout, oh, ow, s, pads, expand, bool(attrs["residual"]),
                      tuple(attrs["act_expand"]), tuple(attrs["act_dw"]), int(attrs["band"]))


def _infer(types, attrs):
    g = _geometry(types, attrs)
    return [TensorType((g.n, g.oh, g.ow, g.cout), "float32")]


def _clamp(v, lohi):
    lo, hi = lohi
    if lo is not None:
        v = np.where(v < lo, lo, v)
    if hi is not None:
        v = np.where(v > hi, hi, v)
    return v


def _reference(xs, attrs):
    g = _geometry([TensorType(a.shape, str(a.dtype)) for a in xs], attrs)
    x = xs[0].astype(np.float64)
    bias = xs[-1].astype(np.float64)
    wd, w2 = xs[-3].astype(np.float64), xs[-2].astype(np.float64)
    if g.expand:
        e = _clamp(x @ xs[1].astype(np.float64) + bias[:g.ce], g.act_expand)
        bias = bias[g.ce:]
    else:
        e = x
    pt, pl, pb, pr = g.pads
    ep = np.pad(e, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    s = g.stride
    d = np.zeros((g.n, g.oh, g.ow, g.ce))
    for r in range(3):
        for c in range(3):
            d += ep[:, r:r + s * (g.oh - 1) + 1:s, c:c + s * (g.ow - 1) + 1:s] * wd[r, c]
    d = _clamp(d + bias[:g.ce], g.act_dw)
    y = d @ w2 + bias[g.ce:]
    if g.residual:
        y = y + x
    return [y.astype(np.float32)]


def _compute(inputs, attrs, out_types):
    from ..tir.schedule.rules.inverted_residual import (choose_band, inverted_residual_body,
                                                       kernel_buffers)
    g = _geometry([TensorType(tuple(t.shape), t.dtype) for t in inputs], attrs)
    if any(int(np.prod(t.shape)) == 1 for t in inputs[1:]):
        raise LoweringError(f"{OP}: a one-element weight (Cin = Ce = 1 or Ce = Cout = 1) is "
                            f"an immediate constant, not a kernel parameter; keep such a block "
                            f"as separate convolutions (FuseInvertedResidual does not fuse it)")
    gb = g if g.band else dataclasses.replace(g, band=choose_band(g))

    def body(k):
        return inverted_residual_body(gb, *kernel_buffers(k.params + k.outputs, gb), "scalar")
    f = imperative_kernel(inputs, out_types, body, "inverted_residual")
    f.attrs["inverted_residual"] = g.to_attrs()  # band 0: the schedule rule chooses
    e = g.n * g.h * g.w * g.cin * g.ce * 2 if g.expand else 0
    f.attrs["flops"] = e + g.n * g.oh * g.ow * g.ce * (18 + 2 * g.cout)
    return [f]


register_op(OP, infer_type=_infer, reference=_reference, compute=_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(4, 5),
            attrs={"stride": 1, "pads": (1, 1, 1, 1), "expand": True, "residual": False,
                   "act_expand": (0.0, 6.0), "act_dw": (0.0, 6.0), "band": 0},
            doc="MobileNetV2 inverted-residual block (1x1 expand + act -> 3x3 depthwise + act "
                "-> 1x1 project [+ x]) in one kernel, NHWC; see ember.ops.inverted_residual")
