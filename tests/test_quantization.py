"""The int8 path end to end: onnxruntime ``quantize_static`` QDQ models imported into the QDQ
graph form and lowered to int8 kernels (against onnxruntime's own int8 execution), ember's
post-training quantization (``ember.quantize``, ``ember.compile(quantize="int8")``, the QDQ ONNX
writer and ``ember quantize``), the calibration observers, and bad input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.errors import InputError, QuantizationError
from ember.frontend.onnx import from_onnx
from ember.quant import observers as O
from ember.quant import quantize_with_report
from ember.quant.onnx_qdq import quantize_onnx
from isa_marks import needs_vnni

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

SHAPE = (1, 3, 15, 15)


def small_cnn(opset: int = 13) -> onnx.ModelProto:
    """conv+relu -> conv(stride 2)+relu -> conv + residual add + relu -> global pool -> gemm."""
    rng = np.random.default_rng(0)

    def init(name, a):
        return numpy_helper.from_array(a.astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c3", "r2"], ["a3"]),
             helper.make_node("Relu", ["a3"], ["r3"]),
             helper.make_node("GlobalAveragePool", ["r3"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    inits = [init("w1", rng.normal(0, .3, (16, 3, 3, 3))), init("b1", rng.normal(0, .1, 16)),
             init("w2", rng.normal(0, .1, (24, 16, 3, 3))), init("b2", rng.normal(0, .1, 24)),
             init("w3", rng.normal(0, .1, (24, 24, 3, 3))), init("b3", rng.normal(0, .1, 24)),
             init("wf", rng.normal(0, .2, (10, 24))), init("bf", rng.normal(0, .1, 10))]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         list(SHAPE))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def feeds(n, seed=1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, SHAPE).astype(np.float32)} for _ in range(n)]


def ort_qdq(tmp_path, activation="QUInt8", per_channel=True, model=None):
    q = quantization
    src, dst = tmp_path / "m.onnx", tmp_path / "m.qdq.onnx"
    onnx.save(model if model is not None else small_cnn(), src)

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds(8))

        def get_next(self):
            return next(self.it, None)
    q.quantize_static(str(src), str(dst), Reader(), quant_format=q.QuantFormat.QDQ,
                      per_channel=per_channel, activation_type=getattr(q.QuantType, activation),
                      weight_type=q.QuantType.QInt8)
    return str(dst)


def ort_run(path, x):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return s.run(None, x)[0]


def output_step(path) -> float:
    """The scale of the QuantizeLinear that makes the graph's output."""
    m = onnx.load(path)
    out = m.graph.output[0].name
    dq = next(n for n in m.graph.node if out in n.output)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    return float(inits[dq.input[1]])


def int8_steps(compiled) -> int:
    return sum(1 for s in compiled.plan["steps"] if s.get("op") == "qnn.conv2d")


@pytest.mark.parametrize("activation,per_channel", [("QUInt8", True), ("QInt8", True),
                                                    ("QUInt8", False)])
def test_onnxruntime_qdq_model_runs_on_int8_kernels(tmp_path, activation, per_channel):
    path = ort_qdq(tmp_path, activation, per_channel)
    step = output_step(path)
    native = ember.compile(path)
    scalar = ember.compile(path, target="llvm -isa=scalar")
    assert int8_steps(native) == 4 and int8_steps(scalar) == 4  # 3 conv + gemm
    for x in feeds(3, seed=9):
        want = ort_run(path, x)
        got = native.run(x)[0]
        assert np.abs(got - want).max() <= step * 1.001  # within one quantization step
        np.testing.assert_array_equal(scalar.run(x)[0], got)  # scalar path bit-identical


