"""The CUDA target without a GPU: the CUDA C printer (golden text in ``tests/golden/cuda/``;
regenerate with ``EMBER_UPDATE_GOLDEN=1`` and review the diff), its shared base with the WGSL
printer, the NVRTC / nvJitLink build (PTX, sm_90 and sm_80 cubins, ptxas resources), its errors,
CUDA artifacts, and the runtime's no-GPU ``DeviceError``. Whole models: ``test_cuda_models.py``.
"""

import ctypes.util
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra (cuda-bindings, NVRTC) is not "
                                                  "installed")

import ember  # noqa: E402
from ember.codegen.c import CFunctionPrinter  # noqa: E402
from ember.codegen.cstyle import CStylePrinter  # noqa: E402
from ember.codegen.cuda import CUDAPrinter, emit_cuda, module_source  # noqa: E402
from ember.codegen.nvrtc import (build_cuda, check_resources, include_dir,  # noqa: E402
                                 parse_ptxas_log)
from ember.codegen.wgsl import WGSLPrinter  # noqa: E402
from ember.errors import CodegenError, DeviceError  # noqa: E402
from ember.graph.lower import lower_binding  # noqa: E402
from ember.runtime.cuda import CUDAModel  # noqa: E402
from ember.target import Target  # noqa: E402
from ember.testing import op_module  # noqa: E402
from ember.tir.schedule.rules import schedule_default  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "cuda"
H200 = "nvidia/h200"


def kernel(op, inputs, attrs=None):
    m = op_module(op, inputs, attrs or {})
    return lower_binding(m.main.bindings[0], "k0", m)


def f32(*shape):
    return np.zeros(shape, np.float32)


def cuda_kernels(op, inputs, attrs=None, target=H200):
    k = schedule_default(kernel(op, inputs, attrs), target)
    return emit_cuda(k, target)[1]


def small_cnn() -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


# the printers share one base ----------------------------------------------------------------

def test_cuda_and_wgsl_printers_share_their_base():
    assert issubclass(CUDAPrinter, CStylePrinter) and issubclass(WGSLPrinter, CStylePrinter)
    # the walk over expressions and statements is the base's in both: no twin printer
    for method in ("expr", "stmt", "serial_loop", "access"):
        assert getattr(WGSLPrinter, method) is getattr(CStylePrinter, method) or method == "stmt"
    # (CUDA's stmt only rewrites warp-sized reduction trees, then calls the base's)
    for method in ("expr", "serial_loop", "binop"):
        assert getattr(CUDAPrinter, method) is getattr(CFunctionPrinter, method)
    assert CUDAPrinter.expr is CStylePrinter.expr and issubclass(CUDAPrinter, CFunctionPrinter)
    # thread-bound loops too: only the dialect's declaration differs
    assert CUDAPrinter.thread_loop is WGSLPrinter.thread_loop is CStylePrinter.thread_loop
    assert CUDAPrinter.dialect.thread_decl != WGSLPrinter.dialect.thread_decl
    assert CUDAPrinter.dialect.name == "cuda" and WGSLPrinter.dialect.name == "wgsl"
    assert CUDAPrinter.dialect.barrier == "__syncthreads();"


# golden text ----------------------------------------------------------------------------------

