"""Default schedule rules, vector codegen, ConvertLayout, the AOT entry and the profiler, checked
against the operators' NumPy references and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen.c import emit_c_function
from ember.graph.ir import TensorType
from ember.ops import get_op
from ember.runtime.kernel import compile_prim_func
from ember.tir.schedule import IndexMap
from ember.tir.schedule.rules import schedule_default

RNG = np.random.default_rng(0)


def _op_kernel(op, shapes, attrs, epilogue=None, rng=RNG):
    """``op`` as a PrimFunc (weights marked constant, optional elementwise ``epilogue``), random
    inputs drawn from ``rng`` and the op's NumPy reference output (without the epilogue)."""
    od = get_op(op)
    a = od.normalize_attrs(attrs)
    out_t = od.infer_type([TensorType(s, "float32") for s in shapes], a)
    ins = [te.placeholder(s, "float32", f"x{k}") for k, s in enumerate(shapes)]
    y = od.compute(ins, a, out_t)[0]
    if epilogue is not None:
        y = te.compute(y.shape, lambda *i: epilogue(y[i]), name="epi")
    f = te.create_prim_func(ins + [y], "f")
    f.attrs["constant_params"] = list(range(1, len(shapes)))
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    return f, xs, od.reference(xs, a)[0]


def _packed(g, xs):
    """``xs`` with the weights ``g``'s schedule packs (``param_layouts``) packed the same way."""
    lay = {int(k): v for k, v in g.attrs.get("param_layouts", {}).items()}
    return [IndexMap.from_json(lay[k]["index_map"]).apply_numpy(x) if k in lay else x
            for k, x in enumerate(xs)]


def _run_scheduled(f, xs, target="llvm"):
    g = schedule_default(f, target)
    return g, compile_prim_func(g, target).run(_packed(g, xs))[0]


RELU = lambda v: te.maximum(v, te.const(0.0, "float32"))  # noqa: E731


@pytest.mark.parametrize("isa", ["avx512", "avx2", "scalar"])
@pytest.mark.parametrize("op, shapes, attrs", [
    ("nn.conv", [(1, 9, 9, 16), (32, 16, 3, 3), (32,)],
     {"pads": [1, 1, 1, 1], "data_layout": "NHWC"}),
    ("nn.conv", [(1, 10, 10, 8), (24, 8, 1, 1)], {"strides": [2, 2], "data_layout": "NHWC"}),
    ("nn.conv", [(1, 6, 6, 128), (32, 128, 3, 3)],  # long reduction: K-blocked variant
     {"pads": [1, 1, 1, 1], "data_layout": "NHWC"}),
    ("nn.conv", [(1, 5, 5, 1024), (32, 1024, 1, 1), (32,)], {"data_layout": "NHWC"}),
    # stem convolutions reading a channels-first image and writing channels-last
    ("nn.conv", [(1, 3, 11, 13), (16, 3, 3, 3), (16,)],
     {"pads": [1, 2, 1, 0], "strides": [2, 2], "data_layout": "NCHW", "out_layout": "NHWC"}),
    ("nn.conv", [(1, 4, 6, 6), (32, 4, 1, 1)], {"data_layout": "NCHW", "out_layout": "NHWC"}),
    ("nn.gemm", [(6, 40), (40, 40), (40,)], {"trans_b": 1}),
    ("matmul", [(2, 12, 16), (16, 48)], {}),
    # row counts without a good dividing register block: a row tail (row_tail_tile)
    ("nn.gemm", [(197, 20), (64, 20), (64,)], {"trans_b": 1}),
    ("matmul", [(1, 37, 24), (24, 48)], {}),
    ("matmul", [(3, 23, 8), (3, 8, 32)], {}),
])
def test_gemm_rule_kernels_match_reference(op, shapes, attrs, isa):
    f, xs, ref = _op_kernel(op, shapes, attrs, RELU)
    try:
        target = ember.Target(f"llvm -isa={isa}")
        _ = target.isa
    except ember.target.TargetError:
        pytest.skip(f"the C compiler cannot target {isa}")
    g, out = _run_scheduled(f, xs, f"llvm -isa={isa}")
    assert g.attrs["schedule_rule"] == "gemm_rule"
    assert f"ember_ukr_gemm_{target.isa}" in emit_c_function(g, target=target)
    np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)


