"""ONNX RNN, GRU and LSTM through the whole path (the unrolling converter -> graph ops ->
kernels), randomized over direction, layout, sequence_lens, initial states, bias, peepholes,
clip, activations (with alpha/beta), GRU linear_before_reset and LSTM input_forget, against
onnxruntime (onnx's ReferenceEvaluator where onnxruntime has no kernel for the form)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from op_cases import one_of, rng
from test_frontend_fuzz import SCALE, Node, check, references, run_in

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
N_ACTS = {"RNN": 1, "GRU": 2, "LSTM": 3}
ACTS = [("Tanh", 0), ("Sigmoid", 0), ("Relu", 0), ("LeakyRelu", 1), ("HardSigmoid", 2),
        ("Softsign", 0), ("Affine", 2), ("ScaledTanh", 2), ("Elu", 1), ("ThresholdedRelu", 1)]


def recurrent(draw, kind):
    r = rng(draw)
    seq, batch = draw(st.integers(1, 4), label="seq"), draw(st.integers(1, 3), label="batch")
    inp, hid = draw(st.integers(1, 4), label="input"), draw(st.integers(1, 4), label="hidden")
    direction = one_of(draw, ["forward", "reverse", "bidirectional"], "direction")
    nd = 2 if direction == "bidirectional" else 1
    layout = draw(st.integers(0, 1), label="layout")
    G = GATES[kind]
    x = r.standard_normal((batch, seq, inp) if layout else (seq, batch, inp)).astype(np.float32)
    w = (r.standard_normal((nd, G * hid, inp)) * 0.5).astype(np.float32)
    rr = (r.standard_normal((nd, G * hid, hid)) * 0.5).astype(np.float32)
    ins = [run_in(x), run_in(w), run_in(rr)]
    opt = []
    if draw(st.booleans(), label="bias"):
        opt.append((3, run_in(r.standard_normal((nd, 2 * G * hid)).astype(np.float32))))
    if draw(st.booleans(), label="sequence_lens"):
        opt.append((4, run_in(r.integers(1, seq + 1, batch).astype(np.int32))))
    state = (batch, nd, hid) if layout else (nd, batch, hid)
    if draw(st.booleans(), label="initial_h"):
        opt.append((5, run_in(r.standard_normal(state).astype(np.float32))))
    if kind == "LSTM":
        if draw(st.booleans(), label="initial_c"):
            opt.append((6, run_in(r.standard_normal(state).astype(np.float32))))
        if draw(st.booleans(), label="peepholes"):
            opt.append((7, run_in(r.standard_normal((nd, 3 * hid)).astype(np.float32))))
    for k, v in opt:
        while len(ins) < k:
            ins.append(None)
        ins.append(v)
    attrs = {"hidden_size": hid, "direction": direction, "layout": layout or None}
    if draw(st.booleans(), label="custom activations"):
        names, alphas, betas = [], [], []
        for _ in range(N_ACTS[kind] * nd):
            name, n_params = one_of(draw, ACTS, "activation")
            names.append(name)
            if n_params >= 1:
                alphas.append(float(one_of(draw, [0.5, 1.0, 1.5], "alpha")))
            if n_params == 2:
                betas.append(float(one_of(draw, [0.25, 0.5], "beta")))
        attrs.update(activations=names, activation_alpha=alphas or None,
                     activation_beta=betas or None)
    if draw(st.booleans(), label="clip"):
        attrs["clip"] = float(one_of(draw, [0.5, 2.0], "clip value"))
    if kind == "GRU":
        attrs["linear_before_reset"] = draw(st.integers(0, 1), label="linear_before_reset")
    if kind == "LSTM" and not layout:
        attrs["input_forget"] = draw(st.integers(0, 1), label="input_forget") or None
    node = Node(kind, 14 if layout else 7, ins, attrs, n_out=3 if kind == "LSTM" else 2,
                rtol=1e-4, atol=1e-5)
    if layout:  # onnxruntime has no batch-major kernel: run the time-major twin and transpose
        node.spec = _batch_major_outputs(node)
    return node


def _batch_major_outputs(node):
    t = [(0, (1, 0, 2))] + [(k, (1, 0, 2)) for k in (5, 6)]
    ins = list(node.inputs)
    for k, perm in t:
        if k < len(ins) and ins[k] is not None:
            ins[k] = (ins[k][0], np.ascontiguousarray(ins[k][1].transpose(perm)))
    twin = Node(node.op_type, 14, ins, dict(node.attrs, layout=0), n_out=node.n_out)
    model, feeds = twin.model()
    want = next(references(model, feeds))[1]
    return [np.transpose(want[0], (2, 0, 1, 3))] + [np.transpose(w, (1, 0, 2)) for w in want[1:]]


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
def test_recurrent_layer_matches_reference(kind):
    @settings(max_examples=int(6 * SCALE), deadline=None)
    @given(data=st.data())
    def run(data):
        check(recurrent(data.draw, kind))
    run()


def _lstm_model(seq: int, inp: int, hid: int, bidirectional: bool):
    """A one-node ONNX LSTM (opset 14) with random W, R, B initializers; X (seq, 1, inp)."""
    from onnx import TensorProto, helper, numpy_helper
    nd = 2 if bidirectional else 1
    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(r.standard_normal(s).astype(np.float32), n) for n, s in
             (("W", (nd, 4 * hid, inp)), ("R", (nd, 4 * hid, hid)), ("B", (nd, 8 * hid)))]
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], hidden_size=hid,
                            direction="bidirectional" if bidirectional else "forward")
    g = helper.make_graph([node], "lstm",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, 1, inp])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT,
                                                         [seq, nd, 1, hid])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), inits


@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_weights_stored_once_and_few_kernels_per_step(bidirectional):
    """The unrolled recurrence keeps one copy of W^T and of each direction's R^T (shared by
    every step's GEMM, so it stays in cache) and at most 3 kernels per step (the recurrent
    GEMM and two gate kernels) plus the hoisted input projection: the optimized graph's
    constants total the initializers' bytes, not one folded copy of R per step."""
    from ember.frontend import from_onnx
    from ember.graph.passes import optimize
    seq = 8
    model, inits = _lstm_model(seq, inp=8, hid=16, bidirectional=bidirectional)
    mod, params = from_onnx(model)
    opt, consts = optimize(mod, "llvm", params)
    weight_bytes = sum(_nbytes(t) for t in inits if t.name in ("W", "R"))
    const_bytes = sum(np.asarray(v).nbytes for v in consts.values())
    bias_bytes = _nbytes(inits[2])
    assert weight_bytes <= const_bytes <= weight_bytes + bias_bytes
    nd = 2 if bidirectional else 1
    assert len(opt.main.bindings) <= 3 * seq * nd + 2 + 4 * (nd - 1)


def _nbytes(t) -> int:
    """Bytes of an ONNX initializer's array."""
    from onnx import numpy_helper
    return numpy_helper.to_array(t).nbytes
