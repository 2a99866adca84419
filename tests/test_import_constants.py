"""The ONNX import keeps each large folded constant's param tied to that constant: a freed
temporary's address (Python ``id``) reused by a later constant must not hand the later one the
first one's param (a 2-layer GRU read a (256, 768) weight where its (256, 256) one belonged)."""

import gc

import numpy as np

from ember.frontend.onnx import ImportContext
from ember.graph.ir import Constant


def test_a_later_constant_at_a_freed_constants_address_gets_its_own_param():
    ctx = ImportContext({"": 17})
    shapes = [(40, 40), (30, 50), (8, 9, 10), (64,), (33, 2)]
    for k, shape in enumerate(shapes * 4):  # temporaries freed right away: ids get reused
        p = ctx._materialize(Constant(np.full(shape, float(k), np.float32)), f"c{k}")
        gc.collect()
        assert p.type.shape == shape
        np.testing.assert_array_equal(ctx.params[p.name], np.full(shape, float(k), np.float32))
    c = Constant(np.ones((40, 40), np.float32))
    assert ctx._materialize(c, "a") is ctx._materialize(c, "b")  # one constant, one param


def test_two_layer_gru_imports_and_matches_onnxruntime():
    import pytest
    ort = pytest.importorskip("onnxruntime")
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import ember
    rng = np.random.default_rng(0)
    seq, d, h = 5, 6, 4
    inits, nodes, cur, cin = [], [], "x", d
    for layer in range(2):
        w = rng.standard_normal((1, 3 * h, cin)).astype(np.float32) * 0.5
        r = rng.standard_normal((1, 3 * h, h)).astype(np.float32) * 0.5
        b = rng.standard_normal((1, 6 * h)).astype(np.float32) * 0.5
        inits += [numpy_helper.from_array(w, f"w{layer}"), numpy_helper.from_array(r, f"r{layer}"),
                  numpy_helper.from_array(b, f"b{layer}")]
        nodes.append(helper.make_node("GRU", [cur, f"w{layer}", f"r{layer}", f"b{layer}"],
                                      [f"y{layer}"], hidden_size=h))
        nodes.append(helper.make_node("Squeeze", [f"y{layer}", "ax1"], [f"s{layer}"]))
        cur, cin = f"s{layer}", h
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "ax1"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [seq, 1, d])], [helper.make_tensor_value_info(
            cur, TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    x = rng.standard_normal((seq, 1, d)).astype(np.float32)
    got = ember.compile(model, target="llvm -num-threads=1").run({"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
