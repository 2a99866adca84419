"""The counter-based random operators by their distributions (their kernels reproduce the NumPy
reference exactly, ``test_ops.py``) and the ONNX generators' seed semantics through the whole
path."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ember.frontend.backend import prepare
from ember.testing import run_op

N = 40000


def test_uniform_is_uniform_on_its_interval():
    x = run_op("random.uniform", [], {"shape": [N], "dtype": "float64", "a": -1.0, "b": 3.0,
                                      "key": 11})[0]
    assert x.min() >= -1.0 and x.max() < 3.0
    hist = np.histogram(x, bins=8, range=(-1, 3))[0]
    expected = N / 8
    assert np.all(np.abs(hist - expected) < 5 * np.sqrt(expected)), hist  # ~5 sigma
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 0.03  # neighbours independent


def test_normal_has_its_mean_and_scale():
    x = run_op("random.normal", [], {"shape": [N], "dtype": "float64", "a": 2.0, "b": 0.5,
                                     "key": 12})[0]
    assert abs(x.mean() - 2.0) < 5 * 0.5 / np.sqrt(N)
    assert abs(x.std() - 0.5) < 0.02
    assert abs(((x - 2.0) / 0.5 > 1.96).mean() - 0.025) < 0.005  # the tail of a normal


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_bernoulli_frequency_matches_probability(p):
    y = run_op("random.bernoulli", [np.full(N, p)], {"dtype": None, "key": 13})[0]
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert abs(y.mean() - p) < 5 * np.sqrt(p * (1 - p) / N) + 1e-12


def _node_model(op, seed=None, **attrs):
    if seed is not None:
        attrs["seed"] = seed
    if op == "Bernoulli":
        node = helper.make_node(op, ["p"], ["y"], **attrs)
        ins = [helper.make_tensor_value_info("p", TensorProto.FLOAT, [64])]
    else:
        node = helper.make_node(op, [], ["y"], shape=[64], **attrs)
        ins = []
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", 1, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])


@pytest.mark.parametrize("op", ["RandomUniform", "RandomNormal", "Bernoulli"])
def test_seed_fixes_the_draws_and_no_seed_varies_by_compile(op):
    feeds = [np.full(64, 0.5, np.float32)] if op == "Bernoulli" else []
    a = prepare(_node_model(op, seed=3.0)).run(feeds)[0]
    b = prepare(_node_model(op, seed=3.0)).run(feeds)[0]
    c = prepare(_node_model(op, seed=4.0)).run(feeds)[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    rep = prepare(_node_model(op))
    d = rep.run(feeds)[0]
    np.testing.assert_array_equal(d, rep.run(feeds)[0])  # no state between runs
    assert not np.array_equal(d, prepare(_node_model(op)).run(feeds)[0])


def test_uniform_like_takes_shape_and_dtype_from_its_input():
    node = helper.make_node("RandomUniformLike", ["x"], ["y"], low=5.0, high=6.0, seed=1.0)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE,
                                                                      [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    y = prepare(m).run([np.zeros((3, 4))])[0]
    assert y.shape == (3, 4) and y.dtype == np.float64 and y.min() >= 5 and y.max() < 6
