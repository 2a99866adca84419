"""ONNX LpPool, LpNormalization and InstanceNormalization (``converters/nn_ext.py``) through the
whole path, randomized over their attributes (auto_pad, dilations, ceil_mode, p, axis, all-zero
slices, epsilon), against onnxruntime (onnx's ReferenceEvaluator where onnxruntime lacks the
form)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from op_cases import one_of, rng, values
from test_frontend_fuzz import SCALE, Node, check, const_in, run_in


def lp_pool(draw):
    r = rng(draw)
    nsp = draw(st.integers(1, 3), label="spatial rank")
    sp = [draw(st.integers(2, 6), label="in") for _ in range(nsp)]
    k = [draw(st.integers(1, s), label="kernel") for s in sp]
    attrs = {"kernel_shape": k, "p": one_of(draw, [1, 2, 3], "p"),
             "strides": [draw(st.integers(1, 2), label="stride") for _ in k]}
    auto = one_of(draw, ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"], "auto_pad")
    if auto == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, kk - 1), label="pad") for kk in k * 2]
        if draw(st.booleans(), label="ceil"):
            attrs["ceil_mode"] = 1
    else:
        attrs["auto_pad"] = auto
    if auto in ("NOTSET", "VALID") and draw(st.booleans(), label="dilate"):
        attrs["dilations"] = [1 + (kk * 2 <= s) for kk, s in zip(k, sp)]
    x = values(r, (draw(st.integers(1, 2)), draw(st.integers(1, 3))) + tuple(sp), "float32")
    return Node("LpPool", 18, [run_in(x)], attrs, rtol=1e-4, atol=1e-5)


def lp_norm(draw):
    r = rng(draw)
    shp = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4), label="shape"))
    x = values(r, shp, one_of(draw, ["float32", "float64"], "dtype"))
    if draw(st.booleans(), label="zero slice"):
        x[..., 0] = 0
    return Node("LpNormalization", 1, [run_in(x)],
                {"axis": draw(st.integers(-len(shp), len(shp) - 1), label="axis"),
                 "p": one_of(draw, [1, 2], "p")}, rtol=1e-5, atol=1e-6)


def instance_norm(draw):
    r = rng(draw)
    nsp = draw(st.integers(1, 3), label="spatial rank")
    c = draw(st.integers(1, 3), label="C")
    x = values(r, (draw(st.integers(1, 2)), c) + tuple(
        draw(st.lists(st.integers(1, 4), min_size=nsp, max_size=nsp), label="sp")), "float32")
    return Node("InstanceNormalization", 6,
                [run_in(x), const_in(values(r, (c,), "float32")),
                 run_in(values(r, (c,), "float32"))],
                {"epsilon": one_of(draw, [1e-5, 1e-2], "epsilon")}, rtol=1e-4, atol=1e-4)


GENERATORS = {"LpPool": lp_pool, "LpNormalization": lp_norm,
              "InstanceNormalization": instance_norm}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_converter_matches_reference(name):
    @settings(max_examples=int(12 * SCALE), deadline=None)
    @given(data=st.data())
    def run(data):
        check(GENERATORS[name](data.draw))
    run()
