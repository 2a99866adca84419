"""WebGPU numerics the CPU got right and the GPU path did not (the ``cpu_passing_failing_here``
cases of ``bench/results/conformance_webgpu.md``), each kind on lavapipe against NumPy:

- full reductions with an epilogue (``mean``, layer norm, RMS norm over every axis): the
  cooperative row-reduction schedule left the result in thread 0's registers and every thread
  stored its own copy (``gpu_row_reduction_rule`` now keeps such nests on the fallback);
- ``tanh`` of small arguments (lavapipe: 1.7e-4 relative off near 0; Mish of x < -7);
- ``mod`` edge cases: signed zeros, infinite divisors (``fmod`` 0 and 1)."""

import numpy as np
import pytest

from ember.testing import assert_matches_reference, run_op
from webgpu_util import needs_adapter

SHAPES = [(7,), (3, 5), (2, 3, 4), (2, 3, 4, 5)]
RNG = np.random.default_rng(19)


def _x(shape):
    return RNG.standard_normal(shape).astype(np.float32) * 3 + 0.5


@needs_adapter
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("keepdims", [0, 1])
def test_mean_over_every_axis(shape, keepdims):
    assert_matches_reference("mean", [_x(shape)], {"axes": None, "keepdims": keepdims},
                             rtol=1e-4, atol=1e-5, target="webgpu")


@needs_adapter
@pytest.mark.parametrize("op", ["nn.global_avg_pool", "nn.global_max_pool"])
@pytest.mark.parametrize("shape", [(1, 1, 9, 9), (2, 3, 9, 9), (1, 1, 3, 3)],
                         ids=lambda s: "x".join(map(str, s)))
def test_global_pool_single_plane(op, shape):
    # N = C = 1 leaves no spatial loop: the average's division ran in every thread on main
    assert_matches_reference(op, [_x(shape)], {}, rtol=1e-4, atol=1e-5, target="webgpu")


