"""Helpers of the graph-pass tests: a pass test reads as "this text in, that text out"."""

import numpy as np

from ember.graph import IRModule, structural_equal
from ember.graph.interpreter import run_reference


def random_inputs(func, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for p in func.params:
        dt = np.dtype(p.type.dtype)
        if dt.kind == "f":
            out[p.name] = rng.standard_normal(p.type.shape).astype(dt)
        elif dt.kind == "b":
            out[p.name] = rng.integers(0, 2, p.type.shape).astype(bool)
        else:
            out[p.name] = rng.integers(0, 5, p.type.shape).astype(dt)
    return out


def check_pass_text(pass_, before: str, expected: str, rtol=1e-5, atol=1e-5) -> IRModule:
    """Run ``pass_`` on the parsed ``before``; the result must equal the parsed ``expected``
    structurally and compute the same values (NumPy references) as ``before``."""
    mod = IRModule.from_text(before)
    got = pass_(mod)
    want = IRModule.from_text(expected)
    assert structural_equal(got, want), f"got:\n{got.text()}\nexpected:\n{want.text()}"
    x = random_inputs(got.main)  # (the result: its shapes are static when the input's are not)
    for a, b in zip(run_reference(mod, x), run_reference(got, x)):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)
    return got


def shuffle_unit_body(c_in, c_mid, c_out, g1, gs, g2, hw, stride, seed=0):
    """The ONNX body of a ShuffleNet unit on an NCHW input ``x`` of ``(1, c_in, hw, hw)``:
    grouped 1x1 conv (``g1`` groups) + BN + ReLU, channel shuffle (``gs`` groups:
    Reshape/Transpose/Reshape), depthwise 3x3 (``stride``, pad 1) + BN, grouped 1x1 conv
    (``g2`` groups, ``c_out`` outputs) + BN into value ``"b2"``. Returns ``(nodes, inits,
    w)``: the node and initializer lists to extend and ``w(name, shape)``, which adds a random
    float32 weight (seeded draws in call order) and returns its name."""
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, shape, scale=0.3):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def bn(x, c, out):
        s = w(out + "_s", (c,)), w(out + "_b", (c,)), w(out + "_m", (c,))
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32),
                                             out + "_v"))
        nodes.append(helper.make_node("BatchNormalization", [x, *s, out + "_v"], [out]))

    nodes.append(helper.make_node("Conv", ["x", w("w1", (c_mid, c_in // g1, 1, 1))], ["c1"],
                                  group=g1))
    bn("c1", c_mid, "b1")
    nodes.append(helper.make_node("Relu", ["b1"], ["r1"]))
    inits.append(numpy_helper.from_array(
        np.array([1, gs, c_mid // gs, hw, hw], np.int64), "s5"))
    inits.append(numpy_helper.from_array(np.array([1, c_mid, hw, hw], np.int64), "s4"))
    nodes.append(helper.make_node("Reshape", ["r1", "s5"], ["sh1"]))
    nodes.append(helper.make_node("Transpose", ["sh1"], ["sh2"], perm=[0, 2, 1, 3, 4]))
    nodes.append(helper.make_node("Reshape", ["sh2", "s4"], ["sh3"]))
    nodes.append(helper.make_node("Conv", ["sh3", w("wd", (c_mid, 1, 3, 3))], ["d"],
                                  group=c_mid, strides=[stride, stride], pads=[1, 1, 1, 1]))
    bn("d", c_mid, "bd")
    nodes.append(helper.make_node("Conv", ["bd", w("w2", (c_out, c_mid // g2, 1, 1))],
                                  ["c2"], group=g2))
    bn("c2", c_out, "b2")
    return nodes, inits, w
