"""GEMM_RS, the matrix instruction added after the base ISA (GEMM + fused ReLU, rounding
shift and int8 saturation): its boundary conditions (rounding ties, shift 0 and 31,
saturation, int32 overflow of the accumulation, tails and padding in a generated kernel)."""

import numpy as np
import pytest

from ember import npu
from ember.errors import NPUError
from ember.npu import isa, reference
from ember.npu.intrin import Requant, select_intrinsic
from ember.npu.isa import Finish, GemmRS, Load, Uop
from ember.npu.sim import Simulator

CFG = npu.load_config()


def _epilogue(v, shift, relu):
    """The documented semantics on one int32 value, in Python integers."""
    r = v if shift == 0 else (v + (1 << (shift - 1))) >> shift
    return max(0 if relu else -128, min(127, r))


def _wrap(v):
    return (v + 2**31) % 2**32 - 2**31


def _run_gemm_rs(acc0, x, w, shift, relu, n_rows):
    """acc rows 0..n_rows-1 preloaded with ``acc0``; GEMM_RS over rows 0..n_rows-2 only
    (row n_rows-1 must stay untouched), input rows ``x``, one weight block ``w``."""
    img = np.zeros(4096 * 4, np.uint8)
    words = isa.encode_uops([Uop(dst=0, src=0, wgt=0)])
    img[0:4] = words.view(np.uint8)
    a32 = acc0.astype(np.int32)
    img[256:256 + a32.nbytes] = a32.view(np.uint8).ravel()
    img[2048:2048 + x.nbytes] = x.view(np.uint8).ravel()
    img[4096:4096 + 256] = w.view(np.uint8).ravel()
    prog = [Load(mem=isa.MEM_UOP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=0),
            Load(mem=isa.MEM_ACC, sram_base=0, dram_base=256 // 64, y_size=1, x_size=n_rows,
                 x_stride=0),
            Load(mem=isa.MEM_INP, sram_base=0, dram_base=2048 // 16, y_size=1,
                 x_size=x.shape[0], x_stride=0),
            Load(mem=isa.MEM_WGT, sram_base=0, dram_base=4096 // 256, y_size=1, x_size=1,
                 x_stride=0, push_next=True),
            GemmRS(shift=shift, relu=relu, uop_bgn=0, uop_end=1, iter_out=1,
                   iter_in=n_rows - 1, dst_fo=0, dst_fi=1, src_fo=0, src_fi=1, pop_prev=True),
            Finish()]
    sim = Simulator(CFG)
    st = sim.run(prog, img, mode="cycle")
    return sim.state.acc[:n_rows].astype(np.int64), st


@pytest.mark.parametrize("shift", [0, 1, 2, 7, 16, 30, 31])
@pytest.mark.parametrize("relu", [0, 1])
def test_epilogue_rounding_saturation_and_untouched_rows(shift, relu):
    special = [0, 1, -1, 2**31 - 1, -2**31, 3, -3, 5, -5, 127, 128, -128, -129,
               (1 << shift) // 2 if shift else 7, -((1 << shift) // 2) if shift else -7,
               (127 << shift) + (1 << max(shift - 1, 0)), (-128 << shift) - 1]
    rng = np.random.default_rng(shift * 2 + relu)
    acc0 = rng.integers(-2**31, 2**31, (9, 16), dtype=np.int64)
    flat = acc0.ravel()
    flat[:len(special)] = [_wrap(v) for v in special]
    zeros_x = np.zeros((8, 16), np.int8)
    got, _ = _run_gemm_rs(acc0, zeros_x, np.zeros((16, 16), np.int8), shift, relu, 9)
    want = np.array([[_epilogue(int(v), shift, relu) for v in row] for row in acc0[:8]])
    assert np.array_equal(got[:8], want)
    assert np.array_equal(got[8], acc0[8])  # not in the loop: untouched


