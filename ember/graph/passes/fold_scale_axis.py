"""FoldScaleAxis: fold per-channel constant scales into the weights of the convolution or dense
layer next to them.

- backward: ``conv(x, w[, b]) * s`` with ``s`` constant per output channel (shape ``(M, 1, 1)``,
  ``(1, M, 1, 1)`` or a scalar) and the conv read only there => ``conv(x, w * s, b * s)``;
  ``gemm(a, B[, C]) * s`` with ``s`` per column => ``gemm(a, B * s, C * s)``;
- forward: ``conv(x * s, w)`` with ``s`` per input channel, ``group == 1``, the product read
  only by convolutions => ``conv(x, w * s[None, :, None, None])`` (zero padding commutes with
  the scale); ``gemm(x * s, B)`` with ``s`` per column of ``x`` => rows of ``B`` scaled.

Weights must be constants (bound parameters); anything else is left alone.
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant, Function
from ..mutator import rewrite_function, users
from .canonicalize_ops import _channel_vector
from .pass_manager import function_pass


def _scaled(c: Constant, factor, hint="_scaled"):
    data = (c.data.astype(np.float64) * factor).astype(c.data.dtype)
    return Constant(data, (c.name_hint + hint) if c.name_hint else None)


def _backward(b, args, rw, use):
    """``producer(...) * s`` => producer with scaled weights, or None."""
    for xi, ci in ((0, 1), (1, 0)):
        x, s = args[xi], args[ci]
        if not isinstance(s, Constant) or x.type != b.outputs[0].type:
            continue
        pb = rw.producer(x)
        if pb is None or len(use.get(id(b.call.args[xi]), [])) != 1:
            continue
        pa = list(pb.call.args)
        if pb.call.op == "nn.conv" and isinstance(pa[1], Constant) and \
                (len(pa) == 2 or isinstance(pa[2], Constant)):
            vec = _channel_vector(s, x.type.ndim, x.type.shape[1], 1)
            if vec is None:
                continue
            vec = vec.astype(np.float64)
            new = [pa[0], _scaled(pa[1], vec.reshape((-1,) + (1,) * (pa[1].type.ndim - 1)))]
            if len(pa) == 3:
                new.append(_scaled(pa[2], vec))
            rw.remove(pb)
            return [rw.emit("nn.conv", new, pb.call.attrs)]
        if pb.call.op == "nn.gemm" and isinstance(pa[1], Constant) and \
                (len(pa) == 2 or isinstance(pa[2], Constant)):
            vec = _channel_vector(s, 2, x.type.shape[1], 1)
            if vec is None:
                continue
            vec = vec.astype(np.float64)
            trans_b = pb.call.attrs["trans_b"]
            new = [pa[0], _scaled(pa[1], vec.reshape((-1, 1)) if trans_b else vec.reshape(1, -1))]
            if len(pa) == 3:
                c = pa[2].data.astype(np.float64)
                full = np.broadcast_to(c, np.broadcast_shapes(c.shape, (vec.shape[0],)))
                new.append(Constant((full * vec).astype(c.dtype)))
            rw.remove(pb)
            return [rw.emit("nn.gemm", new, pb.call.attrs)]
    return None


def _forward(b, args, rw, use):
    """``conv(x * s, w)`` / ``gemm(x * s, B)`` => scaled weights, or None."""
    op = b.call.op
    x = args[0]
    mb = rw.producer(x)
    if mb is None or mb.call.op != "multiply" or not isinstance(args[1], Constant):
        return None
    if any(u is None or u.call.op != op for u in use.get(id(b.call.args[0]), [None])):
        return None
    for xi, ci in ((0, 1), (1, 0)):
        src, s = mb.call.args[xi], mb.call.args[ci]
        if not isinstance(s, Constant) or src.type != x.type:
            continue
        w = args[1]
        if op == "nn.conv" and b.call.attrs["group"] == 1:
            vec = _channel_vector(s, x.type.ndim, x.type.shape[1], 1)
            if vec is None:
                continue
            shp = (1, -1) + (1,) * (w.type.ndim - 2)
            return [rw.emit("nn.conv", [src, _scaled(w, vec.astype(np.float64).reshape(shp)),
                                        *args[2:]], b.call.attrs)]
        if op == "nn.gemm" and not b.call.attrs["trans_a"]:
            vec = _channel_vector(s, 2, x.type.shape[1], 1)
            if vec is None:
                continue
            v = vec.astype(np.float64)
            factor = v.reshape(1, -1) if b.call.attrs["trans_b"] else v.reshape(-1, 1)
            return [rw.emit("nn.gemm", [src, _scaled(w, factor), *args[2:]], b.call.attrs)]
    return None


def fold_function(func: Function) -> Function:
    """``func`` with per-channel constant scales folded backward (``conv/gemm * s``) and forward
    (``conv/gemm(x * s)``) into the weights (rules in the module docstring)."""
    use = users(func)

    def visit(b, args, rw):
        if b.call.op == "multiply":
            return _backward(b, args, rw, use)
        if b.call.op in ("nn.conv", "nn.gemm"):
            return _forward(b, args, rw, use)
        return None
    return rewrite_function(func, visit)


@function_pass("FoldScaleAxis", opt_level=3)
def FoldScaleAxis(func, mod, ctx):
    """Fold per-channel constant scales into neighbouring conv/gemm weights."""
    return fold_function(func)
