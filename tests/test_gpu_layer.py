"""The GPU layer without a device: targets and tags, the ``bind`` primitive's preconditions,
the verify-GPU-kernel pass, the WGSL legalization's refusals, the per-target TIR pass lists,
and golden text of scheduled loop IR and WGSL (``tests/golden/webgpu/``; regenerate with
``EMBER_UPDATE_GOLDEN=1`` and review the diff)."""

import os
from pathlib import Path

import numpy as np
import pytest

from ember.codegen.wgsl import emit_wgsl
from ember.errors import CodegenError, ScheduleError, TargetError
from ember.graph.lower import lower_binding
from ember.target import Target
from ember.testing import op_module
from ember.tir.expr import Var
from ember.tir.pipeline import PASSES
from ember.tir.schedule import Schedule, Trace
from ember.tir.schedule.rules import schedule_default
from ember.tir.stmt import Allocate, Barrier, Buffer, For, IfThenElse, PrimFunc, Store, seq
from ember.tir.expr import Const, Load, binop
from ember.tir.text import func_text

GOLDEN = Path(__file__).parent / "golden" / "webgpu"


def kernel(op, inputs, attrs=None):
    m = op_module(op, inputs, attrs or {})
    return lower_binding(m.main.bindings[0], "k0", m)


def f32(*shape):
    return np.zeros(shape, np.float32)


# targets -------------------------------------------------------------------------------------

def test_tags_expand_to_attribute_sets():
    assert Target.list_tags() == ["nvidia/a100", "nvidia/h200", "nvidia/nvidia-t4"]
    t4, a100, h200 = (Target(t) for t in ("nvidia/nvidia-t4", "nvidia/a100", "nvidia/h200"))
    assert (t4.kind, t4.attr("arch"), a100.attr("arch"), h200.attr("arch")) == \
        ("cuda", "sm_75", "sm_80", "sm_90")
    for t in (t4, a100, h200):
        assert t.max_threads_per_block == 1024 and t.thread_warp_size == 32
        assert t.max_shared_memory_per_block == 48 * 1024
    assert a100.attr("l2_cache_size_bytes") == 40 * 2**20
    assert Target(str(a100)) == a100  # the printed form parses back


def test_webgpu_target_defaults_and_options():
    t = Target("webgpu")
    assert t.is_gpu and t.max_threads_per_block == 256
    assert t.max_shared_memory_per_block == 16384 and t.max_num_blocks == 65535
    assert Target("webgpu -max_threads_per_block=64").max_threads_per_block == 64
    with pytest.raises(TargetError, match="unknown webgpu target option -mcpu"):
        Target("webgpu -mcpu=native")
    with pytest.raises(TargetError, match="not a GPU"):
        Target("llvm").attr("arch")
    assert str(Target("llvm")) == "llvm -mcpu=native" and not Target("llvm").is_gpu


def test_cuda_build_makes_a_cuda_model():
    pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra is not installed")
    import ember
    from ember.runtime.cuda import CUDAModel
    assert isinstance(ember.build(op_module("nn.relu", [f32(4)]), "nvidia/a100"), CUDAModel)


# bind ----------------------------------------------------------------------------------------

def test_bind_preconditions_name_the_loop():
    sch = Schedule(kernel("sum", [f32(4, 8)], {"axes": [1]}))
    blk = sch.block_names()[0]
    i, k = sch.get_loops(blk)
    with pytest.raises(ScheduleError, match=r"bind of loop \w+ .* reduction iterator"):
        sch.bind(k, "threadIdx.x")
    with pytest.raises(ScheduleError, match="unknown thread tag"):
        sch.bind(i, "warp.x")
    io, ii = sch.split(i, [None, 2])
    sch.bind(ii, "threadIdx.x")
    with pytest.raises(ScheduleError, match="blocks contain threads|already bound"):
        sch.bind(io, "threadIdx.x")
    with pytest.raises(ScheduleError, match="already thread_binding"):
        sch.bind(ii, "blockIdx.x")
    sch.bind(io, "blockIdx.x")
    # the trace replays to the same program
    again = Trace.from_json(sch.trace.to_json()).apply_to(kernel("sum", [f32(4, 8)],
                                                                 {"axes": [1]}))
    assert func_text(again.func) == func_text(sch.func)


def test_block_bound_inside_a_thread_loop_is_refused():
    sch = Schedule(kernel("nn.relu", [f32(4, 8)]))
    i, j = sch.get_loops(sch.block_names()[0])
    sch.bind(i, "threadIdx.x")
    with pytest.raises(ScheduleError, match="blocks contain threads"):
        sch.bind(j, "blockIdx.x")


