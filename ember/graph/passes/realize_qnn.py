"""RealizeQnn: the CPU's int8 lowering of the QDQ graph form (``ember.ops.qnn``).

    q = qnn.quantize(act(core(qnn.dequantize(x_q, sx, zx), qnn.dequantize(w_q, sw, 0) [, b])),
                     sy, zy)

with ``core`` a 2-D ``nn.conv`` (group 1), ``nn.gemm`` (alpha = beta = 1, A not transposed) or
``matmul`` against constant weights, ``b`` a float bias or ``qnn.dequantize`` of an int32 bias,
and ``act`` an optional ``nn.relu``, becomes one ``qnn.conv2d`` (``ember.ops.qnn_conv``): u8/s8
activations x s8 weights -> s32, with the weights packed at compile time (``qnn_conv.pack_weight``), the zero-point correction ``-zx_u * sum_k w`` folded into the int32 bias, and the
requantization (``sx * sw / sy`` per output channel, round half to even, ``+ zy``, saturation,
ReLU as the lower clamp ``zy``) in the kernel's epilogue. Its output stays int8 for the next
layer's ``qnn.dequantize``. The matching uses the pattern language (``ember.graph.pattern``).

Chains that do not fit stay in the QDQ form and compute in float32 (fused elementwise
quantize/dequantize kernels): per-axis activation scales, weight zero points other than 0,
grouped or non-2-D convolutions, uint8 weights, reductions longer than
``qnn_conv.MAX_K``. ``realize_report(mod)`` lists what was and was not lowered.

With the ``PassContext`` config ``"RealizeQnn.requantize": "fixed"`` (set by the ``npu`` target,
docs/npu.md) every ``qnn.conv2d`` with one per-tensor scale ratio gets the integer requantization
(``requant="fixed"``, ``(M, shift)`` from ``qnn_conv.fixed_point_multiplier`` with the sound
accumulator bound ``max|x - zx| * max_co sum|w| + max|bias|``), so CPU and NPU outputs are
identical; per-channel ratios keep the float32 form.
"""

from __future__ import annotations

import numpy as np

from ...errors import EmberError
from ..ir import Constant
from ..pattern import PatternCallback, is_constant, is_op, rewrite_function, wildcard
from .pass_manager import PassContext, function_pass, register_config

REQUANTIZE = register_config(
    "RealizeQnn.requantize", str,
    "'float' (default: float32 multiply, round half even) or 'fixed' (the integer (acc * M + "
    "round) >> shift of the NPU, bit-exact across targets) requantization of qnn.conv2d")


def _dq(x):
    return is_op("qnn.dequantize")(x, is_constant(), is_constant())


def _scalar(c) -> float | None:
    a = np.asarray(c.data)
    return a.reshape(-1)[0].item() if a.size == 1 else None


def quantize_root(m):
    """``(quantize binding, the binding it quantizes under an optional nn.relu, relu?)`` of a
    match rooted at ``qnn.quantize([relu](...))``."""
    qb = m.producer(m.root)
    cb = m.producer(qb.call.args[0])
    if cb.call.op == "nn.relu":
        return qb, m.producer(cb.call.args[0]), True
    return qb, cb, False


