"""CanonicalizeOps: bias adds join conv/gemm, 2-D matmul becomes gemm, relu spellings unify."""

from ember.graph.passes import CanonicalizeOps

CONV = "strides=null, pads=null, dilations=null, group=1"


def test_channel_bias_add_joins_conv(check_pass):
    check_pass(CanonicalizeOps(), f"""
def @main(%x: Tensor[(1, 1, 2, 2), float32], %w: Tensor[(2, 1, 1, 1), float32]) {{
  %0 = nn.conv(%x, %w, {CONV}) : Tensor[(1, 2, 2, 2), float32]
  %1 = add(%0, const(float32, [1, 2, 1, 1], [1.0, -1.0])) : Tensor[(1, 2, 2, 2), float32]
  return %1
}}""", f"""
def @main(%x: Tensor[(1, 1, 2, 2), float32], %w: Tensor[(2, 1, 1, 1), float32]) {{
  %0 = nn.conv(%x, %w, const(float32, [2], [1.0, -1.0]), {CONV}) : Tensor[(1, 2, 2, 2), float32]
  return %0
}}""")


def test_non_channel_add_stays(check_pass):
    text = f"""
def @main(%x: Tensor[(1, 1, 2, 2), float32], %w: Tensor[(2, 1, 1, 1), float32]) {{
  %0 = nn.conv(%x, %w, {CONV}) : Tensor[(1, 2, 2, 2), float32]
  %1 = add(%0, const(float32, [2], [1.0, -1.0])) : Tensor[(1, 2, 2, 2), float32]
  return %1
}}"""
    check_pass(CanonicalizeOps(), text, text)


def test_matmul_becomes_gemm_with_bias(check_pass):
    check_pass(CanonicalizeOps(), """
def @main(%x: Tensor[(3, 2), float32], %w: Tensor[(2, 4), float32]) {
  %0 = matmul(%x, %w) : Tensor[(3, 4), float32]
  %1 = add(%0, const(float32, [4], [1.0, 2.0, 3.0, 4.0])) : Tensor[(3, 4), float32]
  return %1
}""", """
def @main(%x: Tensor[(3, 2), float32], %w: Tensor[(2, 4), float32]) {
  %0 = nn.gemm(%x, %w, const(float32, [4], [1.0, 2.0, 3.0, 4.0]), alpha=1.0, beta=1.0, trans_a=0, trans_b=0) : Tensor[(3, 4), float32]
  return %0
}""")


def test_relu_spellings_and_subtract(check_pass):
    check_pass(CanonicalizeOps(), """
def @main(%x: Tensor[(3,), float32]) {
  %0 = clip(%x, min=0.0, max=null) : Tensor[(3,), float32]
  %1 = maximum(%0, const(float32, [], [0.0])) : Tensor[(3,), float32]
  %2 = subtract(%1, const(float32, [], [1.5])) : Tensor[(3,), float32]
  return %2
}""", """
def @main(%x: Tensor[(3,), float32]) {
  %0 = nn.relu(%x) : Tensor[(3,), float32]
  %1 = nn.relu(%0) : Tensor[(3,), float32]
  %2 = add(%1, const(float32, [], [-1.5])) : Tensor[(3,), float32]
  return %2
}""")


def test_matmul_of_one_row_per_batch_becomes_one_gemm_over_the_batch(check_pass):
    # torch's nn.MultiheadAttention at batch 1: (seq, 1, d) @ (d, 3d)
    check_pass(CanonicalizeOps(), """
def @main(%x: Tensor[(3, 1, 2), float32], %w: Tensor[(2, 4), float32]) {
  %0 = matmul(%x, %w) : Tensor[(3, 1, 4), float32]
  return %0
}""", """
def @main(%x: Tensor[(3, 1, 2), float32], %w: Tensor[(2, 4), float32]) {
  %r0 = reshape(%x, newshape=[3, 2]) : Tensor[(3, 2), float32]
  %r1 = nn.gemm(%r0, %w, alpha=1.0, beta=1.0, trans_a=0, trans_b=0) : Tensor[(3, 4), float32]
  %r2 = reshape(%r1, newshape=[3, 1, 4]) : Tensor[(3, 1, 4), float32]
  return %r2
}""")
