"""Tensor cores on CUDA without a GPU (``rules/cuda_tensorcore.py``, ``codegen/cuda_wmma.py``).

- The schedule is checked on the CPU: the scheduled kernel, its GPU loops made serial and the
  ``wmma`` call printed as the intrinsic's C specification (``cuda_wmma._c_reference``: the
  warp's tile with float16-rounded operands and float32 sums), runs through the C backend and
  must equal NumPy's GEMM of the float16-rounded operands plus the epilogue (matmul + bias +
  ReLU, transposed dense weights, batch matmul with a broadcast operand, ``K`` not a multiple of
  16). The tile function's wmma code itself is checked by NVRTC here and by ``bench/gpu.py`` on
  a GPU.
- ``ember.compile(..., quantize="fp16" | "bf16")`` puts a BERT layer's GEMMs on tensor cores;
  every kernel builds to sm_90 and sm_80 cubins without spills; golden CUDA of one tensor-core
  kernel (``tests/golden/cuda/matmul_fp16_tensorcore.cu``).
"""

import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra (cuda-bindings, NVRTC) is not "
                                                  "installed")

import ember  # noqa: E402
import ember.driver as driver  # noqa: E402
from ember.codegen.cuda_wmma import register_c_reference  # noqa: E402
from ember.codegen.nvrtc import build_cuda  # noqa: E402
from ember.runtime.kernel import compile_prim_func  # noqa: E402
from ember.target import Target  # noqa: E402
from ember.tir.stmt import Allocate, Block, For, IfThenElse, KernelCall, PrimFunc, Seq  # noqa
from ember.tir.schedule.rules import cuda_tensorcore_rule  # noqa: E402
from ember.tir.schedule.rules.cuda_tensorcore import tensorcore_gemm  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "cuda"


def _model(nodes, inputs, output, inits, opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                       for n, s in inputs],
                          [helper.make_tensor_value_info(output[0], TensorProto.FLOAT,
                                                         output[1])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _r16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


rng = np.random.default_rng(0)
W1 = rng.standard_normal((40, 32)).astype(np.float32)
B1 = rng.standard_normal(32).astype(np.float32)
W2 = rng.standard_normal((48, 64)).astype(np.float32)  # Gemm transB: (N, K)
Y3 = rng.standard_normal((2, 32, 16)).astype(np.float32)

W4 = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
B4 = B1  # (32,): the test feeds weights by shape
W5 = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)


def _conv_ref(x, w, stride, pad):
    """NCHW convolution of float16-rounded operands (float64 sums)."""
    x = np.pad(_r16(x).astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    w = _r16(w).astype(np.float64)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


CASES = {
    # implicit GEMM through im2col: 3x3 stride 2 zero-padded, bias, ReLU (N = 7x7 = 49 padded)
    "conv3x3_s2_bias_relu": (
        lambda: _model([helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[1, 1, 1, 1],
                                         strides=[2, 2]),
                        helper.make_node("Relu", ["y"], ["o"])],
                       [("x", [1, 16, 14, 14])], ("o", [1, 32, 7, 7]), {"W": W4, "B": B4}),
        [(1, 16, 14, 14)],
        lambda x: np.maximum(_r16(_conv_ref(x, W4, 2, 0 + 1) + _r16(B4)[None, :, None, None]),
                             0)),
    # 1x1 convolution, batch 2, 5x5 columns (N = 25: not a multiple of 16, im2col pads it)
    "conv1x1_batch2": (
        lambda: _model([helper.make_node("Conv", ["x", "W"], ["o"])],
                       [("x", [2, 8, 5, 5])], ("o", [2, 16, 5, 5]), {"W": W5}),
        [(2, 8, 5, 5)],
        lambda x: _conv_ref(x, W5, 1, 0)),
    # x (2, 32, 40) @ W (40, 32) + b, ReLU: K = 40 is not a multiple of 16
    "matmul_bias_relu": (
        lambda: _model([helper.make_node("MatMul", ["x", "W"], ["y"]),
                        helper.make_node("Add", ["y", "b"], ["z"]),
                        helper.make_node("Relu", ["z"], ["o"])],
                       [("x", [2, 32, 40])], ("o", [2, 32, 32]), {"W": W1, "b": B1}),
        [(2, 32, 40)],
        lambda x: np.maximum(_r16(_r16(x) @ _r16(W1)) + _r16(B1), 0)),
    # dense with transposed weights (Gemm transB=1), M = 16: one fragment row per warp tile
    "gemm_transb": (
        lambda: _model([helper.make_node("Gemm", ["x", "W"], ["o"], transB=1)],
                       [("x", [16, 64])], ("o", [16, 48]), {"W": W2}),
        [(16, 64)],
        lambda x: _r16(x) @ _r16(W2).T),
    # batch matmul, the second operand a constant shared by... every batch (broadcast)
    "batch_matmul_broadcast": (
        lambda: _model([helper.make_node("MatMul", ["x", "Y"], ["o"])],
                       [("x", [3, 2, 16, 32])], ("o", [3, 2, 16, 16]), {"Y": Y3}),
        [(3, 2, 16, 32)],
        lambda x: _r16(x) @ _r16(Y3)),
}


