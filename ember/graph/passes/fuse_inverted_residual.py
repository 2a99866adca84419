"""FuseInvertedResidual: MobileNetV2's inverted-residual block as one ``nn.inverted_residual``
(``ember.ops.inverted_residual``). The chain, channels-last (after ``ConvertLayout``)::

    %e  = nn.conv(%x, W1, b1)                 # 1x1, stride 1, no padding, group 1 (optional)
    %ea = clip(%e, lo, hi) | nn.relu(%e)
    %d  = nn.conv(%ea, Wd, bd)                # 3x3 depthwise (group = channels), stride 1 or 2,
    %da = clip(%d, lo, hi) | nn.relu(%d)      #   pads 0/1, dilation 1
    %y  = nn.conv(%da, W2, b2)                # 1x1, stride 1, no padding, group 1
    %z  = add(%y, %x)                         # optional residual

with constant float32 weights and biases (batch norm already folded into them), every
intermediate read only by the next step, becomes one binding whose kernel keeps the expanded
and depthwise activations in per-thread scratch (``rules/inverted_residual``): the expanded
activation of MobileNetV2's 112x112 and 56x56 blocks (1.6-4.8 MB) no longer makes a round trip
through L3/memory between three kernels.

Gated (config ``inverted_residual.fuse``): ``0`` (default) fuses blocks whose depthwise input
is at least ``MIN_FUSE_BYTES`` (the measured break-even, ``docs/performance.md``: smaller ones
stay in L2 anyway and the three separate kernels parallelize better); ``1`` fuses every
matching block; ``-1`` none. ``inverted_residual.band`` forces the kernel's band height
(output rows per parallel task; 0 chooses). Disabling the pass
(``PassContext(disabled_pass=["FuseInvertedResidual"])``) or ``opt_level < 2`` also keeps the
convolutions separate.
"""

from __future__ import annotations

import numpy as np

from ...errors import PassError
from ..ir import Constant
from ..mutator import Rewriter, users
from .pass_manager import function_pass, register_config

FUSE = register_config(
    "inverted_residual.fuse", int,
    "MobileNetV2 blocks (1x1 conv + act -> 3x3 depthwise + act -> 1x1 conv [+ add]) as one "
    "kernel: 0 = where the expanded activation is large (default), 1 = every match, -1 = off")
BAND = register_config(
    "inverted_residual.band", int,
    "output rows per band of the fused inverted-residual kernel (0 = chosen per block)")

MIN_FUSE_BYTES = 512 << 10  # depthwise input (N*H*W*Ce float32) from which fusion pays

OP = "nn.inverted_residual"


def _act(b):
    """``(lo, hi)`` of a clip / ReLU binding, else ``None``."""
    if b is None or len(b.outputs) != 1:
        return None
    if b.call.op == "nn.relu":
        return (0.0, None)
    if b.call.op == "clip" and len(b.call.args) == 1:
        lo, hi = b.call.attrs.get("min"), b.call.attrs.get("max")
        return (None if lo is None else float(lo), None if hi is None else float(hi))
    return None


def _conv(b, kind: str):
    """``(weights, bias | None)`` numpy arrays of an NHWC float32 ``nn.conv`` binding of
    ``kind`` ``"1x1"`` or ``"dw"`` with constant weights/bias, else ``None``."""
    if b is None or b.call.op != "nn.conv" or len(b.outputs) != 1 or len(b.call.args) < 2:
        return None
    a = b.call.attrs
    x, w = b.call.args[0], b.call.args[1]
    bias = b.call.args[2] if len(b.call.args) > 2 else None
    if (a.get("data_layout") != "NHWC" or x.type.ndim != 4 or not isinstance(w, Constant)
            or w.type.ndim != 4 or x.type.dtype != "float32" or w.type.dtype != "float32"
            or (bias is not None and not isinstance(bias, Constant))
            or any(d != 1 for d in (a.get("dilations") or (1, 1)))):
        return None
    c = x.type.shape[3]
    strides = tuple(a.get("strides") or (1, 1))
    pads = tuple(a.get("pads") or (0, 0, 0, 0))
    if kind == "1x1":
        ok = (tuple(w.type.shape[2:]) == (1, 1) and a.get("group", 1) == 1
              and strides == (1, 1) and not any(pads))
    else:
        ok = (tuple(w.type.shape[1:]) == (1, 3, 3) and a.get("group", 1) == c
              and w.type.shape[0] == c and strides[0] == strides[1] and strides[0] in (1, 2)
              and len(pads) == 4 and all(p in (0, 1) for p in pads))
    if not ok:
        return None
    bv = np.zeros(w.type.shape[0], np.float32) if bias is None else \
        np.asarray(bias.data, np.float32).reshape(-1)
    if bv.shape != (w.type.shape[0],):
        return None
    return np.asarray(w.data, np.float32), bv


