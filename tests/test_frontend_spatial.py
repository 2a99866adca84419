"""ONNX LpPool, LpNormalization and InstanceNormalization (``converters/nn_ext.py``) through the
whole path, randomized over their attributes (auto_pad, dilations, ceil_mode, p, axis, all-zero
slices, epsilon), against onnxruntime (onnx's ReferenceEvaluator where onnxruntime lacks the
form); RoiAlign's adaptive grid with rois fed at run time; MaxUnpool of MaxPool's indices."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from op_cases import one_of, rng, values
from test_frontend_fuzz import SCALE, Node, check, const_in, run_in


def lp_pool(draw):
    r = rng(draw)
    nsp = draw(st.integers(1, 3), label="spatial rank")
    sp = [draw(st.integers(2, 6), label="in") for _ in range(nsp)]
    k = [draw(st.integers(1, s), label="kernel") for s in sp]
    attrs = {"kernel_shape": k, "p": one_of(draw, [1, 2, 3], "p"),
             "strides": [draw(st.integers(1, 2), label="stride") for _ in k]}
    auto = one_of(draw, ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"], "auto_pad")
    if auto == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, kk - 1), label="pad") for kk in k * 2]
        if draw(st.booleans(), label="ceil"):
            attrs["ceil_mode"] = 1
    else:
        attrs["auto_pad"] = auto
    if auto in ("NOTSET", "VALID") and draw(st.booleans(), label="dilate"):
        attrs["dilations"] = [1 + (kk * 2 <= s) for kk, s in zip(k, sp)]
    x = values(r, (draw(st.integers(1, 2)), draw(st.integers(1, 3))) + tuple(sp), "float32")
    return Node("LpPool", 18, [run_in(x)], attrs, rtol=1e-4, atol=1e-5)


def lp_norm(draw):
    r = rng(draw)
    shp = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4), label="shape"))
    x = values(r, shp, one_of(draw, ["float32", "float64"], "dtype"))
    if draw(st.booleans(), label="zero slice"):
        x[..., 0] = 0
    return Node("LpNormalization", 1, [run_in(x)],
                {"axis": draw(st.integers(-len(shp), len(shp) - 1), label="axis"),
                 "p": one_of(draw, [1, 2], "p")}, rtol=1e-5, atol=1e-6)


def instance_norm(draw):
    r = rng(draw)
    nsp = draw(st.integers(1, 3), label="spatial rank")
    c = draw(st.integers(1, 3), label="C")
    x = values(r, (draw(st.integers(1, 2)), c) + tuple(
        draw(st.lists(st.integers(1, 4), min_size=nsp, max_size=nsp), label="sp")), "float32")
    return Node("InstanceNormalization", 6,
                [run_in(x), const_in(values(r, (c,), "float32")),
                 run_in(values(r, (c,), "float32"))],
                {"epsilon": one_of(draw, [1e-5, 1e-2], "epsilon")}, rtol=1e-4, atol=1e-4)


GENERATORS = {"LpPool": lp_pool, "LpNormalization": lp_norm,
              "InstanceNormalization": instance_norm}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_converter_matches_reference(name):
    @settings(max_examples=int(12 * SCALE), deadline=None)
    @given(data=st.data())
    def run(data):
        check(GENERATORS[name](data.draw))
    run()


def _graph(nodes, inputs, opset, outputs=("y",)):
    from onnx import helper
    g = helper.make_graph(nodes, "g", inputs,
                          [helper.make_tensor_value_info(o, 1, None) for o in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
def test_roi_align_adaptive_grid_with_rois_fed_at_run_time(mode, ctm):
    """sampling_ratio=0 sizes each roi's grid from its extent: the staged executor specializes
    on the rois' values to bound the grid."""
    from onnx import TensorProto, helper

    from ember.frontend.backend import prepare
    from test_frontend_fuzz import references
    r = np.random.default_rng(1)
    x = r.standard_normal((2, 3, 8, 9)).astype(np.float32)
    node = helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], mode=mode, output_height=2,
                            output_width=3, sampling_ratio=0, spatial_scale=0.5,
                            coordinate_transformation_mode=ctm)
    m = _graph([node], [helper.make_tensor_value_info("x", 1, x.shape),
                        helper.make_tensor_value_info("rois", 1, [None, 4]),
                        helper.make_tensor_value_info("b", TensorProto.INT64, [None])], 16)
    rep = prepare(m)
    for rois in ([[0, 0, 12, 10], [2, 3, 16, 15]], [[1, 1, 3, 4]]):
        rois = np.asarray(rois, np.float32)
        b = np.arange(len(rois), dtype=np.int64) % 2
        want = next(references(m, {"x": x, "rois": rois, "b": b}))[1][0]
        np.testing.assert_allclose(rep.run([x, rois, b])[0], want, rtol=1e-4, atol=1e-5)


def test_max_unpool_inverts_max_pool_indices():
    from onnx import TensorProto, helper

    from ember.frontend.backend import prepare
    from test_frontend_fuzz import references
    x = np.random.default_rng(2).standard_normal((1, 2, 6, 7)).astype(np.float32)
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 3], strides=[2, 2])
    unpool = helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 3],
                              strides=[2, 2])
    m = _graph([pool, unpool], [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
               11)
    want = next(references(m, {"x": x}))[1][0]
    np.testing.assert_array_equal(prepare(m).run([x])[0], want)