def _serial(s):
    """``s`` with every GPU thread loop serial (the CPU check)."""
    if isinstance(s, For):
        return For(s.var, s.extent, _serial(s.body), "serial", {})
    if isinstance(s, Seq):
        return Seq([_serial(x) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _serial(s.body))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, _serial(s.then), _serial(s.else_) if s.else_ else None)
    if isinstance(s, Block):
        return Block(s.name, s.iter_vars, s.bindings, _serial(s.body), s.init, s.predicate,
                     s.annotations)
    return s


def _calls(s, out):
    if isinstance(s, KernelCall):
        out.append(s)
    for c in (getattr(s, "body", None), getattr(s, "then", None), getattr(s, "else_", None)):
        if c is not None:
            _calls(c, out)
    for c in getattr(s, "stmts", ()):
        _calls(c, out)
    return out


def _scheduled_kernels(monkeypatch, model, quantize="fp16", target="nvidia/h200"):
    """``(compiled model, [scheduled kernel])`` of ``ember.compile`` for ``target``."""
    seen = []
    orig = driver.schedule_kernels

    def spy(kernels, tgt, level, *rest):
        out = orig(kernels, tgt, level, *rest)
        seen.extend(out)
        return out
    monkeypatch.setattr(driver, "schedule_kernels", spy)
    monkeypatch.setenv("EMBER_NO_MODEL_CACHE", "1")  # compile for real: the spy sees kernels
    cm = ember.compile(model, target=target, quantize=quantize)
    return cm, seen


@pytest.mark.parametrize("case", sorted(CASES))
def test_tensorcore_schedule_computes_the_gemm(monkeypatch, case):
    make, shapes, ref = CASES[case]
    cm, kernels = _scheduled_kernels(monkeypatch, make())
    tc = [k for k in kernels if k.attrs.get("schedule_rule") == "cuda_tensorcore_rule"]
    assert len(tc) == 1 and cm.info["tensor_core_kernels"] == 1
    k = tc[0]
    calls = _calls(k.body, [])
    assert calls and all(c.key[0] == "wmma" and c.key[1] == "float16" for c in calls)
    assert "ember_wmma_f16" in cm.source and "wmma::mma_sync" in cm.source
    # the same schedule on the CPU, with the intrinsic's C specification
    register_c_reference()
    cpu = PrimFunc(k.name, list(k.params), _serial(k.body), dict(k.attrs))
    x = rng.standard_normal(shapes[0]).astype(np.float32)
    x16 = _r16(x)  # ToMixedPrecision's producer rounds the activations before the GEMM
    args = []
    for p in k.params[:-1]:
        if tuple(p.shape) == tuple(shapes[0]) and p.dtype == "float32":
            args.append(x16)
        else:  # the float16 weights / bias the graph bound (by shape)
            w = {W1.shape: W1, W2.shape: W2, Y3.shape: Y3, B1.shape: B1, W4.shape: W4,
                 W5.shape: W5}[tuple(p.shape)]
            args.append(w.astype(np.float16) if p.dtype == "float16" else _r16(w))
    got = compile_prim_func(cpu, "llvm").run(args)[0].astype(np.float32)
    want = ref(x)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-2)


