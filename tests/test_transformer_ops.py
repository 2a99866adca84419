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
            np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64),
                                       rtol=case.rtol * 10 if g.dtype != np.float32 else case.rtol,
                                       atol=max(case.atol, 1e-6) if g.dtype == np.float32
                                       else 1e-2, err_msg=f"{case.name} output {k}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backend_case_native(case):
    run_case(case)