def fuse_inverted_residual_function(func, mode: int = 0, band: int = 0):
    """``func`` with its matching blocks (module doc) as ``nn.inverted_residual`` bindings;
    ``mode``/``band`` as the configs ``inverted_residual.fuse`` / ``inverted_residual.band``."""
    if mode < 0:
        return func
    used_by = users(func)
    fused = {}  # id(fused output) -> (its binding, the project conv's output it replaced)

    def single_use(v) -> bool:
        us = used_by.get(id(v), [])
        return len(us) == 1 and us[0] is not None

    def visit(b, args, rw: Rewriter):
        if b.call.op == "add" and len(args) == 2:
            return _residual(b, args, rw)
        proj = _conv(b, "1x1")
        if proj is None:
            return None
        P = rw.producer
        da_b = P(args[0])
        act_dw = _act(da_b)
        d_b = P(da_b.call.args[0]) if act_dw else None
        dw = _conv(d_b, "dw")
        if dw is None or not single_use(da_b.outputs[0]) or not single_use(d_b.outputs[0]):
            return None
        ea_b = P(d_b.call.args[0])
        act_e = _act(ea_b)
        e_b = P(ea_b.call.args[0]) if act_e else None
        exp = _conv(e_b, "1x1")
        expand = (exp is not None and single_use(ea_b.outputs[0])
                  and single_use(e_b.outputs[0]))
        x = e_b.call.args[0] if expand else d_b.call.args[0]
        nb, h, w, cin = x.type.shape
        ce, cout = dw[0].shape[0], proj[0].shape[0]
        if ce == 1 and (cout == 1 or (expand and cin == 1)):
            return None  # a one-element weight would be an immediate, not a kernel parameter
        if mode == 0 and 4 * nb * h * w * ce < MIN_FUSE_BYTES:
            return None
        wd = np.ascontiguousarray(dw[0][:, 0].transpose(1, 2, 0))            # (3, 3, Ce)
        w2 = np.ascontiguousarray(proj[0][:, :, 0, 0].T)                     # (Ce, Cout)
        biases = [dw[1], proj[1]]
        ins = [x]
        if expand:
            ins.append(Constant(np.ascontiguousarray(exp[0][:, :, 0, 0].T),  # (Cin, Ce)
                                name_hint=_hint(e_b, "expand")))
            biases.insert(0, exp[1])
        ins += [Constant(wd, name_hint=_hint(d_b, "dw")),
                Constant(w2, name_hint=_hint(b, "project")),
                Constant(np.concatenate(biases).astype(np.float32),
                         name_hint=_hint(b, "bias"))]
        da = d_b.call.attrs
        y = rw.emit(OP, ins, {"stride": int((da.get("strides") or (1, 1))[0]),
                              "pads": [int(p) for p in da.get("pads") or (0, 0, 0, 0)],
                              "expand": expand,
                              "residual": False, "act_expand": act_e if expand else (None, None),
                              "act_dw": act_dw, "band": band}, name=b.outputs[0].name)
        for dead in ([ea_b, e_b] if expand else []) + [da_b, d_b]:
            rw.remove(dead)
        fused[id(y)] = (rw.producer(y), b.outputs[0])
        return y

    def _residual(b, args, rw: Rewriter):
        for k in (0, 1):
            y, other = args[k], args[1 - k]
            info = fused.get(id(y))
            if info is None:
                continue
            fb, orig = info
            if (fb.call.args[0] is not other or not single_use(orig)
                    or y.type != b.outputs[0].type or other.type != y.type):
                continue
            rw.remove(fb)
            attrs = dict(fb.call.attrs)
            attrs["residual"] = True
            return rw.emit(OP, list(fb.call.args), attrs, name=b.outputs[0].name)
        return None
    return Rewriter(func).run(visit)


def _hint(b, what: str) -> str | None:
    w = b.call.args[1]
    hint = getattr(w, "name_hint", None)
    return f"{hint}@ir_{what}" if hint else None


@function_pass("FuseInvertedResidual", opt_level=2)
def FuseInvertedResidual(func, mod, ctx):
    """MobileNetV2 inverted-residual blocks as one ``nn.inverted_residual`` kernel each."""
    band = ctx.get_config(BAND, 0)
    if band < 0:
        raise PassError(f"FuseInvertedResidual: PassContext config {BAND!r} must be >= 0 "
                        f"(output rows per band, 0 = chosen per block), got {band}")
    return fuse_inverted_residual_function(func, ctx.get_config(FUSE, 0), band)


__all__ = ["FuseInvertedResidual", "fuse_inverted_residual_function", "FUSE", "BAND",
           "MIN_FUSE_BYTES"]
