"""Randomized cases for the counter-based random operators (``ember.ops.random``): the kernel
must reproduce the NumPy reference's stream exactly. Registered into ``op_cases.CASES``
(imported at its end); their distributions are tested in ``test_random_ops.py``."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from op_cases import FLOATS, Case, cases, one_of, rng, shape


@cases("random.uniform", "random.normal")
def generator(draw, op):
    attrs = {"shape": list(shape(draw, max_rank=3, max_side=6, allow_empty=True)),
             "dtype": one_of(draw, FLOATS, "dtype"), "a": one_of(draw, [0.0, -2.0], "a"),
             "b": one_of(draw, [1.0, 3.5], "b"),
             "key": draw(st.integers(0, 2**64 - 1), label="key")}
    return Case([], attrs, rtol=1e-6, atol=1e-6)


@cases("random.bernoulli")
def bernoulli(draw, op):
    r = rng(draw)
    dt = one_of(draw, FLOATS, "dtype")
    p = np.asarray(r.uniform(0, 1, shape(draw, max_rank=3, max_side=6)), dt)
    return Case([p], {"dtype": one_of(draw, [None, "float64", "int32", "bool"], "out dtype"),
                      "key": draw(st.integers(0, 2**64 - 1), label="key")})
