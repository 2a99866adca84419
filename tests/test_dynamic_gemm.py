"""The GEMM micro-kernel rule on a symbolic row count (issue 18): one kernel, built once for a
symbolic ``m`` (tokens), tiles ``m`` into full ``mr``-row micro-kernel blocks over ``m // mr``
plus a tail of one-row calls; checked against the operators' NumPy references at row counts
around the register block (1, mr - 1, mr, mr + 1, 37, 128) with weights packed as at compile
time."""

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
from ember.tir.symbolic import Symbol
from test_default_schedules import _packed
from isa_marks import needs_avx512

M = Symbol("m")
B = Symbol("batch")

def _kernel(op, shapes, attrs, epilogue=False, weights=True):
    """``op`` on placeholders of ``shapes`` (dims may be symbols), with an optional
    ``relu(y + 1)`` epilogue, scheduled; ``weights``: every input after the first is a constant
    (packed), else all are activations."""
    ins = [te.placeholder(s, "float32", f"in{k}") for k, s in enumerate(shapes)]
    attrs_n, types = infer_call(op, [Var(f"a{k}", TensorType(s, "float32"))
                                     for k, s in enumerate(shapes)], attrs)
    y = get_op(op).compute(ins, attrs_n, types)[0]
    if epilogue:
        y = te.compute(y.shape, lambda *i: te.maximum(y[i] + te.const(1.0, "float32"),
                                                      te.const(0.0, "float32")), name="epi")
    func = create_prim_func(ins + [y], op.replace(".", "_"))
    func.attrs["constant_params"] = list(range(1, len(shapes))) if weights else []
    return schedule_default(func, "llvm"), attrs_n


CASES = [
    ("matmul", [(M, 64), (64, 48)], {}, False),
    ("matmul", [(M, 32), (32, 16)], {}, False),       # a narrow panel: mr capped (SYMBOLIC_MAX_MR)
    ("matmul", [(M, 96), (96, 80)], {}, True),
    ("nn.gemm", [(M, 40), (40, 40), (40,)], {"trans_b": 1}, True),
    ("matmul", [(B, M, 32), (32, 64)], {}, True),       # (batch, seq, d) x weights
]


@pytest.mark.parametrize("op,shapes,attrs,epi", CASES,
                         ids=[f"{c[0]}-{len(c[1][0])}d-{'epi' if c[3] else 'plain'}"
                              for c in CASES])
def test_symbolic_rows_use_micro_kernels_with_a_tail(op, shapes, attrs, epi):
    g, attrs_n = _kernel(op, shapes, attrs, epi)
    assert g.attrs.get("schedule_rule") == "gemm_rule", g.attrs.get("schedule_notes")
    src = emit_c_function(g)
    assert "ember_ukr_gemm_" in src and "const int64_t s0" in src
    mr = max(int(n.split("_f32_")[1].split("x")[0]) for n in
             {w for w in src.replace("(", " ").split() if w.startswith("ember_ukr_gemm_")})
    k = compile_prim_func(g)  # one build for every row count below
    rng = np.random.default_rng(0)
    for m in sorted({1, max(1, mr - 1), mr, mr + 1, 37, 128}):
        xs = [rng.standard_normal([m if d is M else 3 if d is B else d for d in s])
              .astype(np.float32) for s in shapes]
        got = k.run(_packed(g, xs))[0]
        want = get_op(op).reference(xs, attrs_n)[0]
        if epi:
            want = np.maximum(want + 1.0, 0.0)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"m={m}")


def test_symbolic_reduction_batch_matmul():
    """Attention's ``softmax(QK^T) V``: ``(batch, heads, seq, seq) x (batch, heads, seq, 16)``,
    rows and reduction both ``seq``: row tiles with a tail, the reduction length and ``A``'s
    row stride passed at run time (symbolic strides in ``tensorize``)."""
    shapes = [(B, 4, M, M), (B, 4, M, 16)]
    g, attrs_n = _kernel("matmul", shapes, {}, weights=False)
    assert g.attrs.get("schedule_rule") == "gemm_rule", g.attrs.get("schedule_notes")
    assert "ember_ukr_gemm_" in emit_c_function(g)
    k = compile_prim_func(g)
    rng = np.random.default_rng(1)
    for m in (1, 7, 8, 9, 37, 128):
        xs = [rng.standard_normal([m if d is M else 2 if d is B else d for d in s])
              .astype(np.float32) for s in shapes]
        np.testing.assert_allclose(k.run(xs)[0], xs[0] @ xs[1], rtol=1e-4, atol=1e-4,
                                   err_msg=f"m={m}")


