"""Vector code turns ``select(x > y, x, y)``-shaped selects (Clip/ReLU epilogues) into one
max/min instruction; the result must equal the select's own semantics bit for bit, NaNs and
signed zeros included, on every instruction set."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen.c import emit_c_function
from ember.runtime.kernel import compile_prim_func
from ember.tir.schedule import Schedule

SPECIAL = [0.0, -0.0, 1.0, -1.0, 6.0, 7.5, -3.0, np.nan, -np.nan, np.inf, -np.inf, 1e-30]


@pytest.mark.parametrize("isa", ["avx512", "avx2", "scalar"])
@pytest.mark.parametrize("form", ["x>y?x:y", "x>y?y:x", "x<y?x:y", "x<y?y:x", "clip"])
def test_minmax_selects_keep_select_semantics(form, isa):
    target = ember.Target(f"llvm -isa={isa}")
    if target.isa != isa:
        pytest.skip(f"this machine / compiler cannot run {isa} code")
    rng = np.random.default_rng(0)
    vals = np.array(SPECIAL, np.float32)
    a = np.concatenate([np.repeat(vals, len(vals)), rng.standard_normal(64) * 5]).astype(np.float32)
    b = np.concatenate([np.tile(vals, len(vals)), rng.standard_normal(64) * 5]).astype(np.float32)
    n = len(a) - len(a) % 16
    a, b = a[:n], b[:n]
    A = te.placeholder((n,), "float32", "A")
    B = te.placeholder((n,), "float32", "B")
    zero, six = te.const(0.0, "float32"), te.const(6.0, "float32")

    def f(i):
        x, y = A[i], B[i]
        if form == "x>y?x:y":
            return te.select(te.gt(x, y), x, y)
        if form == "x>y?y:x":
            return te.select(te.gt(x, y), y, x)
        if form == "x<y?x:y":
            return te.select(te.lt(x, y), x, y)
        if form == "x<y?y:x":
            return te.select(te.lt(x, y), y, x)
        c = te.select(te.lt(x, zero), zero, x)
        return te.select(te.gt(c, six), six, c)
    Y = te.compute((n,), f, name="y")
    sch = Schedule(te.create_prim_func([A, B, Y], "f"))
    sch.vectorize(sch.get_loops("y")[0])
    src = emit_c_function(sch.func, target=target)
    assert "ember_vgt_" in src or "ember_vlt_" in src
    got = compile_prim_func(sch.func, target).run([a, b])[0]
    with np.errstate(invalid="ignore"):
        if form == "x>y?x:y":
            want = np.where(a > b, a, b)
        elif form == "x>y?y:x":
            want = np.where(a > b, b, a)
        elif form == "x<y?x:y":
            want = np.where(a < b, a, b)
        elif form == "x<y?y:x":
            want = np.where(a < b, b, a)
        else:
            c = np.where(a < 0, np.float32(0), a)
            want = np.where(c > 6, np.float32(6), c)
    np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))
