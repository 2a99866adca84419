"""The GPU GEMM/convolution rule (``gpu_gemm_rule``: ``Schedule.tile_gemm``, shared-memory and
register tiles) run on the WebGPU adapter (lavapipe in CI) against NumPy, on shapes whose sides
are not multiples of the tiles (tails in M, N and K), batched and broadcast matmuls, and
convolutions with padding, strides, dilations and a fused bias. Each case asserts that the
tiled rule scheduled it, so the fallback cannot pass in its place."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.graph.lower import lower_binding
from ember.testing import assert_matches_reference, op_module
from ember.tir.schedule.rules import schedule_default
from webgpu_util import needs_adapter


def _check(op, inputs, attrs, target="webgpu"):
    m = op_module(op, inputs, attrs)
    k = schedule_default(lower_binding(m.main.bindings[0], "k0", m), target)
    assert k.attrs["schedule_rule"] == "gpu_gemm_rule", k.attrs.get("schedule_notes")
    assert_matches_reference(op, inputs, attrs, rtol=1e-4, atol=1e-5, target=target)


def _rand(r, *shape):
    return r.standard_normal(shape).astype(np.float32)


@needs_adapter
@settings(max_examples=4, deadline=None)
@given(m=st.integers(16, 70), n=st.integers(17, 70), k=st.integers(8, 40),
       batch=st.sampled_from([(), (2,), (2, 1)]), seed=st.integers(0, 2**16))
def test_tiled_matmul_odd_shapes(m, n, k, batch, seed):
    r = np.random.default_rng(seed)
    b_batch = batch if batch != (2, 1) else (3,)   # (2, 1) x (3,) broadcasts to (2, 3)
    _check("matmul", [_rand(r, *batch, m, k), _rand(r, *b_batch, k, n)], {})


@needs_adapter
def test_tiled_matmul_small_workgroups():
    r = np.random.default_rng(1)
    _check("matmul", [_rand(r, 37, 29), _rand(r, 29, 41)], {},
           target="webgpu -max_threads_per_block=64")


@needs_adapter
@settings(max_examples=4, deadline=None)
@given(c=st.integers(1, 6), oc=st.integers(8, 20), hw=st.integers(5, 11),
       k=st.sampled_from([1, 3]), stride=st.integers(1, 2), dil=st.integers(1, 2),
       pad=st.integers(0, 1), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_tiled_conv_odd_shapes(c, oc, hw, k, stride, dil, pad, bias, seed):
    r = np.random.default_rng(seed)
    hw = max(hw, dil * (k - 1) + 1)
    ins = [_rand(r, 2, c, hw, hw + 1), _rand(r, oc, c, k, k)] + ([_rand(r, oc)] if bias else [])
    attrs = {"strides": [stride, stride], "pads": [pad, 0, pad, pad], "dilations": [dil, dil]}
    out = (hw + pad * 2 - dil * (k - 1) - 1) // stride + 1
    if 2 * out * out * oc < 256 or c * k * k < 8:
        return  # below the rule's size threshold: the fallback's kernel (test_webgpu_ops)
    _check("nn.conv", ins, attrs)
