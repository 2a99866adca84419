"""DecomposeAttention (GPU pipelines): ``nn.attention`` as graph operators that GPU kernels
exist for, instead of its CPU kernel (a streaming online softmax built of CPU micro-kernel
calls, which WGSL and CUDA C cannot express).

ONNX Attention-23 semantics (``ember.ops.transformer``), in float32::

    k, v   <- key/value heads repeated for grouped-query attention (take along axis 1)
    s      =  scale * q @ k^T                         (qk_matmul_output_mode 0)
    s      =  softcap * tanh(s / softcap)  if softcap (mode 1)
    s      =  s + bias + mask                         (mode 2; bias: causal frontier and
                                                       sliding window as a 0 / -inf constant,
                                                       mask padded with -inf past its last dim)
    p      =  exp(s - m) / sum(exp(s - m)),  m = rowmax(s) (0 where a row is all -inf);
              a row whose every key is masked is 0    (mode 3; ONNX's errata)
    y      =  p @ v

With ``nonpad_kv_seqlen`` (Attention-24) the bias depends on its values ``n[b]``: key ``j``
of query ``i`` is kept where ``j < n[b]`` and, with the causal offset ``n[b] - S``, ``j <= i +
n[b] - S`` (causal) and the window's ``n[b] - S - left <= j - i <= n[b] - S + right``, each a
comparison of a constant ``(1, 1, S, T)`` index grid with ``n`` reshaped to ``(B, 1, 1, 1)``.
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant
from ..mutator import rewrite_function
from .pass_manager import function_pass


def _const(a) -> Constant:
    return Constant(np.asarray(a))


def decompose_attention_function(func):
    """``func`` with every ``nn.attention`` binding replaced by the graph operators of the
    module doc."""
    from ...ops.transformer import _att_geom, attention_bias

    def nonpad_bias(g, n, e):
        """``where(keep, 0, -inf)`` ``(B, 1, S, T)`` from valid key counts ``n (B,)``."""
        n = e("reshape", [n], {"newshape": [g.b, 1, 1, 1]})
        i = np.arange(g.s, dtype=np.int64)[:, None]
        j = np.arange(g.t, dtype=np.int64)[None, :]
        d = (j - i + g.s)[None, None]                     # keep where d <= n (causal)
        keep = e("less", [_const(j[None, None]), n])
        conds = []
        if g.causal:
            conds.append(e("less_equal", [_const(d), n]))
        left, right = g.window
        if left >= 0:
            conds.append(e("greater_equal", [_const(d + left), n]))
        if right >= 0:
            conds.append(e("less_equal", [_const(d - right), n]))
        for c in conds:
            keep = e("logical_and", [keep, c])
        return e("where", [keep, _const(np.float32(0)), _const(np.float32(-np.inf))])

    def visit(b, args, rw):
        if b.call.op != "nn.attention":
            return None
        g = _att_geom([a.type for a in args], b.call.attrs)
        q, k, v = args[:3]
        mask = args[3] if g.mask is not None else None
        e = rw.emit
        if g.hkv != g.h:
            idx = _const(np.arange(g.h, dtype=np.int64) // (g.h // g.hkv))
            k, v = e("take", [k, idx], {"axis": 1}), e("take", [v, idx], {"axis": 1})
        s = e("matmul", [q, e("transpose", [k], {"perm": [0, 1, 3, 2]})])
        s = e("multiply", [s, _const(np.float32(g.scale))])
        stages = [s]
        if g.softcap > 0:
            s = e("multiply", [e("tanh", [e("multiply", [s, _const(np.float32(1 / g.softcap))])]),
                               _const(np.float32(g.softcap))])
        stages.append(s)
        if g.nonpad:
            s = e("add", [s, nonpad_bias(g, args[-1], e)])
        else:
            bias = attention_bias(g)[:1, :1]
            if np.any(bias != 0):
                s = e("add", [s, _const(bias.astype(np.float32))])
        if mask is not None:
            tm = mask.type.shape[3]
            if tm < g.t:
                pad = np.full(tuple(mask.type.shape[:3]) + (g.t - tm,), -np.inf, np.float32)
                mask = e("concatenate", [mask, _const(pad)], {"axis": 3})
            s = e("add", [s, mask])
        stages.append(s)
        m = e("max", [s], {"axes": [3], "keepdims": 1})
        m = e("where", [e("isinf", [m]), _const(np.float32(0)), m])
        x = e("exp", [e("subtract", [s, m])])
        tot = e("sum", [x], {"axes": [3], "keepdims": 1})
        p = e("where", [e("greater", [tot, _const(np.float32(0))]), e("divide", [x, tot]),
                        _const(np.float32(0))])
        stages.append(p)
        y = e("matmul", [p, v])
        return [y] if g.qk_mode < 0 else [y, stages[g.qk_mode]]
    return rewrite_function(func, visit)


@function_pass("DecomposeAttention", opt_level=0)
def decompose_attention(func, mod, ctx):
    """Graph pass: ``decompose_attention_function`` (GPU pipelines only)."""
    return decompose_attention_function(func)


__all__ = ["decompose_attention_function"]
