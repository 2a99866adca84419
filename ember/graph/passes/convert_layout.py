"""ConvertLayout: run 2-D convolutions and the operators around them channels-last (NHWC).

ONNX activations are NCHW; ember's fast convolution schedule (``ember.tir.schedule.rules.gemm``)
wants the channels contiguous (``data_layout="NHWC"``), which is also the layout pooling and the
per-channel epilogues vectorize best in. The pass walks the bindings in order and keeps, per
value, its NCHW and/or NHWC form:

- ``nn.conv`` (2-D), ``nn.max_pool``, ``nn.avg_pool``, ``nn.global_avg_pool``,
  ``nn.global_max_pool`` on a rank-4 input take the NHWC form of their input (a ``transpose``
  is emitted only when the value exists in NCHW alone) and produce NHWC;
- elementwise and broadcasting operators whose rank-4 operands are available in NHWC run in NHWC;
  lower-rank operands that broadcast against NCHW (a ``(C, 1, 1)`` bias) are reshaped to rank 4
  and transposed -- constants, so ``FoldConstant`` folds them at compile time;
- ``concatenate`` along the channel axis of NHWC inputs concatenates along axis 3;
- an int8 ``qnn.conv2d`` (``layout="nchw"``, constant weights) becomes the channels-last
  kernel (``layout="nhwc"``, or ``"nchw_nhwc"`` for a stem as below; ``blocked_form``
  re-packs its weights), and per-tensor ``qnn.quantize`` / ``qnn.dequantize`` count as
  elementwise, so int8 activations stay NHWC between the layers;
- every other operator, and the function's outputs, read the NCHW form (a ``transpose`` back is
  emitted where a value exists only in NHWC).

A convolution with few input channels (at most ``STEM_MAX_CHANNELS``, one group: the network's
stem on an RGB image) whose input exists in NCHW alone reads it as it is and writes NHWC
(``data_layout="NCHW", out_layout="NHWC"``): transposing a 3-channel image costs a pass over
it as slow as the convolution's own reads (scattered 3-float groups), while the convolution's
GEMM micro-kernel broadcasts one input element per output pixel in either layout
(``PassContext(config={"layout.stem_nchw": False})`` keeps the transpose).

Convolution weights keep their (M, C/group, kh, kw) layout here; the schedule packs them once at
compile time. Transposes of constants are folded by the ``FoldConstant`` that follows in the
pipeline, so only activations are ever transposed at run time: the network input once, and
values leaving the NHWC region (e.g. before a flatten).
"""

from __future__ import annotations

from ...ops import get_op
from ...ops.registry import OpPattern
from ..ir import Binding, Call, Constant, Function, Var
from ..mutator import Rewriter
from .pass_manager import function_pass, register_config

STEM_NCHW = register_config(
    "layout.stem_nchw", bool,
    "ConvertLayout: a convolution with at most STEM_MAX_CHANNELS input channels reads its "
    "NCHW input directly and writes NHWC instead of transposing the input (default True)")
STEM_MAX_CHANNELS = 4

LAYOUT_OPS = ("nn.conv", "nn.max_pool", "nn.avg_pool", "nn.global_avg_pool",
              "nn.global_max_pool")
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
_AXIS_ATTRS = ("axis", "axes", "perm", "shape", "pads", "starts")


def _rank(v) -> int:
    return v.type.ndim if hasattr(v, "type") and v.type is not None else -1


def _is_elementwise(op: str, attrs: dict) -> bool:
    if op.startswith("@") or op == "nn.batch_norm":
        return False
    try:
        od = get_op(op)
    except Exception:  # noqa: BLE001 - an unknown op is simply not converted
        return False
    return od.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST) and not any(
        k in attrs for k in _AXIS_ATTRS)


def _qconv_nchw(call) -> bool:
    """An NCHW ``qnn.conv2d`` with constant weights (ConvertLayout makes it channels-last)."""
    return call.op == "qnn.conv2d" and call.attrs.get("layout") == "nchw" and \
        len(call.args) == 4 and all(isinstance(a, Constant) for a in call.args[1:])


def _qdq_per_tensor(call) -> bool:
    """``qnn.quantize`` / ``qnn.dequantize`` with one scale and zero point: elementwise (its
    ``axis`` is unused)."""
    return call.op in ("qnn.quantize", "qnn.dequantize") and all(
        isinstance(a, Constant) and a.data.size == 1 for a in call.args[1:])


def _reads_nchw(call, have_nhwc: bool) -> bool:
    """Whether convolution ``call`` should read its NCHW input directly (see the module doc)."""
    x = call.args[0]
    return (call.op == "nn.conv" and not have_nhwc and call.attrs.get("group", 1) == 1
            and call.attrs.get("out_layout") is None
            and x.type.shape[1] <= STEM_MAX_CHANNELS)


