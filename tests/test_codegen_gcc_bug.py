"""Regression: gcc 12 with AVX-512 miscompiled if-converted loop nests whose select reads a
buffer on one side only (the masked loads of later vectors reused the first vector's mask), which
made PRelu (and any guarded load) return wrong elements for shapes like (3, 4, 5)."""

import numpy as np
import pytest
from onnx import helper

import ember


@pytest.mark.parametrize("shape", [(3, 4, 5), (16, 16, 3), (1, 12, 5)])
def test_prelu_guarded_load_nested_loops(shape):
    n = helper.make_node("PRelu", ["x", "slope"], ["y"])
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", 1, list(shape)),
                                     helper.make_tensor_value_info("slope", 1, list(shape))],
                          [helper.make_tensor_value_info("y", 1, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    s = rng.standard_normal(shape).astype(np.float32)
    y, = ember.compile(m).run([x, s])
    np.testing.assert_allclose(y, np.where(x < 0, x * s, x), rtol=1e-6)
