"""CanonicalizeOps: rewrite operators into the forms later passes and kernels expect.

- ``nn.conv(x, w) + b`` with a constant per-output-channel ``b`` (shape ``(M, 1, ...)`` or
  ``(1, M, 1, ...)``) and the conv read only there => ``nn.conv(x, w, b)`` (the bias add joins the
  convolution, as ONNX Conv's third input);
- ``nn.gemm(a, b) + c`` with a constant ``c`` broadcasting to the result => ``nn.gemm(a, b, c)``;
- ``matmul(x, w)`` with 2-D ``x`` and 2-D ``w`` => ``nn.gemm(x, w)`` (one dense form for
  CombineParallelDense, FuseOps and the schedules);
- ``matmul(x, w)`` with 2-D ``w`` and ``x`` of shape ``(b.., 1, K)`` (one row per batch element,
  the ``(seq, batch, d)`` layout of torch's ``nn.MultiheadAttention`` at batch 1) =>
  ``reshape(nn.gemm(reshape(x, (b.., K)), w), (b.., 1, N))``: the batch becomes the GEMM's rows
  instead of a batch of one-row products;
- ``clip(x, min=0, max=None)`` and ``maximum(x, 0)`` => ``nn.relu(x)``;
- ``x - c`` with a constant ``c`` => ``x + (-c)`` (adds fold into biases);
- a 2-D ``nn.conv_transpose`` with constant weights and dilation 1 => one ``nn.conv`` over its
  stride phases and a depth-to-space interleave (``conv_transpose_phases``).
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant, Function
from ..mutator import rewrite_function, users
from .conv_transpose_phases import conv_transpose_as_conv
from .pass_manager import function_pass


def _channel_vector(c: Constant, out_ndim: int, channels: int, axis: int):
    """The (channels,) vector of a constant broadcasting along ``axis`` only, else ``None``."""
    d = c.data
    if d.ndim > out_ndim:
        return None
    shape = (1,) * (out_ndim - d.ndim) + d.shape
    if all(n == 1 for k, n in enumerate(shape) if k != axis) and shape[axis] in (1, channels):
        return np.broadcast_to(d.reshape(-1), (channels,)) if d.size == 1 else d.reshape(-1)
    return None


def canonicalize_function(func: Function) -> Function:
    """``func`` with the rewrites of the module docstring applied (the body of ``CanonicalizeOps``
    for one function); the input is not changed."""
    use = users(func)

    def single_use(v):
        return len(use.get(id(v), [])) == 1

    def visit(b, args, rw):
        op, attrs = b.call.op, b.call.attrs
        if op == "add":
            for xi, ci in ((0, 1), (1, 0)):
                x, c = args[xi], args[ci]
                if not isinstance(c, Constant) or x.type != b.outputs[0].type:
                    continue
                pb = rw.producer(x)
                if pb is None or not single_use(b.call.args[xi]):
                    continue
                if pb.call.op == "nn.conv" and len(pb.call.args) == 2:
                    vec = _channel_vector(c, x.type.ndim, x.type.shape[1], 1)
                    if vec is not None:
                        return [_replace(rw, pb, "nn.conv", [*pb.call.args, Constant(
                            np.ascontiguousarray(vec).astype(x.type.dtype))], pb.call.attrs)]
                if pb.call.op == "nn.gemm" and len(pb.call.args) == 2:
                    return [_replace(rw, pb, "nn.gemm", [*pb.call.args, c],
                                     dict(pb.call.attrs, beta=1.0))]
        elif op == "matmul" and args[0].type.ndim == 2 and args[1].type.ndim == 2:
            return [rw.emit("nn.gemm", list(args))]
        elif op == "matmul" and args[0].type.ndim > 2 and args[1].type.ndim == 2 \
                and args[0].type.shape[-2] == 1 \
                and all(isinstance(n, int) for n in b.outputs[0].type.shape):
            rows = int(np.prod(args[0].type.shape[:-2]))
            if rows > 1:
                x2 = rw.emit("reshape", [args[0]], {"newshape": [rows, args[0].type.shape[-1]]})
                y = rw.emit("nn.gemm", [x2, args[1]])
                return [rw.emit("reshape", [y], {"newshape": list(b.outputs[0].type.shape)})]
        elif op == "clip" and attrs["min"] == 0 and attrs["max"] is None:
            return [rw.emit("nn.relu", [args[0]])]
        elif op == "maximum":
            for xi, ci in ((0, 1), (1, 0)):
                c = args[ci]
                if isinstance(c, Constant) and c.data.size == 1 and float(c.data.reshape(())) \
                        == 0.0 and args[xi].type == b.outputs[0].type:
                    return [rw.emit("nn.relu", [args[xi]])]
        elif op == "nn.conv_transpose":
            y = conv_transpose_as_conv(rw, args[0], args[1], args[2] if len(args) == 3 else None,
                                       attrs)
            return None if y is None else [y]
        elif op == "subtract" and isinstance(args[1], Constant) and \
                args[1].type.dtype.startswith("float"):
            return [rw.emit("add", [args[0], Constant(-args[1].data)])]
        return None
    return rewrite_function(func, visit)


def _replace(rw, pb, op, args, attrs):
    """Emit ``op(args)`` in place of the already emitted producer ``pb``."""
    rw.remove(pb)
    return rw.emit(op, list(args), attrs)


@function_pass("CanonicalizeOps", opt_level=2)
def CanonicalizeOps(func, mod, ctx):
    """Bias adds into conv/gemm, 2-D matmul to gemm, relu spellings to nn.relu, sub to add."""
    return canonicalize_function(func)
