"""Every registered graph operator: its compiled kernel (te compute -> loop IR -> C) matches its
NumPy reference on randomized shapes, dtypes and attributes (see ``op_cases.py``)."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.ops import list_ops
from ember.ops.collective import COLLECTIVE_OPS
from ember.testing import assert_matches_reference
from op_cases import CASES

MAX_EXAMPLES = {"nn.conv": 20, "nn.max_pool": 15, "nn.avg_pool": 20, "strided_slice": 15,
                "cast": 20, "nn.attention": 8}
SCALE = float(os.environ.get("EMBER_OP_EXAMPLES_SCALE", "1"))  # e.g. 10 for a deeper search


def test_every_registered_op_has_a_case():
    # dist.* collectives have no kernel: the distributed executor runs them between compiled
    # segments (tests/test_distributed.py)
    missing = sorted(set(list_ops()) - set(CASES) - COLLECTIVE_OPS)
    assert not missing, (f"registered operators without a randomized test case: {missing}; add "
                         f"a generator for each to tests/op_cases.py")


@pytest.mark.parametrize("op", sorted(CASES))
def test_op_matches_reference(op):
    @settings(max_examples=int(MAX_EXAMPLES.get(op, 10) * SCALE))
    @given(data=st.data())
    def check(data):
        case = CASES[op](data.draw)
        assert_matches_reference(op, case.inputs, case.attrs, rtol=case.rtol, atol=case.atol)
    check()
