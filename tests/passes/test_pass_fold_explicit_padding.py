"""FoldExplicitPadding: nn.pad into conv/pool pads."""

from ember.graph.passes import FoldExplicitPadding


def test_zero_pad_folds_into_conv(check_pass):
    check_pass(FoldExplicitPadding(), """
def @main(%x: Tensor[(1, 1, 3, 3), float32], %w: Tensor[(1, 1, 3, 3), float32]) {
  %0 = nn.pad(%x, pads=[0, 0, 1, 2, 0, 0, 1, 0], mode="constant", value=0.0) : Tensor[(1, 1, 5, 5), float32]
  %1 = nn.conv(%0, %w, strides=null, pads=[0, 0, 1, 1], dilations=null, group=1) : Tensor[(1, 1, 4, 4), float32]
  return %1
}""", """
def @main(%x: Tensor[(1, 1, 3, 3), float32], %w: Tensor[(1, 1, 3, 3), float32]) {
  %0 = nn.pad(%x, pads=[0, 0, 1, 2, 0, 0, 1, 0], mode="constant", value=0.0) : Tensor[(1, 1, 5, 5), float32]
  %1 = nn.conv(%x, %w, strides=null, pads=[1, 2, 2, 1], dilations=null, group=1) : Tensor[(1, 1, 4, 4), float32]
  return %1
}""")


def test_avg_pool_counts_folded_pad(check_pass):
    check_pass(FoldExplicitPadding(), """
def @main(%x: Tensor[(1, 1, 3, 3), float32]) {
  %0 = nn.pad(%x, pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant", value=0.0) : Tensor[(1, 1, 5, 5), float32]
  %1 = nn.avg_pool(%0, kernel_shape=[2, 2], strides=null, pads=null, dilations=null, ceil_mode=0, count_include_pad=0) : Tensor[(1, 1, 4, 4), float32]
  return %1
}""", """
def @main(%x: Tensor[(1, 1, 3, 3), float32]) {
  %0 = nn.pad(%x, pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant", value=0.0) : Tensor[(1, 1, 5, 5), float32]
  %1 = nn.avg_pool(%x, kernel_shape=[2, 2], strides=null, pads=[1, 1, 1, 1], dilations=null, ceil_mode=0, count_include_pad=1) : Tensor[(1, 1, 4, 4), float32]
  return %1
}""")


def test_non_zero_or_channel_pads_do_not_fold(check_pass):
    text = """
def @main(%x: Tensor[(1, 1, 3, 3), float32], %w: Tensor[(1, 2, 1, 1), float32]) {
  %0 = nn.pad(%x, pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant", value=1.0) : Tensor[(1, 1, 5, 5), float32]
  %1 = nn.max_pool(%0, kernel_shape=[2, 2], strides=null, pads=null, dilations=null, ceil_mode=0) : Tensor[(1, 1, 4, 4), float32]
  %2 = nn.pad(%x, pads=[0, 1, 0, 0, 0, 0, 0, 0], mode="constant", value=0.0) : Tensor[(1, 2, 3, 3), float32]
  %3 = nn.conv(%2, %w, strides=null, pads=null, dilations=null, group=1) : Tensor[(1, 1, 3, 3), float32]
  return %1, %3
}"""
    check_pass(FoldExplicitPadding(), text, text)
