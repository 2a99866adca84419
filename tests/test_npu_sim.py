"""ember.npu simulator: instruction semantics against naive loops, the cycle model against
hand-derived formulas, token discipline and the hazard checker."""

import math

import numpy as np
import pytest

from ember import npu
from ember.errors import HazardError, NPUError
from ember.npu import isa
from ember.npu.isa import Alu, Finish, Gemm, Load, Store, Uop
from ember.npu.sim import COMPUTE, LOAD, STORE, Simulator

CFG = npu.load_config()


class Dram:
    """A DRAM image built region by region (byte offsets aligned to 256)."""

    def __init__(self):
        self.parts, self.size = [], 0

    def put(self, arr):
        off = self.size
        b = np.ascontiguousarray(arr).view(np.uint8).ravel()
        self.parts.append((off, b))
        self.size += -(-b.size // 256) * 256
        return off

    def reserve(self, nbytes):
        off = self.size
        self.size += -(-nbytes // 256) * 256
        return off

    def image(self):
        img = np.zeros(self.size, np.uint8)
        for off, b in self.parts:
            img[off:off + b.size] = b
        return img


def dma(nbytes):
    return (CFG.dma_setup_cycles + CFG.dram_latency_cycles
            + math.ceil(nbytes / CFG.dram_bytes_per_cycle))


def _small_gemm_program(n_pos, rng):
    """uops, one weight block, n_pos input rows: out = clip(inp @ wgt.T) via GEMM + ALU."""
    d = Dram()
    u = d.put(isa.encode_uops([Uop(dst=0, src=0, wgt=0)]))
    x = rng.integers(-128, 128, (n_pos, 16), dtype=np.int8)
    w = rng.integers(-128, 128, (16, 16), dtype=np.int8)
    xi, wi = d.put(x), d.put(w)
    out = d.reserve(n_pos * 16)
    loop = dict(uop_bgn=0, uop_end=1, iter_out=1, iter_in=n_pos, dst_fo=0, dst_fi=1)
    prog = [Load(mem=isa.MEM_UOP, sram_base=0, dram_base=u // 4, y_size=1, x_size=1, x_stride=0),
            Load(mem=isa.MEM_INP, sram_base=0, dram_base=xi // 16, y_size=1, x_size=n_pos,
                 x_stride=0),
            Load(mem=isa.MEM_WGT, sram_base=0, dram_base=wi // 256, y_size=1, x_size=1,
                 x_stride=0, push_next=True),
            Gemm(reset=0, src_fo=0, src_fi=1, pop_prev=True, **loop),
            Alu(op=isa.ALU_MAX, imm=-128, **loop),
            Alu(op=isa.ALU_MIN, imm=127, push_next=True, **loop),
            Store(sram_base=0, dram_base=out // 16, y_size=1, x_size=n_pos, x_stride=0,
                  pop_prev=True, push_prev=True),
            Finish(pop_next=True)]
    ref = np.clip(x.astype(np.int64) @ w.astype(np.int64).T, -128, 127).astype(np.int8)
    return prog, d.image(), out, ref


def test_small_program_cycles_match_hand_derived_formula():
    n = 5
    prog, img, out, ref = _small_gemm_program(n, np.random.default_rng(0))
    st = Simulator(CFG).run(prog, img, mode="cycle")
    assert np.array_equal(img[out:out + 16 * n].view(np.int8).reshape(n, 16), ref)
    loads = dma(4) + dma(16 * n) + dma(256)          # three LOADs back to back
    gemm = CFG.gemm_pipeline_depth + n               # one micro-op per cycle
    alu = 2 * (CFG.alu_pipeline_depth + n * CFG.alu_ii)
    store = dma(16 * n)
    assert st.cycles == loads + gemm + alu + store + 1   # + FINISH
    assert st.busy == [loads, gemm + alu + 1, store]
    assert st.token_stall == [0, loads + store, loads + gemm + alu]  # FINISH waits the store
    assert st.dram_read == 4 + 16 * n + 256 and st.dram_written == 16 * n
    assert st.gemm_uops == n


@pytest.mark.parametrize("iters", [4, 100])
def test_overlapped_load_and_compute_formula(iters):
    """Two input tiles: the second tile's LOAD overlaps the first GEMM."""
    rng = np.random.default_rng(1)
    d = Dram()
    u = d.put(isa.encode_uops([Uop(0, 0, 0), Uop(0, iters, 0)]))
    wi = d.put(rng.integers(-128, 128, (16, 16), dtype=np.int8))
    xi = d.put(rng.integers(-128, 128, (2 * iters, 16), dtype=np.int8))
    loop = dict(iter_out=1, iter_in=iters, dst_fo=0, dst_fi=1, src_fo=0, src_fi=1)
    prog = [Load(mem=isa.MEM_UOP, sram_base=0, dram_base=u // 4, y_size=1, x_size=2, x_stride=0),
            Load(mem=isa.MEM_WGT, sram_base=0, dram_base=wi // 256, y_size=1, x_size=1,
                 x_stride=0),
            Load(mem=isa.MEM_INP, sram_base=0, dram_base=xi // 16, y_size=1, x_size=iters,
                 x_stride=0, push_next=True),
            Load(mem=isa.MEM_INP, sram_base=iters, dram_base=xi // 16 + iters, y_size=1,
                 x_size=iters, x_stride=0, push_next=True),
            Gemm(pop_prev=True, uop_bgn=0, uop_end=1, **loop),
            Gemm(pop_prev=True, uop_bgn=1, uop_end=2, **loop),
            Finish()]
    st = Simulator(CFG).run(prog, d.image(), mode="cycle")
    g = CFG.gemm_pipeline_depth + iters
    l0 = dma(8) + dma(256) + dma(16 * iters)
    l1 = l0 + dma(16 * iters)
    g0_end = l0 + g
    g1_end = max(g0_end, l1) + g
    assert st.cycles == g1_end + 1
    assert st.token_stall[COMPUTE] == l0 + max(0, l1 - g0_end)
    assert st.busy[COMPUTE] == 2 * g + 1


def _acc_program(values, n, ops):
    """LOAD int32 ``values`` into acc rows 0.., run ALU ``ops`` on rows 0..n-1 (src: n..)."""
    d = Dram()
    u = d.put(isa.encode_uops([Uop(dst=0, src=n)]))
    vi = d.put(values.astype(np.int32))
    prog = [Load(mem=isa.MEM_UOP, sram_base=0, dram_base=u // 4, y_size=1, x_size=1,
                 x_stride=0),
            Load(mem=isa.MEM_ACC, sram_base=0, dram_base=vi // 64, y_size=1, x_size=values.shape[0],
                 x_stride=0, push_next=True)]
    for k, (op, use_imm, imm) in enumerate(ops):
        prog.append(Alu(op=op, use_imm=use_imm, imm=imm, uop_bgn=0, uop_end=1, iter_out=1,
                        iter_in=n, dst_fo=0, dst_fi=1, src_fo=0, src_fi=1, pop_prev=k == 0))
    prog.append(Finish())
    sim = Simulator(CFG)
    sim.run(prog, d.image())
    return sim.state.acc[:n].astype(np.int64)


def _wrap(v):
    return (v + 2**31) % 2**32 - 2**31


def test_alu_ops_match_python_integer_semantics():
    rng = np.random.default_rng(2)
    a = rng.integers(-2**31, 2**31, (6, 16), dtype=np.int64)
    a[0, :4] = [2**31 - 1, -2**31, -1, 0]
    b = rng.integers(-2**31, 2**31, (6, 16), dtype=np.int64)
    vals = np.concatenate([a, b])
    cases = {
        (isa.ALU_ADD, 1, 32767): lambda x, y: _wrap(x + 32767),
        (isa.ALU_ADD, 0, 0): lambda x, y: _wrap(x + y),
        (isa.ALU_MUL, 1, -32768): lambda x, y: _wrap(x * -32768),
        (isa.ALU_MUL, 0, 0): lambda x, y: _wrap(x * y),
        (isa.ALU_MIN, 0, 0): lambda x, y: min(x, y),
        (isa.ALU_MAX, 1, -5): lambda x, y: max(x, -5),
        (isa.ALU_SHR, 1, 3): lambda x, y: x >> 3,
        (isa.ALU_SHR, 1, 40): lambda x, y: x >> 40,       # saturates to the sign
        (isa.ALU_SHR, 1, -4): lambda x, y: _wrap(x << 4),  # negative: shift left
    }
    for op, fn in cases.items():
        got = _acc_program(vals, 6, [op])
        want = np.array([[fn(int(x), int(y)) for x, y in zip(ra, rb)] for ra, rb in zip(a, b)])
        assert np.array_equal(got, want), isa.ALU_OPS[op[0]]


def test_gemm_general_loop_matches_naive_semantics():
    """Duplicate destinations and moving weights (the non-fast path), and the fast path."""
    rng = np.random.default_rng(3)
    uops = [Uop(dst=rng.integers(4), src=rng.integers(8), wgt=rng.integers(4)) for _ in range(7)]
    d = Dram()
    u = d.put(isa.encode_uops(uops))
    x = rng.integers(-128, 128, (40, 16), dtype=np.int8)
    w = rng.integers(-128, 128, (12, 16, 16), dtype=np.int8)
    xi, wi = d.put(x), d.put(w)
    g = Gemm(uop_bgn=0, uop_end=7, iter_out=3, iter_in=2, dst_fo=5, dst_fi=1, src_fo=7,
             src_fi=3, wgt_fo=2, wgt_fi=1, pop_prev=True)
    prog = [Load(mem=isa.MEM_UOP, sram_base=0, dram_base=u // 4, y_size=1, x_size=7, x_stride=0),
            Load(mem=isa.MEM_INP, sram_base=0, dram_base=xi // 16, y_size=1, x_size=40,
                 x_stride=0),
            Load(mem=isa.MEM_WGT, sram_base=0, dram_base=wi // 256, y_size=1, x_size=12,
                 x_stride=0, push_next=True), g,
            Gemm(**{**{f: getattr(g, f) for f in g.__dataclass_fields__}, "pop_prev": False}),
            Finish()]
    sim = Simulator(CFG)
    sim.run(prog, d.image())
    acc = np.zeros((20, 16), np.int64)
    for _rep in range(2):
        for i0 in range(3):
            for i1 in range(2):
                for m in uops:
                    dd, ss, ww = (m.dst + 5 * i0 + i1, m.src + 7 * i0 + 3 * i1,
                                  m.wgt + 2 * i0 + i1)
                    acc[dd] += w[ww].astype(np.int64) @ x[ss].astype(np.int64)
    assert np.array_equal(sim.state.acc[:20], acc)


def test_dma_padding_and_strides():
    rng = np.random.default_rng(4)
    d = Dram()
    x = rng.integers(-128, 128, (5, 7, 16), dtype=np.int8)  # rows of 7 entries
    xi = d.put(x)
    prog = [Load(mem=isa.MEM_INP, sram_base=3, dram_base=xi // 16 + 7 + 2, y_size=3, x_size=4,
                 x_stride=7, y_pad0=1, y_pad1=2, x_pad0=2, x_pad1=1, push_next=True),
            Finish(pop_prev=True)]
    sim = Simulator(CFG)
    sim.run(prog, d.image(), check=False)
    got = sim.state.inp[3:3 + 6 * 7].reshape(6, 7, 16)
    want = np.zeros((6, 7, 16), np.int8)
    want[1:4, 2:6] = x[1:4, 2:6]
    assert np.array_equal(got, want)
    assert not sim.state.inp[:3].any() and not sim.state.inp[45:].any()


def _conv_kernel(vt=2, **kw):
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 20, 9, 9), dtype=np.int8)
    w = rng.integers(-128, 128, (24, 20, 3, 3), dtype=np.int8)
    b = rng.integers(-999, 999, 24).astype(np.int32)
    tiling = npu.Tiling(1, 3, 9, 2, vt, 5, 11)  # 3 row tiles x 2 channel groups
    k = npu.lower_conv2d(w, b, input_shape=x.shape, pads=(1, 1, 1, 1), multiplier=3, shift=11,
                         virtual_threads=vt, tiling=tiling, **kw)
    return k, x


def _run(k, x, prog, mode="functional"):
    dram = k.program.image.copy()
    off, n = k.program.regions["inp"]
    dram[off:off + n] = npu.pack_input(x).view(np.uint8).ravel()
    st = Simulator(k.cfg).run(prog, dram, mode=mode)
    return dram, st


def test_functional_and_cycle_modes_leave_identical_memory():
    for vt in (1, 2):
        k, x = _conv_kernel(vt)
        d1, _ = _run(k, x, k.program.instrs, "functional")
        d2, st = _run(k, x, k.program.instrs, "cycle")
        assert np.array_equal(d1, d2)
        # every cycle of every unit is busy or a counted stall, up to its last instruction
        for u in (LOAD, COMPUTE, STORE):
            last = max(e for _pc, uu, _s, e in st.trace if uu == u)
            assert st.busy[u] + st.token_stall[u] + st.port_stall[u] == last


def _flag_indices(prog, unit, flag):
    return [pc for pc, ins in enumerate(prog) if isa.unit_of(ins) == unit and getattr(ins, flag)]


def _drop(prog, pc, flag):
    p = list(prog)
    p[pc] = type(p[pc])(**{**{f: getattr(p[pc], f) for f in p[pc].__dataclass_fields__},
                           flag: False})
    return p


def test_tokens_balance_and_deleting_one_push_is_caught():
    k, x = _conv_kernel(2)
    prog = k.program.instrs
    _run(k, x, prog)  # balanced as generated
    for unit, flag in (("load", "push_next"), ("compute", "push_prev"),
                       ("compute", "push_next"), ("store", "push_prev")):
        pc = _flag_indices(prog, unit, flag)[1]
        for mode in ("functional", "cycle"):
            with pytest.raises(NPUError, match="token|deadlock|balance|FINISH"):
                _run(k, x, _drop(prog, pc, flag), mode)
    # an extra push that nobody pops
    extra = list(prog[:-1]) + [Finish(pop_next=True, push_prev=True)]
    with pytest.raises(NPUError, match="do not balance"):
        _run(k, x, extra)
    # an extra push early shifts every later pairing: compute then runs before its loads
    extra = list(prog)
    extra[0] = Load(**{**{f: getattr(prog[0], f) for f in prog[0].__dataclass_fields__},
                       "push_next": True})
    with pytest.raises(HazardError, match="reads inp"):
        _run(k, x, extra)


@pytest.mark.parametrize("mode", ["functional", "cycle"])
def test_missing_dependency_is_a_hazard_not_a_silent_answer(mode):
    k, x = _conv_kernel(2)
    prog = k.program.instrs
    # RAW: remove the 2nd load->compute token (push and its pop)
    pushes = _flag_indices(prog, "load", "push_next")
    pops = _flag_indices(prog, "compute", "pop_prev")
    bad = _drop(_drop(prog, pushes[1], "push_next"), pops[1], "pop_prev")
    with pytest.raises(HazardError, match="reads inp") as e:
        _run(k, x, bad, mode)
    assert e.value.buffer == "inp"
    # WAR: remove the 1st compute->load token: tile 2's loads overwrite what tile 0 reads
    pushes = _flag_indices(prog, "compute", "push_prev")
    pops = _flag_indices(prog, "load", "pop_next")
    bad = _drop(_drop(prog, pushes[0], "push_prev"), pops[0], "pop_next")
    with pytest.raises(HazardError, match="still read by"):
        _run(k, x, bad, mode)
    # compute->store: the store reads the accumulators before the epilogue is ordered
    pushes = _flag_indices(prog, "compute", "push_next")
    pops = _flag_indices(prog, "store", "pop_prev")
    bad = _drop(_drop(prog, pushes[0], "push_next"), pops[0], "pop_prev")
    with pytest.raises(HazardError, match="reads acc"):
        _run(k, x, bad, mode)


def test_malformed_programs():
    k, x = _conv_kernel(1)
    prog = k.program.instrs
    with pytest.raises(NPUError, match="must end with FINISH"):
        _run(k, x, prog[:-1])
    # a pop from a unit that does not exist
    bad = list(prog)
    bad[0] = Load(**{**{f: getattr(prog[0], f) for f in prog[0].__dataclass_fields__},
                     "pop_prev": True})
    with pytest.raises(NPUError, match="no previous unit"):
        _run(k, x, bad)
    # deadlock in cycle mode: compute waits on the store, the store on compute
    d = Dram()
    p = [Gemm(reset=1, uop_bgn=0, uop_end=0, iter_out=1, iter_in=1, dst_fo=0, dst_fi=0,
              src_fo=0, src_fi=0, pop_next=True, push_next=True),
         Store(sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0, pop_prev=True,
               push_prev=True), Finish()]
    d.reserve(256)
    with pytest.raises(NPUError, match="deadlock"):
        Simulator(CFG).run(p, d.image(), mode="cycle")
    with pytest.raises(NPUError, match="no earlier instruction pushed"):
        Simulator(CFG).run(p, d.image(), mode="functional")
    # scratchpad index out of range
    p = [Load(mem=isa.MEM_INP, sram_base=2047, dram_base=0, y_size=1, x_size=2, x_stride=0),
         Finish()]
    with pytest.raises(NPUError, match="inp index 2048 out of range"):
        Simulator(CFG).run(p, d.image())


def test_chrome_trace_of_the_three_units():
    k, x = _conv_kernel(2)
    _, st = _run(k, x, k.program.instrs, "cycle")
    tr = st.chrome_trace(k.program.instrs, CFG.clock_mhz)
    ev = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert len(ev) == len(k.program.instrs)
    for u in (LOAD, COMPUTE, STORE):
        mine = [e for e in ev if e["tid"] == u]
        assert sum(e["args"]["cycles"] for e in mine) == st.busy[u]
        # a unit runs one instruction at a time
        ends = [e["ts"] + e["dur"] for e in mine]
        assert all(b["ts"] >= a - 1e-9 for a, b in zip(ends, mine[1:]))
