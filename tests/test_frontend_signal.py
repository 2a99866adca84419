"""ONNX window generators and MelWeightMatrix (compile-time constants of the graph) and DFT /
STFT whose lengths arrive as graph inputs, through the whole path, against onnxruntime / onnx's
ReferenceEvaluator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from ember.frontend.backend import prepare
from op_cases import rng
from test_frontend_fuzz import SCALE, Node, check, const_in, references, run_in


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 2, 7, 10])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_window_matches_reference(op, periodic, size, dtype):
    if size == 1 and not periodic:
        pytest.skip("one-point symmetric window: the references divide 0 by 0 (NaN)")
    check(Node(op, 17, [const_in(np.asarray(size, np.int64))],
               {"periodic": periodic, "output_datatype": dtype}))


@settings(max_examples=int(10 * SCALE), deadline=None)
@given(bins=st.integers(1, 12), dft=st.sampled_from([8, 16, 31, 64]),
       rate=st.sampled_from([8000, 16000, 22050]), lo=st.sampled_from([0.0, 20.0, 100.0]),
       hi_frac=st.sampled_from([0.5, 0.9]))
def test_mel_weight_matrix_matches_reference(bins, dft, rate, lo, hi_frac):
    ins = [const_in(np.asarray(bins, np.int32)), const_in(np.asarray(dft, np.int32)),
           const_in(np.asarray(rate, np.int32)), const_in(np.asarray(lo, np.float32)),
           const_in(np.asarray(rate / 2 * hi_frac, np.float32))]
    check(Node("MelWeightMatrix", 17, ins))


def test_dft_length_from_a_graph_input_is_specialized():
    """dft_length fed at run time: the staged executor compiles one kernel per value seen."""
    r = np.random.default_rng(0)
    x = r.standard_normal((2, 6, 1)).astype(np.float32)
    for n in (6, 4, 9):
        node = Node("DFT", 20, [run_in(x), run_in(np.asarray(n, np.int64)),
                                const_in(np.asarray(1, np.int64))], rtol=1e-4, atol=1e-4)
        model, feeds = node.model()
        got = prepare(model).run([feeds["in0"], feeds["in1"]])
        want = next(references(model, feeds))[1]
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)