def convert_function(func: Function, stem_nchw: bool = True) -> Function:
    """``func`` with 2-D convolutions and their neighbours in NHWC (see the module doc);
    ``stem_nchw``: convolutions with few input channels read an NCHW-only input directly."""
    if not any(b.call.op == "nn.conv" and b.call.args[0].type.ndim == 4
               and b.call.attrs.get("data_layout") is None for b in func.bindings) and \
            not any(_qconv_nchw(b.call) for b in func.bindings):
        return func
    rw = Rewriter(func)
    cf: dict[int, object] = {}   # id(original value) -> its NCHW form in the new function
    cl: dict[int, object] = {}   # id(original value) -> its NHWC form

    def get_cf(v):
        if id(v) in cf:
            return cf[id(v)]
        if id(v) in cl:
            cf[id(v)] = rw.emit("transpose", [cl[id(v)]], {"perm": list(TO_NCHW)})
            return cf[id(v)]
        return rw.lookup(v)

    def get_cl(v):
        if id(v) in cl:
            return cl[id(v)]
        x = get_cf(v)
        cl[id(v)] = rw.emit("transpose", [x], {"perm": list(TO_NHWC)})
        return cl[id(v)]

    def broadcast_cl(v):
        """A lower-rank operand broadcasting against NCHW, as a rank-4 NHWC operand."""
        r = _rank(v)
        if r <= 0 or r == 4:
            return get_cl(v) if r == 4 else get_cf(v)
        x = get_cf(v)
        shape = [1] * (4 - r) + list(v.type.shape)
        x = rw.emit("reshape", [x], {"newshape": shape})
        return rw.emit("transpose", [x], {"perm": list(TO_NHWC)})

    for b in func.bindings:
        call = b.call
        op, attrs = call.op, dict(call.attrs)
        out = b.outputs[0]
        single = len(b.outputs) == 1
        if (op in LAYOUT_OPS and single and _rank(call.args[0]) == 4
                and attrs.get("data_layout") is None):
            if stem_nchw and _reads_nchw(call, id(call.args[0]) in cl):
                attrs["data_layout"], attrs["out_layout"] = "NCHW", "NHWC"
                x = get_cf(call.args[0])
            else:
                attrs["data_layout"] = "NHWC"
                x = get_cl(call.args[0])
            args = [x] + [get_cf(a) for a in call.args[1:]]
            cl[id(out)] = rw.emit(op, args, attrs, name=out.name)
            continue
        if single and _qconv_nchw(call):  # int8: the channels-last kernel, blocked weights
            from ...ops.qnn_conv import blocked_form
            x0 = call.args[0]
            stem = stem_nchw and id(x0) not in cl and x0.type.shape[1] <= STEM_MAX_CHANNELS
            consts = blocked_form(*(c.data for c in call.args[1:4]), attrs,
                                  "nchw_nhwc" if stem else "nhwc", c=int(x0.type.shape[1]))
            args = [get_cf(x0) if stem else get_cl(x0)] + [Constant(c) for c in consts[:3]]
            cl[id(out)] = rw.emit(op, args, consts[3], name=out.name)
            continue
        if (single and _rank(out) == 4 and (_is_elementwise(op, attrs) or _qdq_per_tensor(call))
                and any(_rank(a) == 4 and id(a) in cl for a in call.args)
                and all(_rank(a) <= 4 for a in call.args)):
            args = [broadcast_cl(a) for a in call.args]
            cl[id(out)] = rw.emit(op, args, attrs, name=out.name)
            continue
        if (op == "concatenate" and single and _rank(out) == 4
                and attrs.get("axis") in (1, -3)
                and all(_rank(a) == 4 for a in call.args)
                and any(id(a) in cl for a in call.args)):
            attrs["axis"] = 3
            cl[id(out)] = rw.emit(op, [get_cl(a) for a in call.args], attrs, name=out.name)
            continue
        args = tuple(get_cf(a) if isinstance(a, Var) else a for a in call.args)
        if all(x is y for x, y in zip(args, call.args)):
            rw.emit_binding(b)
        else:
            rw.emit_binding(Binding(b.outputs, Call(op, args, call.attrs)))
        for o in b.outputs:
            cf[id(o)] = o
    for o in func.outputs:
        if isinstance(o, Var) and (id(o) in cl or id(o) in cf):
            rw.replace(o, get_cf(o))
    return rw.finish()


@function_pass("ConvertLayout", opt_level=2)
def ConvertLayout(func, mod, ctx):
    """Run 2-D convolutions, pooling and their elementwise neighbours in NHWC."""
    return convert_function(func, bool(ctx.get_config(STEM_NCHW, True)))


__all__ = ["ConvertLayout", "convert_function", "STEM_NCHW", "STEM_MAX_CHANNELS"]
