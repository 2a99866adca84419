"""``tir.transform.row_groups`` (a loop of gemm micro-kernel calls over consecutive row blocks
run as calls of a twice-as-tall micro-kernel with two row groups, at code generation): compiled
convolutions checked against the NumPy reference and against the same kernels without the
transform (bit for bit: the sums run in the same order), and where it must not apply."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
import ember.codegen.c as cgen
from ember.ops.nn import _conv_ref
from ember.target import Target
from ember.tir import pipeline

pytestmark = pytest.mark.skipif("avx512f" not in Target("llvm").features,
                                reason="row groups apply to the AVX-512 micro-kernels; this "
                                       "machine has no AVX-512")


def _conv_model(c, h, k, stride, oc, seed=0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((oc, c, k, k)) * 0.05).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    conv = helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[k // 2] * 4,
                            strides=[stride] * 2)
    relu = helper.make_node("Relu", ["c"], ["y"])
    g = helper.make_graph([conv, relu], "conv", [x], [y],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), w, b


def _without_row_groups(monkeypatch):
    """The CPU pass list without its row_groups pass (the kernels print as before it)."""
    monkeypatch.setitem(pipeline.PASSES, "llvm",
                        [(n, f) for n, f in pipeline.PASSES["llvm"] if n != "row_groups"])


def _compile(m, monkeypatch, groups: bool):
    monkeypatch.setenv("EMBER_NO_MODEL_CACHE", "1")
    if not groups:
        _without_row_groups(monkeypatch)
    return ember.compile(m, target="llvm -num-threads=2")


# ResNet-50's stage-4 shapes: 3x3 on 7x7 (stride 1), 3x3 14x14 -> 7x7 (stride 2), and the
# K-blocked 2048 -> 512 1x1 convolution; 7 output rows of 7 x 32 blocks each
@pytest.mark.parametrize("c,h,k,stride,oc", [(512, 7, 3, 1, 512), (512, 14, 3, 2, 256),
                                             (2048, 7, 1, 1, 256)])
def test_stage4_convolutions_use_row_groups_and_match(c, h, k, stride, oc, monkeypatch):
    m, w, b = _conv_model(c, h, k, stride, oc)
    x = np.random.default_rng(1).standard_normal((1, c, h, h)).astype(np.float32)
    on = _compile(m, monkeypatch, True)
    off = _compile(m, monkeypatch, False)
    # pairs of 7-row blocks as one 14-row call, and the odd seventh block as a 7-row call
    assert re.search(r"ember_ukr_gemm_avx512_f32_14x32_r\d(_pn)?_g2\(", on.source)
    assert re.search(r"ember_ukr_gemm_avx512_f32_7x32_r\d(_pn)?\(", on.source)
    assert "_g2(" not in off.source
    attrs = {"strides": [stride] * 2, "pads": [k // 2] * 4, "dilations": [1, 1], "group": 1,
             "kernel_shape": [k, k], "auto_pad": "NOTSET"}
    ref = np.maximum(_conv_ref([x, w, b], attrs)[0], 0)
    y_on, y_off = on.run({"x": x})[0], off.run({"x": x})[0]
    np.testing.assert_allclose(y_on, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(y_on, y_off)


@pytest.mark.parametrize("c,oc", [(512, 2048), (320, 1280)])
def test_panel_row_loops_with_an_epilogue_use_row_groups_and_match(c, oc, monkeypatch):
    """The panels-outer 1x1 convolutions on 7x7 images (ResNet-50's 512 -> 2048, MobileNetV2's
    320 -> 1280) compute each row block into a local tile and run the bias + ReLU epilogue on
    it: grouped, one tile holds two blocks and the epilogue runs on each half."""
    m, w, b = _conv_model(c, 7, 1, 1, oc)
    x = np.random.default_rng(3).standard_normal((1, c, 7, 7)).astype(np.float32)
    on = _compile(m, monkeypatch, True)
    off = _compile(m, monkeypatch, False)
    assert re.search(r"float acc\d+\[448\]", on.source)  # one local tile of two 7 x 32 blocks
    assert "_g2(" in on.source and "_g2(" not in off.source
    attrs = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 1,
             "kernel_shape": [1, 1], "auto_pad": "NOTSET"}
    ref = np.maximum(_conv_ref([x, w, b], attrs)[0], 0)
    y_on = on.run({"x": x})[0]
    np.testing.assert_allclose(y_on, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(y_on, off.run({"x": x})[0])


def test_blocks_that_would_not_fit_the_registers_stay_as_they_are(monkeypatch):
    """A 56-wide image runs 14 x 32 blocks (28 accumulators): doubling them would spill, so no
    call is grouped; the results still match the reference."""
    m, w, b = _conv_model(64, 56, 1, 1, 64)
    x = np.random.default_rng(2).standard_normal((1, 64, 56, 56)).astype(np.float32)
    on = _compile(m, monkeypatch, True)
    assert "_g2(" not in on.source
    attrs = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 1,
             "kernel_shape": [1, 1], "auto_pad": "NOTSET"}
    np.testing.assert_allclose(on.run({"x": x})[0], np.maximum(_conv_ref([x, w, b], attrs)[0], 0),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_tuned_tiles_on_an_even_row_loop_match_on_both_isas(isa, monkeypatch):
    """Every register tile / loop order / K-blocking the GEMM rule offers for a 1x1 convolution
    on 6x6 images (an even row loop: no odd last block), on AVX-512 and on AVX2 (12 accumulators:
    2 x 6 x 8 rows), in the in-place form (``rows``; K-blocked configurations accumulate into
    ``C`` across calls) and the local-tile form (``panels``): wherever row groups apply, the
    kernel matches the reference and, bit for bit, the kernel without the transform."""
    from ember.runtime.kernel import compile_prim_func
    from ember.tir.schedule.rules import gemm_knobs, schedule_config
    from test_default_schedules import RELU, _op_kernel, _packed
    target = Target(f"llvm -num-threads=2 -isa={isa}")
    f, xs, ref = _op_kernel("nn.conv", [(2, 6, 6, 256), (64, 256, 1, 1), (64,)],
                            {"data_layout": "NHWC"}, RELU, np.random.default_rng(4))
    ref = np.maximum(ref, 0)
    knobs = gemm_knobs(f, target)
    picked = {}  # (order, K-blocked) -> the first configuration whose kernel is grouped
    for tile in knobs["tile"]:
        for order in knobs["order"]:
            for kb in knobs["kblock"]:
                cfg = {"tile": tile, "order": order, "kblock": kb}
                g = schedule_config(f, target, "gemm_rule", cfg)
                if (order, kb > 0) not in picked and \
                        "_g2(" in cgen.emit_c_function(g, "k", target=target):
                    picked[(order, kb > 0)] = g
    assert {("rows", True), ("panels", True)} <= set(picked), sorted(picked)
    for g in picked.values():
        on = compile_prim_func(g, target).run(_packed(g, xs))[0]
        np.testing.assert_allclose(on, ref, rtol=1e-4, atol=1e-4)
        with monkeypatch.context() as mp:
            _without_row_groups(mp)
            off = compile_prim_func(g, target).run(_packed(g, xs))[0]
        np.testing.assert_array_equal(on, off)
