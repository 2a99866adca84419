"""SimplifyExpr: reshape/transpose chains collapse; no-op casts, pads, slices, broadcasts and
neutral arithmetic disappear."""

from ember.graph.passes import SimplifyExpr


def test_reshape_chain_collapses(check_pass):
    check_pass(SimplifyExpr(), """
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = reshape(%x, newshape=[3, 4]) : Tensor[(3, 4), float32]
  %1 = reshape(%0, newshape=[12]) : Tensor[(12,), float32]
  %2 = reshape(%1, newshape=[4, 3]) : Tensor[(4, 3), float32]
  return %2
}""", """
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = reshape(%x, newshape=[3, 4]) : Tensor[(3, 4), float32]
  %1 = reshape(%x, newshape=[12]) : Tensor[(12,), float32]
  %2 = reshape(%x, newshape=[4, 3]) : Tensor[(4, 3), float32]
  return %2
}""")


def test_reshape_back_to_input_shape_vanishes(check_pass):
    check_pass(SimplifyExpr(), """
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = reshape(%x, newshape=[12]) : Tensor[(12,), float32]
  %1 = reshape(%0, newshape=[2, 6]) : Tensor[(2, 6), float32]
  %2 = exp(%1) : Tensor[(2, 6), float32]
  return %2
}""", """
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = reshape(%x, newshape=[12]) : Tensor[(12,), float32]
  %2 = exp(%x) : Tensor[(2, 6), float32]
  return %2
}""")


def test_transpose_chain_composes(check_pass):
    check_pass(SimplifyExpr(), """
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = transpose(%x, perm=[1, 2, 0]) : Tensor[(3, 4, 2), float32]
  %1 = transpose(%0, perm=[2, 0, 1]) : Tensor[(2, 3, 4), float32]
  %2 = transpose(%x, perm=[0, 2, 1]) : Tensor[(2, 4, 3), float32]
  %3 = transpose(%2, perm=[2, 0, 1]) : Tensor[(3, 2, 4), float32]
  return %1, %3
}""", """
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = transpose(%x, perm=[1, 2, 0]) : Tensor[(3, 4, 2), float32]
  %2 = transpose(%x, perm=[0, 2, 1]) : Tensor[(2, 4, 3), float32]
  %3 = transpose(%x, perm=[1, 0, 2]) : Tensor[(3, 2, 4), float32]
  return %x, %3
}""")


def test_no_op_data_movement_removed(check_pass):
    check_pass(SimplifyExpr(), """
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = cast(%x, dtype="float32") : Tensor[(2, 3), float32]
  %1 = nn.pad(%0, pads=[0, 0, 0, 0], mode="constant", value=0.0) : Tensor[(2, 3), float32]
  %2 = strided_slice(%1, begin=[0, 0], end=[2, 3], strides=[1, 1]) : Tensor[(2, 3), float32]
  %3 = broadcast_to(%2, shape=[1, 3]) : Tensor[(2, 3), float32]
  %4 = multiply(%3, const(float32, [], [1.0])) : Tensor[(2, 3), float32]
  %5 = add(const(float32, [3], [0.0, 0.0, 0.0]), %4) : Tensor[(2, 3), float32]
  %6 = exp(%5) : Tensor[(2, 3), float32]
  return %6
}""", """
def @main(%x: Tensor[(2, 3), float32]) {
  %6 = exp(%x) : Tensor[(2, 3), float32]
  return %6
}""")


def test_broadcasting_neutral_constant_is_kept(check_pass):
    text = """
def @main(%x: Tensor[(3,), float32]) {
  %0 = add(%x, const(float32, [2, 3], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])) : Tensor[(2, 3), float32]
  return %0
}"""
    check_pass(SimplifyExpr(), text, text)


def test_transpose_moving_only_unit_dims_is_a_reshape(check_pass):
    check_pass(SimplifyExpr(), """
def @main(%x: Tensor[(1, 3, 4), float32]) {
  %0 = transpose(%x, perm=[1, 0, 2]) : Tensor[(3, 1, 4), float32]
  %1 = transpose(%x, perm=[0, 2, 1]) : Tensor[(1, 4, 3), float32]
  return %0, %1
}""", """
def @main(%x: Tensor[(1, 3, 4), float32]) {
  %r0 = reshape(%x, newshape=[3, 1, 4]) : Tensor[(3, 1, 4), float32]
  %1 = transpose(%x, perm=[0, 2, 1]) : Tensor[(1, 4, 3), float32]
  return %r0, %1
}""")
