"""FuseOps: dominator-based grouping by OpPattern; each group one primitive function and one
kernel."""

import numpy as np

import ember
from ember.graph import IRModule
from ember.graph.interpreter import run_reference
from ember.graph.lower import lower_binding
from ember.graph.passes import FuseOps
from ember.tir.stmt import Allocate

from pass_helpers import random_inputs

CONV = "strides=null, pads=[1, 1, 1, 1], dilations=null, group=1"
T = "Tensor[(1, 2, 4, 4), float32]"


def test_conv_bias_relu_residual_fuse(check_pass):
    check_pass(FuseOps(), f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32], %b: Tensor[(2,), float32]) {{
  %0 = nn.conv(%x, %w, %b, {CONV}) : {T}
  %1 = add(%0, %x) : {T}
  %2 = nn.relu(%1) : {T}
  return %2
}}""", f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32], %b: Tensor[(2,), float32]) {{
  %2 = @fused_nn_conv_add_nn_relu_0(%x, %w, %b) : {T}
  return %2
}}

def @fused_nn_conv_add_nn_relu_0(%p0: {T}, %p1: Tensor[(2, 2, 3, 3), float32], %p2: Tensor[(2,), float32]) attrs={{"primitive": 1}} {{
  %0 = nn.conv(%p0, %p1, %p2, {CONV}) : {T}
  %1 = add(%0, %p0) : {T}
  %2 = nn.relu(%1) : {T}
  return %2
}}""")


def test_intermediate_that_is_a_graph_output_is_not_fused_away(check_pass):
    # /work/shared/cases/conv_mul_relu_shared_intermediate: %1 is returned, so it ends a group
    check_pass(FuseOps(), f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32]) {{
  %0 = nn.conv(%x, %w, {CONV}) : {T}
  %1 = multiply(%0, const(float32, [], [2.0])) : {T}
  %2 = nn.relu(%1) : {T}
  return %1, %2
}}""", f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32]) {{
  %1 = @fused_nn_conv_multiply_0(%x, %w) : {T}
  %2 = nn.relu(%1) : {T}
  return %1, %2
}}

def @fused_nn_conv_multiply_0(%p0: {T}, %p1: Tensor[(2, 2, 3, 3), float32]) attrs={{"primitive": 1}} {{
  %0 = nn.conv(%p0, %p1, {CONV}) : {T}
  %1 = multiply(%0, const(float32, [], [2.0])) : {T}
  return %1
}}""")


def test_value_with_two_consumers_ends_its_group(check_pass):
    # the relu feeds two convolutions: it ends its group (stored); the first conv (in binding
    # order) takes the add as its epilogue, the second stays alone
    check_pass(FuseOps(), f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32]) {{
  %0 = nn.conv(%x, %w, {CONV}) : {T}
  %1 = nn.relu(%0) : {T}
  %2 = nn.conv(%1, %w, {CONV}) : {T}
  %3 = nn.conv(%1, %w, {CONV}) : {T}
  %4 = add(%2, %3) : {T}
  return %4
}}""", f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32]) {{
  %1 = @fused_nn_conv_nn_relu_0(%x, %w) : {T}
  %3 = nn.conv(%1, %w, {CONV}) : {T}
  %4 = @fused_nn_conv_add_1(%1, %w, %3) : {T}
  return %4
}}

def @fused_nn_conv_nn_relu_0(%p0: {T}, %p1: Tensor[(2, 2, 3, 3), float32]) attrs={{"primitive": 1}} {{
  %0 = nn.conv(%p0, %p1, {CONV}) : {T}
  %1 = nn.relu(%0) : {T}
  return %1
}}

def @fused_nn_conv_add_1(%p0: {T}, %p1: Tensor[(2, 2, 3, 3), float32], %p2: {T}) attrs={{"primitive": 1}} {{
  %2 = nn.conv(%p0, %p1, {CONV}) : {T}
  %4 = add(%2, %p2) : {T}
  return %4
}}""")


def test_injective_chain_and_reduction_with_producers(check_pass):
    check_pass(FuseOps(), """
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = exp(%x) : Tensor[(2, 6), float32]
  %1 = reshape(%0, newshape=[3, 4]) : Tensor[(3, 4), float32]
  %2 = transpose(%1, perm=[1, 0]) : Tensor[(4, 3), float32]
  %3 = sum(%2, axes=[1], keepdims=0) : Tensor[(4,), float32]
  return %3
}""", """
def @main(%x: Tensor[(2, 6), float32]) {
  %3 = @fused_exp_reshape_transpose_sum_0(%x) : Tensor[(4,), float32]
  return %3
}

def @fused_exp_reshape_transpose_sum_0(%p0: Tensor[(2, 6), float32]) attrs={"primitive": 1} {
  %0 = exp(%p0) : Tensor[(2, 6), float32]
  %1 = reshape(%0, newshape=[3, 4]) : Tensor[(3, 4), float32]
  %2 = transpose(%1, perm=[1, 0]) : Tensor[(4, 3), float32]
  %3 = sum(%2, axes=[1], keepdims=0) : Tensor[(4,), float32]
  return %3
}""")


def test_opaque_ops_stay_alone(check_pass):
    text = """
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = nn.softmax(%x, axis=-1) : Tensor[(2, 6), float32]
  %1 = nn.softmax(%0, axis=-1) : Tensor[(2, 6), float32]
  return %1
}"""
    check_pass(FuseOps(), text, text)