def test_unlowerable_qdq_chain_stays_float_and_correct(tmp_path):
    """A weight zero point other than 0 keeps the QDQ form (computed in float32)."""
    path = ort_qdq(tmp_path)
    m = onnx.load(path)
    for i in m.graph.initializer:  # give the first conv's weights a zero point of 1
        if i.name.startswith("w1") and i.name.endswith("zero_point"):
            z = numpy_helper.to_array(i).copy()
            z[:] = 1
            i.CopyFrom(numpy_helper.from_array(z, i.name))
    p2 = str(tmp_path / "zp.onnx")
    onnx.save(m, p2)
    c = ember.compile(p2)
    assert int8_steps(c) == 3
    x = feeds(1, seed=4)[0]
    assert np.abs(c.run(x)[0] - ort_run(p2, x)).max() <= output_step(p2) * 1.001


@pytest.mark.parametrize("method", O.METHODS)
@needs_vnni("onnxruntime's AVX2 u8s8 kernel is not an exact int8 reference there (open, stop-18 note)")
def test_ember_quantize_is_close_to_float_and_onnxruntime_runs_its_qdq_model(tmp_path, method):
    model = small_cnn()
    mod, params = from_onnx(model)
    cal = feeds(24)
    qmod, qparams, rep = quantize_with_report(mod, params, cal, calibrate=method,
                                              progress=False)
    assert sorted(rep["layers"]) == ["c1", "c2", "c3", "y"] and rep["float_ops"] == []
    assert rep["weight_bytes"]["quantized"] < rep["weight_bytes"]["float32"] / 3
    ops = {b.call.op for b in qmod["main"].bindings}
    assert {"qnn.quantize", "qnn.dequantize"} <= ops
    compiled = ember.build(qmod, "llvm", qparams)
    assert int8_steps(compiled) == 4
    proto, _ = quantize_onnx(model, cal, calibrate=method, progress=False)
    onnx.checker.check_model(proto)
    qpath = str(tmp_path / "e.onnx")
    onnx.save(proto, qpath)
    ref = ember.build(mod, "llvm", dict(params))
    for x in feeds(3, seed=11):
        y = compiled.run(x)[0]
        f = ref.run(x)[0]
        assert np.abs(y - f).max() < 0.15 * np.abs(f).max()
        assert np.abs(y - ort_run(qpath, x)).max() <= output_step(qpath) * 1.001


def test_compile_quantize_keyword_reports(tmp_path):
    c = ember.compile(small_cnn(), quantize="int8", calibration=feeds(8), calibrate="percentile")
    q = c.info["quantization"]
    assert q["int8_kernels"] == 4 and q["method"] == "percentile" and q["num_feeds"] == 8
    lay = q["layers"]["c2"]
    assert lay["output"] == "r2" and lay["input"] == "r1" and lay["output_scale"] > 0
    assert lay["weight_scale_min"] <= lay["weight_scale_max"]


def test_observers_against_numpy():
    rng = np.random.default_rng(3)
    chunks = [rng.normal(0, 1, 5000).astype(np.float32) for _ in range(3)]
    chunks[1][7] = 40.0  # an outlier
    mm, pc, en = (O.Observer(m) for m in O.METHODS)
    for c in chunks:
        for o in (mm, pc, en):
            o.update(c)
    allv = np.concatenate(chunks)
    assert mm.range() == (float(allv.min()), float(allv.max()))
    lo, hi = pc.range()
    assert lo == pytest.approx(np.percentile(allv, 100 - O.PERCENTILE))
    assert hi == pytest.approx(np.percentile(allv, O.PERCENTILE))
    assert 2.0 < en.range()[1] < 40.0  # the outlier is clipped
    s, z = O.affine_uint8(-1.0, 3.0)
    assert s == np.float32(4 / 255) and z == 64
    w = rng.normal(0, 1, (4, 3, 2, 2)).astype(np.float32)
    sc = O.symmetric_int8(w, 0)
    np.testing.assert_allclose(sc, np.abs(w).reshape(4, -1).max(1) / 127, rtol=1e-6)
    assert np.abs(O.quantize_weight(w, sc, 0)).max() == 127


