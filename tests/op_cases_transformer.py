"""Randomized cases of the transformer operators (``ember.ops.transformer``)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from op_cases import FLOATS, Case, cases, one_of, rng, values

TOL = dict(rtol=1e-4, atol=1e-5)


@cases("nn.rms_norm")
def rms_norm(draw, op):
    r = rng(draw)
    nd = draw(st.integers(1, 3))
    shp = tuple(draw(st.integers(1, 20)) for _ in range(nd))
    axis = draw(st.integers(-nd, nd - 1))
    dt = one_of(draw, FLOATS)
    norm = shp[axis % nd:]
    return Case([values(r, shp, dt), values(r, norm, dt)],
                {"axis": axis, "epsilon": draw(st.sampled_from([1e-5, 0.1]))}, **TOL)


@cases("nn.group_norm")
def group_norm(draw, op):
    r = rng(draw)
    n, g, cg, sp = (draw(st.integers(1, 4)) for _ in range(4))
    dt = one_of(draw, FLOATS)
    ps = g * cg if draw(st.booleans(), label="per channel") else g
    return Case([values(r, (n, g, cg * sp), dt), values(r, (ps,), dt), values(r, (ps,), dt)],
                {"spatial": sp, "epsilon": 1e-5}, **TOL)


@cases("nn.rotary_embedding")
def rotary_embedding(draw, op):
    r = rng(draw)
    b, h, s = (draw(st.integers(1, 3)) for _ in range(3))
    dh = 2 * draw(st.integers(1, 5))
    rd = 2 * draw(st.integers(1, dh // 2)) if draw(st.booleans(), label="partial") else 0
    half = (rd or dh) // 2
    three = draw(st.booleans(), label="3-D")
    x = values(r, (b, s, h * dh) if three else (b, h, s, dh), "float32")
    attrs = {"interleaved": int(draw(st.booleans())), "rotary_embedding_dim": rd,
             "num_heads": h if three else 0}
    if draw(st.booleans(), label="position ids"):
        p = draw(st.integers(1, 8))
        ins = [x, values(r, (p, half), "float32"), values(r, (p, half), "float32"),
               r.integers(0, p, (b, s)).astype(np.int64)]
    else:
        ins = [x, values(r, (b, s, half), "float32"), values(r, (b, s, half), "float32")]
    return Case(ins, attrs, **TOL)


@cases("nn.swiglu")
def swiglu(draw, op):
    r = rng(draw)
    shp = tuple(draw(st.integers(1, 6)) for _ in range(draw(st.integers(1, 3))))
    dt = one_of(draw, FLOATS)
    return Case([values(r, shp, dt), values(r, shp, dt)],
                {"alpha": draw(st.sampled_from([1.0, 1.702, 0.5]))}, **TOL)


@cases("nn.attention")
def attention(draw, op):
    r = rng(draw)
    b, hkv = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h = hkv * draw(st.integers(1, 3))
    s, d, dv = draw(st.integers(1, 20)), draw(st.integers(1, 17)), draw(st.integers(1, 17))
    past = draw(st.integers(0, 70))
    t = s + past
    ins = [values(r, (b, h, s, d), "float32"), values(r, (b, hkv, t, d), "float32"),
           values(r, (b, hkv, t, dv), "float32")]
    attrs = {"causal": int(draw(st.booleans())), "past": past,
             "softcap": draw(st.sampled_from([0.0, 0.0, 5.0])),
             "scale": draw(st.sampled_from([None, 0.3]))}
    if draw(st.booleans(), label="mask"):
        ms = tuple(a if draw(st.booleans()) else 1 for a in (b, h, s)) + \
            (draw(st.integers(1, t)),)
        ins.append(values(r, ms, "float32"))
        attrs["has_mask"] = 1
    attrs["qk_mode"] = draw(st.sampled_from([-1, -1, 0, 1, 2, 3]))
    return Case(ins, attrs, **TOL)