def test_row_tail_tile_replaces_one_row_blocks_of_prime_row_counts():
    from ember.tir.schedule.rules.gemm import choose_tile, row_tail_tile
    assert choose_tile(197, 192, 16, 28) == (1, 64)          # 197 is prime
    assert row_tail_tile(197, 192, 16, 28) == (6, 64)        # 32 blocks + a 5-row tail
    assert row_tail_tile(128, 768, 16, 28) is None           # dividing blocks are good
    assert row_tail_tile(23, 32, 16, 28) is None             # 23 x 32 divides
    assert row_tail_tile(197, 197, 16, 28) is None           # no full-lane block


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
@pytest.mark.parametrize("shapes, attrs", [
    # ShuffleNet's grouped 1x1: 34 channels per group (a masked lane tail on 8 and 16 lanes)
    ([(1, 9, 9, 24), (136, 6, 1, 1), (136,)], {"group": 4}),
    # AlexNet-like: 2 groups, 5x5, padded
    ([(1, 7, 8, 16), (64, 8, 5, 5)], {"group": 2, "pads": [2, 2, 2, 2]}),
    # strided, odd group size (10 channels), bias
    ([(1, 11, 11, 20), (40, 10, 3, 3), (40,)], {"group": 2, "pads": [1, 1, 1, 1],
                                                "strides": [2, 2]}),
    # dilated, 3 output channels per group, uneven padding
    ([(1, 12, 13, 16), (12, 4, 3, 3)], {"group": 4, "pads": [2, 1, 2, 0],
                                        "dilations": [2, 2]}),
    # depthwise with a channel multiplier of 2 (group = C: each group one input channel)
    ([(1, 10, 10, 24), (48, 1, 3, 3)], {"group": 24, "pads": [1, 1, 1, 1]}),
])
def test_gemm_rule_runs_grouped_convolutions_as_per_group_micro_kernels(shapes, attrs, isa):
    """A grouped convolution (NHWC) is one packed GEMM per group on the micro-kernel: the
    register tiles never straddle two groups, also where a group's channel count does not
    divide the vector width."""
    from ember.tir.schedule.rules import gemm as G
    f, xs, ref = _op_kernel("nn.conv", shapes, {**attrs, "data_layout": "NHWC"}, RELU)
    try:
        target = ember.Target(f"llvm -isa={isa}")
        _ = target.isa
    except ember.target.TargetError:
        pytest.skip(f"the C compiler cannot target {isa}")
    assert G.analyze(f)["group_n"] == shapes[1][0] // attrs["group"]
    g, out = _run_scheduled(f, xs, f"llvm -isa={isa}")
    assert g.attrs["schedule_rule"] == "gemm_rule"
    assert f"ember_ukr_gemm_{target.isa}" in emit_c_function(g, target=target)
    np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)


def test_grouped_convolution_knobs_all_schedule_and_match_reference():
    """Every tuning configuration ``gemm_knobs`` offers for a grouped convolution schedules it
    and computes it; blocking its reduction is a typed ``ScheduleError``."""
    from ember.errors import ScheduleError
    from ember.tir.schedule.rules import gemm_knobs, schedule_config
    f, xs, ref = _op_kernel("nn.conv", [(1, 8, 8, 32), (64, 16, 3, 3)],
                            {"group": 2, "pads": [1, 1, 1, 1], "data_layout": "NHWC"})
    target = ember.Target("llvm")
    knobs = gemm_knobs(f, target)
    assert knobs["kblock"] == [0]
    for order in knobs["order"]:
        for tile in knobs["tile"][:2]:
            g = schedule_config(f, target, "gemm_rule", {"order": order, "tile": tile})
            out = compile_prim_func(g, target).run(_packed(g, xs))[0]
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(ScheduleError, match="grouped"):
        schedule_config(f, target, "gemm_rule", {"kblock": 8})


