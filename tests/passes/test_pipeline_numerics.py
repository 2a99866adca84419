"""Numerical equivalence of the pass pipeline against onnxruntime on small models: each pass
alone, all passes together, and all passes with each one disabled in turn (graphs evaluated
with the operators' NumPy references), plus native builds at opt_level 0 and 3."""

import numpy as np
import pytest

import ember
from ember.frontend import from_onnx
from ember.graph.interpreter import run_reference
from ember.graph.passes import PassContext, list_passes, optimize, pipeline_names

from small_models import MATRIX, MODELS, inputs_for, onnxruntime_outputs

# ToMixedPrecision changes the numerics on purpose: checked with its own tolerance elsewhere
OPTIONAL = sorted({n for n in pipeline_names("llvm") if n in list_passes()}
                  - {"InferType", "ToMixedPrecision"})


def _reference_after_passes(name, **ctx):
    model = MODELS[name]()
    x = inputs_for(model)
    want = onnxruntime_outputs(model, x)
    mod, params = from_onnx(model)
    with PassContext(**ctx):
        opt, lifted = optimize(mod, "llvm", params)
    got = run_reference(opt, x, lifted)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(w).max()))
    return opt


@pytest.mark.parametrize("name", MATRIX)
@pytest.mark.parametrize("pass_name", OPTIONAL)
def test_each_pass_alone(name, pass_name):
    _reference_after_passes(name, opt_level=0, required_pass=[pass_name])


@pytest.mark.parametrize("name", MATRIX)
@pytest.mark.parametrize("pass_name", OPTIONAL)
def test_all_but_one(name, pass_name):
    _reference_after_passes(name, opt_level=3, disabled_pass=[pass_name])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_all_passes(name):
    opt = _reference_after_passes(name, opt_level=3)
    assert any(f.attrs.get("primitive") for f in opt.functions.values())


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("opt_level", [0, 3])
def test_native_build_matches_onnxruntime(name, opt_level):
    model = MODELS[name]()
    x = inputs_for(model)
    want = onnxruntime_outputs(model, x)
    with PassContext(opt_level=opt_level):
        m = ember.compile(model)
    for g, w in zip(m.run(x), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(w).max()))
    assert m.output_names == [o.name for o in model.graph.output]
    if opt_level == 0:
        assert m.info["num_kernels"] == m.info["num_bindings"]
    else:
        assert m.info["num_kernels"] < m.info["num_bindings"]