GOLDEN_CASES = {
    "softmax_4x8": ("nn.softmax", [f32(4, 8)], {"axis": -1}),
    "softmax_2x256_cooperative": ("nn.softmax", [f32(2, 256)], {"axis": -1}),
    "matmul_8x16x4": ("matmul", [f32(8, 16), f32(16, 4)], {}),
    "conv_1x2x5x5_k3": ("nn.conv", [f32(1, 2, 5, 5), f32(3, 2, 3, 3)], {"pads": [1, 1, 1, 1]}),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_cuda(name):
    op, inputs, attrs = GOLDEN_CASES[name]
    ks = cuda_kernels(op, inputs, attrs)
    text = "\n".join(f"// device kernel {n}: grid {k.grid}, block {k.block}, args {k.args}\n"
                     f"{k.source}" for n, k in enumerate(ks))
    path = GOLDEN / f"{name}.cu"
    if os.environ.get("EMBER_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with EMBER_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name}: the CUDA C changed (see {path})"
    # and it builds: PTX plus cubins for sm_90 and sm_80, every kernel reported, no spills
    b = build_cuda(module_source(ks), ["sm_90", "sm_80"])
    assert ".visible .entry" in b.ptx and b.ptx.count(".entry") == len({k.name for k in ks})
    for arch in ("sm_80", "sm_90"):
        assert b.cubins[arch][:4] == b"\x7fELF"
        assert set(b.resources[arch]) == {k.name for k in ks}
        assert all(r.spill_bytes == 0 and 0 < r.registers <= 255
                   for r in b.resources[arch].values())


def test_thread_index_guard_and_launch_bounds():
    # 1000 elements in blocks of 256: the last block's threads past the end are masked
    (k,) = cuda_kernels("nn.relu", [f32(1000)])
    assert k.grid == (4, 1, 1) and k.block == (256, 1, 1)
    assert "__launch_bounds__(256)" in k.source
    assert "(int64_t)blockIdx.x" in k.source and "(int64_t)threadIdx.x" in k.source
    assert "if (" in k.source


def test_shared_memory_and_barrier_are_printed(monkeypatch):
    from ember.tir.expr import Const, Load
    from ember.tir.gpu import DeviceKernel
    from ember.tir.stmt import Allocate, Barrier, Buffer, For, PrimFunc, Store, seq
    from ember.tir.expr import Var
    a = Buffer("a", (64,), "float32")
    out = Buffer("out", (64,), "float32")
    sh = Buffer("sh", (64,), "float32", scope="shared")
    tx = Var("tx", "int64")
    body = For(tx, 64, seq([Store(sh, [tx], Load(a, [tx])), Barrier(),
                            Store(out, [tx], Load(sh, [Const(63, "int64") - tx]))]),
               "thread_binding", {"thread_tag": "threadIdx.x"})
    func = PrimFunc("rev", [a, out], Allocate(sh, body), {"num_inputs": 1})
    k = CUDAPrinter(func, [], DeviceKernel(Allocate(sh, body), (1, 1, 1), (64, 1, 1)),
                    Target(H200)).kernel_source()
    assert "__shared__ float ws0[64];" in k.source or "__shared__ float" in k.source
    assert "__syncthreads();" in k.source and k.shared_bytes == 256
    b = build_cuda(module_source([k]), ["sm_90"])
    assert b.resources["sm_90"][k.name].shared_bytes == 256


def test_float16_kernels_use_cuda_fp16():
    assert include_dir() is not None, "cuda_fp16.h: pip install nvidia-cuda-runtime"
    ks = cuda_kernels("add", [np.zeros(8, np.float16)] * 2)
    src = module_source(ks)
    assert "#include <cuda_fp16.h>" in src and "__half* __restrict__" in src
    assert "__float2half_rn" in src and "__half2float" in src
    assert build_cuda(src, ["sm_80"]).cubins["sm_80"]


# build errors ---------------------------------------------------------------------------------

def test_nvrtc_error_is_a_codegen_error_with_the_source():
    src = 'extern "C" __global__ void broken(float* p0) { p0[0] = undeclared_name; }\n'
    with pytest.raises(CodegenError, match="NVRTC rejected the CUDA C") as e:
        build_cuda(src, ["sm_90"], name="broken")
    assert e.value.source == src
    assert "undeclared_name" in str(e.value) and "identifier" in str(e.value)


def test_kernel_over_the_register_limit_is_refused_naming_it(monkeypatch):
    ks = cuda_kernels("nn.softmax", [f32(4, 8)], {"axis": -1})
    b = build_cuda(module_source(ks), ["sm_90"])
    used = {k.name: b.resources["sm_90"][k.name].registers for k in ks}
    check_resources(b, {k.name: ("node softmax", 32) for k in ks}, Target(H200))  # fits
    import ember.codegen.nvrtc as nv
    top = max(used.values())
    monkeypatch.setattr(nv, "MAX_REGISTERS", top - 1)
    with pytest.raises(CodegenError, match=f"of node softmax on sm_90: {top} registers per "
                                           f"thread, above the limit of {top - 1}") as e:
        nv.check_resources(b, {k.name: ("node softmax", 32) for k in ks}, Target(H200))
    named = str(e.value).split()[2]
    assert used[named] == top  # the kernel named is one over the limit


def test_ptxas_report_is_parsed():
    log = ("ptxas info    : Compiling entry function 'k_1' for 'sm_90'\n"
           "ptxas info    : Function properties for k_1\n"
           "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 512 bytes smem\n")
    r = parse_ptxas_log(log)["k_1"]
    assert (r.registers, r.spill_bytes, r.shared_bytes, r.stack_bytes) == (40, 12, 512, 16)


def test_builds_are_cached_by_content(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    ks = cuda_kernels("nn.relu", [f32(100)])
    src = module_source(ks)
    b1 = build_cuda(src, ["sm_90"])
    entries = sorted(p.name for p in tmp_path.iterdir())
    import ember.codegen.nvrtc as nv
    monkeypatch.setattr(nv, "_nvrtc_ptx", lambda *a: pytest.fail("rebuilt a cached module"))
    b2 = build_cuda(src, ["sm_90"])
    assert b2.cubins == b1.cubins and b2.ptx == b1.ptx
    assert sorted(p.name for p in tmp_path.iterdir()) == entries


def test_nvrtc_writes_only_into_its_own_buffers(monkeypatch, tmp_path):
    """NVRTC fills output buffers in place; the one-byte buffer of an empty log must not be the
    interpreter's shared b" " (it was: every b" " in the process became b"\\x00", and Pillow's
    PPM reader, which splits on b" ", failed in later tests)."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))  # NVRTC runs: nothing is cached
    build_cuda(module_source(cuda_kernels("nn.relu", [f32(7)])), ["sm_90"])
    assert b" " == bytes([32]) and b" ".isspace()


# models, artifacts, the runtime without a GPU -------------------------------------------------

def test_compile_save_load_without_a_gpu(tmp_path):
    cm = ember.compile(small_cnn(), target=H200)
    assert isinstance(cm, CUDAModel) and cm.info["archs"] == ["sm_90"]
    assert cm.info["num_launches"] >= cm.info["num_kernels"] >= 2  # conv+relu fused
    assert all(r.spill_bytes == 0 for r in cm.binary.resources["sm_90"].values())
    path = tmp_path / "m.ember"
    cm.save(path)
    m2 = ember.load(path)
    assert isinstance(m2, CUDAModel)
    assert m2.binary.cubins == cm.binary.cubins and m2.binary.ptx == cm.binary.ptx
    assert m2.steps == cm.steps and m2.input_shapes == {"x": (1, 3, 8, 8)}
    for n, v in cm.params.items():
        np.testing.assert_array_equal(m2.params[n], v)


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None,
                    reason="an NVIDIA driver is installed: the no-GPU path cannot be seen here")
def test_run_without_a_driver_is_a_device_error():
    cm = ember.compile(small_cnn(), target=H200)
    with pytest.raises(DeviceError, match="no CUDA driver / no GPU"):
        cm.run({"x": np.zeros((1, 3, 8, 8), np.float32)})


def test_run_without_a_device_is_a_device_error(monkeypatch):
    from cuda.bindings import driver as cu
    monkeypatch.setattr(cu, "cuInit", lambda flags: (cu.CUresult.CUDA_ERROR_NO_DEVICE,))
    cm = ember.compile(small_cnn(), target=H200)
    with pytest.raises(DeviceError, match="no CUDA driver / no GPU: cuInit failed with "
                                          "CUDA_ERROR_NO_DEVICE"):
        cm.run({"x": np.zeros((1, 3, 8, 8), np.float32)})


def test_cli_compile_for_h200(tmp_path, capsys):
    from ember.cli import main
    src = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), src)
    out = tmp_path / "m.ember"
    assert main(["compile", str(src), "--target", H200, "-o", str(out)]) in (0, None)
    assert "cuda -arch=sm_90" in capsys.readouterr().out
    m = ember.load(out)
    assert isinstance(m, CUDAModel) and "sm_90" in m.binary.cubins
