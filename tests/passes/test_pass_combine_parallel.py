"""CombineParallelConv2D and CombineParallelDense."""

from ember.graph.passes import CombineParallelConv2D, CombineParallelDense

C1 = "strides=null, pads=null, dilations=null, group=1"
X = "Tensor[(1, 1, 2, 2), float32]"


def test_three_sibling_convs_combine(check_pass):
    check_pass(CombineParallelConv2D(), f"""
def @main(%x: {X}) {{
  %0 = nn.conv(%x, const(float32, [1, 1, 1, 1], [1.0]), {C1}) : {X}
  %1 = nn.conv(%x, const(float32, [2, 1, 1, 1], [2.0, 3.0]), const(float32, [2], [1.0, 1.0]), {C1}) : Tensor[(1, 2, 2, 2), float32]
  %2 = nn.conv(%x, const(float32, [1, 1, 1, 1], [4.0]), {C1}) : {X}
  %3 = nn.relu(%1) : Tensor[(1, 2, 2, 2), float32]
  return %0, %3, %2
}}""", f"""
def @main(%x: {X}) {{
  %c = nn.conv(%x, const(float32, [4, 1, 1, 1], [1.0, 2.0, 3.0, 4.0]), const(float32, [4], [0.0, 1.0, 1.0, 0.0]), {C1}) : Tensor[(1, 4, 2, 2), float32]
  %0 = strided_slice(%c, begin=[0, 0, 0, 0], end=[1, 1, 2, 2], strides=[1, 1, 1, 1]) : {X}
  %1 = strided_slice(%c, begin=[0, 1, 0, 0], end=[1, 3, 2, 2], strides=[1, 1, 1, 1]) : Tensor[(1, 2, 2, 2), float32]
  %2 = strided_slice(%c, begin=[0, 3, 0, 0], end=[1, 4, 2, 2], strides=[1, 1, 1, 1]) : {X}
  %3 = nn.relu(%1) : Tensor[(1, 2, 2, 2), float32]
  return %0, %3, %2
}}""")


def test_two_siblings_or_different_geometry_stay(check_pass):
    text = f"""
def @main(%x: {X}) {{
  %0 = nn.conv(%x, const(float32, [1, 1, 1, 1], [1.0]), {C1}) : {X}
  %1 = nn.conv(%x, const(float32, [1, 1, 1, 1], [2.0]), {C1}) : {X}
  %2 = nn.conv(%x, const(float32, [1, 1, 1, 1], [4.0]), strides=null, pads=[1, 1, 1, 1], dilations=null, group=1) : Tensor[(1, 1, 4, 4), float32]
  return %0, %1, %2
}}"""
    check_pass(CombineParallelConv2D(), text, text)


def test_qkv_dense_combine(check_pass):
    check_pass(CombineParallelDense(), """
def @main(%x: Tensor[(3, 2), float32]) {
  %0 = nn.gemm(%x, const(float32, [2, 1], [1.0, 2.0]), const(float32, [1], [0.5]), alpha=1.0, beta=1.0, trans_a=0, trans_b=0) : Tensor[(3, 1), float32]
  %1 = nn.gemm(%x, const(float32, [1, 2], [3.0, 4.0]), alpha=1.0, beta=1.0, trans_a=0, trans_b=1) : Tensor[(3, 1), float32]
  %2 = nn.gemm(%x, const(float32, [2, 1], [5.0, 6.0]), alpha=1.0, beta=1.0, trans_a=0, trans_b=0) : Tensor[(3, 1), float32]
  %3 = add(%0, %1) : Tensor[(3, 1), float32]
  %4 = add(%3, %2) : Tensor[(3, 1), float32]
  return %4
}""", """
def @main(%x: Tensor[(3, 2), float32]) {
  %c = nn.gemm(%x, const(float32, [2, 3], [1.0, 3.0, 5.0, 2.0, 4.0, 6.0]), const(float32, [3], [0.5, 0.0, 0.0]), alpha=1.0, beta=1.0, trans_a=0, trans_b=0) : Tensor[(3, 3), float32]
  %0 = strided_slice(%c, begin=[0, 0], end=[3, 1], strides=[1, 1]) : Tensor[(3, 1), float32]
  %1 = strided_slice(%c, begin=[0, 1], end=[3, 2], strides=[1, 1]) : Tensor[(3, 1), float32]
  %2 = strided_slice(%c, begin=[0, 2], end=[3, 3], strides=[1, 1]) : Tensor[(3, 1), float32]
  %3 = add(%0, %1) : Tensor[(3, 1), float32]
  %4 = add(%3, %2) : Tensor[(3, 1), float32]
  return %4
}""")


