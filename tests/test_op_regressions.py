"""Fixed inputs that once broke an operator's kernel: each stays as a regression check."""

import numpy as np
import pytest

from ember.testing import assert_matches_reference

RNG = np.random.default_rng(7)


def _x(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("op,attrs", [
    # GCC's masked (AVX-512) vectorization of `acc = in_window ? acc + x : acc` dropped window
    # terms of a padded pooling window; fixed by building without loop if-conversion
    ("nn.avg_pool", {"kernel_shape": [3, 1], "strides": [1, 3], "pads": [1, 0, 0, 0],
                     "dilations": [1, 1], "ceil_mode": 0, "count_include_pad": 0}),
    ("nn.max_pool", {"kernel_shape": [3, 1], "strides": [1, 3], "pads": [1, 0, 0, 0],
                     "dilations": [1, 1], "ceil_mode": 0}),
])
def test_padded_pool_window_reduction(op, attrs):
    assert_matches_reference(op, [_x(1, 1, 5, 4)], attrs)


def test_padded_conv_window_reduction():
    attrs = {"pads": [1, 0, 0, 0], "strides": [1, 3], "dilations": [1, 1], "group": 1}
    assert_matches_reference("nn.conv", [_x(1, 1, 5, 4), _x(1, 1, 3, 1)], attrs,
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sizes", [[0], [0, 0], [0, 2, 0]])
def test_concatenate_of_empty_inputs(sizes):
    xs = [_x(2, n, 3) for n in sizes]
    assert_matches_reference("concatenate", xs, {"axis": 1})


def test_transpose_of_a_scalar_keeps_rank_0():
    assert_matches_reference("transpose", [np.float32(3.5).reshape(())], {"perm": None})
