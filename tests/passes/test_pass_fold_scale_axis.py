"""FoldScaleAxis: per-channel scales into conv/gemm weights, backward and forward."""

from ember.graph.passes import FoldScaleAxis

CONV = "strides=null, pads=[1, 1, 1, 1], dilations=null, group=1"


def test_backward_scale_into_conv(check_pass):
    check_pass(FoldScaleAxis(), f"""
def @main(%x: Tensor[(1, 1, 2, 2), float32]) {{
  %0 = nn.conv(%x, const(float32, [2, 1, 1, 1], [1.0, 3.0]), const(float32, [2], [1.0, 1.0]), {CONV}) : Tensor[(1, 2, 4, 4), float32]
  %1 = multiply(%0, const(float32, [2, 1, 1], [2.0, 0.5])) : Tensor[(1, 2, 4, 4), float32]
  return %1
}}""", f"""
def @main(%x: Tensor[(1, 1, 2, 2), float32]) {{
  %0 = nn.conv(%x, const(float32, [2, 1, 1, 1], [2.0, 1.5]), const(float32, [2], [2.0, 0.5]), {CONV}) : Tensor[(1, 2, 4, 4), float32]
  return %0
}}""")


def test_forward_scale_into_conv_with_padding(check_pass):
    check_pass(FoldScaleAxis(), f"""
def @main(%x: Tensor[(1, 2, 2, 2), float32]) {{
  %0 = multiply(%x, const(float32, [2, 1, 1], [2.0, -1.0])) : Tensor[(1, 2, 2, 2), float32]
  %1 = nn.conv(%0, const(float32, [1, 2, 1, 1], [1.0, 3.0]), {CONV}) : Tensor[(1, 1, 4, 4), float32]
  return %1
}}""", f"""
def @main(%x: Tensor[(1, 2, 2, 2), float32]) {{
  %0 = multiply(%x, const(float32, [2, 1, 1], [2.0, -1.0])) : Tensor[(1, 2, 2, 2), float32]
  %1 = nn.conv(%x, const(float32, [1, 2, 1, 1], [2.0, -3.0]), {CONV}) : Tensor[(1, 1, 4, 4), float32]
  return %1
}}""")


def test_backward_scale_into_gemm_columns(check_pass):
    check_pass(FoldScaleAxis(), """
def @main(%x: Tensor[(3, 2), float32]) {
  %0 = nn.gemm(%x, const(float32, [2, 2], [1.0, 2.0, 3.0, 4.0]), alpha=1.0, beta=1.0, trans_a=0, trans_b=1) : Tensor[(3, 2), float32]
  %1 = multiply(const(float32, [2], [2.0, 3.0]), %0) : Tensor[(3, 2), float32]
  return %1
}""", """
def @main(%x: Tensor[(3, 2), float32]) {
  %0 = nn.gemm(%x, const(float32, [2, 2], [2.0, 4.0, 9.0, 12.0]), alpha=1.0, beta=1.0, trans_a=0, trans_b=1) : Tensor[(3, 2), float32]
  return %0
}""")


def test_scale_of_shared_conv_is_kept(check_pass):
    text = f"""
def @main(%x: Tensor[(1, 1, 2, 2), float32]) {{
  %0 = nn.conv(%x, const(float32, [2, 1, 1, 1], [1.0, 3.0]), {CONV}) : Tensor[(1, 2, 4, 4), float32]
  %1 = multiply(%0, const(float32, [2, 1, 1], [2.0, 0.5])) : Tensor[(1, 2, 4, 4), float32]
  %2 = add(%0, %1) : Tensor[(1, 2, 4, 4), float32]
  return %2
}}"""
    check_pass(FoldScaleAxis(), text, text)
