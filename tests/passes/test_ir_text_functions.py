"""Text form of module functions: calls of fused functions and function attributes round-trip."""

import pytest

from ember.errors import IRParseError
from ember.graph import IRModule, structural_equal

FUSED = """
def @main(%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(3, 2, 1, 1), float32]) {
  %y = @fused_nn_conv_nn_relu_0(%x, %w) : Tensor[(1, 3, 4, 4), float32]
  return %y
}

def @fused_nn_conv_nn_relu_0(%p0: Tensor[(1, 2, 4, 4), float32], %p1: Tensor[(3, 2, 1, 1), float32]) attrs={"primitive": 1} {
  %0 = nn.conv(%p0, %p1, strides=null, pads=null, dilations=null, group=1) : Tensor[(1, 3, 4, 4), float32]
  %1 = nn.relu(%0) : Tensor[(1, 3, 4, 4), float32]
  return %1
}
"""


def test_fused_function_round_trips():
    mod = IRModule.from_text(FUSED)
    assert mod["fused_nn_conv_nn_relu_0"].attrs == {"primitive": 1}
    call = mod.main.bindings[0].call
    assert call.is_function_call and call.callee == "fused_nn_conv_nn_relu_0"
    again = IRModule.from_text(mod.text())
    assert structural_equal(mod, again)
    assert again.text() == mod.text()


def test_function_attrs_take_part_in_equality():
    a = IRModule.from_text(FUSED)
    b = IRModule.from_text(FUSED.replace('{"primitive": 1}', '{"primitive": 0}'))
    assert not structural_equal(a, b)


def test_bad_function_attrs_are_a_parse_error():
    with pytest.raises(IRParseError, match="attributes"):
        IRModule.from_text(FUSED.replace('attrs={"primitive": 1}', 'attrs={primitive}'))


def test_large_constants_elide_only_on_request():
    import numpy as np
    from ember.graph import Constant
    from ember.graph.text import print_module
    mod = IRModule.from_text(FUSED)
    b = mod.main.bindings[0]
    b.call.args = (b.call.args[0], Constant(np.ones((3, 2, 1, 1), "float32")))
    assert "..." in print_module(mod, max_const_elems=4)
    assert "..." not in print_module(mod)
