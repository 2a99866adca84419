"""The native transformer operators (``ember.ops.transformer``) against onnx's backend test
cases (their expected outputs come from onnx's reference implementation) through the front
door, ``ember.compile(model).run(feeds)``, and checks that the compiled graph used the native
operator rather than the function-body expansion."""

import warnings

import numpy as np
import pytest

import ember

PREFIXES = {"test_attention": "nn.attention", "test_rms_normalization": "nn.rms_norm",
            "test_rotary_embedding": "nn.rotary_embedding",
            "test_group_normalization": "nn.group_norm", "test_swiglu": "nn.swiglu"}


def _cases():
    warnings.filterwarnings("ignore")
    from onnx.backend.test.case.node import collect_testcases
    with np.errstate(all="ignore"):
        cs = collect_testcases()
    return [c for c in cs if "_expanded" not in c.name
            and any(c.name.startswith(p) for p in PREFIXES)]


CASES = _cases()


def _native(name):
    return next(op for p, op in PREFIXES.items() if name.startswith(p))


def run_case(case):
    """Compile one backend case through ``ember.compile`` and compare every output."""
    from onnx import numpy_helper
    model = case.model
    names = [i.name for i in model.graph.input]
    native = _native(case.name)
    for ins, outs in case.data_sets:
        feeds = {n: (numpy_helper.to_array(x) if not isinstance(x, np.ndarray) else x)
                 for n, x in zip(names, ins)}
        cm = ember.compile(model)
        assert native + "(" in cm.graph_text, f"{case.name}: {native} not in the compiled graph"
        got = cm.run(feeds)
        for k, (g, e) in enumerate(zip(got, outs)):
            e = numpy_helper.to_array(e) if not isinstance(e, np.ndarray) else e
            assert g.shape == e.shape, f"{case.name} output {k}: {g.shape} != {e.shape}"
            assert g.dtype == e.dtype, f"{case.name} output {k}: {g.dtype} != {e.dtype}"
            if "bfloat16" in str(g.dtype):
                # computed in float32 and rounded once; the reference rounds its intermediate
                # products to bfloat16: one bfloat16 unit (2^-7 near 1) apart at most
                rtol, atol = 2.0 ** -7, 2.0 ** -8
            else:
                rtol, atol = case.rtol, max(case.atol, 1e-6)
            np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol,
                                       atol=atol, err_msg=f"{case.name} output {k}")


# a quick cross-section (every operator, GQA, causal with past, masks, softcap, qk output, 3-D,
# fp16); the whole list runs as a slow test (125 cases, about 5 minutes on 2 busy cores)
QUICK = {"test_attention_4d_gqa_with_past_and_present_fp16",
         "test_attention_3d_diff_heads_sizes_causal",
         "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal",
         "test_attention_4d_attn_mask_bool", "test_attention_4d_gqa_softcap",
         "test_attention_3d_with_past_and_present_qk_matmul_softmax",
         "test_attention_4d_causal_nonpad_batch_prefill", "test_attention_local_window_with_past",
         "test_rms_normalization_4d_axis1", "test_rotary_embedding_with_interleaved_rotary_dim",
         "test_rotary_embedding_3d_input", "test_rotary_embedding_no_position_ids_rotary_dim",
         "test_group_normalization_epsilon", "test_swiglu_alpha"}


@pytest.mark.parametrize("case", [c for c in CASES if c.name in QUICK],
                         ids=[c.name for c in CASES if c.name in QUICK])
def test_backend_case_native_quick(case):
    run_case(case)


@pytest.mark.slow(reason="all 125 onnx backend cases of the transformer operators (~5 min)")
def test_backend_cases_native_all():
    failed = []
    for case in CASES:
        try:
            run_case(case)
        except AssertionError as e:
            failed.append(f"{case.name}: {str(e)[:300]}")
    assert not failed, "\n".join(failed)


def test_quick_cases_exist():
    assert len(CASES) >= 125 and QUICK <= {c.name for c in CASES}


def _attention_model(shapes, **attrs):
    from onnx import TensorProto, helper
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip("qkv", shapes)]
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attn0", **attrs)
    g = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                           None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


@pytest.mark.parametrize("shapes,attrs,match", [
    # a 3-D Q with 4-D K/V was "ValueError: too many values to unpack" from the head split
    (((1, 4, 16), (1, 2, 4, 8), (1, 2, 4, 8)), {"q_num_heads": 2, "kv_num_heads": 2},
     "all 3-D or all 4-D"),
    # no keys at all was a ZeroDivisionError from the kernel's key tiling
    (((1, 2, 4, 8), (1, 2, 0, 8), (1, 2, 0, 8)), {}, "no keys")])
def test_attention_bad_operands_are_typed_errors(shapes, attrs, match):
    from ember.errors import ShapeMismatchError
    with pytest.raises(ShapeMismatchError, match=rf"attn0.*{match}"):
        ember.compile(_attention_model(shapes, **attrs))
