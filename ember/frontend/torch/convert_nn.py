"""ATen converters: convolutions, normalization, pooling, dense products, embedding.

Argument orders follow the ATen schemas (``native_functions.yaml``); torch's symmetric
``padding`` becomes ember's ``begins + ends`` pads.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from .registry import aten
from .values import as_value, ints


@aten("aten.convolution.default")
def convolution(ctx, node, x, w, b, stride, padding, dilation, transposed, output_padding,
                groups):
    """``nn.conv`` (or ``nn.conv_transpose`` when ``transposed``) with x ``(N, C, *sp)``,
    w ``(M, C/groups, *k)`` (transposed: ``(C, M/groups, *k)``), optional bias ``(M,)``."""
    n = x.type.ndim - 2
    pads = ints(padding, n)
    attrs = {"strides": ints(stride, n), "pads": pads + pads, "dilations": ints(dilation, n),
             "group": int(groups)}
    args = [x, w] + ([b] if b is not None else [])
    if transposed:
        attrs["output_padding"] = ints(output_padding, n)
        return ctx.call("nn.conv_transpose", args, attrs)
    return ctx.call("nn.conv", args, attrs)


def _affine(ctx, v, n: int, fill: float, dtype: str):
    return v if v is not None else ctx.const(np.full((n,), fill, dtype=dtype))


@aten("aten._native_batch_norm_legit_no_training.default")
def batch_norm(ctx, node, x, weight, bias, mean, var, momentum, eps):
    """Inference batch norm ``nn.batch_norm(x, scale, bias, mean, var)``; returns
    ``(y, None, None)`` (the saved statistics are training outputs)."""
    c, dt = x.type.shape[1], x.type.dtype
    y = ctx.call("nn.batch_norm", [x, _affine(ctx, weight, c, 1.0, dt),
                                   _affine(ctx, bias, c, 0.0, dt), mean, var],
                 {"epsilon": float(eps)})
    return y, None, None


@aten("aten.native_layer_norm.default")
def layer_norm(ctx, node, x, normalized_shape, weight, bias, eps):
    """``nn.layer_norm`` over the trailing ``normalized_shape`` dims; ``(y, None, None)``."""
    k = len(normalized_shape)
    dt = x.type.dtype
    shape = tuple(normalized_shape)
    w = weight if weight is not None else ctx.const(np.ones(shape, dtype=dt))
    args = [x, w] + ([bias] if bias is not None else [])
    return ctx.call("nn.layer_norm", args, {"axis": -k, "epsilon": float(eps)}), None, None


@aten("aten.native_group_norm.default")
def group_norm(ctx, node, x, weight, bias, n, c, hxw, group, eps):
    """Group norm: ``nn.group_norm`` on ``(N, group, C/group * HxW)`` with the per-channel
    scale and bias, reshaped back; ``(y, None, None)``."""
    shape, dt = x.type.shape, x.type.dtype
    g = int(group)
    rows = ctx.call("reshape", [x], {"newshape": [shape[0], g,
                                                  int(np.prod(shape)) // (shape[0] * g)]})
    y = ctx.call("nn.group_norm", [rows, _affine(ctx, weight, shape[1], 1.0, dt),
                                   _affine(ctx, bias, shape[1], 0.0, dt)],
                 {"epsilon": float(eps), "spatial": int(np.prod(shape[2:]))})
    return ctx.call("reshape", [y], {"newshape": list(shape)}), None, None


def _pool_attrs(x, kernel, stride, padding, dilation, ceil_mode):
    n = x.type.ndim - 2
    k = ints(kernel, n)
    s = ints(stride, n) if stride else k
    p = ints(padding, n)
    return {"kernel_shape": k, "strides": s, "pads": p + p, "dilations": ints(dilation, n),
            "ceil_mode": int(bool(ceil_mode))}


@aten("aten.max_pool2d_with_indices.default", "aten.max_pool1d_with_indices.default",
      "aten.max_pool3d_with_indices.default", "aten.max_pool2d.default")
def max_pool(ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``nn.max_pool`` (padding counts as -inf); the indices output is not produced."""
    y = ctx.call("nn.max_pool", [x], _pool_attrs(x, kernel_size, stride, padding, dilation,
                                                 ceil_mode))
    return y if node.op_type == "aten.max_pool2d.default" else (y, None)


