"""Property: random small graphs of supported operators give the same outputs at opt_level 0
(every operator its own kernel, no rewrites) and opt_level 3 (every standard pass, fusion)."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import ember
from ember.graph import Constant, FunctionBuilder, IRModule, TensorType

SHAPE = (1, 4, 5, 5)
UNARY = ["nn.relu", "tanh", "sigmoid", "abs", "negative", "copy"]
BINARY = ["add", "multiply", "subtract", "maximum", "minimum"]
STEPS = ["unary", "binary", "scalar", "conv", "batch_norm", "reshape_back", "transpose_back",
         "pad_conv", "reduce_broadcast", "concat_slice", "three_convs", "pool", "softmax",
         "mean_scale", "dense", "matmul", "clip"]


@st.composite
def graphs(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    fb = FunctionBuilder()
    x = fb.param("x", TensorType(SHAPE, "float32"))
    vals = [x]

    def const(*shape, scale=0.5):
        return Constant((rng.standard_normal(shape) * scale).astype(np.float32))

    def conv(v, pads=(1, 1, 1, 1)):
        return fb.call("nn.conv", [v, const(4, 4, 3, 3, scale=0.2), const(4)], {"pads": list(pads)})

    for _ in range(draw(st.integers(1, 7))):
        v = vals[draw(st.integers(0, len(vals) - 1))]
        step = draw(st.sampled_from(STEPS))
        if step == "unary":
            y = fb.call(draw(st.sampled_from(UNARY)), [v])
        elif step == "binary":
            w = vals[draw(st.integers(0, len(vals) - 1))]
            y = fb.call(draw(st.sampled_from(BINARY)), [v, w])
        elif step == "scalar":
            y = fb.call(draw(st.sampled_from(["add", "multiply", "subtract"])),
                        [v, Constant(np.float32(draw(st.sampled_from([0.0, 1.0, 0.5, -2.0]))))])
        elif step == "conv":
            y = conv(v)
        elif step == "batch_norm":
            y = fb.call("nn.batch_norm", [v, const(4), const(4), const(4),
                                          Constant(np.abs(rng.standard_normal(4)).astype(
                                              np.float32) + 0.5)])
        elif step == "reshape_back":
            y = fb.call("reshape", [fb.call("reshape", [v], {"newshape": [4, 25]})],
                        {"newshape": list(SHAPE)})
        elif step == "transpose_back":
            t = fb.call("transpose", [v], {"perm": [0, 2, 3, 1]})
            y = fb.call("transpose", [fb.call("nn.relu", [t])], {"perm": [0, 3, 1, 2]})
        elif step == "pad_conv":
            p = fb.call("nn.pad", [v], {"pads": [0, 0, 1, 1, 0, 0, 1, 1]})
            y = conv(p, (0, 0, 0, 0))
        elif step == "reduce_broadcast":
            s = fb.call("sum", [v], {"axes": [1], "keepdims": 1})
            y = fb.call("subtract", [v, s])
        elif step == "concat_slice":
            c = fb.call("concatenate", [v, vals[-1]], {"axis": 1})
            y = fb.call("strided_slice", [c], {"begin": [0, 2, 0, 0], "end": [1, 6, 5, 5],
                                               "strides": [1, 1, 1, 1]})
        elif step == "pool":
            kind = draw(st.sampled_from(["nn.max_pool", "nn.avg_pool"]))
            attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
            if kind == "nn.avg_pool":
                attrs["count_include_pad"] = draw(st.integers(0, 1))
            y = fb.call(kind, [v], attrs)
        elif step == "softmax":
            y = fb.call("nn.softmax", [v], {"axis": 1})
        elif step == "mean_scale":
            m = fb.call("mean", [v], {"axes": [2, 3], "keepdims": 1})
            y = fb.call("multiply", [v, m])
        elif step == "dense":
            f = fb.call("reshape", [v], {"newshape": [4, 25]})
            g = fb.call("nn.gemm", [f, const(25, 25, scale=0.2), const(25)], {"trans_b": 1})
            y = fb.call("reshape", [g], {"newshape": list(SHAPE)})
        elif step == "matmul":
            f = fb.call("reshape", [v], {"newshape": [20, 5]})
            g = fb.call("matmul", [f, const(5, 5)])
            y = fb.call("reshape", [fb.call("add", [g, const(5)])], {"newshape": list(SHAPE)})
        elif step == "clip":
            y = fb.call("clip", [v], {"min": 0.0, "max": draw(st.sampled_from([None, 1.0]))})
        else:  # three convolutions of one input, summed (CombineParallelConv2D)
            a, b, c = conv(v), conv(v), conv(v)
            y = fb.call("add", [fb.call("add", [a, b]), c])
        vals.append(y)
    n_out = draw(st.integers(1, min(2, len(vals) - 1)))
    return IRModule.from_function(fb.finish(vals[-n_out:]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_opt_level_0_and_3_agree(mod):
    x = {"x": np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)}
    with ember.PassContext(opt_level=0):
        m0 = ember.build(mod)
    with ember.PassContext(opt_level=3):
        m3 = ember.build(mod)
    # fusion never adds kernels; ConvertLayout adds layout transposes by design, not counted
    n3 = sum(1 for st in m3.plan["steps"] if st["op"] != "transpose")
    assert n3 <= m0.info["num_kernels"]
    for a, b in zip(m0.run(x), m3.run(x)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)
