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
@pytest.mark.parametrize("op", ["nn.layer_norm", "nn.rms_norm"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_norm_over_every_axis_count(op, shape):
    # every axis from 0 (a full reduction) to the last, as ONNX axis and its negative form
    for axis in range(len(shape)):
        for ax in (axis, axis - len(shape)):
            ins = [_x(shape), _x(shape[axis:])]
            assert_matches_reference(op, ins, {"axis": ax, "epsilon": 1e-5}, rtol=1e-4,
                                     atol=1e-5, target="webgpu")


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
