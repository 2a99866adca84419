"""The pattern language: matching, rewrite callbacks, partition into composite functions."""

import numpy as np

import ember
from ember.graph import IRModule
from ember.graph.interpreter import run_reference
from ember.graph.pattern import (PatternCallback, dominates, is_constant, is_op, is_output,
                                 is_var, match, optional, partition, rewrite, wildcard)

from pass_helpers import random_inputs

T = "Tensor[(1, 2, 4, 4), float32]"
CONV = "strides=null, pads=[1, 1, 1, 1], dilations=null, group=1"
MOD = f"""
def @main(%x: {T}) {{
  %0 = nn.conv(%x, const(float32, [2, 2, 1, 1], [1.0, 0.5, -1.0, 2.0]), strides=null, pads=null, dilations=null, group=1) : {T}
  %1 = add(%0, %x) : {T}
  %2 = nn.relu(%1) : {T}
  %3 = nn.relu(%x) : {T}
  %4 = add(%2, %3) : {T}
  return %4
}}"""


def _value(mod, k):
    return mod.main.bindings[k].outputs[0]


def test_call_wildcard_constant_and_alternation():
    mod = IRModule.from_text(MOD)
    conv = is_op("nn.conv")(wildcard(), is_constant())
    assert match(conv, _value(mod, 0), mod.main)
    assert not match(is_op("nn.conv")(wildcard(), is_var()), _value(mod, 0), mod.main)
    relu_or_add = is_op("nn.relu")(wildcard()) | is_op("add")(wildcard(), wildcard())
    assert match(relu_or_add, _value(mod, 1), mod.main)
    assert match(relu_or_add, _value(mod, 2), mod.main)
    assert not match(relu_or_add, _value(mod, 0), mod.main)


def test_same_pattern_object_binds_one_value():
    mod = IRModule.from_text(MOD)
    x = wildcard()
    assert not match(is_op("add")(x, x), _value(mod, 1), mod.main)
    assert match(is_op("add")(x, wildcard()), _value(mod, 1), mod.main)


def test_attribute_shape_dtype_and_optional():
    mod = IRModule.from_text(MOD)
    conv = is_op("nn.conv")(wildcard(), wildcard())
    assert match(conv.has_attr(group=1), _value(mod, 0), mod.main)
    assert not match(conv.has_attr(group=2), _value(mod, 0), mod.main)
    assert match(wildcard().has_shape((1, 2, 4, 4)).has_dtype("float32"), _value(mod, 0), mod.main)
    assert not match(wildcard().has_dtype("float16"), _value(mod, 0), mod.main)
    opt = optional(is_op("add")(conv, wildcard()), lambda p: is_op("nn.relu")(p))
    m2 = match(opt, _value(mod, 2), mod.main)
    assert m2 and [b.call.op for b in m2.bindings] == ["nn.conv", "add", "nn.relu"]
    assert match(opt, _value(mod, 1), mod.main)


def test_dominator_pattern():
    mod = IRModule.from_text(MOD)
    pat = dominates(is_op("nn.conv")(wildcard(), wildcard()),
                    is_op("add")(wildcard(), wildcard()) | is_op("nn.relu")(wildcard()),
                    is_op("nn.relu")(wildcard()))
    m = match(pat, _value(mod, 2), mod.main)
    assert m and sorted(b.call.op for b in m.bindings) == ["add", "nn.conv", "nn.relu"]
    # the final add has no conv-dominated relu chain on both sides (relu(%x) has no conv)
    assert not match(pat, _value(mod, 3), mod.main)


def test_output_pattern_matches_one_output():
    from ember.graph import Binding, Call, Function, TensorType, Var
    x = Var("x", TensorType((4,), "float32"))
    a, b = Var("a", TensorType((2,), "float32")), Var("b", TensorType((2,), "float32"))
    f = Function([x], [Binding((a, b), Call("split", (x,), {}))], [b])
    assert match(is_output(is_op("split")(wildcard()), 1), b, f)
    assert not match(is_output(is_op("split")(wildcard()), 0), b, f)


class AddZeroToRelu(PatternCallback):
    """``max(x + 0, 0)`` written badly, and a callback that declines on int inputs."""

    def __init__(self):
        self.x = wildcard()
        self.pattern = is_op("nn.relu")(is_op("add")(self.x, wildcard()))

    def callback(self, m):
        if m.node_map[self.x].type.dtype != "float32":
            return None
        return m.emit("nn.relu", [m[self.x]])


class Decline(PatternCallback):
    def __init__(self):
        self.pattern = is_op("nn.relu")(wildcard())

    def callback(self, m):
        return None


def test_rewrite_replaces_and_declines():
    mod = IRModule.from_text(MOD)
    out = rewrite([Decline()], mod)
    assert [b.call.op for b in out.main.bindings] == [b.call.op for b in mod.main.bindings]

    class ReluOfAddToReluOfFirst(AddZeroToRelu):
        pass
    out = rewrite(ReluOfAddToReluOfFirst(), mod)
    ops = [b.call.op for b in out.main.bindings]
    assert ops == ["nn.conv", "nn.relu", "nn.relu", "add"]


def test_partition_into_composites_runs_and_compiles():
    mod = IRModule.from_text(MOD)
    pat = is_op("nn.relu")(is_op("add")(is_op("nn.conv")(wildcard(), is_constant()), wildcard()))
    out = partition(pat, mod, "conv_add_relu")
    assert sorted(out.functions) == ["conv_add_relu_0", "main"]
    f = out["conv_add_relu_0"]
    assert f.attrs == {"composite": "conv_add_relu"}
    assert [b.call.op for b in f.bindings] == ["nn.conv", "add", "nn.relu"]
    assert [b.call.op for b in out.main.bindings] == ["@conv_add_relu_0", "nn.relu", "add"]
    assert IRModule.from_text(out.text()).text() == out.text()
    x = random_inputs(mod.main)
    want = run_reference(mod, x)[0]
    np.testing.assert_allclose(run_reference(out, x)[0], want, rtol=1e-6)
    m = ember.build(out)
    np.testing.assert_allclose(m.run(x)[0], want, rtol=1e-5, atol=1e-6)


def test_partition_skips_regions_whose_inner_values_escape():
    mod = IRModule.from_text(MOD.replace("return %4", "return %4, %1"))
    pat = is_op("nn.relu")(is_op("add")(wildcard(), wildcard()))
    out = partition(pat, mod, "add_relu")
    assert list(out.functions) == ["main"]
