"""FuseLayerNorm: the mean/subtract/square/mean/add/sqrt/divide[/scale/shift] chain becomes one
nn.layer_norm with the same values; other shapes of the chain are left alone."""

import numpy as np
import pytest

from ember.graph import IRModule
from ember.graph.interpreter import run_reference
from ember.graph.passes import get_pass

from pass_helpers import random_inputs

LN = """
def @main(%x: Tensor[(2, 3, 8), float32], %g: Tensor[(8,), float32], %b: Tensor[(8,), float32]) {{
  %0 = mean(%x, axes=[{axes}], keepdims=1) : Tensor[{mshape}, float32]
  %1 = subtract(%x, %0) : Tensor[(2, 3, 8), float32]
  %2 = {square} : Tensor[(2, 3, 8), float32]
  %3 = mean(%2, axes=[{axes}], keepdims=1) : Tensor[{mshape}, float32]
  %4 = add(%3, const(float32, [], [1e-5])) : Tensor[{mshape}, float32]
  %5 = sqrt(%4) : Tensor[{mshape}, float32]
  %6 = divide(%1, %5) : Tensor[(2, 3, 8), float32]
  %7 = multiply({g_first}) : Tensor[(2, 3, 8), float32]
  %8 = add(%b, %7) : Tensor[(2, 3, 8), float32]
  return {ret}
}}"""


def _ln_text(axes="-1", mshape="(2, 3, 1)", square="power(%1, const(float32, [], [2.0]))",
             g_first="%g, %6", ret="%8"):
    return LN.format(axes=axes, mshape=mshape, square=square, g_first=g_first, ret=ret)


def _run(text):
    mod = IRModule.from_text(text)
    got = get_pass("FuseLayerNorm")(mod)
    x = random_inputs(mod.main)
    for a, b in zip(run_reference(mod, x), run_reference(got, x)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    ops = [b.call.op for b in got.main.bindings]
    return got, ops


@pytest.mark.parametrize("square", ["power(%1, const(float32, [], [2.0]))", "multiply(%1, %1)"])
@pytest.mark.parametrize("g_first", ["%g, %6", "%6, %g"])
def test_decomposed_layer_norm_becomes_one_op(square, g_first):
    got, ops = _run(_ln_text(square=square, g_first=g_first))
    out = got.main.outputs[0]
    prod = [b for b in got.main.bindings if out in b.outputs][0]
    assert prod.call.op == "nn.layer_norm"
    assert prod.call.attrs["axis"] == 2 and prod.call.attrs["epsilon"] == pytest.approx(1e-5)
    assert [a.name for a in prod.call.args] == ["x", "g", "b"]


def test_without_scale_and_shift_the_divide_is_replaced():
    got, ops = _run(_ln_text(ret="%6"))
    out = got.main.outputs[0]
    prod = [b for b in got.main.bindings if out in b.outputs][0]
    assert prod.call.op == "nn.layer_norm"


def test_two_trailing_axes_fuse_and_a_middle_axis_does_not():
    got, ops = _run(_ln_text(axes="1, 2", mshape="(2, 1, 1)").replace(
        "%g: Tensor[(8,), float32]", "%g: Tensor[(3, 8), float32]").replace(
        "%b: Tensor[(8,), float32]", "%b: Tensor[(3, 8), float32]"))
    assert "nn.layer_norm" in ops
    got, ops = _run(_ln_text(axes="1", mshape="(2, 1, 8)"))
    assert "nn.layer_norm" not in ops


def test_wrong_exponent_is_not_a_layer_norm():
    got, ops = _run(_ln_text(square="power(%1, const(float32, [], [4.0]))"))
    assert "nn.layer_norm" not in ops
