"""The simplifier's rewrites: nested floordiv/floormod (``arith._divmod_nested``), checked by
evaluating the expression before and after at every point of the variables' bounds; quarter
powers as square roots, checked on the LRN kernel against its NumPy reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from ember.tir.arith import simplify
from ember.tir.expr import BinOp, Const, Var


def _ev(e, env):
    """Python integer value of an index expression (``//``, ``%``: floor semantics)."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env[id(e)]
    a, b = _ev(e.a, env), _ev(e.b, env)
    return {"add": a + b, "sub": a - b, "mul": a * b, "floordiv": a // b if b else 0,
            "floormod": a % b if b else 0, "min": min(a, b), "max": max(a, b)}[e.op]


def _c(v):
    return Const(v, "int64")


def _reshape_chain(c, i0, i1, k):
    """The flat-index arithmetic a channel shuffle leaves: ``((c*k*k + i0*k + i1) % (4*k*k))
    % (k*k) // k`` and ``(..) // (4*k*k)``."""
    flat = BinOp("add", BinOp("add", BinOp("mul", c, _c(k * k)), BinOp("mul", i0, _c(k))), i1)
    inner = BinOp("floormod", flat, _c(4 * k * k))
    return [BinOp("floordiv", BinOp("floormod", inner, _c(k * k)), _c(k)),
            BinOp("floordiv", flat, _c(4 * k * k)), BinOp("floormod", inner, _c(k * k))]


def test_channel_shuffle_index_simplifies_to_its_axes():
    c, i0, i1 = Var("c"), Var("i0"), Var("i1")
    bounds = {c: (0, 15), i0: (0, 6), i1: (0, 6)}
    e0, e1, e2 = _reshape_chain(c, i0, i1, 7)
    s0, s1, s2 = (simplify(e, bounds) for e in (e0, e1, e2))
    assert s0 is i0  # the row, with the channel and the column gone
    assert "floormod" not in repr(s2) and "floordiv" not in repr(s2)
    for v in itertools.product(range(16), range(7), range(7)):
        env = dict(zip((id(c), id(i0), id(i1)), v))
        for e, s in ((e0, s0), (e1, s1), (e2, s2)):
            assert _ev(e, env) == _ev(s, env)


@settings(max_examples=60, deadline=None)
@given(ca=st.integers(1, 40), cb=st.integers(1, 40), cc=st.integers(0, 9),
       ea=st.integers(1, 6), eb=st.integers(1, 6), d1=st.integers(2, 60),
       d2=st.integers(2, 60), ops=st.sampled_from([("floordiv", "floormod"),
                                                    ("floormod", "floordiv"),
                                                    ("floormod", "floormod"),
                                                    ("floordiv", "floordiv")]))
def test_nested_divmod_rewrites_keep_every_value(ca, cb, cc, ea, eb, d1, d2, ops):
    a, b = Var("a"), Var("b")
    bounds = {a: (0, ea - 1), b: (0, eb - 1)}
    e = BinOp("add", BinOp("add", BinOp("mul", a, _c(ca)), BinOp("mul", b, _c(cb))), _c(cc))
    e = BinOp(ops[1], BinOp(ops[0], e, _c(d1)), _c(d2))
    s = simplify(e, bounds)
    for va in range(ea):
        for vb in range(eb):
            env = {id(a): va, id(b): vb}
            assert _ev(s, env) == _ev(e, env), (e, s, va, vb)


@pytest.mark.parametrize("beta", [0.75, 0.5, 0.25, 0.8])
def test_lrn_quarter_powers_become_square_roots_and_match_reference(beta):
    """``pow(t, 0.75)`` (LRN's default beta) is ``sqrt(t) * sqrt(sqrt(t))`` in the kernel (no
    scalar ``powf`` per element); another beta keeps ``powf``. Odd shapes: 7 channels (a lane
    tail), size 5 windows clipped at both channel ends."""
    from ember import te
    from ember.codegen.c import emit_c_function
    from ember.graph.ir import TensorType
    from ember.ops import get_op
    from ember.runtime.kernel import compile_prim_func
    from ember.tir.schedule.rules import schedule_default
    od = get_op("nn.lrn")
    a = od.normalize_attrs({"size": 5, "alpha": 1e-2, "beta": beta, "bias": 2.0})
    shape = (1, 7, 5, 19)
    x = te.placeholder(shape, "float32", "x")
    y = od.compute([x], a, od.infer_type([TensorType(shape, "float32")], a))[0]
    f = schedule_default(te.create_prim_func([x, y], "f"), "llvm")
    src = emit_c_function(f, target="llvm")
    assert ("powf" in src) == (beta == 0.8)
    xs = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 3
    out = compile_prim_func(f, "llvm").run([xs])[0]
    np.testing.assert_allclose(out, od.reference([xs], a)[0], rtol=2e-6, atol=1e-7)
