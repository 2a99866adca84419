"""Reductions fused with a multi-input injective producer (Concat, Pad + Concat, Where, Add with
broadcast), compiled at opt_level 3 and compared with NumPy.

Found by fuzzing: Concat -> ReduceSum over the last axis generated C that did not compile
("redeclaration of 'acc0'"): loop partitioning splits the loop over the concatenated axis into
one part per input, and a part of one iteration is emitted without its loop, so two copies of
the reduction's accumulator declaration landed in the same C scope. Every reduction whose
producer selects between inputs by index meets the same partitioning, hence the whole class
here."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import ember

N = helper.make_node
RNG = np.random.default_rng(0)

# name -> (ONNX nodes producing "c", inputs {name: array}, extra initializers, NumPy of "c")
A = RNG.standard_normal((2, 1, 8)).astype(np.float32)
B = RNG.standard_normal((2, 1, 8)).astype(np.float32)
C3 = RNG.standard_normal((2, 3, 8)).astype(np.float32)
P = RNG.standard_normal((2, 1, 6)).astype(np.float32)
M = RNG.standard_normal((1, 3, 1)).astype(np.float32)
PRODUCERS = {
    # one-row inputs: each partitioned part is a single iteration (the original failure)
    "concat_rows": ([N("Concat", ["a", "b"], ["c"], axis=1)], {"a": A, "b": B}, [],
                    lambda: np.concatenate([A, B], axis=1)),
    "concat_three": ([N("Concat", ["a", "c3", "b"], ["c"], axis=1)], {"a": A, "c3": C3, "b": B},
                     [], lambda: np.concatenate([A, C3, B], axis=1)),
    "pad_concat": ([N("Pad", ["p", "pads"], ["pp"]), N("Concat", ["pp", "b"], ["c"], axis=1)],
                   {"p": P, "b": B},
                   [helper.make_tensor("pads", TensorProto.INT64, [6], [0, 0, 1, 0, 0, 1])],
                   lambda: np.concatenate([np.pad(P, [(0, 0), (0, 0), (1, 1)]), B], axis=1)),
    "where": ([N("Greater", ["c3", "m"], ["g"]), N("Where", ["g", "c3", "m"], ["c"])],
              {"c3": C3, "m": M}, [], lambda: np.where(C3 > M, C3, M)),
    "add_broadcast": ([N("Add", ["c3", "m"], ["c"])], {"c3": C3, "m": M}, [], lambda: C3 + M),
}
REDUCTIONS = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max,
              "ReduceMin": np.min}
# every producer with two reductions, four reduction forms over the producers in turn
FORMS = [("ReduceSum", [2], 0), ("ReduceMean", [2], 1), ("ReduceMax", [1], 0),
         ("ReduceMin", [1, 2], 1)]
CASES = [(p, *FORMS[(2 * k + j) % len(FORMS)]) for k, p in enumerate(PRODUCERS)
         for j in range(2)]


def _model(producer: str, red: str, axes: list, keepdims: int):
    nodes, feeds, inits, _ = PRODUCERS[producer]
    nodes = list(nodes) + [N(red, ["c", "axes"], ["y"], keepdims=keepdims)]
    inits = list(inits) + [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)]
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
           for k, v in feeds.items()]
    g = helper.make_graph(nodes, "fused_reduce", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), feeds


@pytest.mark.parametrize("producer,red,axes,keepdims", CASES)
def test_reduction_fused_after_a_multi_input_injective_op(producer, red, axes, keepdims):
    m, feeds = _model(producer, red, axes, keepdims)
    with ember.PassContext(opt_level=3):
        compiled = ember.compile(m)
    assert compiled.info["num_kernels"] == 1  # the producer is fused into the reduction
    y, = compiled.run(feeds)
    want = REDUCTIONS[red](PRODUCERS[producer][3](), axis=tuple(axes), keepdims=bool(keepdims))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