def test_gemm_rule_splits_weight_panels_of_small_image_large_weight_convs():
    """A 1x1 convolution whose weights dwarf its activation (MobileNetV2's last one: 320 ->
    1280 channels on 7x7) runs one whole weight panel per parallel task, so the cores split the
    weights; a convolution with a larger activation than weights keeps row tiles fused."""
    from ember.tir.schedule.rules import gemm as G
    f, xs, ref = _op_kernel("nn.conv", [(1, 3, 3, 256), (512, 256, 1, 1), (512,)],
                            {"data_layout": "NHWC"}, RELU)
    g = G.analyze(f)
    assert G._b_bytes(g) > G._a_bytes(g)
    sch, out = _run_scheduled(f, xs)
    from ember.tir.schedule.tensorize import MAX_ACCUMULATORS
    target = ember.Target("llvm")
    mr, nr = G.choose_tile(3, 512, target.vector_lanes, MAX_ACCUMULATORS[target.isa])
    src = emit_c_function(sch, target=target)
    assert f"ember_parallel_for({512 // nr}," in src  # one task per panel
    assert "_pn(" in src  # each call prefetches the next weight panel (PANEL_PREFETCH_NEXT)
    np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)
    f2, _, _ = _op_kernel("nn.conv", [(1, 28, 28, 256), (512, 256, 1, 1)],
                          {"data_layout": "NHWC"})
    g2 = G.analyze(f2)
    assert G._b_bytes(g2) < G._a_bytes(g2)
    assert G._default_serial(g2, 32, "panels", 3) == 0


def test_tuned_parallel_fusion_knob_values_all_schedule(monkeypatch):
    # with TUNE_PARALLEL_FUSION the alternative to a panel-split default (2 of 3 outer loops
    # serial) was 1 - 2 = -1, which the rule rejects
    from ember.tir.schedule.rules import gemm as G, schedule_config
    monkeypatch.setattr(G, "TUNE_PARALLEL_FUSION", True)
    f, _, _ = _op_kernel("nn.conv", [(1, 3, 3, 256), (512, 256, 1, 1), (512,)],
                         {"data_layout": "NHWC"}, RELU)
    target = ember.Target("llvm")
    fuse = G.gemm_knobs(f, target)["fuse"]
    assert len(fuse) == 2 and fuse[0] > 1
    for v in fuse:
        schedule_config(f, target, "gemm_rule", {"fuse": v})


@pytest.mark.parametrize("hw, cin, order", [
    (56, 128, "rows"),    # A 1.7 MB (padded) does not stay in L2 beside B 576 KB
    (40, 64, "panels"),   # A 0.43 MB: panels-outer keeps it in L2
])
def test_default_loop_order_streams_a_large_activation_once(hw, cin, order):
    """A stride-2 3x3 convolution whose weights fit L2 (``ROWS_MAX_B_BYTES``) but whose input
    does not fit beside them (``ROWS_MIN_A_BYTES``) goes rows-outer by default; either order
    computes the NumPy reference."""
    from ember.tir.schedule.rules import gemm_knobs, schedule_config
    f, xs, ref = _op_kernel("nn.conv", [(1, hw, hw, cin), (128, cin, 3, 3)],
                            {"pads": [1, 1, 1, 1], "strides": [2, 2], "data_layout": "NHWC"},
                            RELU)
    target = ember.Target("llvm")
    knobs = gemm_knobs(f, target)
    assert knobs["order"][0] == order and knobs["kblock"][0] == 0
    for o in knobs["order"]:
        g = schedule_config(f, target, "gemm_rule", {"order": o})
        out = compile_prim_func(g, target).run(_packed(g, xs))[0]
        np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)


