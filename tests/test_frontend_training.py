"""The ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum standard/Nesterov) through
the whole path, randomized over attributes, step count (0 and positive) and the number of
tensors updated at once, against onnx's ReferenceEvaluator (onnxruntime has no kernels for
them)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from ember.frontend.backend import prepare
from ember.testing import assert_close
from test_frontend_fuzz import SCALE

DOMAIN = "ai.onnx.preview.training"
STATES = {"Adagrad": 1, "Adam": 2, "Momentum": 1}


def _attrs(draw, op):
    if op == "Adagrad":
        return {"decay_factor": draw(st.sampled_from([0.0, 0.1])),
                "epsilon": draw(st.sampled_from([1e-6, 1e-2])),
                "norm_coefficient": draw(st.sampled_from([0.0, 0.01]))}
    if op == "Adam":
        return {"alpha": draw(st.sampled_from([0.9, 0.5])),
                "beta": draw(st.sampled_from([0.999, 0.8])),
                "epsilon": draw(st.sampled_from([1e-6, 1e-2])),
                "norm_coefficient": draw(st.sampled_from([0.0, 0.01])),
                "norm_coefficient_post": draw(st.sampled_from([0.0, 0.02]))}
    return {"alpha": draw(st.sampled_from([0.9, 0.5])), "beta": draw(st.sampled_from([1.0, 0.1])),
            "norm_coefficient": draw(st.sampled_from([0.0, 0.01])),
            "mode": draw(st.sampled_from(["standard", "nesterov"]))}


@pytest.mark.parametrize("op", sorted(STATES))
def test_optimizer_matches_reference(op):
    @settings(max_examples=int(8 * SCALE), deadline=None)
    @given(data=st.data())
    def run(data):
        draw = data.draw
        r = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        n = draw(st.integers(1, 2), label="tensors")
        shapes = [tuple(draw(st.lists(st.integers(1, 3), max_size=3))) for _ in range(n)]
        feeds = {"R": np.asarray(draw(st.sampled_from([0.1, 0.01])), np.float32),
                 "T": np.asarray(draw(st.sampled_from([0, 1, 5])), np.int64)}
        groups = ["X", "G"] + [f"S{k}" for k in range(STATES[op])]
        names = ["R", "T"]
        for grp in groups:
            for i, shp in enumerate(shapes):
                name = f"{grp}{i}"
                names.append(name)
                v = r.standard_normal(shp).astype(np.float32)
                feeds[name] = np.abs(v) if grp == "S1" or (grp == "S0" and op == "Adagrad") else v
        outs = [f"{grp}{i}_new" for grp in ["X"] + groups[2:] for i in range(n)]
        node = helper.make_node(op, names, outs, domain=DOMAIN, **_attrs(draw, op))
        vis = [helper.make_tensor_value_info(k, TensorProto.INT64 if k == "T" else
                                             TensorProto.FLOAT, list(v.shape))
               for k, v in feeds.items()]
        g = helper.make_graph([node], "g", vis,
                              [helper.make_value_info(o, helper.TypeProto()) for o in outs])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                                helper.make_opsetid(DOMAIN, 1)])
        got = prepare(m).run([feeds[k] for k in names])
        want = ReferenceEvaluator(m).run(None, feeds)
        for k, (a, b) in enumerate(zip(got, want)):
            assert_close(a, np.asarray(b, np.float32), 1e-5, 1e-6, f"{op} output {outs[k]}")
    run()