def test_accumulation_overflow_wraps_before_the_epilogue():
    rng = np.random.default_rng(3)
    x = np.full((4, 16), 127, np.int8)
    w = np.full((16, 16), 127, np.int8)          # each dot product 16 * 127 * 127 = 258064
    acc0 = np.full((5, 16), 2**31 - 100000, np.int64)
    acc0[1] = -2**31 + 5
    acc0[2] = rng.integers(-2**31, 2**31, 16)
    for shift in (0, 4, 20):
        got, _ = _run_gemm_rs(acc0, x, w, shift, 0, 5)
        want = [[_epilogue(_wrap(int(a) + 258064), shift, 0) for a in row] for row in acc0[:4]]
        assert np.array_equal(got[:4], np.array(want)), shift
        assert got[0, 0] == _epilogue(_wrap(2**31 - 100000 + 258064), shift, 0)


def test_cost_adds_the_epilogue_depth():
    _, st = _run_gemm_rs(np.zeros((7, 16), np.int64), np.zeros((6, 16), np.int8),
                         np.zeros((16, 16), np.int8), 3, 1, 7)
    gemm_rs = [e - s for pc, u, s, e in st.trace if pc == 4][0]
    assert gemm_rs == CFG.gemm_pipeline_depth + 6 + CFG.gemm_rs_epilogue_depth


def test_encoding_fills_the_word_and_round_trips_extremes():
    assert isa.KINDS["GEMM_RS"].bits == 128
    top = GemmRS(shift=31, relu=1, uop_bgn=8191, uop_end=16383, iter_out=4095, iter_in=4095,
                 dst_fo=2047, dst_fi=2047, src_fo=2047, src_fi=2047, wgt_fo=1023, wgt_fi=1023,
                 pop_prev=True, pop_next=True, push_prev=True, push_next=True)
    assert isa.encode(top) == (1 << 128) - 1 - 2  # every bit but opcode 5's bit 1
    assert isa.decode(isa.encode(top)) == top
    assert npu.assemble(npu.disassemble([top]))[0] == [top]
    with pytest.raises(NPUError, match="shift=32"):
        GemmRS(shift=32, uop_bgn=0, uop_end=0, iter_out=1, iter_in=1, dst_fo=0, dst_fi=0,
               src_fo=0, src_fi=0)


def test_intrinsic_registry_matches_power_of_two_requantize():
    assert select_intrinsic(Requant(1, 5, True)).name == "gemm_rs"
    assert select_intrinsic(Requant(3, 5)).name == "gemm"
    assert select_intrinsic(Requant(1, 5), "gemm").name == "gemm"
    with pytest.raises(NPUError, match="cannot compute"):
        select_intrinsic(Requant(3, 5), "gemm_rs")


@pytest.mark.parametrize("shape", [
    (17, 9, 11, 18, 3, 3, (1, 1), (1, 1, 1, 1)),   # channel tails, odd sizes, padding
    (35, 7, 5, 40, 3, 1, (2, 1), (1, 0, 2, 0)),    # reduction tail in a forced chunking
])
@pytest.mark.parametrize("shift,relu", [(0, False), (0, True), (9, True), (31, False)])
def test_generated_kernel_gemm_rs_equals_alu_epilogue_and_reference(shape, shift, relu):
    c, h, w, o, kh, kw, st, pd = shape
    rng = np.random.default_rng(c + shift)
    x = rng.integers(-128, 128, (1, c, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (o, c, kh, kw), dtype=np.int8)
    b = rng.integers(-2**31, 2**31, o, dtype=np.int64).astype(np.int32)  # overflow-prone bias
    want = reference.conv2d_int8(x, wt, b, st, pd, 1, shift, relu)
    s = npu.ConvShape(c, h, w, o, kh, kw, st, pd)
    outs, cycles = {}, {}
    for intr in ("gemm", "gemm_rs"):
        if shift == 1 and intr == "gemm":
            continue
        k = npu.lower_conv2d(wt, b, input_shape=x.shape, strides=st, pads=pd, multiplier=1,
                             shift=shift, relu=relu, intrinsic=intr,
                             tiling=npu.Tiling.make(s, 2, 3, 5, 2 if c > 32 else 9))
        y, stats = k.run(x, mode="cycle")
        outs[intr], cycles[intr] = y, stats.cycles
        assert np.array_equal(y, want), intr
        if intr == "gemm_rs":
            assert any(isinstance(i, GemmRS) for i in k.program.instrs)
    assert cycles["gemm_rs"] < cycles["gemm"]  # the fused epilogue saves the ALU passes
