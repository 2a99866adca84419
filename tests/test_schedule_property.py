"""Property: random legal schedules of random small computations compute what the unscheduled
program computes, and their traces replay (also through JSON) to the same program."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember import te
from ember.codegen.c import emit_c_function
from ember.errors import ScheduleError
from ember.runtime.kernel import compile_prim_func
from ember.tir.schedule import IndexMap, Schedule, Trace


def _matmul_relu(d):
    m, n, k = d["m"], d["n"], d["k"]
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    bias = te.placeholder((n,), "float32", "bias")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r.var] * B[r.var, j], axis=r), name="mm")
    D = te.compute((m, n), lambda i, j: C[i, j] + bias[j], name="bias")
    E = te.compute((m, n), lambda i, j: te.maximum(D[i, j], te.const(0.0, "float32")),
                   name="relu")
    return [A, B, bias, E]


def _chain(d):
    m, n = d["m"], d["n"]
    A = te.placeholder((m, n), "float32", "A")
    B = te.compute((m, n), lambda i, j: A[i, j] * te.const(2.0, "float32"), name="dbl")
    C = te.compute((m, n), lambda i, j: B[i, j] + A[i, j], name="add")
    D = te.compute((n, m), lambda j, i: C[i, j] - te.const(1.0, "float32"), name="tr")
    return [A, D]


def _rowsum(d):
    m, n = d["m"], d["n"]
    A = te.placeholder((m, n), "float32", "A")
    r = te.reduce_axis(n, "r")
    S = te.compute((m,), lambda i: te.sum(A[i, r.var], axis=r), name="rsum")
    O = te.compute((m, n), lambda i, j: A[i, j] - S[i], name="center")
    return [A, O]


def _conv1d(d):
    c, w, k = d["m"], d["n"] + 2, 3
    X = te.placeholder((c, w), "float32", "X")
    W = te.placeholder((d["k"], c, k), "float32", "W")
    P = te.compute((c, w + 2), lambda ci, x: te.select(
        te.all_of(te.ge(x, 1), te.lt(x, w + 1)), X[ci, x - 1],
        te.const(0.0, "float32")), name="pad")
    rc = te.reduce_axis(c, "rc")
    rk = te.reduce_axis(k, "rk")
    Y = te.compute((d["k"], w), lambda o, x: te.sum(P[rc.var, x + rk.var] * W[o, rc.var, rk.var],
                                                    axis=[rc, rk]), name="conv")
    return [X, W, Y]


TEMPLATES = [_matmul_relu, _chain, _rowsum, _conv1d]


def _loops_of_all(sch):
    out = []
    for b in sch.block_names():
        for k, lp in enumerate(sch.get_loops(b)):
            out.append((b, k, lp))
    return out


def _random_step(sch, data):
    prim = data.draw(st.sampled_from([
        "split", "split", "fuse", "reorder", "parallel", "vectorize", "unroll", "cache_read",
        "cache_write", "compute_at", "reverse_compute_at", "compute_inline",
        "reverse_compute_inline", "decompose_reduction", "storage_align", "transform_layout"]))
    blocks = sch.block_names()
    loops = _loops_of_all(sch)
    if not blocks or not loops:
        return
    blk = data.draw(st.sampled_from(blocks))
    b, k, lp = data.draw(st.sampled_from(loops))
    if prim == "split":
        sch.split(lp, [None, data.draw(st.integers(1, 5))])
    elif prim == "fuse":
        bl = sch.get_loops(b)
        if k + 1 < len(bl):
            sch.fuse(bl[k], bl[k + 1])
    elif prim == "reorder":
        bl = sch.get_loops(b)
        if len(bl) >= 2:
            i, j = data.draw(st.lists(st.integers(0, len(bl) - 1), min_size=2, max_size=2,
                                      unique=True))
            sch.reorder(bl[i], bl[j])
    elif prim == "parallel":
        sch.parallel(lp)
    elif prim == "vectorize":
        sch.vectorize(lp)
    elif prim == "unroll":
        sch.unroll(lp)
    elif prim == "cache_read":
        sch.cache_read(blk, data.draw(st.integers(0, 2)), data.draw(st.sampled_from(
            ["global", "local"])))
    elif prim == "cache_write":
        sch.cache_write(blk, 0, data.draw(st.sampled_from(["global", "local"])))
    elif prim == "compute_at":
        sch.compute_at(blk, lp)
    elif prim == "reverse_compute_at":
        sch.reverse_compute_at(blk, lp)
    elif prim == "compute_inline":
        sch.compute_inline(blk)
    elif prim == "reverse_compute_inline":
        sch.reverse_compute_inline(blk)
    elif prim == "decompose_reduction":
        sch.decompose_reduction(b, lp)
    elif prim == "storage_align":
        sch.storage_align(blk, 0, 0, data.draw(st.integers(1, 8)), 0)
    elif prim == "transform_layout":
        which = ("write", 0)
        f = data.draw(st.integers(2, 4))
        fb, _ = sch.find_block(blk, "test")
        from ember.tir.schedule.analysis import block_writes
        nd = len(block_writes(fb)[0].shape) if block_writes(fb) else 0
        if nd == 2:
            sch.transform_layout(blk, which, IndexMap.from_func(
                2, lambda i, j: (j // f, i, j % f)))


def _run_with_layouts(func, ins):
    """Run ``func`` whose parameters may have new layouts (``attrs["param_layouts"]``): inputs
    are packed, the output unpacked, as the driver does."""
    layouts = {int(k): v for k, v in func.attrs.get("param_layouts", {}).items()}
    packed = [IndexMap.from_json(layouts[k]["index_map"]).apply_numpy(x) if k in layouts else x
              for k, x in enumerate(ins)]
    out = compile_prim_func(func).run(packed)[0]
    k = len(ins)
    if k in layouts:
        out = IndexMap.from_json(layouts[k]["index_map"]).unapply_numpy(out, layouts[k]["shape"])
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_schedules_preserve_results(data):
    tmpl = data.draw(st.sampled_from(TEMPLATES))
    dims = {"m": data.draw(st.integers(2, 7)), "n": data.draw(st.integers(2, 9)),
            "k": data.draw(st.integers(1, 6))}
    tensors = tmpl(dims)
    func = te.create_prim_func(tensors, "f", inline=False)
    rng = np.random.default_rng(0)
    n_in = len(func.params) - 1
    ins = [rng.standard_normal(p.shape).astype(np.float32) for p in func.params[:n_in]]
    ref = compile_prim_func(func).run(ins)[0]
    sch = Schedule(func)
    for _ in range(data.draw(st.integers(1, 8))):
        try:
            _random_step(sch, data)
        except ScheduleError:
            pass
    out = _run_with_layouts(sch.func, ins)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    replay = Trace.from_json(sch.trace.to_json()).apply_to(func)
    assert emit_c_function(replay.func) == emit_c_function(sch.func)


def test_failed_primitive_leaves_schedule_unchanged():
    func = te.create_prim_func(_matmul_relu({"m": 4, "n": 4, "k": 3}), "f", inline=False)
    sch = Schedule(func)
    before = emit_c_function(sch.func)
    with pytest.raises(ScheduleError, match="parallel"):
        sch.parallel(sch.get_loops("mm")[2])
    assert emit_c_function(sch.func) == before and len(sch.trace) == 0
