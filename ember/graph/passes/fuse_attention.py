"""FuseAttention (CPU pipeline): the scaled dot-product attention that exporters write as
matmuls and a softmax,

    s = matmul(q [* c1], kt [* c2])        q (B, H, S, D), kt (B, H, D, T)
    s = s [* c3 | / c3]                    scalar constants, any of them
    s = s [+ bias]                         bias broadcasting to (B, H, S, T)
    y = matmul(softmax(s, axis=-1), v)     v (B, H, T, Dv)

becomes ``nn.attention(q, k, v[, bias], scale=c1 * c2 * c3)`` with ``k = transpose(kt, [0, 1,
3, 2])`` (folded into the transpose that made ``kt``, when one did). The CPU kernel of
``nn.attention`` streams over key tiles with an online softmax (docs/transformers.md): the
``(S, T)`` scores are never written, the softmax is not a separate pass over memory, and the
key length need not suit the GEMM rule's register blocks (ViT's 197 tokens: the scores'
``n = 197`` is prime, so the ``q @ kt`` GEMM had one-lane register tiles).

Matched only on float32 4-D operands of static shapes whose batch and head dims agree, a softmax over the last
axis, and intermediate values read by nothing else. ``bias`` is the additive mask of
``nn.attention`` (reshaped to 4-D, broadcast along the keys when it has one key column). One
difference from the unfused form: a query row whose every key is ``-inf`` gives zeros instead
of NaN (``nn.attention`` follows ONNX Attention's errata).
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant
from ..mutator import rewrite_function, users
from .pass_manager import function_pass


def _scalar(v) -> float | None:
    """The value of a one-element float constant, else ``None``."""
    if isinstance(v, Constant) and v.data.size == 1 and v.data.dtype.kind == "f":
        return float(np.asarray(v.data).reshape(-1)[0])
    return None


def fuse_attention_function(func):
    """``func`` with each matmul-softmax-matmul attention (module doc) replaced by one
    ``nn.attention`` binding; chains that do not match exactly are kept."""
    use = users(func)

    def single_use(v) -> bool:
        return len(use.get(id(v), [])) == 1

    def visit(b, args, rw):
        if b.call.op != "matmul":
            return None
        p, v = args
        if p.type.ndim != 4 or v.type.ndim != 4 or p.type.dtype != "float32" \
                or not _static(p, v):
            return None
        sm = rw.producer(p)
        if sm is None or sm.call.op != "nn.softmax" or not single_use(b.call.args[0]) \
                or sm.call.attrs.get("axis") not in (-1, 3):
            return None
        scale, bias = 1.0, None
        cur = rw.lookup(sm.call.args[0])
        seen = []  # the chain's intermediate values, each must be read only by the next
        while True:
            pb = rw.producer(cur)
            if pb is None:
                return None
            seen.append(cur)
            xa = [rw.lookup(a) for a in pb.call.args]
            if pb.call.op == "matmul":
                break
            if pb.call.op in ("multiply", "divide"):
                c = _scalar(xa[1])
                if c is None and pb.call.op == "multiply":
                    c, xa = _scalar(xa[0]), xa[::-1]
                if c is None or c == 0.0 or xa[0].type != cur.type:
                    return None
                scale *= c if pb.call.op == "multiply" else 1.0 / c
                cur = xa[0]
            elif pb.call.op == "add" and bias is None and scale == 1.0:
                # the bias is added after any scaling: nn.attention's scale applies to q k^T
                k_side = [i for i in (0, 1) if xa[i].type == cur.type
                          and _reaches_matmul(rw, xa[i])]
                if not k_side:
                    return None
                cur, bias = xa[k_side[0]], xa[1 - k_side[0]]
            else:
                return None
        if any(not single_use(x) for x in seen):
            return None
        mm = rw.producer(cur)
        q, kt = (rw.lookup(a) for a in mm.call.args)
        q, c1 = _unscale(rw, q)
        kt, c2 = _unscale(rw, kt)
        scale *= c1 * c2
        if q.type.ndim != 4 or kt.type.ndim != 4 or not _static(q, kt) \
                or q.type.dtype != "float32" \
                or kt.type.dtype != "float32" or v.type.dtype != "float32":
            return None
        bq, hq, s, d = q.type.shape
        if kt.type.shape[:3] != (bq, hq, d) or v.type.shape[:3] != (bq, hq, kt.type.shape[3]):
            return None
        t = kt.type.shape[3]
        k = _untranspose(rw, kt)
        ins = [q, k, v]
        if bias is not None:
            if bias.type.dtype != "float32" or bias.type.ndim > 4 or not _static(bias):
                return None
            bs = (1,) * (4 - bias.type.ndim) + tuple(bias.type.shape)
            if any(a not in (1, f) for a, f in zip(bs, (bq, hq, s, t))):
                return None
            if bs != tuple(bias.type.shape):
                bias = rw.emit("reshape", [bias], {"newshape": list(bs)})
            if bs[3] != t:
                bias = rw.emit("broadcast_to", [bias], {"shape": list(bs[:3]) + [t]})
            ins.append(bias)
        y = rw.emit("nn.attention", ins, {"scale": float(scale), "has_mask": int(bias is not None)})
        return [y]
    return rewrite_function(func, visit)


def _static(*vals) -> bool:
    """Every dim of every value's type is a plain int (symbolic lengths keep the unfused
    form)."""
    return all(isinstance(n, int) for x in vals for n in x.type.shape)


def _reaches_matmul(rw, x) -> bool:
    """``x`` is a matmul's value, possibly multiplied or divided by scalar constants."""
    while True:
        pb = rw.producer(x)
        if pb is None:
            return False
        if pb.call.op == "matmul":
            return True
        a = [rw.lookup(v) for v in pb.call.args]
        if pb.call.op in ("multiply", "divide") and _scalar(a[1]) is not None:
            x = a[0]
        elif pb.call.op == "multiply" and _scalar(a[0]) is not None:
            x = a[1]
        else:
            return False


def _unscale(rw, x):
    """``(x0, c)`` when ``x = x0 * c`` with a scalar constant ``c`` (same type), else
    ``(x, 1.0)``."""
    pb = rw.producer(x)
    if pb is not None and pb.call.op == "multiply":
        a = [rw.lookup(v) for v in pb.call.args]
        for xi, ci in ((0, 1), (1, 0)):
            c = _scalar(a[ci])
            if c is not None and a[xi].type == x.type:
                return a[xi], c
    return x, 1.0


def _untranspose(rw, kt):
    """``k`` with ``kt = k^T`` over the last two dims: the producing transpose composed with
    the swap when ``kt`` is a transpose, else a new transpose."""
    swap = (0, 1, 3, 2)
    pb = rw.producer(kt)
    if pb is not None and pb.call.op == "transpose" and pb.call.attrs.get("perm") is not None:
        inner = rw.lookup(pb.call.args[0])
        q = [a % inner.type.ndim for a in pb.call.attrs["perm"]]
        comp = [q[i] for i in swap]
        if comp == list(range(4)):
            return inner
        return rw.emit("transpose", [inner], {"perm": comp})
    return rw.emit("transpose", [kt], {"perm": list(swap)})


@function_pass("FuseAttention", opt_level=2)
def FuseAttention(func, mod, ctx):
    """Rewrite matmul / scale / mask-add / softmax / matmul attention into ``nn.attention``."""
    return fuse_attention_function(func)