def test_tail_of_a_non_row_predicate_is_refused():
    """``tensorize`` turns only a row- or column-split predicate into a tail: a split of a
    reduction loop that does not divide still raises ``ScheduleError``."""
    from ember.errors import ScheduleError
    from ember.tir.schedule.schedule import Schedule
    a = te.placeholder((8, 15), "float32", "a")
    w = te.placeholder((15, 16), "float32", "w")
    k = te.reduce_axis(15, "k")
    c = te.compute((8, 16), lambda i, j: te.sum(a[i, k] * w[k, j], axis=k), name="c")
    sch = Schedule(create_prim_func([a, w, c], "f"))
    i, j, kk = sch.get_loops("c")
    ko, ki = sch.split(kk, [None, 4])
    sch.reorder(i, ko, ki, j)
    with pytest.raises(ScheduleError, match="row or column tail|predicate"):
        sch.tensorize(ko, "gemm.avx512.f32")


@needs_avx512("builds the AVX-512 micro-kernel")
def test_column_tail_of_a_lane_split():
    """A split of the lane loop that does not divide (24 columns in tiles of 16) is a column
    tail: the full-width call where the tile is in range, else calls of 8, 4, 2 and 1
    columns for the remaining width."""
    from ember.tir.schedule.schedule import Schedule
    a = te.placeholder((8, 16), "float32", "a")
    w = te.placeholder((16, 24), "float32", "w")
    k = te.reduce_axis(16, "k")
    c = te.compute((8, 24), lambda i, j: te.sum(a[i, k] * w[k, j], axis=k), name="c")
    sch = Schedule(create_prim_func([a, w, c], "f"))
    i, j, kk = sch.get_loops("c")
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(jo, i, kk, ji)
    sch.tensorize(kk, "gemm.avx512.f32")
    src = emit_c_function(sch.func)
    assert "ember_ukr_gemm_avx512_f32_1x16_r1" in src and "_1x8_r1" in src
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((8, 16)).astype(np.float32),
          rng.standard_normal((16, 24)).astype(np.float32)]
    got = compile_prim_func(sch.func).run(xs)[0]
    np.testing.assert_allclose(got, xs[0] @ xs[1], rtol=1e-5, atol=1e-5)


def test_epilogue_under_the_row_guard_is_vector_code():
    """A fused ``erf`` epilogue on a symbolic row count: the row tail's guard does not move
    with the lanes, so the printer tests it once and the lane loop stays vector code
    (``ember_verf_``), not a scalar ``erff`` loop under ``omp simd``."""
    import math
    x = te.placeholder((M, 64), "float32", "x")
    w = te.placeholder((64, 64), "float32", "w")
    r = te.reduce_axis(64, "r")
    y = te.compute((M, 64), lambda i, j: te.sum(x[i, r] * w[r, j], axis=r), name="y")
    z = te.compute((M, 64), lambda i, j: te.erf(y[i, j]), name="z")
    func = create_prim_func([x, w, z], "f")
    func.attrs["constant_params"] = [1]
    g = schedule_default(func, "llvm")
    assert g.attrs.get("schedule_rule") == "gemm_rule", g.attrs.get("schedule_notes")
    src = emit_c_function(g)
    assert "ember_verf_" in src and "erff(" not in src.split("ember_verf_")[-1].split("}")[0]
    k = compile_prim_func(g)
    rng = np.random.default_rng(2)
    erf = np.vectorize(math.erf)
    for m in (1, 5, 37):
        xs = [rng.standard_normal((m, 64)).astype(np.float32) * 0.2,
              rng.standard_normal((64, 64)).astype(np.float32) * 0.2]
        want = erf((xs[0] @ xs[1]).astype(np.float64))
        np.testing.assert_allclose(k.run(_packed(g, xs))[0], want, rtol=1e-4, atol=1e-5)


def test_fused_symbolic_parallel_loop_keeps_quotient_per_task():
    """``(batch, m, 32) x (32, 64)``: the parallel loop over ``batch x ceil(m / mr)`` row
    blocks keeps its quotient and remainder per task (``lo / D`` once, then an increment) and
    divides by the symbolic block count nowhere in the loop; every chunk of the thread pool
    starts at its own ``lo``, so sizes with many chunks check the start."""
    shapes = [(B, M, 32), (32, 64)]
    g, attrs_n = _kernel("matmul", shapes, {})
    src = emit_c_function(g)
    assert "if (++r0_ ==" in src
    body = src.split("_body(")[1].split("\n}\n")[0]
    assert "ember_floordiv_int64" not in body and "ember_floormod_int64" not in body
    for threads in (1, 2):
        k = compile_prim_func(g, f"llvm -num-threads={threads}")
        rng = np.random.default_rng(4)
        for b, m in ((1, 1), (3, 7), (5, 17), (2, 64), (7, 33)):
            xs = [rng.standard_normal(s).astype(np.float32)
                  for s in ((b, m, 32), (32, 64))]
            np.testing.assert_allclose(k.run(_packed(g, xs))[0], xs[0] @ xs[1], rtol=1e-4,
                                       atol=1e-4, err_msg=f"batch={b} m={m}")
