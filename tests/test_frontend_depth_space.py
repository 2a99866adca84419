"""DepthToSpace / SpaceToDepth converters (opsets 1, 11, 13: the ones exported models use; the
newest opset also passes through the schema's function body) against onnxruntime."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ember
from ember.errors import ShapeMismatchError


def _model(op, shape, opset, **attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _check(m, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = ember.compile(m).run({"x": x})[0]
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("shape,b", [((1, 8, 3, 4), 2), ((2, 18, 2, 5), 3), ((1, 4, 1, 1), 2),
                                     ((1, 3, 2, 2), 1)])
def test_depth_to_space_matches_onnxruntime(opset, mode, shape, b):
    _check(_model("DepthToSpace", list(shape), opset, blocksize=b, mode=mode), shape)


def test_depth_to_space_opset1_default_mode():
    _check(_model("DepthToSpace", [1, 12, 2, 3], 1, blocksize=2), (1, 12, 2, 3))


@pytest.mark.parametrize("opset", [1, 13])
@pytest.mark.parametrize("shape,b", [((1, 2, 4, 6), 2), ((2, 3, 6, 3), 3), ((1, 5, 2, 2), 2)])
def test_space_to_depth_matches_onnxruntime(opset, shape, b):
    _check(_model("SpaceToDepth", list(shape), opset, blocksize=b), shape)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_modes_match_the_onnx_reference(mode):
    """SpaceToDepth's ``mode`` (opset 28; onnxruntime 1.32 has no kernel for it) against
    onnx's reference implementation."""
    from onnx.reference import ReferenceEvaluator
    m = _model("SpaceToDepth", [2, 3, 4, 6], 28, blocksize=2, mode=mode)
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 6)).astype(np.float32)
    np.testing.assert_array_equal(ember.compile(m).run({"x": x})[0],
                                  ReferenceEvaluator(m).run(None, {"x": x})[0])


def test_space_to_depth_inverts_depth_to_space_dcr():
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 6)).astype(np.float32)
    s2d = ember.compile(_model("SpaceToDepth", [1, 3, 4, 6], 13, blocksize=2)).run({"x": x})[0]
    back = ember.compile(_model("DepthToSpace", [1, 12, 2, 3], 13, blocksize=2)).run({"x": s2d})[0]
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("op,shape,attrs,match", [
    ("DepthToSpace", [1, 6, 2, 2], {"blocksize": 2}, "multiple of blocksize"),
    ("DepthToSpace", [1, 8, 2, 2], {"blocksize": 2, "mode": "XYZ"}, "DCR or CRD"),
    ("SpaceToDepth", [1, 2, 5, 4], {"blocksize": 2}, "multiple of blocksize"),
    ("SpaceToDepth", [1, 2, 4], {"blocksize": 2}, "4-D"),
    ("DepthToSpace", [1, 8, 2, 2], {"blocksize": 0}, ">= 1"),
])
def test_bad_depth_space_nodes_are_typed_errors_naming_the_node(op, shape, attrs, match):
    with pytest.raises(ShapeMismatchError, match=match) as e:
        ember.compile(_model(op, shape, 13, **attrs))
    assert "'y'" in str(e.value) and op in str(e.value)
