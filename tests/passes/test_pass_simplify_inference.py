"""SimplifyInference: batch norm folded into conv/gemm weights or into scale+shift; copies go."""

from ember.graph.passes import SimplifyInference

# s = scale / sqrt(var + eps) = [2, 1]; t = shift - mean * s = [-1.5, 0]
BN = ("const(float32, [2], [2.0, 2.0]), const(float32, [2], [0.5, 0.0]), "
      "const(float32, [2], [1.0, 0.0]), const(float32, [2], [1.0, 4.0]), epsilon=0.0")


def test_batch_norm_folds_into_conv(check_pass):
    check_pass(SimplifyInference(), f"""
def @main(%x: Tensor[(1, 1, 3, 3), float32]) {{
  %0 = nn.conv(%x, const(float32, [2, 1, 1, 1], [1.0, 3.0]), strides=null, pads=null, dilations=null, group=1) : Tensor[(1, 2, 3, 3), float32]
  %1 = nn.batch_norm(%0, {BN}) : Tensor[(1, 2, 3, 3), float32]
  %2 = nn.relu(%1) : Tensor[(1, 2, 3, 3), float32]
  return %2
}}""", """
def @main(%x: Tensor[(1, 1, 3, 3), float32]) {
  %0 = nn.conv(%x, const(float32, [2, 1, 1, 1], [2.0, 3.0]), const(float32, [2], [-1.5, 0.0]), strides=null, pads=null, dilations=null, group=1) : Tensor[(1, 2, 3, 3), float32]
  %2 = nn.relu(%0) : Tensor[(1, 2, 3, 3), float32]
  return %2
}""")


def test_batch_norm_folds_into_gemm_columns(check_pass):
    check_pass(SimplifyInference(), f"""
def @main(%x: Tensor[(3, 2), float32]) {{
  %0 = nn.gemm(%x, const(float32, [2, 2], [1.0, 2.0, 3.0, 4.0]), const(float32, [2], [1.0, 1.0]), alpha=1.0, beta=1.0, trans_a=0, trans_b=0) : Tensor[(3, 2), float32]
  %1 = nn.batch_norm(%0, {BN}) : Tensor[(3, 2), float32]
  return %1
}}""", """
def @main(%x: Tensor[(3, 2), float32]) {
  %0 = nn.gemm(%x, const(float32, [2, 2], [2.0, 2.0, 6.0, 4.0]), const(float32, [2], [0.5, 1.0]), alpha=1.0, beta=1.0, trans_a=0, trans_b=0) : Tensor[(3, 2), float32]
  return %0
}""")


def test_batch_norm_with_shared_producer_becomes_scale_shift(check_pass):
    check_pass(SimplifyInference(), f"""
def @main(%x: Tensor[(1, 2, 2, 2), float32]) {{
  %0 = nn.relu(%x) : Tensor[(1, 2, 2, 2), float32]
  %1 = nn.batch_norm(%0, {BN}) : Tensor[(1, 2, 2, 2), float32]
  %2 = add(%0, %1) : Tensor[(1, 2, 2, 2), float32]
  return %2
}}""", """
def @main(%x: Tensor[(1, 2, 2, 2), float32]) {
  %0 = nn.relu(%x) : Tensor[(1, 2, 2, 2), float32]
  %1 = multiply(%0, const(float32, [2, 1, 1], [2.0, 1.0])) : Tensor[(1, 2, 2, 2), float32]
  %3 = add(%1, const(float32, [2, 1, 1], [-1.5, 0.0])) : Tensor[(1, 2, 2, 2), float32]
  %2 = add(%0, %3) : Tensor[(1, 2, 2, 2), float32]
  return %2
}""")


def test_copy_is_dropped(check_pass):
    check_pass(SimplifyInference(), """
def @main(%x: Tensor[(2,), float32]) {
  %0 = copy(%x) : Tensor[(2,), float32]
  %1 = exp(%0) : Tensor[(2,), float32]
  return %1
}""", """
def @main(%x: Tensor[(2,), float32]) {
  %1 = exp(%x) : Tensor[(2,), float32]
  return %1
}""")
