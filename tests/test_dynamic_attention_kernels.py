"""Attention's kernels on symbolic ``batch``/``seq`` (issue 18), each built once and run at
several sizes around the register and vector widths (1, odd sizes, one past a tile, more than
a tile) against NumPy:

- ``Q K^T`` with a symbolic column count (the keys): the GEMM rule's column tail;
- softmax and layer norm over a symbolic row length / symbolic row count: the row-reduction
  rule, vector loops with a run-time remainder, the row buffer allocated once per task;
- the head split/merge (``reshape`` + ``transpose``) with symbolic dims: plain vector copies,
  no division by a symbolic size in the index.
"""

from __future__ import annotations

import numpy as np
import pytest

from ember import te
from ember.codegen.c import emit_c_function
from ember.graph.builder import infer_call
from ember.graph.ir import TensorType, Var
from ember.ops import get_op
from ember.runtime.kernel import compile_prim_func
from ember.te.lower import create_prim_func
from ember.tir.schedule.rules import schedule_default
from ember.tir.symbolic import Symbol, normal_index
from isa_marks import needs_avx512

B, S = Symbol("batch"), Symbol("seq")
SIZES = [(1, 1), (1, 7), (2, 16), (1, 17), (2, 33), (1, 64), (1, 100)]


def _op_kernel(op, shapes, attrs):
    ins = [te.placeholder(s, "float32", f"in{k}") for k, s in enumerate(shapes)]
    attrs_n, types = infer_call(op, [Var(f"a{k}", TensorType(s, "float32"))
                                     for k, s in enumerate(shapes)], attrs)
    outs = get_op(op).compute(ins, attrs_n, types)
    func = create_prim_func(ins + list(outs), op.replace(".", "_"), num_outputs=len(outs))
    func.attrs["constant_params"] = []
    return schedule_default(func, "llvm"), attrs_n


def _concrete(shape, b, s):
    return [b if d is B else s if d is S else d for d in shape]


def test_qk_transpose_with_symbolic_keys_tiles_and_matches_numpy():
    """``(batch, 4, seq, 16) x (batch, 4, 16, seq) * 0.25``: the keys are the GEMM's columns;
    full ``mr x nr`` blocks plus row and column tails of power-of-two sizes."""
    q = te.placeholder((B, 4, S, 16), "float32", "q")
    k = te.placeholder((B, 4, 16, S), "float32", "k")
    r = te.reduce_axis(16, "r")
    y = te.compute((B, 4, S, S), lambda i, h, m, n: te.sum(q[i, h, m, r] * k[i, h, r, n],
                                                         axis=r), name="y")
    z = te.compute((B, 4, S, S), lambda *i: y[i] * te.const(0.25, "float32"), name="z")
    func = create_prim_func([q, k, z], "qk")
    func.attrs["constant_params"] = []
    g = schedule_default(func, "llvm")
    assert g.attrs.get("schedule_rule") == "gemm_rule", g.attrs.get("schedule_notes")
    src = emit_c_function(g)
    assert "ember_ukr_gemm_" in src and "x1_r1" in src  # a one-column part of the tail
    assert "ember_floordiv_int64" not in src  # the tile loops are not fused over a symbol
    kern = compile_prim_func(g)
    rng = np.random.default_rng(0)
    for b, s in SIZES:
        xq = rng.standard_normal((b, 4, s, 16)).astype(np.float32)
        xk = rng.standard_normal((b, 4, 16, s)).astype(np.float32)
        np.testing.assert_allclose(kern.run([xq, xk])[0], (xq @ xk) * 0.25, rtol=1e-5,
                                   atol=1e-5, err_msg=f"batch={b} seq={s}")


