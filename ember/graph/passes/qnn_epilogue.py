"""QnnEpilogue: keep int8 activations int8 between the layers of a realized QDQ model (after
``RealizeQnn`` and ``ConvertLayout``; docs/quantization.md, "Lowering to int8 kernels").

- A residual add, ``quantize([relu](add(dequantize(c, sc, zc), dequantize(s, ss, zs))), so,
  zo)`` with ``c`` a channels-last ``qnn.conv2d`` read only there, becomes that convolution
  with ``s`` as its fifth input: the epilogue requantizes the sum itself
  (``ember.codegen.microkernel_qgemm``), so no float tensor and no elementwise Q/DQ kernel sits
  between the convolutions. Either operand of the add may be the convolution.
- A residual add read in float32 (``[relu](add(dequantize(c), dequantize(s)))`` with no
  quantize after it) becomes the convolution with a float32 output: its epilogue writes the
  float sum.
- ``quantize(max_pool(dequantize(x, s, z)), s, z)`` (the same scale and zero point, ``s > 0``)
  is ``max_pool(x)`` on the int8 data (dequantization is monotonic, the window's maximum
  commutes with it); the same holds for ``reshape`` / ``flatten`` / ``transpose`` between a
  dequantize and a quantize of equal parameters.
- A dense ``qnn.conv2d`` (``layout="rows"``) gets the channels-last kernel's blocked weights
  (``qnn_conv.blocked_form``).
"""

from __future__ import annotations

import numpy as np

from ...ops.qnn import QDTYPES
from ...ops.qnn_conv import blocked_form
from ..ir import Constant
from ..pattern import PatternCallback, is_constant, is_op, rewrite_function, wildcard
from .pass_manager import function_pass
from .realize_qnn import _dq, _scalar, quantize_root

LAYOUT_FREE = ("nn.max_pool", "reshape", "transpose", "flatten", "squeeze", "expand_dims")


class ResidualCallback(PatternCallback):
    """``quantize([relu](add(dequantize(conv), dequantize(s))))`` -> ``qnn.conv2d(..., s)``."""

    def __init__(self):
        a, b = wildcard(), wildcard()
        add = is_op("add")(_dq(a), _dq(b))
        self.pattern = is_op("qnn.quantize")(is_op("nn.relu")(add) | add, is_constant(),
                                            is_constant())

    def callback(self, m):
        qb, ab, relu = quantize_root(m)
        so, zo = _scalar(qb.call.args[1]), _scalar(qb.call.args[2])
        out_dtype = qb.call.attrs["out_dtype"]
        if so is None or zo is None or not so > 0:
            return None
        for i in (0, 1):
            side = _conv_and_residual(m, ab, i)
            if side is None:
                continue
            args, attrs = side
            lo, hi = QDTYPES[out_dtype]
            return m.emit("qnn.conv2d", args, {
                **attrs, "out_dtype": out_dtype, "o_scale": float(so), "o_zp": int(zo),
                "o_lo": max(lo, int(zo)) if relu else lo, "o_hi": hi})
        return None


class FloatResidualCallback(PatternCallback):
    """``[relu](add(dequantize(conv), dequantize(s)))`` read in float32 (no quantize after it:
    the last residual add of a ResNet feeds the float global average pool) -> ``qnn.conv2d(...,
    s)`` with ``out_dtype="float32"``: the epilogue writes the float sum (``o_relu``: its
    ReLU) as the DequantizeLinear / Add / Relu arithmetic computes it. Runs after
    ``ResidualCallback``, so only adds no quantize consumes are left."""

    def __init__(self):
        a, b = wildcard(), wildcard()
        add = is_op("add")(_dq(a), _dq(b))
        self.pattern = is_op("nn.relu")(add) | add

    def callback(self, m):
        P = m.producer
        root = P(m.root)
        relu = root.call.op == "nn.relu"
        ab = P(root.call.args[0]) if relu else root
        if not relu:  # an add read by one relu: the relu's match takes both
            us = m._users.get(id(m.root), [])
            if len(us) == 1 and us[0] is not None and us[0].call.op == "nn.relu":
                return None
        if m.root.type.dtype != "float32":
            return None
        if relu and m.uses(root.call.args[0]) != 1:
            return None
        for i in (0, 1):
            side = _conv_and_residual(m, ab, i, float_requant_only=True)
            if side is None:
                continue
            args, attrs = side
            return m.emit("qnn.conv2d", args, {**attrs, "out_dtype": "float32", "o_relu": relu})
        return None


