"""Fixed inputs that once broke an operator's kernel: each stays as a regression check."""

import warnings

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


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize("shape,axes", [((0, 1), None), ((0, 3), [0]), ((2, 0, 3), [1]),
                                        ((0,), None)])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduction_over_an_empty_domain_is_the_identity(op, shape, axes, keepdims):
    """The block lowering put a reduction's init under `if (r == 0)` inside the reduce loop, which
    never runs when the loop is empty: the output was uninitialized memory."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy: "mean of empty slice"
        assert_matches_reference(op, [np.zeros(shape, np.float32)],
                                 {"axes": axes, "keepdims": keepdims})


@pytest.mark.parametrize("op,shapes,attrs", [
    ("matmul", [(3, 0), (0, 4)], {}),
    ("matmul", [(2, 3, 0), (0,)], {}),
    ("nn.gemm", [(3, 0), (0, 4), (4,)], {}),
    ("nn.conv", [(1, 0, 4, 4), (2, 0, 3, 3)], {"pads": [1, 1, 1, 1]}),
])
def test_products_with_an_empty_inner_dimension(op, shapes, attrs):
    assert_matches_reference(op, [_x(*s) for s in shapes], attrs)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32"])
def test_integer_division_by_zero_and_min_by_minus_one_do_not_trap(dtype):
    """C traps (SIGFPE/SIGILL) on x / 0 and MIN / -1, killing the process: the kernels give 0
    and MIN (wrapping) instead, as the reference does."""
    info = np.iinfo(dtype)
    a = np.array([7, info.min, info.max, 0, 5, 9], dtype)
    b = np.array([0, 0, 2, 0, 1, 4] if info.min == 0 else [0, -1, -1, 0, -1, -4], dtype)
    got = assert_matches_reference("divide", [a, b])[0]
    assert got[0] == 0


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_mean_over_an_empty_axis(dtype):
    assert_matches_reference("mean", [np.zeros((0, 3), dtype)], {"axes": [0], "keepdims": 0})