@pytest.mark.parametrize("op,shapes,attrs", [
    ("nn.softmax", [(B, 4, S, S)], {"axis": -1}),                    # symbolic row length
    ("nn.log_softmax", [(B, S, S)], {"axis": -1}),
    ("nn.layer_norm", [(B, S, 64), (64,), (64,)], {"axis": -1, "epsilon": 1e-5}),
], ids=["softmax", "log_softmax", "layer_norm"])
@needs_avx512("asserts the AVX-512 f32x16 vectors")
def test_row_reduction_rule_on_symbolic_rows(op, shapes, attrs):
    g, attrs_n = _op_kernel(op, shapes, attrs)
    assert g.attrs.get("schedule_rule") == "row_reduction_rule", g.attrs.get("schedule_notes")
    src = emit_c_function(g)
    assert src.count("ember_parallel_for") == 1  # one pass over the rows
    assert "ember_f32x16" in src and "expf(" not in src.split("for (int64_t")[1]
    body = src.split("_body(")[1]
    assert "ember_floordiv_int64" not in body  # the fused row index is not split back
    if op.endswith("softmax") and op == "nn.softmax":
        # the row buffer (seq floats) is allocated once per task, before the row loop
        assert body.index("ember_alloc") < body.index("for (int64_t")
    kern = compile_prim_func(g)
    rng = np.random.default_rng(1)
    for b, s in SIZES:
        xs = [(3 * rng.standard_normal(_concrete(sh, b, s))).astype(np.float32)
              for sh in shapes]
        want = get_op(op).reference(xs, attrs_n)[0]
        np.testing.assert_allclose(kern.run(xs)[0], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"batch={b} seq={s}")


@pytest.mark.parametrize("src_shape,newshape,perm", [
    ((B, S, 64), (B, S, 4, 16), (0, 2, 1, 3)),     # split heads
    ((B, 4, S, 16), None, (0, 2, 1, 3)),           # merge heads (transpose then reshape)
])
@needs_avx512("asserts the AVX-512 f32x16 vectors")
def test_head_split_and_merge_are_plain_copies(src_shape, newshape, perm):
    x = te.placeholder(src_shape, "float32", "x")
    if newshape is not None:
        r = get_op("reshape").compute([x], {"newshape": list(newshape)},
                                      [TensorType(newshape, "float32")])[0]
        shp = [newshape[p] for p in perm]
        y = te.compute(shp, lambda *i: r[tuple(i[perm.index(d)] for d in range(4))],
                       name="t")
        want_fn = lambda a: a.reshape(a.shape[0], a.shape[1], 4, 16).transpose(perm)  # noqa
    else:
        shp = [src_shape[p] for p in perm]
        t = te.compute(shp, lambda *i: x[tuple(i[perm.index(d)] for d in range(4))],
                       name="t")
        out = (B, S, 64)
        y = get_op("reshape").compute([t], {"newshape": list(out)},
                                      [TensorType(out, "float32")])[0]
        want_fn = lambda a: a.transpose(perm).reshape(a.shape[0], a.shape[2], 64)  # noqa
    func = create_prim_func([x, y], "heads")
    g = schedule_default(func, "llvm")
    src = emit_c_function(g)
    assert "ember_floordiv_int64" not in src and "ember_floormod_int64" not in src
    assert "ember_f32x16" in src
    kern = compile_prim_func(g)
    rng = np.random.default_rng(2)
    for b, s in SIZES:
        a = rng.standard_normal(_concrete(src_shape, b, s)).astype(np.float32)
        np.testing.assert_array_equal(kern.run([a])[0], want_fn(a))


def test_normal_index_folds_fused_loop_quotients():
    """``(i // (4 s)) * 4 s s + ((i // s) % 4) * s s + (i % s) * s`` is ``i * s``: the flat
    offset of a fused ``batch x 4 x seq`` row loop, at every ``i``."""
    from ember.tir.expr import Var as TVar
    from ember.tir.symbolic import evaluate
    i = TVar("i", "int64")
    e = (i // (S * 4)) * (S * S * 4) + ((i // S) % 4) * (S * S) + (i % S) * S + 3
    got = normal_index(e)
    assert got is not None and "//" not in str(got) and "%" not in str(got)
    for s in (1, 5, 16):
        for iv in range(0, 4 * 3 * s):
            want = (iv // (4 * s)) * 4 * s * s + ((iv // s) % 4) * s * s + (iv % s) * s + 3
            env = {"seq": s, "i": iv}
            assert evaluate(got, env) == want