class QnnConvCallback(PatternCallback):
    """``quantize([relu](conv/gemm/matmul(dequantize(x), dequantize(w)[, bias])))`` ->
    ``qnn.conv2d`` (see the module doc)."""

    def __init__(self, requantize: str = "float"):
        self.requantize = requantize
        x, w = wildcard(), is_constant()
        dqx, dqw = _dq(x), _dq(w)
        bias = _dq(is_constant()) | is_constant()
        core = (is_op("nn.conv")(dqx, dqw) | is_op("nn.conv")(dqx, dqw, bias) |
                is_op("nn.gemm")(dqx, dqw) | is_op("nn.gemm")(dqx, dqw, bias) |
                is_op("matmul")(dqx, dqw))
        act = is_op("nn.relu")(core) | core
        self.x = x
        self.pattern = is_op("qnn.quantize")(act, is_constant(), is_constant())

    def callback(self, m):
        try:
            return self._rewrite(m)
        except EmberError:
            return None  # shapes the int8 operator refuses: keep the QDQ form

    def _rewrite(self, m):
        P = m.producer
        qb, cb, relu = quantize_root(m)
        dqx, dqw = P(cb.call.args[0]), P(cb.call.args[1])
        xq = m[self.x]
        sx, zx = _scalar(dqx.call.args[1]), _scalar(dqx.call.args[2])
        sy, zy = _scalar(qb.call.args[1]), _scalar(qb.call.args[2])
        if None in (sx, zx, sy, zy) or xq.type.dtype not in ("uint8", "int8"):
            return None
        wq = np.asarray(dqw.call.args[0].data)
        sw = np.asarray(dqw.call.args[1].data, np.float64).reshape(-1)
        zw = np.asarray(dqw.call.args[2].data)
        if wq.dtype != np.int8 or np.any(zw != 0):
            return None
        op, a = cb.call.op, cb.call.attrs
        if op == "nn.conv":
            if wq.ndim != 4 or xq.type.ndim != 4 or a.get("group", 1) != 1 or \
                    a.get("data_layout") not in (None, "NCHW"):
                return None
            w_axis, wmat = 0, wq.reshape(wq.shape[0], -1)
            kernel = wq.shape[2:]
        else:
            if op == "nn.gemm" and (a["alpha"] != 1.0 or a["beta"] != 1.0 or a["trans_a"]):
                return None
            if wq.ndim != 2 or xq.type.ndim < 2:
                return None
            trans = op == "nn.gemm" and a["trans_b"]
            w_axis, wmat = (0, wq) if trans else (1, wq.T)
            kernel = (1, 1)
        cout, k = wmat.shape
        if sw.size not in (1, cout) or (sw.size > 1 and
                                        dqw.call.attrs["axis"] % wq.ndim != w_axis):
            return None
        sw = np.broadcast_to(sw, (cout,))
        b = np.zeros(cout)
        if len(cb.call.args) > 2:
            bv = cb.call.args[2]
            bp = P(bv)
            if bp is not None:  # dequantize(int32 bias)
                from ...ops.qnn import dequantize_ref
                b = dequantize_ref(*(np.asarray(c.data) for c in bp.call.args), bp.call.attrs["axis"])
            else:
                b = np.asarray(bv.data)
            b = np.broadcast_to(np.asarray(b, np.float64).reshape(-1), (cout,))
        x_zp_u = int(zx) + (128 if xq.type.dtype == "int8" else 0)
        acc_scale = float(np.float32(sx)) * sw
        bias = np.rint(b / acc_scale) - x_zp_u * wmat.astype(np.int64).sum(1)
        if np.any(np.abs(bias) >= 2**30):
            return None
        from ...ops.qnn_conv import pack_weight
        wp = pack_weight(wq if op == "nn.conv" else wmat)
        mult = (acc_scale / float(np.float32(sy))).astype(np.float32)
        out_dtype = qb.call.attrs["out_dtype"]
        attrs = {"x_zp": int(zx), "y_zp": int(zy), "out_dtype": out_dtype,
                 "lo": int(zy) if relu else -128, "hi": 255, "kernel": tuple(int(v) for v in kernel)}
        if self.requantize == "fixed" and np.all(mult == mult[0]):
            from ...ops.qnn_conv import fixed_point_multiplier
            span = max(x_zp_u, 255 - x_zp_u)
            bound = span * int(np.abs(wmat.astype(np.int64)).sum(1).max()) + \
                int(np.abs(bias + x_zp_u * wmat.astype(np.int64).sum(1)).max())
            try:
                m_, s_ = fixed_point_multiplier(float(acc_scale[0]) / float(np.float32(sy)),
                                                bound)
                attrs.update(requant="fixed", rq_mult=m_, rq_shift=s_)
            except ValueError:
                pass  # the float32 requantization stays
        consts = [Constant(wp, name_hint="qweight"), Constant(bias.astype(np.int32)),
                  Constant(mult)]
        if op == "nn.conv":
            nd = 2
            attrs.update(layout="nchw", strides=tuple(a.get("strides") or (1,) * nd),
                         dilations=tuple(a.get("dilations") or (1,) * nd),
                         pads=tuple(a.get("pads") or (0,) * (2 * nd)))
            return m.emit("qnn.conv2d", [xq] + consts, attrs)
        attrs["layout"] = "rows"
        lead = tuple(xq.type.shape[:-1])
        if xq.type.ndim != 2 and not all(isinstance(d, (int, np.integer)) for d in lead):
            return None  # symbolic leading dims: keep the QDQ form
        rows = int(np.prod(lead, dtype=np.int64))  # reshape wants resolved dims, not -1
        x2 = xq if xq.type.ndim == 2 else m.emit("reshape", [xq], {"newshape": [rows, k]})
        y = m.emit("qnn.conv2d", [x2] + consts, attrs)
        return y if xq.type.ndim == 2 else m.emit("reshape", [y], {"newshape": [int(d) for d in lead]
                                                                   + [cout]})


def realize_qnn_function(func, requantize: str = "float"):
    """``func`` with every matching QDQ chain rewritten into ``qnn.conv2d`` (module doc);
    ``requantize``: ``"float"`` or ``"fixed"``."""
    if not any(b.call.op == "qnn.quantize" for b in func.bindings):
        return func
    return rewrite_function([QnnConvCallback(requantize)], func)


def realize_report(mod) -> dict:
    """``{"int8": [...], "float": [...]}``: the ``qnn.conv2d`` bindings, and the conv/dense/
    matmul bindings that stayed float32, of ``mod["main"]`` (names of their outputs)."""
    f = mod["main"]
    out = {"int8": [], "float": []}
    for b in f.bindings:
        if b.call.op == "qnn.conv2d":
            out["int8"].append(b.outputs[0].name)
        elif b.call.op in ("nn.conv", "nn.gemm", "nn.dense", "matmul"):
            out["float"].append(b.outputs[0].name)
    return out


@function_pass("RealizeQnn", opt_level=1)
def RealizeQnn(func, mod, ctx):
    """Lower ``dequantize -> conv/gemm/matmul [-> relu] -> quantize`` chains to ``qnn.conv2d``
    int8 kernels (``ember.graph.passes.realize_qnn``)."""
    mode = (ctx or PassContext.current()).get_config(REQUANTIZE, "float")
    if mode not in ("float", "fixed"):
        raise EmberError(f"PassContext config {REQUANTIZE}={mode!r}: use 'float' or 'fixed'")
    return realize_qnn_function(func, mode)
