"""FoldConstant: all-constant bindings become constants."""

from ember.graph.passes import FoldConstant


def test_folds_constant_arithmetic(check_pass):
    check_pass(FoldConstant(), """
def @main(%x: Tensor[(2,), float32]) {
  %0 = add(const(float32, [2], [1.0, 2.0]), const(float32, [2], [3.0, 4.0])) : Tensor[(2,), float32]
  %1 = multiply(%0, const(float32, [], [2.0])) : Tensor[(2,), float32]
  %2 = add(%x, %1) : Tensor[(2,), float32]
  return %2
}""", """
def @main(%x: Tensor[(2,), float32]) {
  %2 = add(%x, const(float32, [2], [8.0, 12.0])) : Tensor[(2,), float32]
  return %2
}""")


def test_leaves_variable_bindings_alone(check_pass):
    text = """
def @main(%x: Tensor[(2,), float32]) {
  %0 = exp(%x) : Tensor[(2,), float32]
  return %0
}"""
    check_pass(FoldConstant(), text, text)


def test_respects_size_limit():
    from ember.graph import IRModule
    from ember.graph.passes import PassContext
    text = """
def @main(%x: Tensor[(4, 4), float32]) {
  %0 = broadcast_to(const(float32, [], [1.0]), shape=[4, 4]) : Tensor[(4, 4), float32]
  %1 = add(%x, %0) : Tensor[(4, 4), float32]
  return %1
}"""
    with PassContext(config={"FoldConstant.max_elems": 8}):
        out = FoldConstant()(IRModule.from_text(text))
    assert [b.call.op for b in out.main.bindings] == ["broadcast_to", "add"]
    out = FoldConstant()(IRModule.from_text(text))
    assert [b.call.op for b in out.main.bindings] == ["add"]
