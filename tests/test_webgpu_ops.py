"""Every registered operator compiled for ``Target("webgpu")`` (GPU fallback schedule -> WGSL ->
wgpu) and run on the WebGPU adapter (lavapipe in CI) against its NumPy reference, with the
CPU op tests' randomized cases (``op_cases.py``) at their small shapes.

An example whose dtype WebGPU cannot represent (float64, float16 without shader-f16, the narrow
float formats, 64-bit unsigned) must be refused with a ``CodegenError`` naming the dtype, and an
int64 input outside int32 with an ``InputError``; an operator whose every drawn example is such
is skipped with that reason. Any other error, or a wrong number, fails."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.errors import CodegenError, InputError
from ember.testing import assert_matches_reference
from op_cases import CASES
from webgpu_util import needs_adapter

EXAMPLES = 4
# CPU-only operators the webgpu graph pipeline never produces: the Winograd transforms (their
# per-position select chains take lavapipe minutes to compile) and the inverted-residual
# composite (built of CPU micro-kernel calls); nn.attention runs decomposed into graph
# operators (the DecomposeAttention pass of the GPU pipelines)
NOT_ON_WEBGPU = {"nn.winograd_input": "Winograd transforms are CPU-only (the webgpu pipeline "
                                      "has no WinogradConv pass)",
                 "nn.winograd_output": "Winograd transforms are CPU-only (the webgpu pipeline "
                                       "has no WinogradConv pass)",
                 "nn.inverted_residual": "a CPU composite of micro-kernel calls (the webgpu "
                                         "pipeline has no FuseInvertedResidual pass)",
                 "qnn.conv2d": "its compute is a loop of CPU int8 micro-kernel calls (qconv); no "
                               "GPU int8 kernel yet (the webgpu pipeline keeps QDQ in float)"}
REFUSED = re.compile(r"dtype (\w+) has no WGSL form|int64 values in .* do not fit the int32"
                     r"|int64 value it computes left the 32-bit range")


@needs_adapter
@pytest.mark.parametrize("op", sorted(CASES))
def test_op_matches_reference_on_webgpu(op):
    if op in NOT_ON_WEBGPU:
        pytest.skip(NOT_ON_WEBGPU[op])
    seen = {"ok": 0, "refused": set()}

    @settings(max_examples=EXAMPLES)
    @given(data=st.data())
    def check(data):
        case = CASES[op](data.draw)
        try:
            assert_matches_reference(op, case.inputs, case.attrs, rtol=case.rtol,
                                     atol=case.atol, target="webgpu")
        except (CodegenError, InputError) as e:
            m = REFUSED.search(str(e))
            assert m is not None, f"{op}: unexpected {type(e).__name__}: {e}"
            assert op in str(e) or "input" in str(e), f"the error does not name the kernel: {e}"
            seen["refused"].add(m.group(1) or "int64 out of int32 range")
            return
        seen["ok"] += 1
    check()
    if not seen["ok"]:
        pytest.skip(f"every drawn example uses what WebGPU lacks: {sorted(seen['refused'])}")
