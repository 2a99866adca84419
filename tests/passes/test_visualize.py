"""Graph pictures: DOT text, text rendering, files."""

import shutil

import pytest

from ember.errors import ToolchainError
from ember.graph import IRModule
from ember.graph.passes import FuseOps
from ember.graph.visualize import render, to_dot, to_text

T = "Tensor[(1, 2, 4, 4), float32]"
MOD = f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32]) {{
  %0 = nn.conv(%x, %w, strides=null, pads=[1, 1, 1, 1], dilations=null, group=1) : {T}
  %1 = nn.relu(%0) : {T}
  %2 = nn.softmax(%1, axis=1) : {T}
  return %2
}}"""


def test_dot_names_every_op_and_edge():
    fused = FuseOps()(IRModule.from_text(MOD))
    dot = to_dot(fused)
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert "@fused_nn_conv_nn_relu_0" in dot and "nn.softmax" in dot
    assert dot.count("->") == 4  # x, w -> fused; fused -> softmax; softmax -> output
    expanded = to_dot(fused, expand=True)
    assert "subgraph cluster_0" in expanded and "nn.relu" in expanded


def test_text_counts_operators_and_kernels():
    fused = FuseOps()(IRModule.from_text(MOD))
    txt = to_text(fused)
    assert "3 operators in 2 kernels" in txt
    assert "nn.conv > nn.relu" in txt


def test_render_formats(tmp_path):
    mod = IRModule.from_text(MOD)
    assert render(mod, tmp_path / "g.dot", "dot").read_text() == to_dot(mod)
    assert "kernels" in render(mod, tmp_path / "g.txt", "txt").read_text()
    if shutil.which("dot"):
        assert "<svg" in render(mod, tmp_path / "g.svg", "svg").read_text()
    else:
        with pytest.raises(ToolchainError, match="dot"):
            render(mod, tmp_path / "g.svg", "svg")
    with pytest.raises(ValueError):
        render(mod, tmp_path / "g.png", "png")