def test_cross_thread_reduce_preconditions_and_replay():
    func = kernel("sum", [f32(4, 40)], {"axes": [1]})
    sch = Schedule(func)
    blk = sch.block_names()[0]
    i, k = sch.get_loops(blk)
    with pytest.raises(ScheduleError, match="power of two"):
        sch.cross_thread_reduce(k, 48)
    with pytest.raises(ScheduleError, match=r"cross_thread_reduce of loop \w+ \(extent 4\)"):
        sch.cross_thread_reduce(i, 64)
    sch.bind(i, "blockIdx.x")
    sch.cross_thread_reduce(k, 64)
    text = func_text(sch.func)
    assert "alloc reduce_sum_red: shared float32[64]" in text and text.count("barrier") == 7
    again = Trace.from_json(sch.trace.to_json()).apply_to(func)
    assert func_text(again.func) == text


# verify --------------------------------------------------------------------------------------

def test_too_many_threads_is_a_schedule_error_naming_the_loop():
    sch = Schedule(kernel("nn.relu", [f32(4, 1024)]))
    i, j = sch.get_loops(sch.block_names()[0])
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    loop = j.var.name
    with pytest.raises(ScheduleError, match=rf"loop {loop} bound to threadIdx.x \(extent 1024\)"
                                            rf".*max_threads_per_block=256"):
        emit_wgsl(sch.func, "webgpu")
    emit_wgsl(sch.func, "webgpu -max_threads_per_block=1024")  # fits a bigger limit


def _manual(body_fn, shared=None):
    x = Buffer("x", (64,), "float32")
    y = Buffer("y", (64,), "float32")
    tx = Var("tx")
    body = body_fn(x, y, tx)
    loop = For(tx, 64, body, "thread_binding", {"thread_tag": "threadIdx.x"})
    if shared is not None:
        loop = Allocate(shared, loop)
    return PrimFunc("manual", [x, y], loop, {"num_inputs": 1})


def test_barrier_under_divergent_control_flow_is_refused():
    func = _manual(lambda x, y, tx: IfThenElse(binop("lt", tx, Const(32, "int64")),
                                               seq([Barrier(), Store(y, (tx,), Load(x, (tx,)))])))
    with pytest.raises(ScheduleError, match="barrier sits under a condition that differs"):
        emit_wgsl(func, "webgpu")
    ok = _manual(lambda x, y, tx: seq([Barrier(), Store(y, (tx,), Load(x, (tx,)))]))
    assert "workgroupBarrier();" in emit_wgsl(ok, "webgpu")[1][0].source


def test_shared_memory_above_the_limit_is_refused():
    sh = Buffer("tile", (8192,), "float32", scope="shared")
    func = _manual(lambda x, y, tx: seq([Store(sh, (tx,), Load(x, (tx,))), Barrier(),
                                         Store(y, (tx,), Load(sh, (binop("sub", Const(63, "int64"), tx),)))]),
                   shared=sh)
    with pytest.raises(ScheduleError, match=r"shared buffers tile take 32768 bytes.*16384"):
        emit_wgsl(func, "webgpu")
    src = emit_wgsl(func, "webgpu -max_shared_memory_per_block=32768")[1][0].source
    assert "var<workgroup> sh0: array<f32, 8192>;" in src


# legalization --------------------------------------------------------------------------------

def test_float64_is_refused_naming_kernel_and_dtype():
    k = schedule_default(kernel("nn.relu", [np.zeros(4, np.float64)]), "webgpu")
    with pytest.raises(CodegenError, match=r"kernel k0 \(nn.relu\).*dtype float64 has no WGSL"):
        emit_wgsl(k, "webgpu")


def test_large_grid_is_folded_under_the_block_limit():
    k = schedule_default(kernel("nn.relu", [f32(10, 256)]), "webgpu -max_num_blocks=4")
    _, (wk,) = emit_wgsl(k, "webgpu -max_num_blocks=4")
    gx, gy, gz = wk.dispatch
    assert gx <= 4 and gy <= 4 and gx * gy >= 10 and wk.uniform == [gx]
    assert "wid.x + wid.y * launch.grid_x" in wk.source


def test_pass_lists_per_target():
    assert [n for n, _ in PASSES["llvm"]] == ["lower_blocks", "expand_unrolled",
                                              "partition_loops", "row_groups"]
    names = [n for n, _ in PASSES["webgpu"]]
    assert names[0] == "lower_blocks" and "verify_gpu_kernel" in names
    assert names[-1] == "legalize_wgsl"


# golden text ---------------------------------------------------------------------------------