def _norm_model(op, shape, axis):
    """An ONNX model normalizing ``x`` over ``axis`` (odd axes in their negative form) with the
    run-time scale ``s``, as in the backend suite: ``LayerNormalization`` (opset 17, bias
    ``b``, outputs ``y``, ``mean``, ``inv``) or RMS normalization written out as
    ``Mul``/``ReduceMean``/``Add``/``Sqrt``/``Reciprocal`` (the expanded ``RMSNormalization``).
    """
    from onnx import TensorProto, helper
    ax = axis - len(shape) if axis % 2 else axis
    rshape = shape[:axis] + (1,) * (len(shape) - axis)

    def vi(name, shp):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shp)
    ins = [vi("x", shape), vi("s", shape[axis:])]
    if op == "LayerNormalization":
        ins.append(vi("b", shape[axis:]))
        nodes = [helper.make_node(op, ["x", "s", "b"], ["y", "mean", "inv"], axis=ax,
                                  epsilon=1e-5)]
        outs = [vi("y", shape), vi("mean", rshape), vi("inv", rshape)]
        inits, opset = [], 17
    else:
        axes = helper.make_tensor("axes", TensorProto.INT64, [len(shape) - axis],
                                  list(range(ax, ax + len(shape) - axis)))
        eps = helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-5])
        nodes = [helper.make_node("Mul", ["x", "x"], ["xx"]),
                 helper.make_node("ReduceMean", ["xx", "axes"], ["ms"], keepdims=1),
                 helper.make_node("Add", ["ms", "eps"], ["mse"]),
                 helper.make_node("Sqrt", ["mse"], ["rms"]),
                 helper.make_node("Reciprocal", ["rms"], ["inv"]),
                 helper.make_node("Mul", ["x", "inv"], ["xn"]),
                 helper.make_node("Mul", ["xn", "s"], ["y"])]
        outs, inits, opset = [vi("y", shape)], [axes, eps], 18
    g = helper.make_graph(nodes, "norm", ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@needs_adapter
@pytest.mark.parametrize("op", ["LayerNormalization", "RMSNormalization"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_norm_over_every_axis_count(op, shape):
    # through ember.compile (graph passes on): every axis from 0 (a full reduction) to the last
    import ember
    for axis in range(len(shape)):
        x, s, b = _x(shape), _x(shape[axis:]), _x(shape[axis:])
        feeds = {"x": x, "s": s} if op != "LayerNormalization" else {"x": x, "s": s, "b": b}
        got = ember.compile(_norm_model(op, shape, axis), target="webgpu").run(feeds)
        red = tuple(range(axis, len(shape)))
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=red, keepdims=True)
        if op == "LayerNormalization":
            x64 = x64 - mean
        inv = 1 / np.sqrt((x64 * x64).mean(axis=red, keepdims=True) + 1e-5)
        want = [x64 * inv * s + (b if op == "LayerNormalization" else 0)]
        if op == "LayerNormalization":
            want += [mean, inv]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{op} axis {axis}")


@needs_adapter
def test_tanh_and_mish_near_zero_keep_relative_precision():
    mag = np.geomspace(1e-30, 20, 300).astype(np.float32)
    x = np.concatenate([mag, -mag, np.float32([0, -0.0, 0.125, -0.125, 15, 100, -100])])
    y, = run_op("tanh", [x], {}, target="webgpu")
    ref = np.tanh(x.astype(np.float64))
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=0)
    assert np.array_equal(np.signbit(y), np.signbit(ref))
    special, = run_op("tanh", [np.float32([np.nan, np.inf, -np.inf])], {}, target="webgpu")
    assert np.isnan(special[0]) and special[1] == 1 and special[2] == -1
    xm = -np.linspace(5, 12, 200).astype(np.float32)  # mish(x) ~ x e^x: tanh of ~1e-4
    assert_matches_reference("nn.mish", [xm], {}, rtol=2e-5, atol=0, target="webgpu")


@needs_adapter
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_signed_zeros_and_infinite_divisors(fmod):
    inf, nan = np.inf, np.nan
    a = np.float32([0, -0.0, 4, -4, 3, -1, 3, -1, 1, inf, -inf, nan, 5, 5.5, -5.5, 5.5, -5.5,
                    0, 1e-30, 7.25, -7.25])
    b = np.float32([-2, 2, 2, -2, inf, inf, -inf, -inf, -inf, 2, 3, 2, 0, 2, 2, -2, -2, -0.0,
                    -3e-30, 0.5, 0.5])
    y, = run_op("mod", [a, b], {"fmod": fmod}, target="webgpu")
    with np.errstate(all="ignore"):
        ref = np.fmod(a, b) if fmod else np.mod(a, b)
    assert np.array_equal(y, ref, equal_nan=True), (y, ref)
    assert np.array_equal(np.signbit(y[~np.isnan(ref)]), np.signbit(ref[~np.isnan(ref)]))
    # 1 / mod: the sign of a zero result shows (the ONNX signed-zero case)
    r, = run_op("mod", [np.float32([-4, 4, 0, -0.0]), np.float32([2, -2, 3, 3])],
                {"fmod": fmod}, target="webgpu")
    with np.errstate(all="ignore"):
        want = (np.fmod if fmod else np.mod)(np.float32([-4, 4, 0, -0.0]), np.float32([2, -2, 3, 3]))
        assert np.array_equal(1 / r, 1 / want)


@needs_adapter
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("spatial", [(3, 2), (2, 3, 4)], ids=["2d", "3d"])
def test_grid_sample_reflection_far_outside(mode, align, spatial):
    # coordinates up to 3.5 image sizes out: several reflections from either edge; the
    # kernel must also compile quickly (its reflect once made 0.5 MB of WGSL, timing out)
    x = _x((1, 2) + spatial)
    out = (3, 5, 2)[:len(spatial)]
    grid = RNG.uniform(-3.5, 3.5, (1, *out, len(spatial))).astype(np.float32)
    assert_matches_reference("image.grid_sample", [x, grid],
                             {"mode": mode, "padding_mode": "reflection", "align_corners": align},
                             rtol=1e-4, atol=1e-4, target="webgpu")


@pytest.mark.parametrize("target", ["webgpu", "cuda"])
def test_full_reduction_with_epilogue_is_not_cooperative(target):
    # no adapter needed: the schedule itself. A mean over every axis divides the sum in the
    # same kernel after the reduction: a cooperative sum would leave it in thread 0 only
    from ember.graph.lower import lower_binding
    from ember.testing import op_module
    from ember.tir.schedule.rules import schedule_default

    def rule(op, attrs):
        m = op_module(op, [np.zeros((2, 3, 4, 5), np.float32)], attrs)
        k = schedule_default(lower_binding(m.main.bindings[0], "k0", m), target)
        return k.attrs["schedule_rule"]
    assert rule("mean", {"axes": None, "keepdims": 1}) == "gpu_fallback_rule"
    # the sum stores straight into the output (thread 0): it stays cooperative
    assert rule("sum", {"axes": None, "keepdims": 0}) == "gpu_row_reduction_rule"