def test_bad_calibration_feeds_raise_input_errors():
    mod, params = from_onnx(small_cnn())
    good = feeds(1)[0]["x"]
    bad = [[{"image": good}], [{"x": good[:, :2]}], [{"x": good.astype(np.float64)}],
           [{"x": np.where(good > 1, np.nan, good)}], [{"x": np.full(SHAPE, np.inf, np.float32)}],
           [], [good]]
    for cal in bad:
        with pytest.raises(InputError):
            ember.quantize(mod, params, cal, progress=False)


def test_nothing_to_quantize_and_bad_options():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    mod, params = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    cal = [{"x": np.ones((1, 4), np.float32)}]
    with pytest.raises(QuantizationError, match="nothing to quantize"):
        ember.quantize(mod, params, cal, progress=False)
    mod, params = from_onnx(small_cnn())
    with pytest.raises(QuantizationError, match="nothing to quantize"):
        ember.quantize(mod, params, feeds(1), skip=["c1", "c2", "c3", "y"], progress=False)
    with pytest.raises(QuantizationError):
        ember.quantize(mod, params, feeds(1), calibrate="mse", progress=False)
    with pytest.raises(QuantizationError):
        ember.quantize(mod, params, feeds(1), dtype="int4", progress=False)


def test_skip_keeps_a_layer_float():
    mod, params = from_onnx(small_cnn())
    _, _, rep = quantize_with_report(mod, params, feeds(4), skip=["c3"], progress=False)
    assert "c3" not in rep["layers"] and rep["float_ops"] == ["c3"]


def test_cli_quantize_and_compile(tmp_path, capsys):
    from ember.cli import main
    src = tmp_path / "m.onnx"
    onnx.save(small_cnn(), src)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", x=rng.normal(0, 1, (6,) + SHAPE).astype(np.float32))
    out = tmp_path / "m.int8.onnx"
    assert main(["quantize", str(src), "--calibration", str(tmp_path / "cal.npz"),
                 "-o", str(out)]) == 0
    assert "quantized 4 layer(s) on 6 calibration feed(s)" in capsys.readouterr().out
    x = feeds(1, seed=5)[0]
    assert ort_run(str(out), x).shape == (1, 10)
    d = tmp_path / "cal"
    d.mkdir()
    for k in range(3):  # a directory of per-sample files without the batch axis
        np.savez(d / f"{k}.npz", x=rng.normal(0, 1, SHAPE[1:]).astype(np.float32))
    assert main(["compile", str(src), "--quantize", "int8", "--calibration", str(d),
                 "-o", str(tmp_path / "m.ember")]) == 0
    assert main(["quantize", str(src), "--calibration", str(tmp_path / "none.npz")]) == 2
    assert "InputError" in capsys.readouterr().err


def test_one_feed_dict_for_calibration_says_so():
    f = feeds(1)[0]
    with pytest.raises(InputError, match="one input dict"):
        ember.compile(small_cnn(), quantize="int8", calibration=f)


