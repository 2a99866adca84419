"""Offloading a quantized CNN to the NPU (``ember.build(..., "npu")``, ``ember.compile(...,
target="npu", quantize="int8")``, ember.npu.offload): a small CNN (convs + ReLU + a dense,
built with onnx.helper, quantized with ``ember.quantize`` on random calibration data) gives
identical int8 outputs on the NPU and on the CPU's int8 kernels with the integer requantize,
both within a few quantization steps of onnxruntime's float result; a layer the NPU cannot run
(dilation 2) falls back to the CPU and is reported; a config whose scratchpads hold no tile
of a layer is reported as a fallback naming the scratchpad."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.frontend.onnx import from_onnx


def _cnn(dilated: bool = False, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, *shape, scale=None):
        fan = int(np.prod(shape[1:]))
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * (scale or np.sqrt(2.0 / fan))).astype(np.float32),
            name))
        return name

    def conv(x, y, cin, cout, k, stride=1, pad=0, dil=1):
        nodes.append(helper.make_node(
            "Conv", [x, w(y + "_w", cout, cin, k, k), w(y + "_b", cout, scale=0.1)], [y + "_c"],
            strides=[stride, stride], pads=[pad] * 4, dilations=[dil, dil]))
        nodes.append(helper.make_node("Relu", [y + "_c"], [y]))
        return y

    h = conv("x", "c1", 3, 16, 3, pad=1)
    h = conv(h, "c2", 16, 32, 3, stride=2, pad=1)
    if dilated:
        h = conv(h, "c3", 32, 32, 3, pad=2, dil=2)
    h = conv(h, "c4", 32, 16, 1)
    nodes.append(helper.make_node("Flatten", [h], ["flat"], axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", w("fc_w", 10, 16 * 6 * 6), w(
        "fc_b", 10, scale=0.1)], ["y"], transB=1))
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, (1, 3, 12, 12))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, (1, 10))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(n, seed):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(n)]


def _quantized(model):
    mod, params = from_onnx(model)
    return ember.quantize(mod, params, _feeds(8, 1), per_channel=False,
                          symmetric_activations=True, progress=False)


@pytest.mark.parametrize("dilated", [False, True])
def test_npu_and_cpu_int8_identical(dilated):
    import onnxruntime as ort
    model = _cnn(dilated)
    qmod, qparams = _quantized(model)
    npu_m = ember.build(qmod, "npu", dict(qparams))
    with ember.PassContext(config={"RealizeQnn.requantize": "fixed"}):
        cpu_m = ember.build(qmod, "llvm", dict(qparams))
    info = npu_m.info["npu"]
    offloaded = [r["layer"] for r in info["layers"]]
    assert len(offloaded) == 4  # c1, c2, c4, fc
    if dilated:
        assert len(info["fallback"]) == 1 and "dilation" in info["fallback"][0]["reason"]
    else:
        assert info["fallback"] == []
    assert info["cycles"] == sum(r["cycles"] for r in info["layers"]) > 0
    assert 0 < info["utilization"] <= 1
    for r in info["layers"]:
        assert r["macs"] > 0 and r["dma_bytes"] > 0 and 0 < r["utilization"] <= 1
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    # the output's quantization step: the scale of the last qnn.quantize
    out_scale = float(np.asarray([b for b in qmod["main"].bindings
                                  if b.call.op == "qnn.quantize"][-1].call.args[1].data))
    for f in _feeds(3, 5):
        y_npu = npu_m.run(f)[0]
        y_cpu = cpu_m.run(f)[0]
        np.testing.assert_array_equal(y_npu, y_cpu)  # identical (dequantized int8) outputs
        np.testing.assert_allclose(np.round(y_npu / out_scale), y_npu / out_scale, atol=1e-3)
        want = sess.run(None, f)[0]
        # the error of four int8 layers accumulated (measured: up to 7 steps on these seeds);
        # values beyond the calibrated range saturate at the int8 ends
        sat = np.abs(want) >= 127 * out_scale
        assert np.max(np.abs(y_npu - want)[~sat]) <= 8 * out_scale
        assert np.all(np.isin(np.round(np.abs(y_npu[sat]) / out_scale), (127, 128)))
        assert np.corrcoef(y_npu.ravel(), want.ravel())[0, 1] > 0.98


def test_compile_target_npu_quantize(tmp_path):
    model = _cnn()
    p = tmp_path / "cnn.onnx"
    onnx.save(model, p)
    m = ember.compile(str(p), target="npu", quantize="int8", calibration=_feeds(4, 2))
    info = m.info["npu"]
    assert len(info["layers"]) == 4 and not info["fallback"]
    assert {"layer", "shape", "cycles", "macs", "utilization", "dma_bytes",
            "stall_cycles"} <= set(info["layers"][0])
    y = m.run(_feeds(1, 9)[0])[0]
    assert y.shape == (1, 10) and np.all(np.isfinite(y))
    # the whole model's NPU timeline: the layers back to back, each instruction once on its unit
    trace = m.chrome_trace()["traceEvents"]
    clock = info["clock_mhz"]
    spans = [e for e in trace if e["ph"] == "X" and e["tid"] == 3]
    assert [e["name"] for e in spans] == [r["layer"] for r in info["layers"]]
    assert [e["args"]["cycles"] for e in spans] == [r["cycles"] for r in info["layers"]]
    assert sum(e["args"]["cycles"] for e in spans) == info["cycles"]
    steps = [it for it in m.items if hasattr(it, "stats")]
    for span, step in zip(spans, steps):
        ev = [e for e in trace if e["ph"] == "X" and e["tid"] < 3
              and e["args"]["layer"] == span["name"]]
        assert len(ev) == len(step.kernel.program.instrs)
        start, end = span["args"]["start_cycle"], span["args"]["start_cycle"] + span["args"]["cycles"]
        assert all(start <= round(e["ts"] * clock) and round((e["ts"] + e["dur"]) * clock) <= end
                   for e in ev)


def test_scratchpad_too_small_falls_back(tmp_path):
    """A config whose weight scratchpad holds one 16x16 block: valid, but no tile of a 3x3
    layer fits it (each half needs KH*KW blocks): those layers fall back, naming it."""
    from ember.npu import load_config
    cfg = json.loads(load_config.__globals__["DEFAULT_CONFIG"].read_text())
    cfg["WGT_BUFF_BYTES"] = 256
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps(cfg))
    qmod, qparams = _quantized(_cnn())
    m = ember.build(qmod, f"npu -config={p}", dict(qparams))
    reasons = [f["reason"] for f in m.info["npu"]["fallback"]]
    assert reasons and all("TargetError" in r and "wgt" in r for r in reasons)
    with ember.PassContext(config={"RealizeQnn.requantize": "fixed"}):
        cpu_m = ember.build(qmod, "llvm", dict(qparams))
    f = _feeds(1, 4)[0]
    np.testing.assert_array_equal(m.run(f)[0], cpu_m.run(f)[0])


def test_imported_ort_qdq_model_on_npu(tmp_path):
    """An onnxruntime ``quantize_static`` QDQ model (QInt8 symmetric activations, per-tensor
    weights) imported and run with target="npu": identical to the CPU int8 path with the
    integer requantize, and within a few output steps of onnxruntime running the QDQ model."""
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(_feeds(8, 1))

        def get_next(self):
            return next(self.it, None)

    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(_cnn(), src)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    per_channel=False, extra_options={"ActivationSymmetric": True})
    m = ember.compile(str(dst), target="npu")
    assert len(m.info["npu"]["layers"]) == 4, m.info["npu"]["fallback"]
    with ember.PassContext(config={"RealizeQnn.requantize": "fixed"}):
        cpu_m = ember.compile(str(dst), target="llvm")
    sess = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    for f in _feeds(3, 6):
        y = m.run(f)[0]
        np.testing.assert_array_equal(y, cpu_m.run(f)[0])
        want = sess.run(None, f)[0]
        step = np.min(np.diff(np.unique(want)))
        assert np.max(np.abs(y - want)) <= 3 * step
    # the same model through `ember profile --target npu`: the table lists each offloaded layer
    from ember.cli import main
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["profile", str(dst), "--target", "npu", "--trace",
                     str(tmp_path / "npu.json")]) == 0
    out = buf.getvalue()
    for r in m.info["npu"]["layers"]:
        assert r["layer"][:33] in out and str(r["cycles"]) in out
    assert f"total: {m.info['npu']['cycles']} cycles" in out
    written = json.loads((tmp_path / "npu.json").read_text())["traceEvents"]
    assert [e["name"] for e in written if e["ph"] == "X" and e["tid"] == 3] == \
        [r["layer"] for r in m.info["npu"]["layers"]]