def _first_half_rows(g, batch: int, rows: int, k: int):
    """``(batches, rows)`` whose ``A`` rows the first half of ``g``'s parallel loop (one
    thread's range on two threads) reads: evaluates the micro-kernel call's ``A`` address
    (``A`` of shape ``(batch, rows, k)``) at each of those iterations (loops inside the
    parallel one at 0: the first row of each block)."""
    from ember.tir.arith import flat_index, simplify, substitute, walk_stmt
    from ember.tir.expr import Const
    from ember.tir.stmt import For, KernelCall
    par, = [s for s in walk_stmt(g.body) if isinstance(s, For) and s.kind == "parallel"]
    call = next(s for s in walk_stmt(par.body) if isinstance(s, KernelCall))
    a = call.args[1]
    inner = {s.var: Const(0, "int64") for s in walk_stmt(par.body) if isinstance(s, For)}
    seen_b, seen_r = set(), set()
    for i in range(par.extent // 2):
        off = simplify(substitute(flat_index(a.src, a.indices),
                                  {**inner, par.var: Const(i, "int64")}))
        assert isinstance(off, Const), off
        seen_b.add(off.value // (rows * k))
        seen_r.add(off.value % (rows * k) // k)
    return seen_b, seen_r


def test_winograd_products_go_tiles_outer_and_every_order_computes_the_product():
    """A batched matmul whose every batch element has its own constant weights (Winograd's
    products, ``(n*n, P, C) x (n*n, C, K)``) takes the ``tiles`` order by default: row blocks
    outermost in the parallel loop, so one thread's range is a band of rows (tiles) of every
    batch element, where rows-outer gave it half of the batch elements. All three orders are in
    the tuning space and compute the NumPy reference; an activation ``B`` (attention's batched
    matmul) keeps the rows/panels default."""
    from ember.tir.schedule.rules import gemm_knobs, schedule_config
    target = ember.Target("llvm")
    f, xs, ref = _op_kernel("matmul", [(16, 49, 64), (16, 64, 64)], {}, RELU)
    knobs = gemm_knobs(f, target)
    assert knobs["order"][0] == "tiles" and set(knobs["order"]) == {"tiles", "rows", "panels"}
    for o in knobs["order"]:
        g = schedule_config(f, target, "gemm_rule", {"order": o})
        out = compile_prim_func(g, target).run(_packed(g, xs))[0]
        np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)
        batches, rows = _first_half_rows(g, 16, 49, 64)
        mr = {"avx512": 7, "avx2": 6}[target.isa]  # register block rows: 32 zmm / 16 ymm
        if o == "tiles":
            assert batches == set(range(16)) and max(rows) < 49 // 2 + mr
        else:
            assert batches != set(range(16)) or rows == set(range(0, 49, mr))
    f2, _, _ = _op_kernel("matmul", [(16, 49, 64), (16, 64, 64)], {}, RELU)
    f2.attrs["constant_params"] = []
    assert "tiles" not in gemm_knobs(f2, target)["order"]


def test_streamed_weights_of_a_batched_matmul_are_prefetched_a_panel_ahead(monkeypatch):
    """A batched matmul (Winograd's products) whose constant weights total at least
    ``PREFETCH_MIN_B_BYTES`` prefetches the next panel (``pfnext``) by default, a plain GEMM
    does not; both compute the NumPy reference."""
    from ember.tir.schedule.rules import gemm as G
    f, xs, ref = _op_kernel("matmul", [(16, 12, 256), (16, 256, 64)], {}, RELU)
    g_small = schedule_default(f, "llvm")
    assert "_pn(" not in emit_c_function(g_small, "k")  # 1 MB of weights < 2 MB
    monkeypatch.setattr(G, "PREFETCH_MIN_B_BYTES", 1 << 20)
    g = schedule_default(f, "llvm")
    f2, xs2, ref2 = _op_kernel("nn.gemm", [(12, 1024), (1024, 512)], {}, RELU)
    g2 = schedule_default(f2, "llvm")
    assert "_pn(" in emit_c_function(g, "k") and "_pn(" not in emit_c_function(g2, "k")
    for gg, x, r in ((g, xs, ref), (g2, xs2, ref2)):
        out = compile_prim_func(gg, "llvm").run(_packed(gg, x))[0]
        np.testing.assert_allclose(out, np.maximum(r, 0), rtol=1e-4, atol=1e-4)


def test_vectorized_epilogue_uses_vector_types_and_blends():
    f, xs, ref = _op_kernel("nn.conv", [(1, 7, 7, 32), (32, 32, 1, 1)], {"data_layout": "NHWC"},
                            lambda v: te.select(te.gt(v, te.const(0.0, "float32")), v,
                                                v * te.const(0.1, "float32")))
    g, out = _run_scheduled(f, xs)
    src = emit_c_function(g, target=ember.Target("llvm"))
    lanes = ember.Target("llvm").vector_lanes
    assert f"ember_f32x{lanes}u" in src and "ember_vsel" in src
    np.testing.assert_allclose(out, np.where(ref > 0, ref, ref * 0.1), rtol=1e-4, atol=1e-4)


def test_generic_rule_parallelizes_and_vectorizes_elementwise():
    X = te.placeholder((64, 100), "float32", "X")
    Y = te.compute((64, 100), lambda i, j: te.exp(X[i, j]) * te.const(2.0, "float32"),
                   name="y")
    f = te.create_prim_func([X, Y], "f")
    g = schedule_default(f, "llvm")
    src = emit_c_function(g, target=ember.Target("llvm"))
    assert g.attrs["schedule_rule"] == "generic_rule" and "ember_parallel_for" in src
    x = RNG.standard_normal((64, 100)).astype(np.float32)
    np.testing.assert_allclose(compile_prim_func(g).run([x])[0], np.exp(x) * 2, rtol=1e-5)


def _conv_model():
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w1 = numpy_helper.from_array((RNG.standard_normal((16, 8, 3, 3)) * 0.2).astype("float32"), "w1")
    w2 = numpy_helper.from_array((RNG.standard_normal((16, 16, 1, 1)) * 0.2).astype("float32"), "w2")
    b = numpy_helper.from_array(RNG.standard_normal(16).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w1", "b"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "p"], ["s"]),
             helper.make_node("GlobalAveragePool", ["s"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "convs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                              [w1, w2, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_convert_layout_runs_convolutions_nhwc_and_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime compares the outputs")
    model = _conv_model()
    x = RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)
    m = ember.compile(model)
    assert 'data_layout="NHWC"' in m.graph_text or "data_layout='NHWC'" in m.graph_text \
        or "NHWC" in m.graph_text
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(m.run({"x": x})[0], sess.run(None, {"x": x})[0], rtol=1e-4,
                               atol=1e-5)
    with ember.PassContext(disabled_pass=["ConvertLayout"]):
        m0 = ember.compile(model)
    assert "NHWC" not in m0.graph_text
    np.testing.assert_allclose(m0.run({"x": x})[0], m.run({"x": x})[0], rtol=1e-4, atol=1e-5)


def _stem_model(cin=3):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w1 = numpy_helper.from_array((RNG.standard_normal((16, cin, 3, 3)) * 0.2).astype("float32"),
                                 "w1")
    w2 = numpy_helper.from_array((RNG.standard_normal((8, 16, 1, 1)) * 0.2).astype("float32"), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 15, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w1, w2, numpy_helper.from_array(np.float32(0), "lo"),
         numpy_helper.from_array(np.float32(6), "hi")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("cin", [1, 3, 5])
def test_stem_convolution_reads_the_nchw_image_without_a_transpose(cin):
    """A convolution with at most ``STEM_MAX_CHANNELS`` input channels on the NCHW network
    input reads it directly (``out_layout="NHWC"``; its pad stage does the layout change);
    with ``layout.stem_nchw`` off (or more channels) the input is transposed first. Both agree
    with onnxruntime."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime compares the outputs")
    from ember.graph.passes.convert_layout import STEM_MAX_CHANNELS
    model = _stem_model(cin)
    x = {"x": RNG.standard_normal((1, cin, 15, 14)).astype(np.float32)}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, x)[0]
    for on in (True, False):
        with ember.PassContext(config={"layout.stem_nchw": on}):
            m = ember.compile(model)
        direct = on and cin <= STEM_MAX_CHANNELS
        assert ('out_layout="NHWC"' in m.graph_text) == direct
        assert (m.plan["steps"][0]["op"] != "transpose") == direct
        np.testing.assert_allclose(m.run(x)[0], want, rtol=1e-4, atol=1e-5)


def test_channels_first_output_of_a_channels_last_convolution_is_a_typed_error():
    from ember.errors import ShapeMismatchError
    with pytest.raises(ShapeMismatchError, match="out_layout"):
        _op_kernel("nn.conv", [(1, 6, 6, 3), (8, 3, 3, 3)],
                   {"data_layout": "NHWC", "out_layout": "NCHW"})
    with pytest.raises(ShapeMismatchError, match="out_layout"):  # not a layout of a 4-d tensor
        _op_kernel("nn.conv", [(1, 3, 6, 6), (8, 3, 3, 3)],
                   {"data_layout": "NCHW", "out_layout": "NHWCX"})
    # spatial letters out of order were read as NHWC / NCHW: a transposed image, silently
    for lay in ("NWHC", "NCWH"):
        with pytest.raises(ShapeMismatchError, match="out_layout.*'NHWC'"):
            _op_kernel("nn.conv", [(1, 3, 6, 7), (8, 3, 3, 3)],
                       {"data_layout": "NCHW", "out_layout": lay})
        with pytest.raises(ShapeMismatchError, match=lay):
            _op_kernel("nn.conv", [(1, 3, 6, 7), (8, 3, 3, 3)], {"data_layout": lay})


def test_aot_entry_and_step_executor_agree_and_profile_reports_kernels(tmp_path):
    from ember.runtime.profiler import profile
    model = _conv_model()
    x = {"x": RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    m = ember.compile(model)
    assert m.plan.get("aot") and m._executor.use_aot
    y_aot = m.run(x)[0]
    m._executor.use_aot = False
    np.testing.assert_array_equal(m.run(x)[0], y_aot)
    m._executor.use_aot = True
    rep = profile(m, x, repeat=2)
    assert len(rep.kernels) == len(m.plan["steps"])
    convs = [k for k in rep.kernels if "conv" in k.op]
    assert convs and all(k.flops > 0 and k.gflops > 0 for k in convs)
    assert "GFLOP/s" in rep.table()
    rep.write_chrome_trace(tmp_path / "t.json")
    import json
    ev = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert len(ev) == len(rep.kernels) and all(e["ph"] == "X" for e in ev)


def test_profile_hot_times_each_kernel_back_to_back_without_changing_results():
    from ember.runtime.profiler import profile
    m = ember.compile(_conv_model())
    x = {"x": RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    y = m.run(x)[0]
    rep = profile(m, x, repeat=3, hot=True)
    assert all(k.hot_ms is not None and k.hot_ms > 0 for k in rep.kernels)
    table = rep.table()
    assert "hot ms" in table and "waits on data earlier kernels evicted" in table
    assert all("stall_ms" in d for d in rep.to_dict()["kernels"])
    # repeating every kernel in place left the arena and the weights as they were
    np.testing.assert_array_equal(m.run(x)[0], y)
    assert "hot ms" not in profile(m, x, repeat=1).table()


def test_weights_are_packed_once_at_compile_time():
    m = ember.compile(_conv_model())
    packed = [k for k in m.params if "@packed" in k]
    assert packed, "the convolutions' weights should be stored pre-packed"
    # the original (unpacked) conv weights are not kept alongside the packed copies
    assert not any(k in m.params for k in ("w1", "w2"))


@pytest.mark.parametrize("name, ref", [
    ("exp", np.exp), ("tanh", np.tanh),
    ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
    ("erf", lambda v: np.vectorize(__import__("math").erf)(v)),
])
def test_vector_math_matches_float64_reference(name, ref):
    from ember.tir.schedule import Schedule
    x = np.concatenate([np.linspace(-90, 90, 3001), np.linspace(-2, 2, 2001),
                        [0.0, 1e-8, -1e-8, np.inf, -np.inf, np.nan, 50.0]]).astype(np.float32)
    x = x[:len(x) - len(x) % 16]
    X = te.placeholder(x.shape, "float32", "X")
    Y = te.compute(x.shape, lambda i: getattr(te, name)(X[i]), name="y")
    sch = Schedule(te.create_prim_func([X, Y], "f"))
    sch.vectorize(sch.get_loops("y")[0])
    assert f"ember_v{name}" in emit_c_function(sch.func)
    y = compile_prim_func(sch.func).run([x])[0]
    with np.errstate(all="ignore"):
        r = ref(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(y, r, rtol=2e-6, atol=1e-30 if name == "exp" else 1e-7)


@pytest.mark.parametrize("target", ["llvm", "llvm -isa=avx2"])
def test_vector_erf_is_accurate_everywhere(target):
    # the rational erf (codegen/vector.py) on a dense sweep: absolute and relative error
    # within 4e-7 of float64 math.erf, relative accuracy kept down to tiny arguments, odd
    # symmetry, saturation to exactly +-1, signed zeros and NaN
    import math
    from ember.tir.schedule import Schedule
    x = np.concatenate([np.linspace(-6, 6, 240001), np.geomspace(1e-30, 6, 20000),
                        -np.geomspace(1e-30, 6, 20000), [0.0, -0.0, 4.0, -4.0, 1e3, -1e3,
                                                        np.inf, -np.inf, np.nan]])
    x = x.astype(np.float32)
    x = np.concatenate([x, np.zeros((-len(x)) % 16, np.float32)])
    X = te.placeholder(x.shape, "float32", "X")
    Y = te.compute(x.shape, lambda i: te.erf(X[i]), name="y")
    sch = Schedule(te.create_prim_func([X, Y], "f"))
    sch.vectorize(sch.get_loops("y")[0])
    y = compile_prim_func(sch.func, target).run([x])[0]
    fin = np.isfinite(x)
    r = np.vectorize(math.erf)(x[fin].astype(np.float64))
    err = np.abs(y[fin].astype(np.float64) - r)
    assert err.max() < 4e-7
    assert (err / np.maximum(np.abs(r), 1e-300)).max() < 4e-7
    np.testing.assert_array_equal(y[x == np.float32(1e3)], 1.0)
    np.testing.assert_array_equal(y[x == np.float32(-1e3)], -1.0)
    assert np.all(np.abs(y[~np.isnan(x)]) <= 1.0) and np.isnan(y[np.isnan(x)]).all()
    np.testing.assert_array_equal(y[np.isinf(x)], np.sign(x[np.isinf(x)]))
    assert np.signbit(y[(x == 0) & np.signbit(x)]).all()
    assert not np.signbit(y[(x == 0) & ~np.signbit(x)]).any()


@pytest.mark.parametrize("target", ["llvm", "llvm -isa=avx2"])
@pytest.mark.parametrize("m, k, n", [(37, 29, 40), (128, 64, 96), (5, 17, 24)])
def test_gemm_erf_gelu_epilogue_matches_float64(target, m, k, n):
    # dense + bias + erf GELU (BERT's FFN-up as exporters write it: x / sqrt2, erf, + 1, * x,
    # * 0.5) as the GEMM rule's fused epilogue, on row and column tails
    rng = np.random.default_rng(7)
    od = get_op("matmul")
    a = od.normalize_attrs({})
    shapes = [(m, k), (k, n)]
    ins = [te.placeholder(s, "float32", f"x{i}") for i, s in enumerate(shapes)]
    bias = te.placeholder((n,), "float32", "b")
    mm = od.compute(ins, a, od.infer_type([TensorType(s, "float32") for s in shapes], a))[0]
    c = lambda v: te.const(v, "float32")  # noqa: E731

    def gelu(*i):
        v = mm[i] + bias[i[-1]]
        return v * (te.erf(v / c(1.4142135381698608)) + c(1.0)) * c(0.5)
    y = te.compute(mm.shape, gelu, name="gelu")
    f = te.create_prim_func(ins + [bias, y], "f")
    f.attrs["constant_params"] = [1, 2]
    xs = [rng.standard_normal(s).astype(np.float32) * 2 for s in shapes]
    xs.append(rng.standard_normal(n).astype(np.float32))
    g = schedule_default(f, target)
    assert g.attrs["schedule_rule"] == "gemm_rule"
    out = compile_prim_func(g, target).run(_packed(g, xs))[0]
    import math
    v = xs[0].astype(np.float64) @ xs[1].astype(np.float64) + xs[2]
    ref = v * (np.vectorize(math.erf)(v / math.sqrt(2)) + 1) * 0.5
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("op, shape, attrs", [
    ("nn.max_pool", (1, 17, 17, 48), {"kernel_shape": [3, 3], "strides": [2, 2],
                                      "pads": [1, 1, 1, 1], "data_layout": "NHWC"}),
    ("nn.global_avg_pool", (1, 5, 5, 80), {"data_layout": "NHWC"}),
    ("nn.global_max_pool", (2, 3, 3, 32), {"data_layout": "NHWC"}),
])
def test_pooling_rule_vectorizes_channels(op, shape, attrs):
    od = get_op(op)
    a = od.normalize_attrs(attrs)
    x = RNG.standard_normal(shape).astype(np.float32)
    ins = [te.placeholder(shape, "float32", "x")]
    y = od.compute(ins, a, od.infer_type([TensorType(shape, "float32")], a))[0]
    g = schedule_default(te.create_prim_func(ins + [y], "f"), "llvm")
    assert g.attrs["schedule_rule"] == "pooling_rule"
    np.testing.assert_allclose(compile_prim_func(g).run([x])[0], od.reference([x], a)[0],
                               rtol=1e-5, atol=1e-6)


def _guarded(shape, before: bool):
    """A float32 array whose data ends right before (``before=False``) or starts right after
    (``before=True``) an inaccessible page: any out-of-bounds read of it faults."""
    import ctypes
    import mmap
    page = mmap.PAGESIZE
    nbytes = int(np.prod(shape)) * 4
    npages = -(-nbytes // page)
    buf = mmap.mmap(-1, (npages + 1) * page)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None)
    guard = addr if before else addr + npages * page
    assert libc.mprotect(ctypes.c_void_p(guard), ctypes.c_size_t(page), 0) == 0
    off = page if before else npages * page - nbytes
    arr = np.frombuffer(buf, np.float32, int(np.prod(shape)), off).reshape(shape)
    return arr, buf


@pytest.mark.parametrize("before", [True, False])
def test_padded_kernels_never_read_outside_their_input(before):
    """Padding is a guarded load: vector code must not read the input where the guard fails
    (a fault here is a crash in real use)."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent(f"""
        import sys, numpy as np
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        import test_default_schedules as T
        f, xs, ref = T._op_kernel("nn.conv", [(1, 8, 8, 64), (32, 64, 3, 3)],
                                  {{"pads": [1, 1, 1, 1], "data_layout": "NHWC"}})
        g = T.schedule_default(f, "llvm")
        lay = {{int(k): v for k, v in g.attrs.get("param_layouts", {{}}).items()}}
        w = T.IndexMap.from_json(lay[1]["index_map"]).apply_numpy(xs[1]) if 1 in lay else xs[1]
        x, keep = T._guarded(xs[0].shape, {before})
        x[...] = xs[0]
        out = np.zeros(ref.shape, np.float32)
        T.compile_prim_func(g)(x, np.ascontiguousarray(w), out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**__import__("os").environ,
                            "PYTHONPATH": str(__import__("pathlib").Path(ember.__file__)
                                              .parent.parent)})
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


def test_ablation_rungs_compile_the_optimizations_they_name():
    """Each ablation rung is a distinct compile: fusion cuts kernels, the Winograd rung adds its
    transform kernels (the rung before has it off) and every rung's model agrees with
    onnxruntime."""
    import onnxruntime as ort
    from ember.benchmark import ABLATION_STEPS, ablation
    from ember.graph.passes import PassContext
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.2).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv3x3",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = {"x": rng.standard_normal((1, 16, 20, 20)).astype(np.float32)}
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, x)[0]
    steps = ablation(model, x, threads=1, repeat=1)
    assert [s.label for s in steps] == [lbl for lbl, _ in ABLATION_STEPS]
    assert steps[1].num_kernels < steps[0].num_kernels  # FuseOps
    assert steps[4].num_kernels > steps[3].num_kernels  # Winograd's transform kernels
    for _, kw in ABLATION_STEPS:
        with PassContext(**kw):
            got = ember.compile(model, target="llvm -num-threads=1").run(x)[0]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
