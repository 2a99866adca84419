"""Small ONNX models with random weights for the pass tests (built with onnx.helper), covering
what the passes rewrite: conv + batch norm + relu, residual adds, explicit pads, parallel
convolutions into a concat (Inception), dense layers, attention-style matmuls, reshapes."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _G:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.k = [], [], 0

    def w(self, *shape, scale=0.3, positive=False):
        a = self.rng.standard_normal(shape).astype(np.float32) * scale
        if positive:
            a = np.abs(a) + 0.5
        name = f"w{self.k}"
        self.k += 1
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def const(self, arr):
        name = f"c{self.k}"
        self.k += 1
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(self, op_type, inputs, **attrs):
        out = f"t{self.k}"
        self.k += 1
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv_bn_relu(self, x, cin, cout, k=3, relu=True, stride=1, bias=False):
        pads = [k // 2] * 4
        ins = [x, self.w(cout, cin, k, k)] + ([self.w(cout)] if bias else [])
        y = self.op("Conv", ins, pads=pads, strides=[stride, stride])
        y = self.op("BatchNormalization", [y, self.w(cout, positive=True), self.w(cout),
                                           self.w(cout), self.w(cout, positive=True)],
                    epsilon=1e-5)
        return self.op("Relu", [y]) if relu else y

    def model(self, inputs, outputs):
        g = helper.make_graph(self.nodes, "m", inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def small_resnet(seed=0) -> onnx.ModelProto:
    """Conv-BN-ReLU stem, explicit Pad + max pool, two residual blocks, global pool, gemm."""
    g = _G(seed)
    x = g.conv_bn_relu("x", 3, 8, bias=True)
    x = g.op("Pad", [x, g.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], mode="constant")
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    for _ in range(2):
        y = g.conv_bn_relu(x, 8, 8)
        y = g.conv_bn_relu(y, 8, 8, relu=False)
        x = g.op("Relu", [g.op("Add", [x, y])])
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    x = g.op("Gemm", [x, g.w(5, 8), g.w(5)], transB=1)
    out = g.op("Softmax", [x], axis=-1)
    g.nodes[-1].output[0] = "y"
    return g.model([_vi("x", [1, 3, 16, 16])], [_vi("y", [1, 5])])


def small_inception(seed=1) -> onnx.ModelProto:
    """Parallel 1x1 convolutions of one input (CombineParallelConv2D), a padded 3x3 branch, an
    average-pool branch, concat; a graph output that is also read by a later op."""
    g = _G(seed)
    stem = g.conv_bn_relu("x", 4, 8, k=1)
    branches = [g.op("Relu", [g.op("Conv", [stem, g.w(6, 8, 1, 1), g.w(6)])]) for _ in range(3)]
    p = g.op("Pad", [branches[1], g.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])
    branches[1] = g.op("Conv", [p, g.w(6, 6, 3, 3)])
    ap = g.op("AveragePool", [stem], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1],
              count_include_pad=1)
    branches.append(g.op("Conv", [ap, g.w(4, 8, 1, 1)]))
    cat = g.op("Concat", branches, axis=1)
    g.nodes[-1].output[0] = "cat"
    s = g.op("Mul", ["cat", g.const(np.array(0.5, np.float32))])
    g.op("Sigmoid", [s])
    g.nodes[-1].output[0] = "y"
    return g.model([_vi("x", [1, 4, 8, 8])], [_vi("cat", [1, 22, 8, 8]), _vi("y", [1, 22, 8, 8])])


def small_attention(seed=2) -> onnx.ModelProto:
    """One BERT-like block: Q/K/V projections of one input (CombineParallelDense), reshape and
    transpose to heads, scaled scores, softmax, context, output projection, residual, layer
    norm written as reductions, GELU with Erf."""
    g = _G(seed)
    S, D, H = 6, 8, 2
    x2 = g.op("Reshape", ["x", g.const(np.array([S, D], np.int64))])
    qkv = []
    for _ in range(3):
        t = g.op("Add", [g.op("MatMul", [x2, g.w(D, D)]), g.w(D)])
        t = g.op("Reshape", [t, g.const(np.array([S, H, D // H], np.int64))])
        qkv.append(g.op("Transpose", [t], perm=[1, 0, 2]))
    q, k, v = qkv
    kt = g.op("Transpose", [k], perm=[0, 2, 1])
    sc = g.op("Div", [g.op("MatMul", [q, kt]), g.const(np.array(2.0, np.float32))])
    pr = g.op("Softmax", [sc], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [pr, v])], perm=[1, 0, 2])
    ctx = g.op("Reshape", [ctx, g.const(np.array([S, D], np.int64))])
    o = g.op("Add", [g.op("MatMul", [ctx, g.w(D, D)]), x2])
    mean = g.op("ReduceMean", [o], axes=[-1])
    d = g.op("Sub", [o, mean])
    var = g.op("ReduceMean", [g.op("Mul", [d, d])], axes=[-1])
    n = g.op("Div", [d, g.op("Sqrt", [g.op("Add", [var, g.const(np.array(1e-5, np.float32))])])])
    n = g.op("Add", [g.op("Mul", [n, g.w(D, positive=True)]), g.w(D)])
    half = g.const(np.array(0.5, np.float32))
    e = g.op("Erf", [g.op("Div", [n, g.const(np.array(1.4142135, np.float32))])])
    gelu = g.op("Mul", [g.op("Mul", [n, half]), g.op("Add", [e, g.const(np.array(1.0, np.float32))])])
    g.op("Reshape", [gelu, g.const(np.array([1, S, D], np.int64))])
    g.nodes[-1].output[0] = "y"
    return g.model([_vi("x", [1, S, D])], [_vi("y", [1, S, D])])


def _zoo(name):
    from ember.testing import models as zoo
    return {"resnet18": lambda: zoo.resnet18(image_size=32, num_classes=10),
            "mobilenet_v2": lambda: zoo.mobilenet_v2(image_size=32, num_classes=10),
            "bert": lambda: zoo.bert_encoder(num_layers=1, hidden=32, heads=2, seq=8,
                                             vocab=50)}[name]()


MODELS = {"resnet": small_resnet, "inception": small_inception, "attention": small_attention,
          "resnet18": lambda: _zoo("resnet18"), "mobilenet_v2": lambda: _zoo("mobilenet_v2"),
          "bert": lambda: _zoo("bert")}
# the models every pass is checked on alone and disabled in turn (mobilenet_v2's reference
# evaluation takes seconds: it is checked with all passes and natively only)
MATRIX = ["resnet", "inception", "attention", "resnet18", "bert"]


def inputs_for(model: onnx.ModelProto, seed=0) -> dict:
    if any(vi.name == "input_ids" for vi in model.graph.input):
        from ember.testing.models import bert_inputs
        return bert_inputs(model, seed, pad=2)
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def onnxruntime_outputs(model: onnx.ModelProto, inputs: dict) -> list:
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)
