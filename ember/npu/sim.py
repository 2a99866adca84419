"""The NPU simulator: a functional mode and a cycle mode that leave identical memory.

**Functional mode** runs the instructions in program order. **Cycle mode** runs the load,
compute and store units concurrently, event-driven: each unit takes its own instructions in
order and starts one as soon as the unit is free, the tokens it pops have been pushed (a push
happens when its instruction finishes) and, for a DMA, the DRAM port is free (LOAD and STORE
share one port). Units are scheduled in order of their next start time, so the simulation is a
list schedule of the three queues. Costs (docs/npu.md, "Cost model"):

- LOAD/STORE: ``dma_setup + dram_latency + ceil(bytes / dram_bytes_per_cycle)``, bytes being
  the DRAM bytes moved (padding is made on chip and costs nothing);
- GEMM: ``gemm_pipeline_depth + iter_out * iter_in * n_uops`` (one micro-op per cycle);
  GEMM_RS adds ``gemm_rs_epilogue_depth``;
- ALU: ``alu_pipeline_depth + iter_out * iter_in * n_uops * alu_ii``; FINISH: 1.

Every cycle a unit waits is counted, per unit, as a token stall or a DRAM-port stall.

Both modes run the **hazard checker** (``check=True``): scratchpad entries are tagged with
their last writer and readers, and every access must be ordered after the conflicting access
of another unit by a chain of tokens (vector clocks over the token queues); otherwise a
``HazardError`` names both instructions, even when the numbers happen to be right.

The semantics of each instruction kind are registered in ONE place, :data:`SEMANTICS`
(:func:`register_semantics`).

GEMM is vectorized: a whole instruction's micro-op loop is one float64 matrix product (exact:
int8 x int8 products summed over fewer than 2**39 terms) added to the int32 accumulators with
wrap-around.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import HazardError, NPUError
from . import isa
from .config import NPUConfig

LOAD, COMPUTE, STORE = 0, 1, 2
UNIT_INDEX = {"load": LOAD, "compute": COMPUTE, "store": STORE}
BUFFERS = ("uop", "inp", "wgt", "acc")


@dataclass(frozen=True)
class Semantics:
    """What one instruction kind does: ``execute(state, instr, pc)`` performs it on the
    :class:`State` and returns its scratchpad accesses ``[(buffer, indices, is_write), ...]``
    for the hazard checker; ``cost(cfg, instr)`` is its cycles once started; ``dram_bytes(cfg,
    instr)`` is ``(read, written)`` DRAM bytes (only for a DMA on the DRAM port);
    ``gemm_uops(instr)`` the GEMM-core micro-op executions that multiply (for utilization)."""

    execute: object
    cost: object
    dram_bytes: object = None
    gemm_uops: object = None


SEMANTICS: dict[str, Semantics] = {}


def register_semantics(kind_name: str, execute, cost, dram_bytes=None, gemm_uops=None):
    """Register the simulator side of an instruction kind (the simulator's extension point)."""
    if kind_name not in isa.KINDS:
        raise NPUError(f"{kind_name!r} is not a registered NPU instruction kind")
    SEMANTICS[kind_name] = Semantics(execute, cost, dram_bytes, gemm_uops)


class State:
    """Scratchpads and DRAM. ``dram`` is a flat uint8 array (the caller's, written in place);
    LOAD/STORE address it in entries of the memory type (uop 4 B, wgt 256 B, inp 16 B, acc
    64 B, out 16 B)."""

    def __init__(self, cfg: NPUConfig, dram: np.ndarray):
        if dram.dtype != np.uint8 or dram.ndim != 1:
            raise NPUError("NPU DRAM must be a flat uint8 array")
        self.cfg = cfg
        bi, bo = cfg.block_in, cfg.block_out
        self.uop = np.zeros(cfg.depth("uop"), np.uint32)
        self.inp = np.zeros((cfg.depth("inp"), bi), np.int8)
        self.wgt = np.zeros((cfg.depth("wgt"), bo, bi), np.int8)
        self.acc = np.zeros((cfg.depth("acc"), bo), np.int32)
        self.dram = dram
        eb = cfg.entry_bytes

        def view(dtype, nbytes, shape):
            n = dram.size // nbytes
            return dram[:n * nbytes].view(dtype).reshape((n,) + shape)

        self.dram_views = {"uop": view(np.uint32, 4, ()), "wgt": view(np.int8, eb["wgt"], (bo, bi)),
                           "inp": view(np.int8, eb["inp"], (bi,)),
                           "acc": view(np.int32, eb["acc"], (bo,)),
                           "out": view(np.int8, eb["out"], (bo,))}

    def sram(self, buf):
        return getattr(self, buf)


def _check_range(idx, n, what, pc, kind):
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise NPUError(f"instruction {pc} ({kind}): {what} index {int(idx.max())} out of range "
                       f"[0, {n})")


def _dma_rows(ins):
    return (ins.dram_base + np.arange(ins.y_size, dtype=np.int64)[:, None] * ins.x_stride
            + np.arange(ins.x_size, dtype=np.int64)[None, :])


# ---------------------------------------------------------------- LOAD / STORE
def _exec_load(st: State, ins: isa.Load, pc: int):
    buf = isa.MEM_TYPES[ins.mem]
    src = st.dram_views[buf]
    rows = _dma_rows(ins)
    _check_range(rows, src.shape[0], "DRAM", pc, "LOAD")
    ny = ins.y_pad0 + ins.y_size + ins.y_pad1
    nx = ins.x_pad0 + ins.x_size + ins.x_pad1
    block = np.zeros((ny, nx) + src.shape[1:], src.dtype)
    block[ins.y_pad0:ins.y_pad0 + ins.y_size, ins.x_pad0:ins.x_pad0 + ins.x_size] = src[rows]
    dst = st.sram(buf)
    idx = np.arange(ins.sram_base, ins.sram_base + ny * nx, dtype=np.int64)
    _check_range(idx, dst.shape[0], buf, pc, "LOAD")
    dst[ins.sram_base:ins.sram_base + ny * nx] = block.reshape((ny * nx,) + src.shape[1:])
    return [(buf, idx, True)]


def _load_bytes(cfg, ins):
    return ins.y_size * ins.x_size * cfg.entry_bytes[isa.MEM_TYPES[ins.mem]], 0


def _exec_store(st: State, ins: isa.Store, pc: int):
    n = ins.y_size * ins.x_size
    idx = np.arange(ins.sram_base, ins.sram_base + n, dtype=np.int64)
    _check_range(idx, st.acc.shape[0], "acc", pc, "STORE")
    rows = _dma_rows(ins)
    out = st.dram_views["out"]
    _check_range(rows, out.shape[0], "DRAM", pc, "STORE")
    out[rows.ravel()] = st.acc[idx].astype(np.int8)  # low 8 bits
    return [("acc", idx, False)]


def _store_bytes(cfg, ins):
    return 0, ins.y_size * ins.x_size * cfg.entry_bytes["out"]


def _dma_cost(cfg, ins):
    r, w = SEMANTICS[ins.kind.name].dram_bytes(cfg, ins)
    return cfg.dma_setup_cycles + cfg.dram_latency_cycles + -(-(r + w) // cfg.dram_bytes_per_cycle)


# ---------------------------------------------------------------- GEMM / ALU loops
def _loop(st: State, ins, pc, with_wgt: bool):
    """Index arrays ``(D, S, W)`` of shape ``(iter_out * iter_in, n_uops)`` and the uop range."""
    if not 0 <= ins.uop_bgn <= ins.uop_end <= st.uop.shape[0]:
        raise NPUError(f"instruction {pc} ({ins.kind.name}): micro-op range "
                       f"[{ins.uop_bgn}, {ins.uop_end}) outside the uop scratchpad")
    d, s, w = isa.uop_fields(st.uop[ins.uop_bgn:ins.uop_end])
    i0 = np.arange(ins.iter_out, dtype=np.int64)[:, None]
    i1 = np.arange(ins.iter_in, dtype=np.int64)[None, :]
    doff = (i0 * ins.dst_fo + i1 * ins.dst_fi).reshape(-1, 1)
    soff = (i0 * ins.src_fo + i1 * ins.src_fi).reshape(-1, 1)
    D, S = d[None, :] + doff, s[None, :] + soff
    W = None
    if with_wgt:
        woff = (i0 * ins.wgt_fo + i1 * ins.wgt_fi).reshape(-1, 1)
        W = w[None, :] + woff
    return D, S, W, (d, s, w)


def _distinct(idx, n):
    """The distinct values of ``idx`` (all in ``[0, n)``), sorted; a mask, not a sort."""
    m = np.zeros(n, bool)
    m[idx] = True
    return np.flatnonzero(m)


def _all_distinct(idx, n):
    return _distinct(idx.ravel(), n).size == idx.size


def _wrap32(a):
    return a.astype(np.int64).astype(np.int32)


def _gemm_accumulate(st: State, ins, pc, D, S, W, uops):
    """acc[D] += inp[S] @ wgt[W].T over all (iteration, micro-op) pairs, int32 wrap-around."""
    _check_range(D, st.acc.shape[0], "acc", pc, ins.kind.name)
    _check_range(S, st.inp.shape[0], "inp", pc, ins.kind.name)
    _check_range(W, st.wgt.shape[0], "wgt", pc, ins.kind.name)
    d, s, w = uops
    n_it, n_u = D.shape
    if n_u == 0 or n_it == 0:
        return
    bo = st.acc.shape[1]
    # Fast path: micro-ops in G runs of equal dst, every run with the same src sequence, and
    # weights that do not move with the loop: one gather and one matrix product.
    starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    g = starts.size
    if ins.wgt_fo == 0 and ins.wgt_fi == 0 and n_u % g == 0:
        up = n_u // g
        ok = np.array_equal(starts, np.arange(0, n_u, up)) and (
            g == 1 or np.array_equal(np.tile(s[:up], g), s))
        if ok:
            dg = D[:, ::up]  # (I, G)
            if _all_distinct(dg, st.acc.shape[0]):
                x = st.inp[S[:, :up]].reshape(n_it, -1).astype(np.float64)
                wm = st.wgt[w].reshape(g, up, bo, -1).transpose(1, 3, 0, 2).reshape(-1, g * bo)
                r = (x @ wm.astype(np.float64)).astype(np.int64).reshape(n_it, g, bo)
                flat = dg.ravel()
                st.acc[flat] = _wrap32(st.acc[flat].astype(np.int64) + r.reshape(-1, bo))
                return
    x = st.inp[S.ravel()].astype(np.float64)
    wm = st.wgt[W.ravel()].astype(np.float64)
    p = np.einsum("nk,nok->no", x, wm).astype(np.int64)
    tmp = np.zeros(st.acc.shape, np.int64)
    np.add.at(tmp, D.ravel(), p)
    st.acc[:] = _wrap32(st.acc.astype(np.int64) + tmp)


def _uop_access(ins):
    return ("uop", np.arange(ins.uop_bgn, ins.uop_end, dtype=np.int64), False)


def _exec_gemm(st: State, ins: isa.Gemm, pc: int):
    D, S, W, uops = _loop(st, ins, pc, True)
    if ins.reset:
        _check_range(D, st.acc.shape[0], "acc", pc, "GEMM")
        st.acc[D.ravel()] = 0
        return [_uop_access(ins), ("acc", D.ravel(), True)]
    _gemm_accumulate(st, ins, pc, D, S, W, uops)
    flat = D.ravel()
    return [_uop_access(ins), ("inp", S.ravel(), False), ("wgt", W.ravel(), False),
            ("acc", flat, False), ("acc", flat, True)]


def _gemm_cost(cfg, ins):
    return cfg.gemm_pipeline_depth + ins.iter_out * ins.iter_in * (ins.uop_end - ins.uop_bgn)


def round_shift(a, shift: int):
    """``floor((a + 2**(shift-1)) / 2**shift)`` exactly (``shift == 0``: ``a``), on int64."""
    a = a.astype(np.int64)
    if shift == 0:
        return a
    return (a + (np.int64(1) << (shift - 1))) >> shift


def _exec_gemm_rs(st: State, ins: isa.GemmRS, pc: int):
    D, S, W, uops = _loop(st, ins, pc, True)
    _gemm_accumulate(st, ins, pc, D, S, W, uops)
    flat = D.ravel()
    rows = _distinct(flat, st.acc.shape[0])
    lo = 0 if ins.relu else -128
    st.acc[rows] = np.clip(round_shift(st.acc[rows], ins.shift), lo, 127).astype(np.int32)
    return [_uop_access(ins), ("inp", S.ravel(), False), ("wgt", W.ravel(), False),
            ("acc", flat, False), ("acc", flat, True)]


def _gemm_rs_cost(cfg, ins):
    return _gemm_cost(cfg, ins) + cfg.gemm_rs_epilogue_depth


def _alu_apply(op, a, b):
    a = a.astype(np.int64)
    b = np.asarray(b, dtype=np.int64)
    if op == isa.ALU_MIN:
        r = np.minimum(a, b)
    elif op == isa.ALU_MAX:
        r = np.maximum(a, b)
    elif op == isa.ALU_ADD:
        r = a + b
    elif op == isa.ALU_MUL:
        r = a * b
    elif op == isa.ALU_SHR:
        sh = np.clip(b, -63, 63)
        r = np.where(sh >= 0, a >> np.maximum(sh, 0), a << np.maximum(-sh, 0))
    else:
        raise NPUError(f"ALU op {op} is not one of {isa.ALU_OPS}")
    return _wrap32(r)


def _exec_alu(st: State, ins: isa.Alu, pc: int):
    D, S, _, _ = _loop(st, ins, pc, False)
    fd = D.ravel()
    _check_range(fd, st.acc.shape[0], "acc", pc, "ALU")
    acc = [_uop_access(ins), ("acc", fd, False)]
    if ins.use_imm:
        if _all_distinct(fd, st.acc.shape[0]):
            st.acc[fd] = _alu_apply(ins.op, st.acc[fd], ins.imm)
        else:
            for k in fd:
                st.acc[k] = _alu_apply(ins.op, st.acc[k], ins.imm)
    else:
        fs = S.ravel()
        _check_range(fs, st.acc.shape[0], "acc", pc, "ALU")
        acc.append(("acc", fs, False))
        n = st.acc.shape[0]
        if _all_distinct(fd, n) and not np.intersect1d(_distinct(fd, n), _distinct(fs, n)).size:
            st.acc[fd] = _alu_apply(ins.op, st.acc[fd], st.acc[fs])
        else:  # the loop reads what it writes: run it in order
            for k, j in zip(fd, fs):
                st.acc[k] = _alu_apply(ins.op, st.acc[k], st.acc[j])
    acc.append(("acc", fd, True))
    return acc


def _alu_cost(cfg, ins):
    return cfg.alu_pipeline_depth + ins.iter_out * ins.iter_in * (ins.uop_end - ins.uop_bgn) \
        * cfg.alu_ii


register_semantics("LOAD", _exec_load, _dma_cost, _load_bytes)
register_semantics("STORE", _exec_store, _dma_cost, _store_bytes)
def _loop_uops(ins):
    return 0 if getattr(ins, "reset", 0) else ins.iter_out * ins.iter_in * (ins.uop_end -
                                                                             ins.uop_bgn)


register_semantics("GEMM", _exec_gemm, _gemm_cost, gemm_uops=_loop_uops)
register_semantics("ALU", _exec_alu, _alu_cost)
register_semantics("FINISH", lambda st, ins, pc: [], lambda cfg, ins: 1)
register_semantics("GEMM_RS", _exec_gemm_rs, _gemm_rs_cost, gemm_uops=_loop_uops)


# ---------------------------------------------------------------- hazard checker
class HazardChecker:
    """Tags every scratchpad entry with its last writer (unit, sequence number, pc) and its
    last reader per unit, and checks each access against the accessing instruction's vector
    clock (what it is ordered after through tokens)."""

    def __init__(self, cfg: NPUConfig):
        self.tags = {}
        for b in BUFFERS:
            n = cfg.depth(b)
            self.tags[b] = dict(wu=np.full(n, -1, np.int8), ws=np.zeros(n, np.int64),
                                wpc=np.full(n, -1, np.int64), rs=np.zeros((3, n), np.int64),
                                rpc=np.full((3, n), -1, np.int64))

    def access(self, buf, idx, write, unit, vc, pc, kind):
        t = self.tags[buf]
        idx = _distinct(idx, t["wu"].shape[0])
        wu = t["wu"][idx]
        m = (wu >= 0) & (wu != unit)
        if m.any():
            bad = vc[wu[m].astype(np.int64)] < t["ws"][idx[m]]
            if bad.any():
                e = int(idx[m][np.argmax(bad)])
                what = "writes over" if write else "reads"
                raise HazardError(
                    f"hazard: instruction {pc} ({kind}, {isa.UNITS[unit]} unit) {what} {buf}"
                    f"[{e}] written by instruction {int(t['wpc'][e])} "
                    f"({isa.UNITS[int(t['wu'][e])]} unit) with no dependency token ordering it "
                    f"after that write", pc, int(t["wpc"][e]), buf)
        if write:
            for y in range(3):
                if y == unit:
                    continue
                bad = t["rs"][y, idx] > vc[y]
                if bad.any():
                    e = int(idx[np.argmax(bad)])
                    raise HazardError(
                        f"hazard: instruction {pc} ({kind}, {isa.UNITS[unit]} unit) writes "
                        f"{buf}[{e}] still read by instruction {int(t['rpc'][y, e])} "
                        f"({isa.UNITS[y]} unit) with no dependency token ordering it after "
                        f"that read", pc, int(t["rpc"][y, e]), buf)
            t["wu"][idx] = unit
            t["ws"][idx] = vc[unit]
            t["wpc"][idx] = pc
        else:
            t["rs"][unit, idx] = vc[unit]
            t["rpc"][unit, idx] = pc


# ---------------------------------------------------------------- the machine
def _one_blas_thread():
    """The GEMM products are small (at most a tile): one BLAS thread is faster than several
    competing for a busy host (measured 2.5 ms vs 24 ms for 196x576 @ 576x64 on the 2-core CI
    host under load). Uses threadpoolctl when installed (the ``npu`` extra)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        import contextlib
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


@dataclass
class Stats:
    """What a run measured. Cycle fields are zero in functional mode.

    ``busy``/``token_stall``/``port_stall``: cycles per unit (load, compute, store);
    ``cycles``: when FINISH ends. ``dram_read``/``dram_written``: bytes. ``gemm_uops``: micro-op
    executions of the GEMM core (each ``block_in x block_out`` MACs). ``trace``: per
    instruction ``(pc, unit, start, end)`` in cycle mode.
    """

    mode: str
    cycles: int = 0
    busy: list = field(default_factory=lambda: [0, 0, 0])
    token_stall: list = field(default_factory=lambda: [0, 0, 0])
    port_stall: list = field(default_factory=lambda: [0, 0, 0])
    instructions: list = field(default_factory=lambda: [0, 0, 0])
    dram_read: int = 0
    dram_written: int = 0
    gemm_uops: int = 0
    trace: list = field(default_factory=list)

    @property
    def compute_bound(self) -> int:
        """Busy cycles of the compute unit: no schedule finishes sooner."""
        return self.busy[COMPUTE]

    @property
    def memory_bound(self) -> int:
        """Busy cycles of the shared DRAM port (every LOAD and STORE): no schedule finishes
        sooner."""
        return self.busy[LOAD] + self.busy[STORE]

    def chrome_trace(self, instrs, clock_mhz: float) -> dict:
        """The cycle-mode trace as Chrome trace-event JSON (``chrome://tracing``, Perfetto):
        one complete event per instruction on the thread of its unit, times in microseconds
        at ``clock_mhz``. ``instrs``: the program that ran."""
        events = [{"ph": "M", "pid": 0, "tid": u, "name": "thread_name",
                   "args": {"name": isa.UNITS[u]}} for u in range(3)]
        for pc, u, start, end in self.trace:
            events.append({"ph": "X", "pid": 0, "tid": u, "name": instrs[pc].kind.name,
                           "ts": start / clock_mhz, "dur": (end - start) / clock_mhz,
                           "args": {"pc": pc, "cycles": end - start}})
        return {"traceEvents": events, "displayTimeUnit": "ns"}


class Simulator:
    """Runs an NPU instruction stream against DRAM (see the module docstring).

    ``run(instrs, dram, mode="functional" | "cycle", check=True) -> Stats``; ``dram`` (flat
    uint8) is read and written in place. Raises ``NPUError`` for a malformed program (field
    out of range, token pop with no push, unbalanced tokens at FINISH, deadlock, FINISH not
    last) and ``HazardError`` for an unordered scratchpad access.
    """

    def __init__(self, cfg: NPUConfig):
        self.cfg = cfg

    def run(self, instrs, dram: np.ndarray, mode: str = "functional", check: bool = True):
        if mode not in ("functional", "cycle"):
            raise NPUError(f"simulator mode {mode!r}: use 'functional' or 'cycle'")
        instrs = list(instrs)
        if not instrs or not isinstance(instrs[-1], isa.Finish):
            raise NPUError("an NPU program must end with FINISH")
        if any(isinstance(i, isa.Finish) for i in instrs[:-1]):
            raise NPUError("FINISH must be the last instruction of an NPU program")
        self.state = State(self.cfg, dram)
        self.checker = HazardChecker(self.cfg) if check else None
        self.clock = [np.zeros(3, np.int64) for _ in range(3)]
        self.queues = {(a, b): deque() for a in range(3) for b in range(3) if abs(a - b) == 1}
        self.stats = Stats(mode)
        units = [UNIT_INDEX[isa.unit_of(i)] for i in instrs]
        for pc, (ins, u) in enumerate(zip(instrs, units)):
            if (u == LOAD and (ins.pop_prev or ins.push_prev)) or \
                    (u == STORE and (ins.pop_next or ins.push_next)):
                raise NPUError(f"instruction {pc} ({ins.kind.name}): the {isa.UNITS[u]} unit "
                               f"has no {'previous' if u == LOAD else 'next'} unit to exchange "
                               f"tokens with")
        with _one_blas_thread():
            if mode == "functional":
                for pc, ins in enumerate(instrs):
                    self._step(pc, ins, units[pc], 0)
            else:
                self._run_cycles(instrs, units)
        self._finish_check(instrs, units)
        return self.stats

    def _pops(self, ins, u):
        out = []
        if ins.pop_prev:
            out.append((u - 1, u))
        if ins.pop_next:
            out.append((u + 1, u))
        return out

    def _step(self, pc, ins, u, end_time):
        """Pop, check, execute, push one instruction (its tokens get ``end_time``)."""
        vc = self.clock[u]
        for q in self._pops(ins, u):
            if not self.queues[q]:
                raise NPUError(f"instruction {pc} ({ins.kind.name}): pops a token from the "
                               f"{isa.UNITS[q[0]]} unit that no earlier instruction pushed "
                               f"(a missing push, or a pop too many)")
            _t, tok = self.queues[q].popleft()
            np.maximum(vc, tok, out=vc)
        vc[u] += 1
        sem = SEMANTICS[ins.kind.name]
        accesses = sem.execute(self.state, ins, pc)
        if self.checker is not None:
            for buf, idx, write in accesses:
                self.checker.access(buf, idx, write, u, vc, pc, ins.kind.name)
        s = self.stats
        s.instructions[u] += 1
        if sem.dram_bytes is not None:
            r, w = sem.dram_bytes(self.cfg, ins)
            s.dram_read += r
            s.dram_written += w
        if sem.gemm_uops is not None:
            s.gemm_uops += sem.gemm_uops(ins)
        if ins.push_prev:
            self.queues[(u, u - 1)].append((end_time, vc.copy()))
        if ins.push_next:
            self.queues[(u, u + 1)].append((end_time, vc.copy()))

    def _run_cycles(self, instrs, units):
        cfg, s = self.cfg, self.stats
        per_unit = [[pc for pc, u in enumerate(units) if u == k] for k in range(3)]
        ptr = [0, 0, 0]
        free = [0, 0, 0]
        port_free = 0
        while True:
            best = None
            for u in range(3):
                if ptr[u] >= len(per_unit[u]):
                    continue
                pc = per_unit[u][ptr[u]]
                ins = instrs[pc]
                ready, blocked = free[u], False
                for q in self._pops(ins, u):
                    if not self.queues[q]:
                        blocked = True
                        break
                    ready = max(ready, self.queues[q][0][0])
                if blocked:
                    continue
                is_dma = SEMANTICS[ins.kind.name].dram_bytes is not None
                start = max(ready, port_free) if is_dma else ready
                if best is None or (start, pc) < (best[0], best[1]):
                    best = (start, pc, u, ready, is_dma)
            if best is None:
                if any(ptr[u] < len(per_unit[u]) for u in range(3)):
                    waiting = [f"{isa.UNITS[u]} at instruction {per_unit[u][ptr[u]]}"
                               for u in range(3) if ptr[u] < len(per_unit[u])]
                    raise NPUError("NPU deadlock: every unit waits for a token that is never "
                                   "pushed: " + ", ".join(waiting))
                break
            start, pc, u, ready, is_dma = best
            ins = instrs[pc]
            cost = int(SEMANTICS[ins.kind.name].cost(cfg, ins))
            end = start + cost
            s.token_stall[u] += ready - free[u]
            s.port_stall[u] += start - ready
            s.busy[u] += cost
            s.trace.append((pc, u, start, end))
            self._step(pc, ins, u, end)
            free[u] = end
            if is_dma:
                port_free = end
            ptr[u] += 1
            if isinstance(ins, isa.Finish):
                s.cycles = end

    def _finish_check(self, instrs, units):
        left = {f"{isa.UNITS[a]}->{isa.UNITS[b]}": len(q) for (a, b), q in self.queues.items()
                if q}
        if left:
            raise NPUError(f"tokens do not balance at FINISH: {left} pushed but never popped")
        fin = self.clock[COMPUTE]
        last = [sum(1 for u in units if u == k) for k in range(3)]
        for k in (LOAD, STORE):
            if fin[k] < last[k]:
                raise NPUError(f"FINISH is not ordered after the last {isa.UNITS[k]} "
                               f"instruction: no token chain from it to FINISH")
        if self.stats.mode == "cycle":
            self.stats.cycles = max(self.stats.cycles, max(e for _, _, _, e in self.stats.trace))
