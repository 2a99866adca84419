"""EliminateDeadCode and EliminateCommonSubexpr."""

from ember.graph.passes import EliminateCommonSubexpr, EliminateDeadCode


def test_dead_bindings_removed(check_pass):
    check_pass(EliminateDeadCode(), """
def @main(%x: Tensor[(2,), float32]) {
  %0 = exp(%x) : Tensor[(2,), float32]
  %1 = log(%0) : Tensor[(2,), float32]
  %2 = nn.relu(%x) : Tensor[(2,), float32]
  return %2
}""", """
def @main(%x: Tensor[(2,), float32]) {
  %2 = nn.relu(%x) : Tensor[(2,), float32]
  return %2
}""")


def test_uncalled_functions_removed(check_pass):
    check_pass(EliminateDeadCode(), """
def @main(%x: Tensor[(2,), float32]) {
  %0 = nn.relu(%x) : Tensor[(2,), float32]
  return %0
}

def @fused_exp_0(%p0: Tensor[(2,), float32]) attrs={"primitive": 1} {
  %0 = exp(%p0) : Tensor[(2,), float32]
  return %0
}""", """
def @main(%x: Tensor[(2,), float32]) {
  %0 = nn.relu(%x) : Tensor[(2,), float32]
  return %0
}""")


def test_common_subexpressions_merged(check_pass):
    check_pass(EliminateCommonSubexpr(), """
def @main(%x: Tensor[(2,), float32]) {
  %0 = add(%x, const(float32, [], [1.0])) : Tensor[(2,), float32]
  %1 = add(%x, const(float32, [], [1.0])) : Tensor[(2,), float32]
  %2 = add(%x, const(float32, [], [2.0])) : Tensor[(2,), float32]
  %3 = multiply(%0, %1) : Tensor[(2,), float32]
  %4 = multiply(%3, %2) : Tensor[(2,), float32]
  return %4
}""", """
def @main(%x: Tensor[(2,), float32]) {
  %0 = add(%x, const(float32, [], [1.0])) : Tensor[(2,), float32]
  %2 = add(%x, const(float32, [], [2.0])) : Tensor[(2,), float32]
  %3 = multiply(%0, %0) : Tensor[(2,), float32]
  %4 = multiply(%3, %2) : Tensor[(2,), float32]
  return %4
}""")


def test_different_attributes_are_not_merged(check_pass):
    text = """
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = sum(%x, axes=[0], keepdims=0) : Tensor[(3,), float32]
  %1 = sum(%x, axes=[1], keepdims=0) : Tensor[(2,), float32]
  return %0, %1
}"""
    check_pass(EliminateCommonSubexpr(), text, text)
