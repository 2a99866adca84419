"""Operators transformers are made of: RMS normalization, group normalization, rotary position
embeddings, the SwiGLU gate and scaled dot-product attention (ONNX RMSNormalization-23,
GroupNormalization-18/21, RotaryEmbedding-23, SwiGLU-28, Attention-23/24/25).

Layouts and conventions (the converters in ``ember.frontend.converters.transformer`` bring ONNX
nodes into them):

- ``nn.rms_norm(x, scale)``: ``x / sqrt(mean(x^2 over dims [axis, rank)) + epsilon) * scale``,
  ``scale`` unidirectionally broadcast to ``x``; float32 (or float64).
- ``nn.group_norm(x, scale, bias)``: ``x`` is ``(N, G, R)`` (the converter reshapes ONNX's
  ``(N, C, *spatial)`` so that each group is one row of ``R = C / G * spatial`` elements);
  normalized per row (population variance, ``epsilon``), then ``* scale + bias`` with ``scale``
  and ``bias`` either per channel ``(C,)`` (opset 21) or per group ``(G,)`` (opset 18);
  ``spatial`` (attribute) is the spatial size, so channel ``c = g * C/G + r // spatial``.
- ``nn.rotary_embedding(x, cos, sin[, position_ids])``: ``x`` ``(B, H, S, Dh)`` or ``(B, S,
  H * Dh)`` (``num_heads`` given); ``cos``/``sin`` ``(P, rd / 2)`` indexed by ``position_ids
  (B, S)`` (int64), or ``(B, S, rd / 2)`` without it; the first ``rd = rotary_embedding_dim``
  (0: ``Dh``) features of each head are rotated as halves or, ``interleaved``, as even/odd
  pairs; the rest pass through.
- ``nn.swiglu(a, b)``: ``a * sigmoid(alpha * a) * b`` (same shapes).
- ``nn.attention(q, k, v[, mask][, nonpad])``: ``q (B, H, S, D)``, ``k (B, Hkv, T, D)``,
  ``v (B, Hkv, T, Dv)`` (the keys and values including any past cache), ``mask (Bm, Hm, Sm,
  Tm)`` float32 additive (each of ``Bm, Hm, Sm`` 1 or full; ``Tm <= T``, keys past ``Tm`` are
  masked), ``nonpad (B,)`` int64 valid key counts (Attention-24). Outputs ``y (B, H, S, Dv)``
  and, with ``qk_mode >= 0``, ``qk_matmul_output (B, H, S, T)``. ``H % Hkv == 0``; query head
  ``h`` uses key head ``h // (H / Hkv)``. Scores ``scale * q k^T``, then softcap ``c *
  tanh(s / c)`` (``softcap > 0``), plus the bias (mask; ``-inf`` for ``j > i + offset`` when
  ``causal``, ``offset = past`` or ``nonpad[b] - S``; outside ``window = (left, right)``;
  at ``j >= nonpad[b]``); softmax over keys; a row whose every key is masked is zero
  (ONNX Attention's errata). The kernel streams over keys with an online softmax
  (``ember.tir.schedule.rules.attention``).
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import LoweringError, ShapeMismatchError
from ..graph.ir import TensorType
from .elemwise import broadcast_load
from .registry import REQUIRED, OpPattern, broadcast_shapes, normalize_axis, register_op

FLOATS = ("float32", "float64")


def _need_float(types, name, allowed=FLOATS):
    for t in types:
        if t.dtype not in allowed:
            raise ShapeMismatchError(f"{name}: inputs must be {' or '.join(allowed)} (the "
                                     f"converter casts other floats), got {t.dtype}")


# rms_norm ---------------------------------------------------------------------------------------

def _rms_type(types, attrs):
    _need_float(types, "nn.rms_norm")
    x, s = types
    normalize_axis(attrs["axis"], x.ndim, "nn.rms_norm: ")
    if broadcast_shapes(x.shape, s.shape, where="nn.rms_norm scale: ") != tuple(x.shape):
        raise ShapeMismatchError(f"nn.rms_norm: scale {s.shape} does not broadcast to x "
                                 f"{x.shape}")
    return [x]


def _rms_ref(xs, attrs):
    x = xs[0].astype(np.float64)
    ax = normalize_axis(attrs["axis"], x.ndim)
    ms = np.mean(x * x, axis=tuple(range(ax, x.ndim)), keepdims=True)
    return [(x / np.sqrt(ms + attrs["epsilon"]) * xs[1]).astype(xs[0].dtype)]


def _rms_compute(inputs, attrs, out_types):
    x, scale = inputs
    ax = normalize_axis(attrs["axis"], x.ndim)
    red = x.shape[ax:]
    n = float(np.prod(red))
    kd = x.shape[:ax] + (1,) * (x.ndim - ax)
    dt = x.dtype
    r = [te.reduce_axis(s, "rms") for s in red]

    def fss(*i):
        v = x[i[:ax] + tuple(a.var for a in r)]
        return te.sum(v * v, axis=r)
    ss = te.compute(kd, fss, name="rms_sumsq")

    def f(*i):
        k = i[:ax] + (0,) * (x.ndim - ax)
        inv = te.const(1.0, dt) / te.sqrt(ss[k] / te.const(n, dt) + te.const(attrs["epsilon"], dt))
        return x[i] * inv * broadcast_load(scale, i)
    return [te.compute(x.shape, f, name="rms_norm")]


register_op("nn.rms_norm", infer_type=_rms_type, reference=_rms_ref, compute=_rms_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(2, 2), attrs={"axis": -1, "epsilon": 1e-5},
            doc="x / sqrt(mean(x^2 over [axis, rank)) + epsilon) * scale (ONNX "
                "RMSNormalization-23)")


# group_norm -------------------------------------------------------------------------------------

def _gn_type(types, attrs):
    _need_float(types, "nn.group_norm")
    x, s, b = types
    if x.ndim != 3:
        raise ShapeMismatchError(f"nn.group_norm: x must be (N, G, R), got {x.shape}")
    g, r = x.shape[1], x.shape[2]
    sp = int(attrs["spatial"])
    if sp < 1 or r % sp:
        raise ShapeMismatchError(f"nn.group_norm: row length {r} is not a multiple of the "
                                 f"spatial size {sp}")
    c = g * (r // sp)
    for name, t in (("scale", s), ("bias", b)):
        if tuple(t.shape) not in ((c,), (g,)):
            raise ShapeMismatchError(f"nn.group_norm: {name} {t.shape} must be ({c},) (per "
                                     f"channel) or ({g},) (per group)")
    return [x]


def _gn_ref(xs, attrs):
    x = xs[0].astype(np.float64)
    n, g, r = x.shape
    sp = attrs["spatial"]
    m = x.mean(axis=2, keepdims=True)
    var = ((x - m) ** 2).mean(axis=2, keepdims=True)
    y = (x - m) / np.sqrt(var + attrs["epsilon"])

    def per(t):
        t = t.astype(np.float64)
        if t.shape[0] == g and t.shape[0] != g * (r // sp):
            return t.reshape(1, g, 1)
        return np.repeat(t.reshape(g, r // sp), sp, axis=1).reshape(1, g, r)
    return [(y * per(xs[1]) + per(xs[2])).astype(xs[0].dtype)]


def _gn_compute(inputs, attrs, out_types):
    x, scale, bias = inputs
    n, g, r = x.shape
    sp = int(attrs["spatial"])
    cg = r // sp
    dt = x.dtype
    kd = (n, g, 1)
    r1 = te.reduce_axis(r, "gn")
    mean = te.compute(kd, lambda a, b, _: te.sum(x[a, b, r1.var], axis=r1), name="gn_sum")
    r2 = te.reduce_axis(r, "gv")

    def fvar(a, b, _):
        d = x[a, b, r2.var] - mean[a, b, 0] / te.const(float(r), dt)
        return te.sum(d * d, axis=r2)
    var = te.compute(kd, fvar, name="gn_var")

    def par(t, b, j):
        if t.shape[0] == g and g != g * cg:
            return t[(b,)]
        return t[(b * cg + j // sp,)]

    def f(a, b, j):
        y = (x[a, b, j] - mean[a, b, 0] / te.const(float(r), dt)) / te.sqrt(
            var[a, b, 0] / te.const(float(r), dt) + te.const(attrs["epsilon"], dt))
        return y * par(scale, b, j) + par(bias, b, j)
    return [te.compute(x.shape, f, name="group_norm")]


register_op("nn.group_norm", infer_type=_gn_type, reference=_gn_ref, compute=_gn_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(3, 3),
            attrs={"epsilon": 1e-5, "spatial": REQUIRED},
            doc="normalize each (N, G) row of x (N, G, R), then * scale + bias per channel "
                "(C,) or per group (G,) (ONNX GroupNormalization-18/21)")


# rotary_embedding -------------------------------------------------------------------------------

def _rot_geom(xshape, attrs):
    if len(xshape) == 4:
        dh = xshape[3]
    else:
        nh = int(attrs["num_heads"])
        if nh <= 0 or xshape[2] % nh:
            raise ShapeMismatchError(f"nn.rotary_embedding: a 3-D input {tuple(xshape)} needs "
                                     f"num_heads dividing its hidden size, got {nh}")
        dh = xshape[2] // nh
    rd = int(attrs["rotary_embedding_dim"]) or dh
    if rd % 2 or rd > dh:
        raise ShapeMismatchError(f"nn.rotary_embedding: rotary_embedding_dim {rd} must be even "
                                 f"and at most the head size {dh}")
    return dh, rd


def _rot_type(types, attrs):
    _need_float(types[:3], "nn.rotary_embedding")
    x, cos, sin = types[:3]
    if x.ndim not in (3, 4):
        raise ShapeMismatchError(f"nn.rotary_embedding: x must be 3-D or 4-D, got {x.shape}")
    dh, rd = _rot_geom(x.shape, attrs)
    b, s = x.shape[0], (x.shape[2] if x.ndim == 4 else x.shape[1])
    if cos.shape != sin.shape or cos.shape[-1] != rd // 2:
        raise ShapeMismatchError(f"nn.rotary_embedding: cos {cos.shape} and sin {sin.shape} must "
                                 f"be equal with last dim rotary_embedding_dim / 2 = {rd // 2}")
    if len(types) == 4:
        if types[3].shape != (b, s) or types[3].dtype != "int64" or cos.ndim != 2:
            raise ShapeMismatchError(f"nn.rotary_embedding: position_ids must be int64 "
                                     f"{(b, s)} with 2-D caches, got {types[3].shape} "
                                     f"{types[3].dtype}, cache {cos.shape}")
    elif cos.shape != (b, s, rd // 2):
        raise ShapeMismatchError(f"nn.rotary_embedding: without position_ids the caches must be "
                                 f"{(b, s, rd // 2)}, got {cos.shape}")
    return [x]


def _rot_ref(xs, attrs):
    x = xs[0].astype(np.float64)
    shape = x.shape
    dh, rd = _rot_geom(shape, attrs)
    if x.ndim == 4:
        x = x.transpose(0, 2, 1, 3)
    else:
        x = x.reshape(shape[0], shape[1], -1, dh)
    cos, sin = xs[1].astype(np.float64), xs[2].astype(np.float64)
    if len(xs) == 4:
        cos, sin = cos[xs[3]], sin[xs[3]]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    xr = x[..., :rd]
    if attrs["interleaved"]:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if attrs["interleaved"]:
        rot = np.stack([real, imag], axis=-1).reshape(xr.shape)
    else:
        rot = np.concatenate([real, imag], axis=-1)
    y = np.concatenate([rot, x[..., rd:]], axis=-1)
    y = y.transpose(0, 2, 1, 3) if len(shape) == 4 else y.reshape(shape)
    return [y.astype(xs[0].dtype)]


def _rot_compute(inputs, attrs, out_types):
    x, cos, sin = inputs[:3]
    pos = inputs[3] if len(inputs) == 4 else None
    dh, rd = _rot_geom(x.shape, attrs)
    half = rd // 2
    inter = bool(attrs["interleaved"])

    def f(*i):
        if x.ndim == 4:
            b, s, d = i[0], i[2], i[3]

            def xat(dd):
                return x[(i[0], i[1], i[2], dd)]
        else:
            b, s = i[0], i[1]
            d = i[2] % dh
            hd0 = i[2] - d

            def xat(dd):
                return x[(i[0], i[1], hd0 + dd)]
        if inter:
            pr = d // 2
            even = te.eq(d % 2, 0)
        else:
            pr = te.select(te.lt(d, half), d, d - half)
            even = te.lt(d, half)
        if pos is not None:
            p = pos[(b, s)]
            p = te.select(te.lt(p, 0), p + cos.shape[0], p)
            c, sn = cos[(p, pr)], sin[(p, pr)]
        else:
            c, sn = cos[(b, s, pr)], sin[(b, s, pr)]
        partner = te.select(even, d + 1, d - 1) if inter else te.select(even, d + half, d - half)
        sgn = te.select(even, te.const(-1.0, x.dtype), te.const(1.0, x.dtype))
        rot = xat(d) * c + sgn * xat(partner) * sn
        return te.if_then_else(te.lt(d, rd), rot, xat(d))
    checks = [te.IndexCheck(pos, [(-cos.shape[0], cos.shape[0] - 1)],
                            "RotaryEmbedding position_ids")] if pos is not None else []
    return [te.compute(x.shape, f, name="rotary_embedding", checks=checks)]


register_op("nn.rotary_embedding", infer_type=_rot_type, reference=_rot_ref,
            compute=_rot_compute, pattern=OpPattern.INJECTIVE, num_inputs=(3, 4),
            attrs={"interleaved": 0, "rotary_embedding_dim": 0, "num_heads": 0},
            doc="rotary position embedding of the first rotary_embedding_dim features of each "
                "head, halves or interleaved pairs (ONNX RotaryEmbedding-23)")


# swiglu -----------------------------------------------------------------------------------------

def _swiglu_type(types, attrs):
    _need_float(types, "nn.swiglu", FLOATS + ("float16",))
    a, b = types
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ShapeMismatchError(f"nn.swiglu: A {a.shape} {a.dtype} and B {b.shape} {b.dtype} "
                                 f"must have the same shape and dtype (no broadcasting)")
    return [a]


def _swiglu_ref(xs, attrs):
    a, b = xs[0].astype(np.float64), xs[1].astype(np.float64)
    return [(a / (1 + np.exp(-attrs["alpha"] * a)) * b).astype(xs[0].dtype)]


def _swiglu_compute(inputs, attrs, out_types):
    a, b = inputs
    al = te.const(float(attrs["alpha"]), a.dtype)
    return [te.compute(a.shape, lambda *i: a[i] * te.sigmoid(al * a[i]) * b[i], name="swiglu")]


register_op("nn.swiglu", infer_type=_swiglu_type, reference=_swiglu_ref,
            compute=_swiglu_compute, pattern=OpPattern.ELEMWISE, num_inputs=(2, 2),
            attrs={"alpha": 1.0},
            doc="a * sigmoid(alpha * a) * b, the Swish-gated linear unit (ONNX SwiGLU-28)")


# attention --------------------------------------------------------------------------------------

def _att_geom(types, attrs):
    from ..tir.schedule.rules.attention import AttentionGeometry
    n = 3 + (1 if attrs["has_mask"] else 0) + (1 if attrs["has_nonpad"] else 0)
    if len(types) != n:
        raise ShapeMismatchError(f"nn.attention: expected {n} inputs (q, k, v"
                                 f"{', mask' if attrs['has_mask'] else ''}"
                                 f"{', nonpad' if attrs['has_nonpad'] else ''}), got "
                                 f"{len(types)}")
    q, k, v = types[:3]
    _need_float([q, k, v], "nn.attention", ("float32",))
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ShapeMismatchError(f"nn.attention: q, k, v must be 4-D (B, heads, seq, head "
                                 f"size), got {q.shape}, {k.shape}, {v.shape}")
    b, h, s, d = q.shape
    _, hkv, t, dk = k.shape
    if k.shape[0] != b or v.shape[:3] != (b, hkv, t) or dk != d:
        raise ShapeMismatchError(f"nn.attention: k {k.shape} / v {v.shape} do not match q "
                                 f"{q.shape} (same batch and head size; k, v same heads and "
                                 f"length)")
    if hkv < 1 or h % hkv:
        raise ShapeMismatchError(f"nn.attention: query heads {h} are not a multiple of the "
                                 f"key/value heads {hkv}")
    mask = None
    if attrs["has_mask"]:
        m = types[3]
        _need_float([m], "nn.attention mask", ("float32",))
        if m.ndim != 4 or any(a not in (1, full) for a, full in zip(m.shape[:3], (b, h, s))) \
                or not 1 <= m.shape[3] <= t:
            raise ShapeMismatchError(f"nn.attention: mask {m.shape} must be 4-D, broadcast to "
                                     f"{(b, h, s)} in its first dims and have at most {t} keys")
        mask = tuple(int(a) for a in m.shape)
    if attrs["has_nonpad"]:
        npd = types[-1]
        if npd.shape != (b,) or npd.dtype != "int64":
            raise ShapeMismatchError(f"nn.attention: nonpad_kv_seqlen must be int64 ({b},), got "
                                     f"{npd.shape} {npd.dtype}")
    mode = int(attrs["qk_mode"])
    if mode not in (-1, 0, 1, 2, 3):
        raise ShapeMismatchError(f"nn.attention: qk_mode must be -1 (none) or 0-3, got {mode}")
    scale = attrs["scale"]
    scale = float(scale) if scale is not None else 1.0 / float(np.sqrt(d))
    return AttentionGeometry(b, h, hkv, s, t, d, v.shape[3], scale, bool(attrs["causal"]),
                             int(attrs["past"]), float(attrs["softcap"]), mask,
                             bool(attrs["has_nonpad"]), mode, tuple(attrs["window"]))


def _att_type(types, attrs):
    g = _att_geom(types, attrs)
    out = [TensorType((g.b, g.h, g.s, g.dv), "float32")]
    if g.qk_mode >= 0:
        out.append(TensorType((g.b, g.h, g.s, g.t), "float32"))
    return out


def attention_bias(g, nonpad=None, mask=None) -> np.ndarray:
    """The additive bias ``(B, H, S, T)`` (float64) of geometry ``g``: the mask (``-inf`` past
    its last dim), the causal frontier, the window and the padding (ONNX Attention-23..25)."""
    bias = np.zeros((g.b, g.h, g.s, g.t))
    if mask is not None:
        mm = np.full(mask.shape[:3] + (g.t,), -np.inf)
        mm[..., :mask.shape[3]] = mask
        bias = bias + mm
    i = np.arange(g.s)[:, None]
    j = np.arange(g.t)[None, :]
    off = (np.asarray(nonpad, np.int64) - g.s).reshape(-1, 1, 1, 1) if g.nonpad else \
        np.full((1, 1, 1, 1), g.past)
    ok = np.ones((off.shape[0], 1, g.s, g.t), bool)
    if g.causal:
        ok &= j <= i + off
    left, right = g.window
    if left >= 0:
        ok &= j >= i + off - left
    if right >= 0:
        ok &= j <= i + off + right
    if g.nonpad:
        ok &= j < np.asarray(nonpad).reshape(-1, 1, 1, 1)
    return np.where(ok, bias, -np.inf)


def _att_ref(xs, attrs):
    g = _att_geom([TensorType(a.shape, str(a.dtype)) for a in xs], attrs)
    q, k, v = (a.astype(np.float64) for a in xs[:3])
    mask = xs[3].astype(np.float64) if g.mask is not None else None
    nonpad = xs[-1] if g.nonpad else None
    rep = g.h // g.hkv
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = g.scale * (q @ k.transpose(0, 1, 3, 2))
    raw = s
    if g.softcap > 0:
        s = g.softcap * np.tanh(s / g.softcap)
    capped = s
    bias = attention_bias(g, nonpad, mask)
    with np.errstate(invalid="ignore", over="ignore"):
        s = s + bias
        m = s.max(axis=-1, keepdims=True)
        m = np.where(np.isneginf(m), 0, m)
        e = np.exp(s - m)
        tot = e.sum(axis=-1, keepdims=True)
        p = np.where(tot > 0, e / np.where(tot > 0, tot, 1), 0)
    y = (p @ v).astype(np.float32)
    if g.qk_mode < 0:
        return [y]
    qk = [raw, capped, s, p][g.qk_mode]
    return [y, qk.astype(np.float32)]


def _att_compute(inputs, attrs, out_types):
    from ..tir.schedule.rules.attention import attention_body
    from .imperative import imperative_kernel
    g = _att_geom([TensorType(tuple(t.shape), t.dtype) for t in inputs], attrs)

    def body(kb):
        if len(kb.params) != len(inputs):
            raise LoweringError(f"nn.attention: an input with at most 16 elements is an inline "
                                f"constant, not a kernel parameter; the kernel reads q, k, v, "
                                f"mask and nonpad_kv_seqlen from memory (feed it as a graph "
                                f"input or a larger initializer)")
        return attention_body(g, kb.params + kb.outputs, "scalar")
    checks = []
    if g.nonpad:
        checks = [te.IndexCheck(inputs[-1], [(0, g.t)], "Attention nonpad_kv_seqlen")]
    f = imperative_kernel(inputs, out_types, body, "attention", checks=checks)
    f.attrs["attention"] = g.to_attrs()
    f.attrs["flops"] = 2 * g.b * g.h * g.s * g.t * (g.d + g.dv)
    return [f]


register_op("nn.attention", infer_type=_att_type, reference=_att_ref, compute=_att_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(3, 5),
            attrs={"scale": None, "causal": 0, "past": 0, "softcap": 0.0, "has_mask": 0,
                   "has_nonpad": 0, "qk_mode": -1, "window": (-1, -1)},
            doc="scaled dot-product attention, multi-head or grouped-query, with causal, "
                "additive mask, softcap, window and padding bias, streaming over keys (ONNX "
                "Attention-23/24/25; see ember.ops.transformer)")
