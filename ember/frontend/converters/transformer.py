"""Converters for the ONNX operators transformers are made of: Attention-23/24/25,
RMSNormalization-23, RotaryEmbedding-23, GroupNormalization-18/21 and SwiGLU-28, onto the native
graph operators of ``ember.ops.transformer`` (not their ONNX function bodies).

Narrow floats (float16, bfloat16) are computed in float32 (the operators' ``stash_type`` /
``softmax_precision``: float32 is what the spec's function bodies use by default) and cast back.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from ...ops.registry import normalize_axis
from ..dtypes import onnx_dtype
from . import converter

F32 = "float32"


def _f32(ctx, x):
    return x if x.type.dtype == F32 else ctx.call("cast", [x], {"dtype": F32})


def _back(ctx, y, dtype):
    return y if y.type.dtype == dtype else ctx.call("cast", [y], {"dtype": dtype})


def _work_dtype(dtype: str) -> str:
    return dtype if dtype in ("float32", "float64") else F32


@converter("RMSNormalization", since=23)
def rms_normalization(ctx, node):
    """ONNX RMSNormalization-23: ``nn.rms_norm`` over dims ``axis..`` in ``stash_type``
    precision (float32 unless the input is float64), cast back to X's dtype.

    Raises:
        UnsupportedOpError: a ``stash_type`` other than float32/float64."""
    x, scale = node.input(0), node.input(1)
    stash = onnx_dtype(node.attr("stash_type", 1), "RMSNormalization stash_type: ")
    if stash not in ("float32", "float64"):
        raise UnsupportedOpError(f"RMSNormalization stash_type={stash} is not supported "
                                 f"(float32 or float64)")
    wd = "float64" if x.type.dtype == "float64" else stash
    xs = x if x.type.dtype == wd else ctx.call("cast", [x], {"dtype": wd})
    ss = scale if scale.type.dtype == wd else ctx.call("cast", [scale], {"dtype": wd})
    axis = normalize_axis(node.attr("axis", -1), x.type.ndim, f"{node.where}RMSNormalization: ")
    y = ctx.call("nn.rms_norm", [xs, ss], {"axis": axis,
                                           "epsilon": float(node.attr("epsilon", 1e-5))})
    return [_back(ctx, y, x.type.dtype)]


def _group_norm(per_channel: bool):
    def convert(ctx, node):
        x, scale, bias = node.input(0), node.input(1), node.input(2)
        g = int(node.attr("num_groups"))
        shape = x.type.shape
        if x.type.ndim < 2 or g < 1 or shape[1] % g:
            raise ShapeMismatchError(f"{node.where}GroupNormalization: num_groups {g} must "
                                     f"divide the channels of {shape}")
        c = shape[1]
        want = (c,) if per_channel else (g,)
        for name, t in (("scale", scale), ("bias", bias)):
            if tuple(t.type.shape) != want:
                raise ShapeMismatchError(f"{node.where}GroupNormalization-"
                                         f"{21 if per_channel else 18}: {name} must be {want}, "
                                         f"got {t.type.shape}")
        wd = _work_dtype(x.type.dtype)
        sp = int(np.prod(shape[2:])) if len(shape) > 2 else 1
        xr = ctx.call("reshape", [x], {"newshape": [shape[0], g, (c // g) * sp]})
        xr = xr if xr.type.dtype == wd else ctx.call("cast", [xr], {"dtype": wd})
        s = scale if scale.type.dtype == wd else ctx.call("cast", [scale], {"dtype": wd})
        b = bias if bias.type.dtype == wd else ctx.call("cast", [bias], {"dtype": wd})
        y = ctx.call("nn.group_norm", [xr, s, b], {"epsilon": float(node.attr("epsilon", 1e-5)),
                                                    "spatial": sp})
        y = ctx.call("reshape", [y], {"newshape": list(shape)})
        return [_back(ctx, y, x.type.dtype)]
    convert.__doc__ = (f"ONNX GroupNormalization-{21 if per_channel else 18}: ``nn.group_norm`` "
                       f"on the input viewed as ``(N, G, C/G * spatial)``, scale and bias per "
                       f"{'channel (C,)' if per_channel else 'group (G,)'}.\n\n    Raises:\n"
                       f"        ShapeMismatchError: num_groups not dividing C, or scale/bias "
                       f"of the wrong shape.")
    return convert


converter("GroupNormalization", since=18, until=20)(_group_norm(False))
converter("GroupNormalization", since=21)(_group_norm(True))


@converter("RotaryEmbedding", since=23)
def rotary_embedding(ctx, node):
    """ONNX RotaryEmbedding-23: ``nn.rotary_embedding`` (3-D input with ``num_heads`` or 4-D;
    interleaved or halves; partial rotation with ``rotary_embedding_dim``; with or without
    ``position_ids``)."""
    x, cos, sin, pos = (node.input(k) for k in range(4))
    dt = x.type.dtype
    args = [_f32(ctx, x) if dt != "float64" else x]
    wd = args[0].type.dtype
    for t in (cos, sin):
        args.append(t if t.type.dtype == wd else ctx.call("cast", [t], {"dtype": wd}))
    if pos is not None:
        args.append(pos if pos.type.dtype == "int64" else
                    ctx.call("cast", [pos], {"dtype": "int64"}))
    y = ctx.call("nn.rotary_embedding", args, {
        "interleaved": int(node.attr("interleaved", 0)),
        "rotary_embedding_dim": int(node.attr("rotary_embedding_dim", 0)),
        "num_heads": int(node.attr("num_heads", 0))})
    return [_back(ctx, y, dt)]


@converter("SwiGLU", since=28)
def swiglu(ctx, node):
    """ONNX SwiGLU-28: ``nn.swiglu(A, B)`` = ``A * sigmoid(alpha * A) * B``."""
    return [ctx.call("nn.swiglu", [node.input(0), node.input(1)],
                     {"alpha": float(node.attr("alpha", 1.0))})]


def _heads_4d(ctx, x, heads, what, where):
    """``(B, S, heads * d)`` -> ``(B, heads, S, d)``."""
    b, s, hid = x.type.shape
    if not heads or hid % heads:
        raise ShapeMismatchError(f"{where}Attention: a 3-D {what} {x.type.shape} needs "
                                 f"{'q_num_heads' if what == 'Q' else 'kv_num_heads'} dividing "
                                 f"its hidden size, got {heads}")
    x = ctx.call("reshape", [x], {"newshape": [b, s, heads, hid // heads]})
    return ctx.call("transpose", [x], {"perm": [0, 2, 1, 3]})


@converter("Attention", since=23)
def attention(ctx, node):
    """ONNX Attention-23 (and 24's ``nonpad_kv_seqlen``, 25's sliding window):
    ``nn.attention`` on 4-D ``(B, heads, seq, head size)`` operands. 3-D inputs are split into
    heads with ``q_num_heads`` / ``kv_num_heads``; ``past_key``/``past_value`` are concatenated
    in front of K/V along the sequence (the ``present_*`` outputs) and set the causal offset; a
    boolean mask becomes ``0 / -inf``, a mask of lower rank gets leading unit dims; narrow
    floats compute in float32.

    Raises:
        ShapeMismatchError: operands whose shapes do not fit the spec (wrong head counts, a
            mask that does not broadcast, past without present shapes).
        UnsupportedOpError: only one of past_key / past_value; nonpad_kv_seqlen together with
            a past cache; a softmax_precision other than float32 for float32 inputs."""
    q, k, v, mask, pk, pv = (node.input(i) for i in range(6))
    nonpad = node.input(6) if len(node.inputs) > 6 else None
    where = node.where
    if (pk is None) != (pv is None):
        raise UnsupportedOpError(f"{where}Attention: past_key and past_value must be given "
                                 f"together")
    if nonpad is not None and pk is not None:
        raise UnsupportedOpError(f"{where}Attention: nonpad_kv_seqlen cannot be combined with "
                                 f"past_key/past_value (ONNX Attention-24)")
    dt = q.type.dtype
    if dt not in ("float32", "float16", "bfloat16"):
        raise UnsupportedOpError(f"{where}Attention: dtype {dt} is not supported (float32, "
                                 f"float16, bfloat16)")
    ranks = (q.type.ndim, k.type.ndim, v.type.ndim)
    if ranks not in ((3, 3, 3), (4, 4, 4)):
        raise ShapeMismatchError(f"{where}Attention: Q, K, V must be all 3-D or all 4-D, got "
                                 f"{q.type.shape}, {k.type.shape}, {v.type.shape}")
    three_d = q.type.ndim == 3
    q, k, v = (_f32(ctx, t) for t in (q, k, v))
    if three_d:
        hq, hkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
        q = _heads_4d(ctx, q, hq, "Q", where)
        k = _heads_4d(ctx, k, hkv, "K", where)
        v = _heads_4d(ctx, v, hkv, "V", where)
    if q.type.ndim != 4 or k.type.ndim != 4 or v.type.ndim != 4:
        raise ShapeMismatchError(f"{where}Attention: Q, K, V must be all 3-D or all 4-D, got "
                                 f"{q.type.shape}, {k.type.shape}, {v.type.shape}")
    past = 0
    if pk is not None:
        pk, pv = _f32(ctx, pk), _f32(ctx, pv)
        past = pk.type.shape[2]
        k = ctx.call("concatenate", [pk, k], {"axis": 2})
        v = ctx.call("concatenate", [pv, v], {"axis": 2})
    b, h, s, _ = q.type.shape
    t = k.type.shape[2]
    if t == 0:
        raise ShapeMismatchError(f"{where}Attention: K and V have no keys (sequence length 0 "
                                 f"and no past): give at least one key")
    args = [q, k, v]
    if mask is not None:
        if mask.type.dtype == "bool":
            mask = ctx.call("where", [mask, ctx.const(np.float32(0)),
                                      ctx.const(np.float32(-np.inf))])
        else:
            mask = _f32(ctx, mask)
        if mask.type.ndim > 4 or mask.type.ndim < 1:
            raise ShapeMismatchError(f"{where}Attention: attn_mask must have rank 1 to 4, got "
                                     f"{mask.type.shape}")
        ms = (1,) * (4 - mask.type.ndim) + tuple(mask.type.shape)
        if ms != tuple(mask.type.shape):
            mask = ctx.call("reshape", [mask], {"newshape": list(ms)})
        if any(a not in (1, f) for a, f in zip(ms[:3], (b, h, s))) or ms[3] > t:
            raise ShapeMismatchError(f"{where}Attention: attn_mask {ms} does not broadcast to "
                                     f"{(b, h, s, t)}")
        args.append(mask)
    if nonpad is not None:
        args.append(nonpad if nonpad.type.dtype == "int64" else
                    ctx.call("cast", [nonpad], {"dtype": "int64"}))
    want_qk = len(node.outputs) > 3 and bool(node.outputs[3])
    mode = int(node.attr("qk_matmul_output_mode", 0))
    if want_qk and mode not in (0, 1, 2, 3):
        raise UnsupportedOpError(f"{where}Attention: qk_matmul_output_mode={mode} is not one "
                                 f"of 0, 1, 2, 3")
    scale = node.attr("scale")
    softcap = float(node.attr("softcap", 0.0) or 0.0)
    window = (int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1)))
    outs = ctx.call("nn.attention", args, {
        "scale": float(scale) if scale is not None else None,
        "causal": int(node.attr("is_causal", 0)), "past": past, "softcap": softcap,
        "has_mask": int(mask is not None), "has_nonpad": int(nonpad is not None),
        "qk_mode": mode if want_qk else -1, "window": window})
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    y = outs[0]
    if three_d:
        y = ctx.call("transpose", [y], {"perm": [0, 2, 1, 3]})
        y = ctx.call("reshape", [y], {"newshape": [b, s, h * v.type.shape[3]]})
    res = [_back(ctx, y, dt), _back(ctx, k, dt), _back(ctx, v, dt)]
    if want_qk:
        res.append(_back(ctx, outs[1], dt))
    return res[:max(1, len(node.outputs))]