def test_cli_quantize_unwritable_output_is_a_typed_error(tmp_path, capsys):
    from ember.cli import main
    src = tmp_path / "m.onnx"
    onnx.save(small_cnn(), src)
    np.savez(tmp_path / "cal.npz",
             x=np.random.default_rng(0).normal(0, 1, (2,) + SHAPE).astype(np.float32))
    out = tmp_path / "no" / "such" / "folder" / "m.int8.onnx"
    assert main(["quantize", str(src), "--calibration", str(tmp_path / "cal.npz"),
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "InputError" in err and "cannot write the quantized model" in err


def residual_cnn() -> onnx.ModelProto:
    """``small_cnn`` with a max pool after the first convolution and the residual add reading
    the pooled tensor and feeding a 1x1 convolution (a ResNet block) before the head."""
    m = small_cnn()
    g = m.graph
    rng = np.random.default_rng(3)
    nodes = list(g.node)
    nodes[2].input[0] = "p1"  # conv 2 reads the pooled tensor, stride 1 (a ResNet block)
    del nodes[2].attribute[:]
    nodes[2].attribute.extend(helper.make_node("Conv", [], [], pads=[1, 1, 1, 1]).attribute)
    nodes[5].input[1] = "p1"  # the residual is the pooled tensor
    nodes[7].input[0] = "c4"  # global pool reads the 1x1 convolution
    nodes.insert(2, helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3],
                                     strides=[2, 2], pads=[1, 1, 1, 1]))
    nodes.insert(8, helper.make_node("Conv", ["r3", "w4", "b4"], ["c4"]))
    inits = {i.name: i for i in g.initializer}
    for name, a in (("w2", rng.normal(0, .1, (16, 16, 3, 3))), ("b2", rng.normal(0, .1, 16)),
                    ("w3", rng.normal(0, .1, (16, 16, 3, 3))), ("b3", rng.normal(0, .1, 16)),
                    ("w4", rng.normal(0, .2, (24, 16, 1, 1))), ("b4", rng.normal(0, .1, 24))):
        inits[name] = numpy_helper.from_array(a.astype(np.float32), name)
    del g.node[:], g.initializer[:]
    g.node.extend(nodes)
    g.initializer.extend(inits.values())
    onnx.checker.check_model(m)
    return m


@needs_vnni("onnxruntime's AVX2 u8s8 kernel is not an exact int8 reference there (open, stop-18 note)")
def test_residual_and_max_pool_stay_int8_and_match_onnxruntime(tmp_path):
    """onnxruntime's QDQ model of a residual block: the add (dequantize, add, relu, quantize)
    runs in the convolution's epilogue and the max pool on uint8, so no float tensor sits
    between the convolutions; the output stays within one quantization step of onnxruntime's
    int8 run, and the AVX2 and scalar kernels give the same bits as the native ones."""
    path = ort_qdq(tmp_path, model=residual_cnn())
    step = output_step(path)
    native = ember.compile(path)
    ops = [s.get("op", "") for s in native.plan["steps"]]
    assert int8_steps(native) == 5  # 4 conv + gemm
    assert not any("add" in o for o in ops), ops  # the residual add is in the epilogue
    assert "nn.max_pool" in ops  # on uint8, not wrapped in dequantize/quantize
    others = [ember.compile(path, target=f"llvm -isa={isa}") for isa in ("avx2", "scalar")]
    for x in feeds(3, seed=9):
        want = ort_run(path, x)
        got = native.run(x)[0]
        assert np.abs(got - want).max() <= step * 1.001
        for o in others:
            np.testing.assert_array_equal(o.run(x)[0], got)