def test_fused_conv_lowers_to_one_kernel_without_workspace():
    mod = FuseOps()(IRModule.from_text(f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32], %b: Tensor[(2,), float32]) {{
  %0 = nn.conv(%x, %w, %b, {CONV}) : {T}
  %1 = add(%0, %x) : {T}
  %2 = nn.relu(%1) : {T}
  return %2
}}"""))
    (call,) = mod.main.bindings
    func = lower_binding(call, "k0", mod)
    allocs = []

    def walk(s):
        if isinstance(s, Allocate):
            allocs.append(s.buffer)
        for f in ("body", "stmts", "then", "else_"):
            v = getattr(s, f, None)
            for c in (v if isinstance(v, list) else [v]):
                if c is not None and hasattr(c, "__dict__"):
                    walk(c)
    walk(func.body)
    # only the scalar accumulator: the conv result is never stored to a workspace
    assert [b.scope for b in allocs] == ["local"]
    x = random_inputs(mod.main)
    got = ember.build(mod, params={}).run(x)[0]
    np.testing.assert_allclose(got, run_reference(mod, x)[0], rtol=1e-5, atol=1e-5)


def test_max_depth_config_caps_group_size():
    from ember.graph.passes import PassContext
    text = """
def @main(%x: Tensor[(4,), float32]) {
  %0 = exp(%x) : Tensor[(4,), float32]
  %1 = exp(%0) : Tensor[(4,), float32]
  %2 = exp(%1) : Tensor[(4,), float32]
  %3 = exp(%2) : Tensor[(4,), float32]
  return %3
}"""
    with PassContext(config={"FuseOps.max_depth": 2}):
        out = FuseOps()(IRModule.from_text(text))
    assert len(out.main.bindings) == 2
    assert len(FuseOps()(IRModule.from_text(text)).main.bindings) == 1


def test_cast_read_by_a_conv_joins_the_conv_not_its_producer(check_pass):
    H = "Tensor[(1, 2, 4, 4), float16]"
    check_pass(FuseOps(), f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32]) {{
  %0 = nn.conv(%x, %w, {CONV}) : {T}
  %1 = cast(%0, dtype="float16") : {H}
  %2 = nn.relu(%1) : {H}
  %3 = cast(%2, dtype="float32") : {T}
  %4 = nn.conv(%3, %w, {CONV}) : {T}
  return %4
}}""", f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32]) {{
  %2 = @fused_nn_conv_cast_nn_relu_0(%x, %w) : {H}
  %4 = @fused_cast_nn_conv_1(%2, %w) : {T}
  return %4
}}

def @fused_nn_conv_cast_nn_relu_0(%p0: {T}, %p1: Tensor[(2, 2, 3, 3), float32]) attrs={{"primitive": 1}} {{
  %0 = nn.conv(%p0, %p1, {CONV}) : {T}
  %1 = cast(%0, dtype="float16") : {H}
  %2 = nn.relu(%1) : {H}
  return %2
}}

def @fused_cast_nn_conv_1(%p0: {H}, %p1: Tensor[(2, 2, 3, 3), float32]) attrs={{"primitive": 1}} {{
  %3 = cast(%p0, dtype="float32") : {T}
  %4 = nn.conv(%3, %p1, {CONV}) : {T}
  return %4
}}""", rtol=1e-2, atol=1e-2)


def test_conv_bias_batch_norm_relu_is_one_group():
    bn = ", ".join(f"%{n}" for n in ("s", "t", "m", "v"))
    mod = FuseOps()(IRModule.from_text(f"""
def @main(%x: {T}, %w: Tensor[(2, 2, 3, 3), float32], %b: Tensor[(2,), float32], %s: Tensor[(2,), float32], %t: Tensor[(2,), float32], %m: Tensor[(2,), float32], %v: Tensor[(2,), float32]) {{
  %0 = nn.conv(%x, %w, %b, {CONV}) : {T}
  %1 = nn.batch_norm(%0, {bn}, epsilon=0.001) : {T}
  %2 = nn.relu(%1) : {T}
  return %2
}}"""))
    (call,) = mod.main.bindings
    assert [b.call.op for b in mod[call.call.callee].bindings] == ["nn.conv", "nn.batch_norm",
                                                                   "nn.relu"]
    x = random_inputs(mod.main)
    x["v"] = np.abs(x["v"]) + 0.1
    got = ember.build(mod, params={}).run(x)[0]
    np.testing.assert_allclose(got, run_reference(mod, x)[0], rtol=1e-4, atol=1e-5)


def test_far_dominator_does_not_hit_the_recursion_limit():
    """A value read at the start and the end of a 1500-op chain (as a 12-layer QDQ BERT's
    attention mask is): its post-dominator lies 1500 bindings away; the partition walks it
    with explicit stacks and still caps groups at max_depth (256)."""
    t = "Tensor[(4,), float32]"
    lines = [f"  %0 = nn.relu(%x) : {t}"]
    for i in range(1, 1501):  # an even number of negations
        lines.append(f"  %{i} = negative(%{i - 1}) : {t}")
    lines.append(f"  %1501 = add(%1500, %0) : {t}")
    text = f"def @main(%x: {t}) {{\n" + "\n".join(lines) + "\n  return %1501\n}"
    mod = IRModule.from_text(text)
    x = {"x": np.linspace(-2, 2, 4).astype(np.float32)}
    out = FuseOps()(mod)
    assert 6 <= len(out.main.bindings) <= 12  # 1501 ops in groups of at most 256
    np.testing.assert_array_equal(run_reference(out, x)[0], np.maximum(x["x"], 0) * 2)
