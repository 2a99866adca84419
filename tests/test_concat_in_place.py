"""Concatenations written in place (``driver.concat_in_place``): the producers store into their
slices of the concatenation's buffer, no concat kernel runs; values agree with onnxruntime on odd
shapes, including the cases that must keep the copy (a producer read elsewhere through a strided
slice, a repeated input, an input that is a graph input)."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import ember


def _model(nodes, inputs, outputs, inits):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    inits = [numpy_helper.from_array(v, n) for n, v in inits.items()]
    g = helper.make_graph(nodes, "g", ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _check(model, feeds):
    cm = ember.compile(model)
    got = cm.run(feeds)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    return cm


def _w(rng, *shape):
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def _fire(extra_use: bool = False):
    """squeeze 1x1 (3 -> 5) + relu, expand 1x1 (5 -> 7) and 3x3 (5 -> 6) + relu, concat on the
    channels, a 1x1 conv (13 -> 3) reading the concatenation; 9x11 image. ``extra_use``: the
    1x1 expand's output is also a graph output."""
    rng = np.random.default_rng(0)
    inits = {"ws": _w(rng, 5, 3, 1, 1), "bs": _w(rng, 5), "w1": _w(rng, 7, 5, 1, 1),
             "b1": _w(rng, 7), "w3": _w(rng, 6, 5, 3, 3), "b3": _w(rng, 6),
             "wo": _w(rng, 3, 13, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "ws", "bs"], ["s0"]),
             helper.make_node("Relu", ["s0"], ["s"]),
             helper.make_node("Conv", ["s", "w1", "b1"], ["e10"]),
             helper.make_node("Relu", ["e10"], ["e1"]),
             helper.make_node("Conv", ["s", "w3", "b3"], ["e30"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["e30"], ["e3"]),
             helper.make_node("Concat", ["e1", "e3"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "wo"], ["y"])]
    outs = ["y", "cat"] + (["e1"] if extra_use else [])
    return _model(nodes, [("x", [1, 3, 9, 11])], outs, inits)


def _x(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_fire_module_concat_runs_no_kernel_and_matches_onnxruntime():
    cm = _check(_fire(), {"x": _x(1, 3, 9, 11)})
    assert "concatenate" not in [st["op"] for st in cm.plan["steps"]]
    views = [s for s in cm.plan["slots"] if "view_of" in s]
    assert len(views) == 2 and sorted(s["view_offset"] for s in views) == [0, 7]
    base = cm.plan["slots"][views[0]["view_of"]]
    assert all(s["offset"] == base["offset"] + 4 * s["view_offset"] for s in views)
    # runs stay independent (the slices are rewritten every run)
    a = cm.run({"x": _x(1, 3, 9, 11, seed=2)})[0]
    b = cm.run({"x": _x(1, 3, 9, 11, seed=2)})[0]
    np.testing.assert_array_equal(a, b)


def test_producer_read_elsewhere_keeps_the_copy():
    cm = _check(_fire(extra_use=True), {"x": _x(1, 3, 9, 11)})
    assert "concatenate" in [st["op"] for st in cm.plan["steps"]]
    assert not any("view_of" in s for s in cm.plan["slots"])


def test_contiguous_slices_may_be_read_elsewhere():
    """Concatenating (1, n) rows along axis 0: each slice is contiguous, so a producer whose
    value is also read by another kernel still writes in place; a nested concatenation and a
    repeated input keep their copies."""
    rng = np.random.default_rng(3)
    inits = {"a": _w(rng, 7, 13), "b": _w(rng, 7, 13), "c": _w(rng, 13, 7)}
    nodes = [helper.make_node("MatMul", ["x", "a"], ["p"]),
             helper.make_node("Tanh", ["p"], ["q"]),
             helper.make_node("MatMul", ["x", "b"], ["r"]),
             helper.make_node("Concat", ["q", "r"], ["cat"], axis=0),  # in place
             helper.make_node("MatMul", ["q", "c"], ["u"]),           # q read again
             helper.make_node("Concat", ["cat", "cat"], ["twice"], axis=1),
             helper.make_node("Concat", ["u", "x"], ["withx"], axis=1)]  # x: a graph input
    m = _model(nodes, [("x", [1, 7])], ["cat", "u", "twice", "withx"], inits)
    cm = _check(m, {"x": _x(1, 7)})
    ops = [st["op"] for st in cm.plan["steps"]]
    assert ops.count("concatenate") == 2
    assert sorted(s["view_offset"] for s in cm.plan["slots"] if "view_of" in s) == [0, 13]


def test_hand_built_producer_keeps_its_dense_output():
    """CumSum is a hand-built kernel (``ops.imperative``; such kernels may compute output
    addresses themselves, so none is given a strided output): the concatenation keeps its
    copy."""
    axis = numpy_helper.from_array(np.array(2, np.int64), "axis")
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["c"]),
             helper.make_node("CumSum", ["x", "axis"], ["d"], reverse=1),
             helper.make_node("Concat", ["c", "d"], ["y"], axis=1)]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs, [axis]),
                          opset_imports=[helper.make_opsetid("", 13)])
    cm = _check(m, {"x": _x(2, 3, 5)})
    assert not any("view_of" in s for s in cm.plan["slots"])
