"""ONNX Resize/Upsample forms beyond the per-axis operator's cases: Resize-11's
tf_half_pixel_for_nn, Upsample-1's height/width scales, Resize-10, and scales/sizes fed as graph
inputs (the staged executor specializes on their values), against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from ember.frontend.backend import prepare

X = np.random.default_rng(0).standard_normal((1, 2, 3, 5)).astype(np.float32)


def _ort(m, feeds):
    return ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def _model(node, opset, inits=(), inputs=("x",)):
    vis = [helper.make_tensor_value_info(n, 1 if n == "x" else
                                         (7 if n == "sizes" else 1), None) for n in inputs]
    g = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info("y", 1, None)],
                          list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize11_tf_half_pixel_for_nn(nearest_mode, mode):
    node = helper.make_node("Resize", ["x", "roi", "s"], ["y"], mode=mode,
                            nearest_mode=nearest_mode,
                            coordinate_transformation_mode="tf_half_pixel_for_nn")
    # scales whose source coordinates stay clear of .5 ties (onnxruntime rounds in float32)
    m = _model(node, 11, [numpy_helper.from_array(np.array([1, 1, 1.7, 0.75], np.float32), "s"),
                          numpy_helper.from_array(np.zeros(0, np.float32), "roi")])
    np.testing.assert_allclose(prepare(m).run([X])[0], _ort(m, {"x": X})[0], rtol=1e-5,
                               atol=1e-6)


def test_upsample1_height_width_scales():
    node = helper.make_node("Upsample", ["x"], ["y"], mode="nearest", height_scale=2.0,
                            width_scale=3.0)
    got = prepare(_model(node, 1)).run([X])[0]
    np.testing.assert_array_equal(got, X.repeat(2, axis=2).repeat(3, axis=3))


@pytest.mark.parametrize("scales", [[1, 1, 2.0, 0.5], [1, 1, 0.7, 1.3]])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize10_matches_onnxruntime(scales, mode):
    node = helper.make_node("Resize", ["x", "s"], ["y"], mode=mode)
    m = _model(node, 10, [numpy_helper.from_array(np.array(scales, np.float32), "s")])
    np.testing.assert_allclose(prepare(m).run([X])[0], _ort(m, {"x": X})[0], rtol=1e-5,
                               atol=1e-6)


def test_sizes_from_a_graph_input_are_specialized():
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic")
    m = _model(node, 19, inputs=("x", "sizes"))
    rep = prepare(m)
    for sizes in ([1, 2, 6, 4], [1, 2, 2, 9], [1, 2, 6, 4]):
        sz = np.array(sizes, np.int64)
        np.testing.assert_allclose(rep.run([X, sz])[0], _ort(m, {"x": X, "sizes": sz})[0],
                                   rtol=1e-5, atol=1e-5)
    segs = rep.staged.report()["segments"]
    assert [s["specialized_on"] for s in segs] == [["sizes"]]