@aten("aten.avg_pool2d.default", "aten.avg_pool1d.default", "aten.avg_pool3d.default")
def avg_pool(ctx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False,
             count_include_pad=True, divisor_override=None):
    """``nn.avg_pool``.

    Raises:
        UnsupportedOpError: ``divisor_override``; ``ceil_mode`` with ``count_include_pad``
            and padding (torch's divisor there is not ONNX's)."""
    if divisor_override is not None:
        raise UnsupportedOpError("avg_pool divisor_override is not supported", op=node.op_type)
    attrs = _pool_attrs(x, kernel_size, stride, padding, 1, ceil_mode)
    if ceil_mode and count_include_pad and any(attrs["pads"]):
        raise UnsupportedOpError("avg_pool with ceil_mode, count_include_pad and padding is "
                                 "not supported", op=node.op_type)
    attrs.pop("dilations")
    attrs["count_include_pad"] = int(bool(count_include_pad))
    return ctx.call("nn.avg_pool", [x], attrs)


def _adaptive(ctx, node, x, output_size, kind: str):
    sp = x.type.shape[2:]
    out = ints(output_size, len(sp))
    if all(o == 1 for o in out):
        return ctx.call(f"nn.global_{kind}_pool", [x])
    if any(o <= 0 or s % o for s, o in zip(sp, out)):
        raise UnsupportedOpError(
            f"adaptive {kind} pooling of spatial size {list(sp)} to {out} (not a divisor) is "
            f"not supported: pick an output size that divides the input", op=node.op_type)
    k = [s // o for s, o in zip(sp, out)]
    attrs = {"kernel_shape": k, "strides": k, "pads": [0] * (2 * len(k))}
    return ctx.call(f"nn.{kind}_pool", [x], attrs)


@aten("aten._adaptive_avg_pool2d.default", "aten._adaptive_avg_pool3d.default",
      "aten.adaptive_avg_pool1d.default")
def adaptive_avg_pool(ctx, node, x, output_size):
    """Adaptive average pooling: global pooling, or ``nn.avg_pool`` with kernel = stride =
    input / output when the output size divides the input.

    Raises:
        UnsupportedOpError: an output size that does not divide the input."""
    return _adaptive(ctx, node, x, output_size, "avg")


@aten("aten.adaptive_max_pool2d.default", "aten.adaptive_max_pool1d.default")
def adaptive_max_pool(ctx, node, x, output_size):
    """Adaptive max pooling as ``adaptive_avg_pool``'s windows; ``(values, None)``."""
    return _adaptive(ctx, node, x, output_size, "max"), None


@aten("aten.addmm.default")
def addmm(ctx, node, bias, a, b, beta=1, alpha=1):
    """``beta * bias + alpha * (a @ b)`` (``nn.gemm``; ``b`` = a weight's transpose, as
    ``nn.Linear`` gives it, reads the weight under its own name with ``trans_b``)."""
    w, trans = _weight_of(ctx, b)
    return ctx.call("nn.gemm", [a, w, bias], {"alpha": float(alpha), "beta": float(beta),
                                               "trans_b": trans})


def _weight_of(ctx, b):
    w = getattr(ctx, "transpose_of", {}).get(id(b))
    return (w, 1) if w is not None else (b, 0)


@aten("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def mm(ctx, node, a, b):
    """``matmul`` (NumPy semantics; ``mm`` 2-D, ``bmm`` batched 3-D); ``mm`` by a weight's
    transpose is ``nn.gemm`` with ``trans_b`` on the weight."""
    w, trans = _weight_of(ctx, b)
    if trans and a.type.ndim == 2:
        return ctx.call("nn.gemm", [a, w], {"trans_b": 1})
    return ctx.call("matmul", [a, b])


@aten("aten.baddbmm.default")
def baddbmm(ctx, node, bias, a, b, beta=1, alpha=1):
    """``beta * bias + alpha * bmm(a, b)``."""
    dt = node.dtype
    y = ctx.call("matmul", [a, b])
    if alpha != 1:
        y = ctx.call("multiply", [y, as_value(ctx, alpha, dt)])
    if beta == 0:
        return y
    c = bias if beta == 1 else ctx.call("multiply", [bias, as_value(ctx, beta, dt)])
    return ctx.call("add", [y, c])


@aten("aten.embedding.default")
def embedding(ctx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False,
              sparse=False):
    """Rows of ``weight`` ``(V, D)`` at ``indices`` (``take`` along axis 0)."""
    return ctx.call("take", [weight, indices], {"axis": 0})


@aten("aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec",
      "aten.upsample_nearest3d.vec", "aten.upsample_linear1d.vec",
      "aten.upsample_bilinear2d.vec", "aten.upsample_trilinear3d.vec")
def upsample(ctx, node, x, output_size, *rest):
    """``F.interpolate`` modes nearest / (bi/tri)linear: one ``image.resize`` per resized
    spatial axis (separable). Torch's source coordinate is ``dst / scale_factor`` (nearest,
    floored: ONNX ``asymmetric`` + ``floor``), ``(dst + 0.5) / s - 0.5`` clamped at 0 (linear:
    ``half_pixel``) or ``dst * (in - 1) / (out - 1)`` (``align_corners``); ``scale`` is the
    given scale factor (not with ``align_corners``), else ``out / in``."""
    linear = "nearest" not in node.op_type
    align = bool(rest[0]) if linear else False
    factors = rest[1] if linear else (rest[0] if rest else None)
    out = node.shape
    y = x
    for k in range(2, x.type.ndim):
        n_in, n_out = x.type.shape[k], out[k]
        if n_in == n_out and (factors is None or float(factors[k - 2]) == 1.0):
            continue
        # align_corners maps by (in - 1) / (out - 1) whatever the factor: ONNX's out = scale*in
        scale = float(factors[k - 2]) if factors and not align else n_out / n_in
        attrs = {"axis": k, "size": int(n_out), "scale": scale,
                 "mode": "linear" if linear else "nearest",
                 "coordinate_transformation_mode": ("align_corners" if align else "half_pixel")
                 if linear else "asymmetric", "nearest_mode": "floor"}
        y = ctx.call("image.resize", [y], attrs)
    return y


@aten("aten._native_batch_norm_legit.no_stats", "aten._native_batch_norm_legit_functional.default")
def batch_norm_batch_stats(ctx, node, x, weight, bias, *rest):
    """Normalization with the batch's own statistics (instance norm, which torch runs as batch
    norm of ``(1, N*C, *sp)``; batch norm without running statistics): per channel over
    ``(N, *sp)``, as ``nn.group_norm`` with one group per channel; ``(y, None, None)``.

    Raises:
        UnsupportedOpError: an update of running statistics (training-mode batch norm)."""
    if node.op_type.endswith("functional.default"):
        raise UnsupportedOpError("batch norm in training mode updates its running statistics: "
                                 "call model.eval()")
    eps = float(rest[-1])
    shape, dt = list(x.type.shape), x.type.dtype
    n, c = shape[0], shape[1]
    sp = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    rows = x if n == 1 else ctx.call("transpose", [x], {"perm": [1, 0] +
                                                         list(range(2, len(shape)))})
    rows = ctx.call("reshape", [rows], {"newshape": [1, c, n * sp]})
    y = ctx.call("nn.group_norm", [rows, _affine(ctx, weight, c, 1.0, dt),
                                   _affine(ctx, bias, c, 0.0, dt)],
                 {"epsilon": eps, "spatial": n * sp})
    if n == 1:
        return ctx.call("reshape", [y], {"newshape": shape}), None, None
    y = ctx.call("reshape", [y], {"newshape": [c, n] + shape[2:]})
    return ctx.call("transpose", [y], {"perm": [1, 0] + list(range(2, len(shape)))}), None, None