GOLDEN_CASES = {
    "softmax_4x8": ("nn.softmax", [f32(4, 8)], {"axis": -1}),
    "softmax_2x64_cooperative": ("nn.softmax", [f32(2, 64)], {"axis": -1}),
    "matmul_8x16x4": ("matmul", [f32(8, 16), f32(16, 4)], {}),
    "conv_1x2x5x5_k3": ("nn.conv", [f32(1, 2, 5, 5), f32(3, 2, 3, 3)], {"pads": [1, 1, 1, 1]}),
    # shared-memory + register tiles (gpu_gemm_rule): tails on every side, a fused bias
    "matmul_tiled_33x20x45": ("matmul", [f32(33, 20), f32(20, 45)], {}),
    "conv_bias_tiled_2x8x7x7_k3s2": ("nn.conv", [f32(2, 8, 7, 7), f32(12, 8, 3, 3), f32(12)],
                                     {"strides": [2, 2], "pads": [1, 0, 1, 0]}),
}
RULE_OF = {"cooperative": "gpu_row_reduction_rule", "tiled": "gpu_gemm_rule"}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_schedule_and_wgsl(name):
    op, inputs, attrs = GOLDEN_CASES[name]
    k = schedule_default(kernel(op, inputs, attrs), "webgpu")
    assert k.attrs["schedule_rule"] == next(
        (r for key, r in RULE_OF.items() if key in name), "gpu_fallback_rule")
    _, wks = emit_wgsl(k, "webgpu")
    text = (func_text(k) + "\n" + "\n".join(
        f"// device kernel {n}: dispatch {w.dispatch}, workgroup {w.workgroup_size}, "
        f"bindings {w.bindings}\n{w.source}" for n, w in enumerate(wks)))
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("EMBER_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with EMBER_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name}: the schedule or WGSL changed (see {path})"


# tile_gemm -----------------------------------------------------------------------------------

def test_tile_gemm_replays_and_fits_the_target():
    from ember.tir.schedule.rules.gpu import gemm_tiles
    func = kernel("matmul", [f32(3, 17, 40), f32(3, 40, 19)])
    k = schedule_default(func, "webgpu")
    assert k.attrs["schedule_rule"] == "gpu_gemm_rule"
    again = Trace.from_json(k.attrs["schedule_trace"]).apply_to(
        kernel("matmul", [f32(3, 17, 40), f32(3, 40, 19)]))
    assert func_text(again.func) == func_text(k)
    text = func_text(k)
    assert "blockIdx.z" in text and text.count("barrier") == 2  # the batch, one k-step's pair
    for tgt in ("webgpu", "webgpu -max_threads_per_block=64", "nvidia/h200"):
        t = Target(tgt)
        for M, N, K in [(1, 1000, 512), (4096, 64, 9), (33, 45, 20), (5, 7, 300)]:
            tm, tn, tk, rm, rn = gemm_tiles(M, N, K, t)
            assert tm % rm == 0 and tn % rn == 0 and 1 <= tk <= K
            assert (tm // rm) * (tn // rn) <= t.max_threads_per_block
            assert 4 * tk * (tm + tn) <= t.max_shared_memory_per_block
    small = schedule_default(kernel("matmul", [f32(3, 17, 40), f32(3, 40, 19)]),
                             "webgpu -max_threads_per_block=64")
    _, wks = emit_wgsl(small, "webgpu -max_threads_per_block=64")
    assert wks[0].workgroup_size[0] <= 64


def test_tile_gemm_refuses_what_is_not_a_gemm():
    sch = Schedule(kernel("nn.softmax", [f32(4, 64)], {"axis": -1}))
    red = [b for b in sch.block_names() if "max" in b][0]
    with pytest.raises(ScheduleError, match="is not a sum of its own output and a product"):
        sch.tile_gemm(red, 32, 32, 8, 4, 4)
    # a grouped convolution's output channel is read by both operands: no column iterator
    sch = Schedule(kernel("nn.conv", [f32(1, 4, 6, 6), f32(8, 2, 3, 3)],
                          {"pads": [1, 1, 1, 1], "group": 2}))
    with pytest.raises(ScheduleError, match="no row/column/reduction structure"):
        sch.tile_gemm("conv", 32, 32, 8, 4, 4)
    sch = Schedule(kernel("matmul", [f32(33, 20), f32(20, 45)]))
    with pytest.raises(ScheduleError, match="do not divide"):
        sch.tile_gemm("matmul", 32, 30, 8, 4, 4)
    sch.bind(sch.get_loops("matmul")[0], "blockIdx.x")
    with pytest.raises(ScheduleError, match="serial"):
        sch.tile_gemm("matmul", 32, 32, 8, 4, 4)


def test_gpu_pipelines_decompose_attention():
    from ember.graph.passes.pipeline import optimize
    q, kv = f32(1, 4, 3, 8), f32(1, 2, 5, 8)

    def text(target):
        mod, _ = optimize(op_module("nn.attention", [q, kv, kv], {"causal": 1}), Target(target))
        return mod.text()
    assert "nn.attention" in text("llvm")  # the CPU keeps its streaming kernel
    for t in ("webgpu", "nvidia/h200"):
        gpu = text(t)
        assert "nn.attention" not in gpu and "matmul" in gpu and "exp" in gpu
        assert "take(" in gpu  # the two key/value heads repeated for the four query heads