def _conv_and_residual(m, ab, i: int, float_requant_only: bool = False):
    """Side ``i`` of the residual ``add(dequantize(a), dequantize(b))`` ``ab`` as a fusable
    pair: operand ``i`` the dequantized output of a blocked-weight channels-last
    ``qnn.conv2d`` read only here, operand ``1 - i`` the dequantized residual ``s`` of the
    conv's output shape. Returns ``(args, attrs)``: the conv's rewritten arguments plus ``s``,
    and its attributes with the residual's (``mid_dtype``, ``c_scale``, ``s_scale``,
    ``s_zp``); None when the side does not fit (``float_requant_only``: also when the conv
    requantizes in integers)."""
    P = m.producer
    dqc, dqs = P(ab.call.args[i]), P(ab.call.args[1 - i])
    c, s = dqc.call.args[0], dqs.call.args[0]
    cb = P(c)
    if cb is None or cb.call.op != "qnn.conv2d" or len(cb.call.args) != 4:
        return None
    ca = cb.call.attrs
    if ca.get("w_layout") != "blocked" or ca.get("layout") not in ("nhwc", "rows", "nchw_nhwc"):
        return None
    if float_requant_only and ca.get("requant", "float") != "float":
        return None
    if m.uses(c) != 1 or m.uses(ab.call.args[i]) != 1:
        return None
    sc, zc = _scalar(dqc.call.args[1]), _scalar(dqc.call.args[2])
    ss, zs = _scalar(dqs.call.args[1]), _scalar(dqs.call.args[2])
    if None in (sc, zc, ss, zs) or int(zc) != int(ca["y_zp"]) or \
            s.type.dtype not in QDTYPES or tuple(s.type.shape) != tuple(c.type.shape):
        return None
    attrs = {**ca, "mid_dtype": ca["out_dtype"], "c_scale": float(sc), "s_scale": float(ss),
             "s_zp": int(zs)}
    return [m.rw.lookup(v) for v in cb.call.args] + [m.rw.lookup(s)], attrs


class Int8LayoutCallback(PatternCallback):
    """``quantize(op(dequantize(x, s, z)), s, z)`` -> ``op(x)`` for max pooling and the
    layout operators (``LAYOUT_FREE``)."""

    def __init__(self):
        self.pattern = is_op("qnn.quantize")(wildcard(), is_constant(), is_constant())

    def callback(self, m):
        P = m.producer
        qb = P(m.root)
        ob = P(qb.call.args[0])
        if ob is None or ob.call.op not in LAYOUT_FREE or len(ob.outputs) != 1:
            return None
        db = P(ob.call.args[0])
        if db is None or db.call.op != "qnn.dequantize" or m.uses(ob.call.args[0]) != 1 or \
                any(not isinstance(a, Constant) for a in ob.call.args[1:]):
            return None
        x = db.call.args[0]
        s1, z1 = _scalar(db.call.args[1]), _scalar(db.call.args[2])
        s2, z2 = _scalar(qb.call.args[1]), _scalar(qb.call.args[2])
        if None in (s1, z1, s2, z2) or np.float32(s1) != np.float32(s2) or int(z1) != int(z2) \
                or not s1 > 0 or x.type.dtype != qb.call.attrs["out_dtype"]:
            return None
        return m.emit(ob.call.op, [m.rw.lookup(x)] + list(ob.call.args[1:]), dict(ob.call.attrs))


class DenseBlockedCallback(PatternCallback):
    """A ``rows`` ``qnn.conv2d`` with tap-major weights -> the blocked (channels-last) form."""

    def __init__(self):
        self.pattern = is_op("qnn.conv2d")(wildcard(), is_constant(), is_constant(),
                                           is_constant())

    def callback(self, m):
        b = m.producer(m.root)
        a = b.call.attrs
        if a.get("layout") != "rows" or a.get("w_layout", "tap") != "tap":
            return None
        w, bias, mult, attrs = blocked_form(*(c.data for c in b.call.args[1:4]), dict(a), "rows")
        return m.emit("qnn.conv2d", [m.rw.lookup(b.call.args[0]), Constant(w), Constant(bias),
                                     Constant(mult)], attrs)


def qnn_epilogue_function(func):
    """``func`` with the rewrites of the module doc."""
    if not any(b.call.op == "qnn.conv2d" for b in func.bindings):
        return func
    func = rewrite_function([DenseBlockedCallback(), Int8LayoutCallback(), ResidualCallback()],
                            func)
    return rewrite_function([FloatResidualCallback()], func)


@function_pass("QnnEpilogue", opt_level=2)
def QnnEpilogue(func, mod, ctx):
    """Fuse residual adds into channels-last ``qnn.conv2d`` epilogues and run max pooling /
    layout operators on int8 data (``ember.graph.passes.qnn_epilogue``)."""
    return qnn_epilogue_function(func)