def test_batched_matmul_siblings_combine(check_pass):
    check_pass(CombineParallelDense(), """
def @main(%x: Tensor[(2, 3, 2), float32]) {
  %0 = matmul(%x, const(float32, [2, 1], [1.0, 2.0])) : Tensor[(2, 3, 1), float32]
  %1 = matmul(%x, const(float32, [2, 1], [3.0, 4.0])) : Tensor[(2, 3, 1), float32]
  %2 = matmul(%x, const(float32, [2, 1], [5.0, 6.0])) : Tensor[(2, 3, 1), float32]
  return %0, %1, %2
}""", """
def @main(%x: Tensor[(2, 3, 2), float32]) {
  %c = matmul(%x, const(float32, [2, 3], [1.0, 3.0, 5.0, 2.0, 4.0, 6.0])) : Tensor[(2, 3, 3), float32]
  %0 = strided_slice(%c, begin=[0, 0, 0], end=[2, 3, 1], strides=[1, 1, 1]) : Tensor[(2, 3, 1), float32]
  %1 = strided_slice(%c, begin=[0, 0, 1], end=[2, 3, 2], strides=[1, 1, 1]) : Tensor[(2, 3, 1), float32]
  %2 = strided_slice(%c, begin=[0, 0, 2], end=[2, 3, 3], strides=[1, 1, 1]) : Tensor[(2, 3, 1), float32]
  return %0, %1, %2
}""")


def test_shared_activation_is_applied_once_before_slicing(check_pass):
    check_pass(CombineParallelConv2D(), f"""
def @main(%x: {X}) {{
  %0 = nn.conv(%x, const(float32, [1, 1, 1, 1], [1.0]), {C1}) : {X}
  %1 = nn.conv(%x, const(float32, [1, 1, 1, 1], [-2.0]), {C1}) : {X}
  %2 = nn.conv(%x, const(float32, [1, 1, 1, 1], [4.0]), {C1}) : {X}
  %3 = nn.relu(%0) : {X}
  %4 = nn.relu(%1) : {X}
  %5 = nn.relu(%2) : {X}
  %6 = add(%3, %4) : {X}
  %7 = add(%6, %5) : {X}
  return %7
}}""", f"""
def @main(%x: {X}) {{
  %c = nn.conv(%x, const(float32, [3, 1, 1, 1], [1.0, -2.0, 4.0]), const(float32, [3], [0.0, 0.0, 0.0]), {C1}) : Tensor[(1, 3, 2, 2), float32]
  %r = nn.relu(%c) : Tensor[(1, 3, 2, 2), float32]
  %3 = strided_slice(%r, begin=[0, 0, 0, 0], end=[1, 1, 2, 2], strides=[1, 1, 1, 1]) : {X}
  %4 = strided_slice(%r, begin=[0, 1, 0, 0], end=[1, 2, 2, 2], strides=[1, 1, 1, 1]) : {X}
  %5 = strided_slice(%r, begin=[0, 2, 0, 0], end=[1, 3, 2, 2], strides=[1, 1, 1, 1]) : {X}
  %6 = add(%3, %4) : {X}
  %7 = add(%6, %5) : {X}
  return %7
}}""")
