"""Symbolic shape functions of the built-in operators (issue 18: compile once for symbolic dims).

A shape function is an operator's type relation for inputs whose dimensions may be symbolic
(``ember.tir.symbolic``: ints or ``int64`` expressions over named symbols). Where an
operator's ``infer_type`` only moves dimensions around (elementwise and broadcasting ops,
transpose, take, reductions, softmax, layer norm, matmul/gemm, whose dimension comparisons go
through ``registry.same_dim``) it *is* the shape function and is registered as such. Reshape,
concatenate and strided_slice compute dimensions, so they get their own here.

Operators not listed have no shape function: a symbolic model reaching one raises
``ShapeFunctionMissingError`` (``ember.register_shape_func`` adds one).
"""

from __future__ import annotations

from ..errors import ShapeMismatchError
from ..tir import symbolic as sym
from ..graph.ir import TensorType
from . import activation, elemwise, reduce
from .registry import get_op, normalize_axis, register_shape_func, same_dim

# operators whose infer_type is already a shape function over symbolic dims
_GENERIC = (list(elemwise.UNARY) + list(elemwise.BINARY) + list(activation.ACTIVATIONS)
            + list(reduce._NP)
            + ["where", "clip", "cast", "isinf", "nn.softmax", "nn.log_softmax",
               "nn.layer_norm", "matmul", "nn.gemm", "transpose", "take", "broadcast_to"])

for _name in _GENERIC:
    register_shape_func(_name, get_op(_name).infer_type)


@register_shape_func("reshape")
def reshape_shape(types, attrs):
    """``reshape`` to ``newshape`` (ints or symbolic dims, 0 and -1 already resolved by the
    frontend): the element counts of input and output must have equal normal forms.

    Raises:
        ShapeMismatchError: a negative static dim, or counts that are not provably equal."""
    x = types[0]
    shape = tuple(sym.as_dim(d) for d in attrs["newshape"])
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise ShapeMismatchError(f"reshape: newshape {sym_shape(shape)} must be resolved "
                                 f"non-negative dims")
    if not sym.dims_equal(sym.prod(x.shape), sym.prod(shape)):
        raise ShapeMismatchError(f"reshape: cannot prove that {sym_shape(x.shape)} "
                                 f"({sym.dim_str(sym.prod(x.shape))} elements) and "
                                 f"{sym_shape(shape)} ({sym.dim_str(sym.prod(shape))}) hold "
                                 f"the same number of elements")
    return [TensorType(shape, x.dtype)]


@register_shape_func("concatenate")
def concatenate_shape(types, attrs):
    """``concatenate`` along ``axis``: the other dims must be equal, the axis dims add up.

    Raises:
        ShapeMismatchError: ranks, dtypes or non-axis dims differ."""
    x = types[0]
    ax = normalize_axis(attrs["axis"], x.ndim, "concatenate: ")
    for t in types:
        if t.ndim != x.ndim or t.dtype != x.dtype or not all(
                same_dim(a, b) for k, (a, b) in enumerate(zip(t.shape, x.shape)) if k != ax):
            raise ShapeMismatchError(f"concatenate: inputs {[sym_shape(tt.shape) for tt in types]}"
                                     f" differ outside axis {ax} (or in dtype)")
    total = sym.as_dim(sum((sym.as_expr(t.shape[ax]) for t in types[1:]),
                           sym.as_expr(x.shape[ax])))
    return [TensorType(x.shape[:ax] + (total,) + x.shape[ax + 1:], x.dtype)]


@register_shape_func("strided_slice")
def strided_slice_shape(types, attrs):
    """``strided_slice`` with ``begin``/``end`` (ints or symbolic, already clamped into the
    axis by the frontend) and int ``strides``: ``ceil((end - begin) / stride)`` elements for a
    positive stride, ``ceil((begin - end) / -stride)`` for a negative one (the frontend's
    clamping makes these non-negative).

    Raises:
        ShapeMismatchError: lists of the wrong length or a symbolic/zero stride."""
    x = types[0]
    b, e, s = attrs["begin"], attrs["end"], attrs["strides"]
    if not (len(b) == len(e) == len(s) == x.ndim):
        raise ShapeMismatchError(f"strided_slice: begin/end/strides must have rank {x.ndim}")
    for ss in s:
        if not isinstance(ss, int) or ss == 0:
            raise ShapeMismatchError(f"strided_slice: stride {ss!r} must be a non-zero int")
    return [TensorType(tuple(slice_count(*t) for t in zip(b, e, s)), x.dtype)]


def slice_count(begin, end, step: int):
    """Elements of ``range(begin, end, step)`` for clamped, possibly symbolic ``begin`` and
    ``end`` (``end >= begin`` for a positive step): ``ceil((end - begin) / step)``."""
    bb, ee = sym.as_expr(begin), sym.as_expr(end)
    n = (ee - bb + (step - 1)) // step if step > 0 else (bb - ee + (-step - 1)) // (-step)
    return sym.as_dim(n)


def sym_shape(shape) -> str:
    """Text of a shape with symbolic dims (``(batch, (seq + 1), 64)``)."""
    from ..graph.ir import shape_str
    return shape_str(shape)


@register_shape_func("nn.attention")
def attention_shape(types, attrs):
    """``nn.attention`` (ONNX Attention-23; docs/transformers.md) on 4-D ``q (B, H, S, D)``,
    ``k (B, Hkv, T, D)``, ``v (B, Hkv, T, Dv)`` (optional mask, nonpad): ``(B, H, S, Dv)``
    and, for ``qk_mode >= 0``, the ``(B, H, S, T)`` scores. Symbolic ``B``, ``S``, ``T`` must
    agree between the inputs by normal form; the head counts must be static when they differ.

    Raises:
        ShapeMismatchError: wrong ranks, inputs that do not agree, or query heads that are not
            a multiple of the key/value heads."""
    n = 3 + (1 if attrs["has_mask"] else 0) + (1 if attrs["has_nonpad"] else 0)
    if len(types) != n:
        raise ShapeMismatchError(f"nn.attention: expected {n} inputs, got {len(types)}")
    q, k, v = types[:3]
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ShapeMismatchError(f"nn.attention: q, k, v must be 4-D, got {sym_shape(q.shape)}, "
                                 f"{sym_shape(k.shape)}, {sym_shape(v.shape)}")
    b, h, s, d = q.shape
    _, hkv, t, dk = k.shape
    if not (same_dim(k.shape[0], b) and same_dim(v.shape[0], b) and same_dim(v.shape[1], hkv)
            and same_dim(v.shape[2], t) and same_dim(dk, d)):
        raise ShapeMismatchError(f"nn.attention: k {sym_shape(k.shape)} / v {sym_shape(v.shape)} "
                                 f"do not match q {sym_shape(q.shape)}")
    if not same_dim(h, hkv) and not (isinstance(h, int) and isinstance(hkv, int)
                                     and hkv >= 1 and h % hkv == 0):
        raise ShapeMismatchError(f"nn.attention: query heads {sym.dim_str(h)} are not a "
                                 f"multiple of the key/value heads {sym.dim_str(hkv)}")
    out = [TensorType((b, h, s, v.shape[3]), "float32")]
    if int(attrs["qk_mode"]) >= 0:
        out.append(TensorType((b, h, s, t), "float32"))
    return out