def test_rule_needs_sm80_low_precision_and_divisible_tiles(monkeypatch):
    make = CASES["matmul_bias_relu"][0]
    _, kernels = _scheduled_kernels(monkeypatch, make())
    k = next(k for k in kernels if k.attrs.get("tensor_cores"))
    assert k.attrs["tensor_cores"] == [{"m": 32, "n": 32, "k": 40, "dtype": "float16",
                                        "im2col": False}]
    _, kc = _scheduled_kernels(monkeypatch, CASES["conv3x3_s2_bias_relu"][0]())
    (conv,) = [k for k in kc if k.attrs.get("tensor_cores")]
    assert conv.attrs["tensor_cores"] == [{"m": 32, "n": 49, "k": 144, "dtype": "float16",
                                           "im2col": True}]
    # float32 compile: no tensor cores (no TF32), sm_75 (T4): none either
    _, f32 = _scheduled_kernels(monkeypatch, make(), quantize=None)
    assert not any(k.attrs.get("tensor_cores") for k in f32)
    _, t4 = _scheduled_kernels(monkeypatch, make(), target="nvidia/nvidia-t4")
    assert not any(k.attrs.get("tensor_cores") for k in t4)
    # M = 1 (a batch-1 dense layer) is not a multiple of 16: the GPU fallback schedules it
    m1 = _model([helper.make_node("MatMul", ["x", "W"], ["o"])], [("x", [1, 40])],
                ("o", [1, 32]), {"W": W1})
    cm, ks = _scheduled_kernels(monkeypatch, m1)
    assert cm.info["tensor_core_kernels"] == 0 and not tensorcore_gemm(ks[0])
    assert cuda_tensorcore_rule(ks[0], Target("nvidia/h200")) is None


@pytest.mark.parametrize("quantize", ["fp16", "bf16"])
def test_bert_layer_gemms_on_tensor_cores_build_for_sm90_and_sm80(quantize):
    from ember.testing import models as M
    cm = ember.compile(M.bert_encoder(num_layers=1, hidden=64, heads=2, seq=16),
                       target="nvidia/h200", quantize=quantize)
    # Q, K, V, output projection, the two FFN GEMMs and the two attention batch matmuls
    assert cm.info["tensor_core_kernels"] >= 6
    low = {"fp16": "f16", "bf16": "bf16"}[quantize]
    assert f"ember_wmma_{low}_" in cm.source
    assert ("cuda_bf16.h" in cm.source) == (quantize == "bf16")
    b = build_cuda(cm.source, ["sm_90", "sm_80"])
    for arch in ("sm_80", "sm_90"):
        assert max(r.spill_bytes for r in b.resources[arch].values()) == 0
        assert max(r.registers for r in b.resources[arch].values()) <= 255
    assert "wmma.mma.sync" in b.ptx


