"""SimplifyInference: inference-time simplifications of training-time operators.

- ``nn.batch_norm(conv(x, w[, b]), scale, shift, mean, var)`` with constant statistics and a
  convolution read only by the batch norm folds into the convolution:
  ``conv(x, w * s[:, None, ...], (b - mean) * s + shift)`` with ``s = scale / sqrt(var + eps)``.
  The same for ``nn.gemm`` (columns of B; C scaled, plus the shift) and ``matmul`` with a 2-D
  constant weight (its columns, then ``+ shift``) when the batch norm's channel axis is the last.
- any other batch norm with constant statistics becomes ``x * s + t`` (per-channel constants,
  shaped to broadcast over axis 1), which FoldScaleAxis and FuseOps then handle;
- ``copy`` (ONNX Identity, Dropout in inference) is dropped.
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant, Function, IRModule
from ..mutator import rewrite_function, users
from .pass_manager import function_pass


def bn_scale_shift(args, eps: float):
    """``(s, t)`` in float64 with ``bn(x) = x * s + t`` per channel, or ``None`` when a statistic
    is not constant."""
    if not all(isinstance(a, Constant) for a in args[1:]):
        return None
    scale, shift, mean, var = (a.data.astype(np.float64) for a in args[1:])
    s = scale / np.sqrt(var + eps)
    return s, shift - mean * s


def _fold_into_producer(pb, s, t, rw):
    """The producer binding ``pb`` rebuilt with the per-channel scale/shift folded in, or
    ``None`` when it cannot absorb them."""
    call = pb.call
    args = list(call.args)
    if call.op == "nn.conv" and isinstance(args[1], Constant):
        w = args[1].data
        dt = w.dtype
        w2 = (w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(dt)
        b0 = args[2].data.astype(np.float64) if len(args) == 3 else 0.0
        if len(args) == 3 and not isinstance(args[2], Constant):
            return None
        b2 = (b0 * s + t).astype(dt)
        return rw.emit("nn.conv", [args[0], Constant(w2, _hint(args[1])), Constant(b2)],
                       call.attrs)
    if call.op == "nn.gemm" and isinstance(args[1], Constant) and \
            (len(args) == 2 or isinstance(args[2], Constant)):
        a = call.attrs
        B = args[1].data
        dt = B.dtype
        sb = s.reshape((-1, 1)) if a["trans_b"] else s.reshape((1, -1))
        B2 = (B.astype(np.float64) * sb).astype(dt)
        n = s.shape[0]
        c0 = a["beta"] * args[2].data.astype(np.float64) if len(args) == 3 else np.zeros(n)
        c2 = (np.broadcast_to(c0, np.broadcast_shapes(c0.shape, (n,))) * s + t).astype(dt)
        return rw.emit("nn.gemm", [args[0], Constant(B2, _hint(args[1])), Constant(c2)],
                       dict(a, beta=1.0))
    if call.op == "matmul" and isinstance(args[1], Constant) and args[1].data.ndim == 2:
        W = args[1].data
        dt = W.dtype
        W2 = (W.astype(np.float64) * s.reshape((1, -1))).astype(dt)
        y = rw.emit("matmul", [args[0], Constant(W2, _hint(args[1]))])
        return rw.emit("add", [y, Constant(t.astype(dt))])
    return None


def _hint(c: Constant):
    return (c.name_hint + "_folded") if c.name_hint else None


def simplify_function(func: Function) -> Function:
    """``func`` with ``copy`` dropped and each batch norm with constant statistics folded into its
    single-use conv/gemm/matmul producer, or else turned into ``x * s + t`` (``s = scale / sqrt(var
    + eps)``, computed in float64, cast to x's dtype)."""
    use = users(func)

    def visit(b, args, rw):
        op = b.call.op
        if op == "copy":
            return [args[0]]
        if op != "nn.batch_norm":
            return None
        st = bn_scale_shift(args, b.call.attrs["epsilon"])
        if st is None:
            return None
        s, t = st
        x = b.call.args[0]
        pb = rw.producer(args[0])
        channel_last = pb is not None and pb.call.op in ("nn.gemm", "matmul")
        if pb is not None and len(use.get(id(x), [])) == 1 and \
                (not channel_last or x.type.ndim == 2):
            # the producer was kept in place; replace it now by the folded form
            y = _fold_into_producer(pb, s, t, rw)
            if y is not None:
                rw.remove(pb)
                return [y]
        dt = x.type.dtype
        shp = (-1,) + (1,) * (x.type.ndim - 2) if x.type.ndim > 2 else (-1,)
        y = rw.emit("multiply", [args[0], Constant(s.astype(dt).reshape(shp))])
        return [rw.emit("add", [y, Constant(t.astype(dt).reshape(shp))])]
    return rewrite_function(func, visit)


@function_pass("SimplifyInference", opt_level=1)
def SimplifyInference(func, mod, ctx):
    """Fold batch norms into producers or into scale/shift; drop copies."""
    return simplify_function(func)
