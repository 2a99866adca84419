"""Every registered operator compiles for CUDA without a GPU: the CPU op tests' randomized
cases (``op_cases.py``, 2 examples each) built for ``nvidia/h200`` (GPU fallback schedule ->
CUDA C -> NVRTC -> PTX -> sm_90 cubin, no spills). An example whose dtype the CUDA printer does
not support yet (the narrow float formats of ``ember.dtypes``) must be refused with a
``CodegenError`` naming it. Their numbers on a GPU: ``bench/gpu.py --section ops``."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra (cuda-bindings, NVRTC) is not "
                                                  "installed")

from ember.driver import build  # noqa: E402
from ember.errors import CodegenError  # noqa: E402
from ember.graph.passes import PassContext  # noqa: E402
from ember.runtime.cuda import CUDAModel  # noqa: E402
from ember.testing import op_module  # noqa: E402
from op_cases import CASES  # noqa: E402

EXAMPLES = 2
# operators the cuda graph pipeline never produces or whose compute is CPU micro-kernels
CPU_ONLY = {"nn.winograd_input": "Winograd transforms are CPU-only (no WinogradConv pass on GPUs)",
            "nn.winograd_output": "Winograd transforms are CPU-only (no WinogradConv pass on "
                                  "GPUs)",
            "nn.inverted_residual": "a CPU composite of micro-kernel calls",
            "nn.attention": "its compute is built of CPU micro-kernel calls (not on GPUs yet)",
            "qnn.conv2d": "its compute is CPU int8 micro-kernel calls (GPU pipelines keep QDQ "
                          "in float32)"}
REFUSED = re.compile(r"dtype (\w+) has no CUDA form")


@pytest.mark.slow(reason="every operator through NVRTC (about 1 s per example)")
@pytest.mark.parametrize("op", sorted(CASES))
def test_op_compiles_for_cuda(op):
    if op in CPU_ONLY:
        pytest.skip(CPU_ONLY[op])
    seen = {"ok": 0, "refused": set()}

    @settings(max_examples=EXAMPLES, deadline=None)
    @given(data=st.data())
    def check(data):
        case = CASES[op](data.draw)
        inputs = [np.asarray(a) for a in case.inputs]
        try:
            with PassContext(opt_level=0):
                cm = build(op_module(op, inputs, case.attrs), "nvidia/h200")
        except CodegenError as e:
            m = REFUSED.search(str(e))
            assert m is not None, f"{op}: unexpected CodegenError: {e}"
            seen["refused"].add(m.group(1))
            return
        assert isinstance(cm, CUDAModel) and cm.binary.cubins["sm_90"]
        assert all(r.spill_bytes == 0 for r in cm.binary.resources["sm_90"].values())
        seen["ok"] += 1
    check()
    if not seen["ok"]:
        pytest.skip(f"every drawn example uses a dtype CUDA lacks here: {sorted(seen['refused'])}")
