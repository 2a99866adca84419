"""Helpers of the graph-pass tests: a pass test reads as "this text in, that text out"."""

import numpy as np

from ember.graph import IRModule, structural_equal
from ember.graph.interpreter import run_reference


def random_inputs(func, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for p in func.params:
        dt = np.dtype(p.type.dtype)
        if dt.kind == "f":
            out[p.name] = rng.standard_normal(p.type.shape).astype(dt)
        elif dt.kind == "b":
            out[p.name] = rng.integers(0, 2, p.type.shape).astype(bool)
        else:
            out[p.name] = rng.integers(0, 5, p.type.shape).astype(dt)
    return out


def check_pass_text(pass_, before: str, expected: str, rtol=1e-5, atol=1e-5) -> IRModule:
    """Run ``pass_`` on the parsed ``before``; the result must equal the parsed ``expected``
    structurally and compute the same values (NumPy references) as ``before``."""
    mod = IRModule.from_text(before)
    got = pass_(mod)
    want = IRModule.from_text(expected)
    assert structural_equal(got, want), f"got:\n{got.text()}\nexpected:\n{want.text()}"
    x = random_inputs(got.main)  # (the result: its shapes are static when the input's are not)
    for a, b in zip(run_reference(mod, x), run_reference(got, x)):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)
    return got
