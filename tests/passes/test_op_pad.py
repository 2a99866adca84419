"""nn.pad: compiled kernel vs the NumPy reference (np.pad), every mode, negative pads."""

import numpy as np
import pytest

import ember
from ember.errors import ShapeMismatchError
from ember.graph import FunctionBuilder, IRModule, TensorType
from ember.graph.interpreter import run_reference


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 2, 1], [0, -1, 2, 0], [1, 0, 0, 3]])
def test_pad_matches_numpy(mode, pads):
    fb = FunctionBuilder()
    x = fb.param("x", TensorType((3, 4), "float32"))
    y = fb.call("nn.pad", [x], {"pads": pads, "mode": mode, "value": 1.5})
    mod = IRModule.from_function(fb.finish([y]))
    xv = np.random.default_rng(0).random((3, 4)).astype("float32")
    got = ember.build(mod).run({"x": xv})[0]
    crop = xv[:, 1:] if pads[1] < 0 else xv
    widths = [(max(pads[0], 0), max(pads[2], 0)), (max(pads[1], 0), max(pads[3], 0))]
    kw = {"constant_values": 1.5} if mode == "constant" else {}
    np.testing.assert_array_equal(got, np.pad(crop, widths, mode=mode, **kw))
    np.testing.assert_array_equal(run_reference(mod, {"x": xv})[0], got)


def test_reflect_pad_longer_than_axis_is_rejected():
    fb = FunctionBuilder()
    x = fb.param("x", TensorType((2, 2), "float32"))
    with pytest.raises(ShapeMismatchError, match="reflect"):
        fb.call("nn.pad", [x], {"pads": [0, 2, 0, 0], "mode": "reflect"})
