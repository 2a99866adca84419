"""Random small graphs (chains and diamonds of elementwise, broadcast, reduction, softmax,
layout and convolution operators, intermediates used twice or returned) compiled with every
optimization (fusion included) and compared with the reference executor on the unoptimized
graph. This is where fused kernels, shared intermediates and layout rewrites meet."""

import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.graph import FunctionBuilder, IRModule
from ember.graph.builder import const
from ember.graph.interpreter import run_reference
from ember.graph.ir import TensorType
from ember.testing import assert_close

SCALE = float(os.environ.get("EMBER_OP_EXAMPLES_SCALE", "1"))
UNARY = ["nn.relu", "tanh", "sigmoid", "negative", "abs"]
BINARY = ["add", "subtract", "multiply", "maximum", "minimum"]


def _draw_graph(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    fb = FunctionBuilder()
    rank = draw(st.sampled_from([2, 3, 4]), label="rank")
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank), label="shape"))
    x = fb.param("x", TensorType(shape, "float32"))
    inputs = {"x": rng.standard_normal(shape).astype(np.float32)}
    params = {}
    values = [x]
    consumed = set()

    def pick():
        v = draw(st.sampled_from(values), label="operand")
        consumed.add(id(v))
        return v

    def weight(name, shp, scale=1.0):
        p = fb.param(name, TensorType(shp, "float32"))
        params[p.name] = (rng.standard_normal(shp) * scale).astype(np.float32)
        return p

    for step in range(draw(st.integers(1, 7), label="steps")):
        v = pick()
        shp = v.type.shape
        kind = draw(st.sampled_from(["unary", "binary", "const", "reduce", "softmax",
                                     "transpose", "reshape", "conv", "matmul", "bn"]),
                    label="kind")
        if kind == "unary":
            y = fb.call(draw(st.sampled_from(UNARY)), [v])
        elif kind == "binary":
            same = [u for u in values if u.type.shape == shp]
            u = draw(st.sampled_from(same), label="other")
            consumed.add(id(u))
            y = fb.call(draw(st.sampled_from(BINARY)), [v, u])
        elif kind == "const":
            cshape = tuple(1 if draw(st.booleans()) else d for d in shp)[
                draw(st.integers(0, len(shp))):]
            c = const(rng.uniform(0.5, 1.5, cshape).astype(np.float32))
            y = fb.call(draw(st.sampled_from(["add", "multiply", "subtract"])), [v, c])
        elif kind == "reduce":
            axes = sorted(draw(st.sets(st.integers(0, len(shp) - 1), min_size=1)))
            y = fb.call(draw(st.sampled_from(["sum", "mean", "max"])), [v],
                        {"axes": axes, "keepdims": 1})
            if draw(st.booleans()):  # broadcast back: a diamond
                y = fb.call("subtract", [v, y])
        elif kind == "softmax":
            y = fb.call("nn.softmax", [v], {"axis": draw(st.integers(-len(shp), len(shp) - 1))})
        elif kind == "transpose":
            y = fb.call("transpose", [v], {"perm": list(draw(st.permutations(range(len(shp)))))})
        elif kind == "reshape":
            n = int(np.prod(shp))
            y = fb.call("reshape", [v], {"newshape": [n] if draw(st.booleans())
                                         else list(shp[::-1])})
        elif kind == "conv" and len(shp) == 4:
            m, k = draw(st.integers(1, 3)), draw(st.sampled_from([1, 3]))
            w = weight("w", (m, shp[1], k, k), 1 / np.sqrt(shp[1] * k * k))
            p = k // 2
            y = fb.call("nn.conv", [v, w], {"pads": [p] * 4})
        elif kind == "matmul" and len(shp) >= 2:
            n = draw(st.integers(1, 4))
            y = fb.call("matmul", [v, weight("m", (shp[-1], n), 1 / np.sqrt(shp[-1]))])
        elif kind == "bn" and len(shp) >= 2:
            c = shp[1]
            y = fb.call("nn.batch_norm", [v, weight("g", (c,)), weight("b", (c,)),
                                          weight("mu", (c,)),
                                          const(rng.uniform(0.5, 1.5, c).astype(np.float32))])
        else:
            y = fb.call("nn.relu", [v])
        values.append(y)
    outs = [values[-1]] + [v for v in values[1:-1]
                           if id(v) in consumed and draw(st.booleans(), label="also output")]
    return IRModule.from_function(fb.finish(outs)), inputs, params


@settings(max_examples=int(40 * SCALE))
@given(data=st.data())
def test_random_graph_compiled_at_opt_level_3_matches_reference(data):
    mod, inputs, params = _draw_graph(data.draw)
    want = run_reference(mod, inputs, params)
    with ember.PassContext(opt_level=3):
        model = ember.build(mod, params=params)
    got = model.run(inputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, 1e-4, 1e-5, f"output {k} of\n{mod.text()}")
