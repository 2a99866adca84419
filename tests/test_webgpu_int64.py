"""int64 results on ``target="webgpu"``: WGSL has no 64-bit integers, so int64 is computed in
i32 and every int64 value a kernel computes that can leave the int32 range is checked on the
device (a status word; ``run`` raises ``InputError`` naming the node). In-range results are
compared with NumPy's int64 arithmetic, bit-exact; kernels that cannot overflow bind no status
word. Runs on the WebGPU adapter (lavapipe in CI)."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import ember
from ember.errors import InputError
from webgpu_util import needs_adapter

I32_MAX, I32_MIN = 2**31 - 1, -2**31
OVERFLOW = "left the 32-bit range WebGPU computes int64 in"


def one_node(op, inputs, attrs=None, out_type=TP.INT64, extra_inits=()):
    """A model applying ONNX ``op`` to graph inputs ``{name: array}`` (int64 or float32)."""
    tp = {np.dtype(np.int64): TP.INT64, np.dtype(np.float32): TP.FLOAT}
    node = h.make_node(op, list(inputs) + [i.name for i in extra_inits], ["y"], **(attrs or {}))
    g = h.make_graph([node], "g", [h.make_tensor_value_info(k, tp[v.dtype], v.shape)
                                   for k, v in inputs.items()],
                     [h.make_tensor_value_info("y", out_type, None)], list(extra_inits))
    return ember.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]),
                         target="webgpu")


@needs_adapter
def test_reproducer_add_leaving_int32_is_an_input_error():
    a = np.array([2**30 + 5, 3], np.int64)
    cm = one_node("Add", {"a": a, "b": a})
    with pytest.raises(InputError, match=OVERFLOW) as e:
        cm.run({"a": a, "b": a})
    assert "'y'" in str(e.value) and "CPU target" in str(e.value)
    ok = np.array([2**30 - 1, -7], np.int64)  # the status word is reset for the next run
    np.testing.assert_array_equal(cm.run({"a": ok, "b": ok})[0], ok + ok)


@needs_adapter
@pytest.mark.parametrize("op,f", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)])
def test_int64_arithmetic_in_range_is_exact_and_out_of_range_is_caught(op, f):
    rng = np.random.default_rng(0)
    a = rng.integers(-2**15, 2**15, 64).astype(np.int64)
    b = rng.integers(-2**15, 2**15, 64).astype(np.int64)
    # edges that land exactly on the int32 limits
    a[:4] = [I32_MAX - 1, I32_MIN + 1, -2**16, 2**16 - 1]
    b[:4] = {"Add": [1, -1, -2**15, 1], "Sub": [-1, 1, 2**15, -1],
             "Mul": [1, 1, 2**15, 2**15]}[op]
    cm = one_node(op, {"a": a, "b": b})
    exp = f(a, b)
    assert exp.min() >= I32_MIN and exp.max() <= I32_MAX
    np.testing.assert_array_equal(cm.run({"a": a, "b": b})[0], exp)
    bad = {"Add": (I32_MAX, 1), "Sub": (I32_MIN, 1), "Mul": (2**16, 2**15)}[op]
    a2, b2 = a.copy(), b.copy()
    a2[7], b2[7] = bad
    with pytest.raises(InputError, match=OVERFLOW):
        cm.run({"a": a2, "b": b2})


@needs_adapter
def test_int64_neg_abs_of_int32_min_are_caught():
    x = np.array([5, -3, I32_MAX, I32_MIN + 1], np.int64)
    for op, f in (("Neg", np.negative), ("Abs", np.abs)):
        cm = one_node(op, {"x": x})
        np.testing.assert_array_equal(cm.run({"x": x})[0], f(x))
        with pytest.raises(InputError, match=OVERFLOW):
            cm.run({"x": np.array([1, 2, I32_MIN, 0], np.int64)})


@needs_adapter
def test_int64_reduce_sum_and_cumsum_overflow_are_caught():
    x = np.full((4, 8), 2**28, np.int64)  # a row sums to 8 * 2^28 = 2^31: one past int32
    small = x // 2 - np.arange(32, dtype=np.int64).reshape(4, 8)
    axes = h.make_tensor("axes", TP.INT64, (1,), [1])
    cm = one_node("ReduceSum", {"x": x}, {"keepdims": 0}, extra_inits=[axes])
    np.testing.assert_array_equal(cm.run({"x": small})[0], small.sum(axis=1))
    with pytest.raises(InputError, match=OVERFLOW):
        cm.run({"x": x})
    axis = h.make_tensor("axis", TP.INT64, (), [1])
    cm = one_node("CumSum", {"x": x}, extra_inits=[axis])
    np.testing.assert_array_equal(cm.run({"x": small})[0], np.cumsum(small, axis=1))
    with pytest.raises(InputError, match=OVERFLOW):
        cm.run({"x": x})


@needs_adapter
def test_int64_cast_from_float_out_of_range_is_caught():
    x = np.array([1.5, -2.5, 2.0e9, -2.0e9], np.float32)
    cm = one_node("Cast", {"x": x}, {"to": TP.INT64})
    np.testing.assert_array_equal(cm.run({"x": x})[0], x.astype(np.int64))
    with pytest.raises(InputError, match=OVERFLOW):
        cm.run({"x": np.array([1.0, 3.0e9, 0.0, 0.0], np.float32)})


@needs_adapter
def test_int64_kernels_that_cannot_overflow_bind_no_status_word():
    a = np.array([[I32_MAX, I32_MIN, 3], [-1, 0, 7]], np.int64)
    b = np.array([[1, -1, 2], [0, 0, 9]], np.int64)
    for op, f in (("Max", np.maximum), ("Min", np.minimum)):
        cm = one_node(op, {"a": a, "b": b})
        np.testing.assert_array_equal(cm.run({"a": a, "b": b})[0], f(a, b))
        assert not cm.checked, f"{op}: an overflow check where none is needed"
    cm = one_node("Transpose", {"a": a})
    np.testing.assert_array_equal(cm.run({"a": a})[0], a.T)
    assert not cm.checked


@needs_adapter
def test_int64_mul_overflow_edges():
    """The checked multiply against exact (Python) products around the int32 limits."""
    a0 = np.zeros(1, np.int64)
    cm = one_node("Mul", {"a": a0, "b": a0})
    pairs = [(-1, I32_MIN), (I32_MIN, -1), (I32_MIN, 1), (-1, I32_MAX), (46341, 46341),
             (46340, 46340), (65536, -32768), (65536, 32768), (-65536, -32768), (0, I32_MIN),
             (3, 715827882), (3, 715827883), (-3, 715827883)]
    for x, y in pairs:
        feeds = {"a": np.array([x], np.int64), "b": np.array([y], np.int64)}
        if I32_MIN <= x * y <= I32_MAX:
            assert cm.run(feeds)[0][0] == x * y, (x, y)
        else:
            with pytest.raises(InputError, match=OVERFLOW):
                cm.run(feeds)
