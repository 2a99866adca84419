"""Randomized cases for the signal operators (``ember.ops.signal``). Registered into
``op_cases.CASES`` (imported at its end)."""

from __future__ import annotations

from hypothesis import strategies as st

from op_cases import FLOATS, Case, cases, one_of, rng, values


@cases("signal.dft")
def dft(draw, op):
    r = rng(draw)
    rank = draw(st.integers(1, 3), label="signal rank")
    sp = tuple(draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank), label="shape"))
    ax = draw(st.integers(0, rank - 1), label="axis")
    inverse = draw(st.integers(0, 1), label="inverse")
    onesided = draw(st.integers(0, 1), label="onesided")
    cplx = 2 if (inverse or not onesided) and draw(st.booleans(), label="complex") else 1
    if inverse and onesided:
        cplx = 2
    n = sp[ax]
    length = draw(st.sampled_from([n, max(1, n - 2), n + 3]), label="length")
    if inverse and onesided:
        length = max(2 * (n - 1), 1) if draw(st.booleans(), label="default length") else length
    x = values(r, sp + (cplx,), one_of(draw, FLOATS, "dtype"))
    return Case([x], {"axis": ax, "length": length, "inverse": inverse, "onesided": onesided},
                rtol=1e-4, atol=1e-4)


@cases("signal.stft")
def stft(draw, op):
    r = rng(draw)
    batch, length = draw(st.integers(1, 2), label="batch"), draw(st.integers(2, 16), label="len")
    flen = draw(st.integers(1, length), label="frame_length")
    step = draw(st.integers(1, 4), label="frame_step")
    onesided = draw(st.integers(0, 1), label="onesided")
    cplx = 2 if not onesided and draw(st.booleans(), label="complex") else 1
    dt = one_of(draw, FLOATS, "dtype")
    ins = [values(r, (batch, length, cplx), dt)]
    if draw(st.booleans(), label="window"):
        ins.append(values(r, (flen,), dt, "positive"))
    return Case(ins, {"frame_step": step, "frame_length": flen, "onesided": onesided},
                rtol=1e-4, atol=1e-4)
