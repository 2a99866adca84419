"""ToMixedPrecision (float16 storage, float32 accumulation) and DynamicToStatic."""

import numpy as np
import pytest

import ember
from ember.errors import PassError, ShapeMismatchError
from ember.graph import IRModule
from ember.graph.passes import DynamicToStatic, PassContext, ToMixedPrecision

from small_models import MODELS, inputs_for, onnxruntime_outputs


def test_allow_deny_follow(check_pass):
    check_pass(ToMixedPrecision(), """
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(3, 4), float32]) {
  %0 = nn.gemm(%x, %w, alpha=1.0, beta=1.0, trans_a=0, trans_b=0) : Tensor[(2, 4), float32]
  %1 = nn.relu(%0) : Tensor[(2, 4), float32]
  %2 = nn.softmax(%1, axis=-1) : Tensor[(2, 4), float32]
  return %2
}""", """
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(3, 4), float32]) {
  %a = cast(%x, dtype="float16") : Tensor[(2, 3), float16]
  %b = cast(%w, dtype="float16") : Tensor[(3, 4), float16]
  %c = cast(%a, dtype="float32") : Tensor[(2, 3), float32]
  %d = cast(%b, dtype="float32") : Tensor[(3, 4), float32]
  %0 = nn.gemm(%c, %d, alpha=1.0, beta=1.0, trans_a=0, trans_b=0) : Tensor[(2, 4), float32]
  %e = cast(%0, dtype="float16") : Tensor[(2, 4), float16]
  %1 = nn.relu(%e) : Tensor[(2, 4), float16]
  %f = cast(%1, dtype="float32") : Tensor[(2, 4), float32]
  %2 = nn.softmax(%f, axis=-1) : Tensor[(2, 4), float32]
  return %2
}""", rtol=2e-2, atol=2e-2)


def test_outputs_keep_their_dtype(check_pass):
    check_pass(ToMixedPrecision(deny=[]), """
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(3, 4), float32]) {
  %0 = matmul(%x, %w) : Tensor[(2, 4), float32]
  return %0
}""", """
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(3, 4), float32]) {
  %a = cast(%x, dtype="float16") : Tensor[(2, 3), float16]
  %b = cast(%w, dtype="float16") : Tensor[(3, 4), float16]
  %c = cast(%a, dtype="float32") : Tensor[(2, 3), float32]
  %d = cast(%b, dtype="float32") : Tensor[(3, 4), float32]
  %0 = matmul(%c, %d) : Tensor[(2, 4), float32]
  %e = cast(%0, dtype="float16") : Tensor[(2, 4), float16]
  %f = cast(%e, dtype="float32") : Tensor[(2, 4), float32]
  return %f
}""", rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype,tol", [("float16", 1e-2), ("bfloat16", 3e-2)])
@pytest.mark.parametrize("name", ["resnet", "inception", "attention", "bert"])
def test_low_precision_models_compile_and_stay_close(name, dtype, tol):
    model = MODELS[name]()
    x = inputs_for(model)
    want = onnxruntime_outputs(model, x)
    with PassContext(opt_level=3, required_pass=["ToMixedPrecision"],
                     config={"ToMixedPrecision.dtype": dtype}):
        m = ember.compile(model)
    header = m.graph_text.split("\n", 1)[0]  # def @main(...): weights are lifted parameters
    assert f"{dtype}]" in header, f"weights should be stored in {dtype}"
    for g, w in zip(m.run(x), want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=0, atol=tol * np.abs(w).max())


def test_bfloat16_kernels_round_like_ml_dtypes():
    import ml_dtypes
    mod = IRModule.from_text("""
def @main(%x: Tensor[(8,), float32]) {
  %0 = cast(%x, dtype="bfloat16") : Tensor[(8,), bfloat16]
  %1 = add(%0, %0) : Tensor[(8,), bfloat16]
  %2 = cast(%1, dtype="float32") : Tensor[(8,), float32]
  return %1, %2
}""")
    x = np.array([1.0, 1.00390625, 1.01171875, -3.3e-5, 65504.0, np.inf, np.nan, 3.4e38],
                 np.float32)
    with PassContext(opt_level=0):
        bf, f32 = ember.build(mod).run({"x": x})
    want = (x.astype(ml_dtypes.bfloat16) + x.astype(ml_dtypes.bfloat16))
    assert bf.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(bf.view(np.uint16)[:6], want.view(np.uint16)[:6])
    assert np.isnan(f32[6]) and np.isinf(f32[7]) and np.isinf(f32[5])
    np.testing.assert_array_equal(f32[:6], want.astype(np.float32)[:6])


def test_unknown_low_dtype_is_rejected():
    mod = IRModule.from_text("""
def @main(%x: Tensor[(2,), float32]) {
  %0 = nn.relu(%x) : Tensor[(2,), float32]
  return %0
}""")
    with pytest.raises(PassError, match="float8"):
        ToMixedPrecision(dtype="float8")(mod)


SYMBOLIC = """
def @main(%x: Tensor[(n, 3), float32]) {
  %0 = nn.relu(%x) : Tensor[(n, 3), float32]
  %1 = sum(%0, axes=[1], keepdims=0) : Tensor[(n,), float32]
  return %1
}"""


def test_dynamic_to_static_binds_symbols(check_pass):
    with PassContext(config={"DynamicToStatic.shapes": {"n": 2}}):
        check_pass(DynamicToStatic(), SYMBOLIC, """
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.relu(%x) : Tensor[(2, 3), float32]
  %1 = sum(%0, axes=[1], keepdims=0) : Tensor[(2,), float32]
  return %1
}""")


def test_dynamic_to_static_strict_names_what_remains():
    with PassContext(config={"DynamicToStatic.strict": True}):
        with pytest.raises(ShapeMismatchError, match="'n'"):
            DynamicToStatic()(IRModule.from_text(SYMBOLIC))