def test_golden_tensorcore_kernel(monkeypatch):
    make = CASES["matmul_bias_relu"][0]
    cm, _ = _scheduled_kernels(monkeypatch, make())
    src = cm.source
    start = src.index("static __device__ __forceinline__ void ember_wmma_")
    kern = [part for part in src.split('extern "C" __global__') if "ember_wmma_f16_" in part
            and "__launch_bounds__" in part]
    text = src[start:src.index("}\n", src.index("__syncwarp();\n}", start)) + 2] + \
        '\nextern "C" __global__' + kern[0]
    path = GOLDEN / "matmul_fp16_tensorcore.cu"
    if os.environ.get("EMBER_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with EMBER_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"the tensor-core CUDA C changed (see {path})"


def test_bfloat16_model_saves_and_loads_without_a_gpu(tmp_path):
    cm = ember.compile(CASES["gemm_transb"][0](), target="nvidia/h200", quantize="bf16")
    assert cm.info["tensor_core_kernels"] == 1 and "ember_wmma_bf16_" in cm.source
    (w,) = [v for v in cm.params.values() if v.ndim == 2]
    assert str(w.dtype) == "bfloat16"
    np.testing.assert_array_equal(w.astype(np.float32), W2.astype(w.dtype).astype(np.float32))
    cm.save(tmp_path / "m.ember")
    m = ember.load(tmp_path / "m.ember")
    for k, v in cm.params.items():  # same dtype and bits after the round trip
        assert m.params[k].dtype == v.dtype
        np.testing.assert_array_equal(m.params[k].view(np.uint16 if v.itemsize == 2 else
                                                       v.dtype), v.view(np.uint16 if
                                                                        v.itemsize == 2
                                                                        else v.dtype))
    assert m.binary.cubins["sm_90"] == cm.binary.cubins["sm_90"]


def test_cli_compile_fp16_for_h200(tmp_path, capsys):
    import onnx
    from ember.cli import main
    src = tmp_path / "g.onnx"
    onnx.save(CASES["gemm_transb"][0](), src)
    out = tmp_path / "m.ember"
    assert main(["compile", str(src), "--target", "nvidia/h200", "--quantize", "fp16",
                 "-o", str(out)]) in (0, None)
    m = ember.load(out)
    assert m.info["tensor_core_kernels"] == 1 and "wmma::mma_sync" in m.source


def test_mma_header_from_a_cuda_toolkit_when_the_wheel_has_none(monkeypatch, tmp_path):
    """``crt/mma.h`` comes from the ``nvidia-cuda-crt`` wheel, else ``$CUDA_HOME/include``
    (a GPU image with the toolkit but not the wheel); with neither, NVRTC's error says what to
    install."""
    import shutil

    import ember.codegen.nvrtc as nv
    from ember.errors import CodegenError
    inc = nv.include_dir()
    fake = tmp_path / "wheel" / "include"  # the runtime wheel's headers without crt/
    shutil.copytree(inc, fake, ignore=shutil.ignore_patterns("crt"))
    toolkit = tmp_path / "toolkit" / "include" / "crt"
    toolkit.mkdir(parents=True)
    shutil.copy(Path(inc) / "crt" / "mma.h", toolkit)
    for name in ("mma.hpp",):
        if (Path(inc) / "crt" / name).exists():
            shutil.copy(Path(inc) / "crt" / name, toolkit)
    monkeypatch.setattr(nv, "include_dir", lambda: str(fake))
    nv.crt_include_dir.cache_clear()
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "toolkit"))
    try:
        assert nv.crt_include_dir() == str(tmp_path / "toolkit" / "include")
        src = ("#include <cuda_fp16.h>\n#include <mma.h>\nextern \"C\" __global__ void k(float* c)"
               " { nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> f; "
               "nvcuda::wmma::fill_fragment(f, 1.0f); "
               "nvcuda::wmma::store_matrix_sync(c, f, 16, nvcuda::wmma::mem_row_major); }\n")
        assert "wmma" in nv.build_cuda(src, ["sm_90"], "crt_test").ptx
        monkeypatch.setenv("CUDA_HOME", str(tmp_path / "none"))
        monkeypatch.setattr(os.path, "exists", lambda p, _e=os.path.exists: False
                            if p.endswith("crt/mma.h") else _e(p))
        nv.crt_include_dir.cache_clear()
        with pytest.raises(CodegenError, match="pip install nvidia-cuda-crt"):
            nv.build_cuda(src + "// no header\n", ["sm_90"], "crt_test")
    finally:
        nv.crt_include_dir.cache_clear()