def qdq_reference(path, x):
    """onnxruntime with its graph optimizations off: the QDQ graph as written (Q/DQ in float),
    the ONNX semantics of the model."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, x)


def test_onnxruntime_qdq_bert_encoder_dense_layers_run_int8(tmp_path):
    """A 1-layer BERT encoder quantized by onnxruntime (QDQ, per channel): the six dense
    layers and the pooler run on qnn.conv2d, and both outputs (DequantizeLinear of the last
    LayerNorm; Tanh of the dequantized pooler, 1-Lipschitz) are within one output step of the
    QDQ graph's float semantics."""
    from ember.testing.models import bert_encoder, bert_inputs
    model = bert_encoder(num_layers=1, hidden=64, heads=4, seq=16, vocab=100)
    cal = [bert_inputs(model, seed=s) for s in range(4)]

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.it = iter(cal)

        def get_next(self):
            return next(self.it, None)
    src, dst = tmp_path / "b.onnx", tmp_path / "b.qdq.onnx"
    onnx.save(model, src)
    quantization.quantize_static(str(src), str(dst), Reader(),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    q = onnx.load(dst)
    inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    prod = {o: n for n in q.graph.node for o in n.output}
    steps = []
    for out in q.graph.output:
        n = prod[out.name]
        while n.op_type in ("Identity", "Tanh"):
            n = prod[n.input[0]]
        assert n.op_type == "DequantizeLinear"
        steps.append(float(inits[n.input[1]]))
    m = ember.compile(str(dst))
    assert int8_steps(m) == 7  # Q, K, V, attention output, FFN in, FFN out, pooler
    for seed in (7, 8):
        x = bert_inputs(model, seed=seed, pad=seed - 5)
        for got, want, step in zip(m.run(x), qdq_reference(str(dst), x), steps):
            assert np.abs(got - want).max() <= step * 1.001


def test_calibrated_quantize_other_than_int8_names_bf16():
    with pytest.raises(QuantizationError, match="bf16"):
        ember.compile(small_cnn(), quantize="int4", calibration=feeds(1))


@pytest.mark.parametrize("isa", ["avx512", "avx2", "scalar"])
@pytest.mark.parametrize("dtype", [TensorProto.UINT8, TensorProto.INT8])
def test_fused_qdq_elementwise_kernels_equal_onnxruntime(isa, dtype):
    """An 8-bit -> 8-bit fused elementwise chain (dequantize, divide, quantize, dequantize,
    divide, quantize: what QDQ models put between int8 layers) prints as vector code (8-bit
    loads widened to float32 lanes, the requantize-dequantize round trip, 8-bit stores) with a
    scalar remainder; bit-exact with onnxruntime's float QDQ execution on every ISA."""
    target = ember.Target(f"llvm -isa={isa}")
    if target.isa != isa:
        pytest.skip(f"this machine / compiler cannot run {isa} code")
    n = 1000  # not a multiple of the vector width: the scalar remainder runs too
    np_t = np.uint8 if dtype == TensorProto.UINT8 else np.int8
    zp = 128 if dtype == TensorProto.UINT8 else 3
    init = [numpy_helper.from_array(np.array(v, t), name) for name, v, t in
            [("s0", 0.05, np.float32), ("z0", zp, np_t), ("s1", 0.03, np.float32),
             ("z1", zp - 5, np_t), ("s2", 0.021, np.float32), ("z2", zp + 2, np_t),
             ("c1", 0.7, np.float32), ("c2", -1.9, np.float32)]]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s0", "z0"], ["a"]),
             helper.make_node("Div", ["a", "c1"], ["b"]),
             helper.make_node("QuantizeLinear", ["b", "s1", "z1"], ["bq"]),
             helper.make_node("DequantizeLinear", ["bq", "s1", "z1"], ["c"]),
             helper.make_node("Div", ["c", "c2"], ["d"]),
             helper.make_node("QuantizeLinear", ["d", "s2", "z2"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", dtype, [1, n])],
                          [helper.make_tensor_value_info("y", dtype, [1, n])], init)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    info = np.iinfo(np_t)
    x = {"x": np.random.default_rng(0).integers(info.min, info.max + 1, (1, n)).astype(np_t)}
    got = ember.compile(model, target=f"llvm -isa={isa}").run(x)[0]
    want = qdq_reference(model.SerializeToString(), x)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("quantize", [None, "bf16", "fp16"])
def test_calibration_without_int8_is_an_input_error(quantize):
    """A calibration set with no int8 quantization would be silently ignored: refused."""
    with pytest.raises(InputError, match="used only by quantize='int8'"):
        ember.compile(small_cnn(), quantize=quantize, calibration=feeds(2))


def test_cli_compile_calibration_without_int8_exits_2(tmp_path, capsys):
    from ember.cli import main
    src = tmp_path / "m.onnx"
    onnx.save(small_cnn(), src)
    np.savez(tmp_path / "cal.npz",
             x=np.random.default_rng(0).normal(0, 1, (2,) + SHAPE).astype(np.float32))
    assert main(["compile", str(src), "--calibration", str(tmp_path / "cal.npz"),
                 "-o", str(tmp_path / "m.ember")]) == 2
    assert "used only by quantize='int8'" in capsys.readouterr().err
    assert not (tmp_path / "m.ember").exists()
