"""The row-reduction rule (softmax, log-softmax, layer norm: per-row reductions computed inside
the output's parallel row loop) against the operators' NumPy references."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen.c import emit_c_function
from ember.graph.ir import TensorType
from ember.ops import get_op
from ember.runtime.kernel import compile_prim_func
from ember.tir.schedule.rules import schedule_default


def _kernel(op, shapes, attrs, seed=0):
    od = get_op(op)
    a = od.normalize_attrs(attrs)
    out_t = od.infer_type([TensorType(s, "float32") for s in shapes], a)
    ins = [te.placeholder(s, "float32", f"x{k}") for k, s in enumerate(shapes)]
    y = od.compute(ins, a, out_t)[0]
    f = te.create_prim_func(ins + [y], "f")
    rng = np.random.default_rng(seed)
    xs = [(3 * rng.standard_normal(s)).astype(np.float32) for s in shapes]
    return f, xs, od.reference(xs, a)[0]


@pytest.mark.parametrize("isa", ["avx512", "avx2", "scalar"])
@pytest.mark.parametrize("op, shapes, attrs", [
    ("nn.softmax", [(1, 4, 128, 128)], {"axis": -1}),
    ("nn.softmax", [(3, 37)], {"axis": 1}),           # row not a multiple of the lanes
    ("nn.softmax", [(64, 9)], {"axis": -1}),
    ("nn.log_softmax", [(5, 7, 40)], {"axis": -1}),
    ("nn.layer_norm", [(1, 128, 256), (256,), (256,)], {"axis": -1, "epsilon": 1e-12}),
    ("nn.layer_norm", [(2, 3, 5, 6), (5, 6)], {"axis": 2, "epsilon": 1e-5}),  # two axes
])
def test_row_reduction_rule_matches_reference(op, shapes, attrs, isa):
    target = ember.Target(f"llvm -isa={isa}")
    if target.isa != isa:
        pytest.skip(f"this machine / compiler cannot run {isa} code")
    f, xs, ref = _kernel(op, shapes, attrs)
    g = schedule_default(f, target)
    assert g.attrs["schedule_rule"] == "row_reduction_rule"
    src = emit_c_function(g, target=target)
    assert src.count("ember_parallel_for") <= 1  # one loop over rows, not one per stage
    out = compile_prim_func(g, target).run(xs)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_softmax_over_a_leading_axis_is_left_to_the_generic_rule():
    f, xs, ref = _kernel("nn.softmax", [(6, 20, 3)], {"axis": 1})
    g = schedule_default(f, "llvm")
    assert g.attrs["schedule_rule"] != "row_reduction_rule"
    np.testing.assert_allclose(compile_prim_func(g).run(xs)[0], ref, rtol=1e-4, atol=1e-5)


def test_square_becomes_a_product_and_vectorizes():
    """``x ** 2`` is ``x * x`` exactly: the variance reduction vectorizes (no scalar powf)."""
    x = te.placeholder((16, 64), "float32", "x")
    r = te.reduce_axis(64, "r")
    y = te.compute((16, 1), lambda i, j: te.sum(te.power(x[i, r.var], te.const(2.0, "float32")),
                                                axis=r), name="sq")
    f = te.create_prim_func([x, y], "f")
    src = emit_c_function(schedule_default(f, "llvm"))
    assert "powf" not in src
    xs = [np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)]
    out = compile_prim_func(schedule_default(f, "llvm")).run(xs)[0]
    np.testing.assert_allclose(out[:, 0], (xs[0].astype(np.float64) ** 2).sum(1), rtol=1e-5)
