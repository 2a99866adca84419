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
