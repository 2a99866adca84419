"""Kernel generation for the NPU: an int8 conv2d / dense (bias, ReLU, requantize) -> a tiled,
tensorized, double-buffered instruction stream with its dependency tokens.

Steps (docs/npu.md, "Kernel generation"):

1. **Layout.** Activations are packed NCHW{16}c (``(ICB, H, W, 16)``, channels zero-padded to
   whole blocks), weights ``(OCB, ICB, KH, KW, 16o, 16i)`` and the bias ``(OCB, 16)`` int32,
   all at compile time into the program's DRAM image; the output is ``(OCB, OH, OW, 16)``.
2. **Tiling.** An output tile is ``t_ocb`` channel blocks x ``t_oh`` rows x ``t_ow`` columns,
   its reduction split into chunks of ``t_icb`` input-channel blocks. The sizes are chosen by
   an analytic cost model among those whose scratchpad footprint fits (static allocation,
   checked; a layer with no fitting tile is a ``TargetError`` naming the scratchpad). The last
   tile along a spatial or output-channel axis is shifted back to end at the edge (it
   recomputes a few outputs) so that every tile has one shape; a reduction tail is a shorter
   micro-op kernel. With one chunk, weights and bias stay resident for all spatial tiles of
   an output-channel group.
3. **DMA.** Each input block of a tile is one 2-D LOAD with the convolution's zero padding
   made on the fly; weights and bias are LOADs, the output tile one STORE per channel block.
4. **Tensorize.** A chunk is one accumulate instruction of the selected intrinsic
   (``intrin.select_intrinsic``): micro-ops enumerate ``(oc block, ic block, kh, kw)``, the
   instruction's two loops run over the tile's rows and columns with affine factors.
5. **Epilogue** on the ALU (bias add, multiplier, rounding shift, clip), per the intrinsic.
6. **Virtual threads.** With ``virtual_threads=2`` consecutive tiles alternate scratchpad
   halves, so loads of tile ``i+1`` and the store of tile ``i-1`` overlap compute of tile
   ``i``; the tokens (load->compute after a tile's loads, compute->load when a half is free
   again, compute->store, store->compute) are inserted by the generator, and the ones no
   later instruction waits for are left out so that tokens balance at FINISH.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import NPUError, TargetError
from . import isa
from .config import NPUConfig, load_config
from .intrin import Requant, select_intrinsic
from .sim import Simulator, Stats

ALIGN = 256


def _starts(n, t):
    """Tile starts along an axis of length ``n`` with tile ``t <= n``; the last is shifted
    back to end at ``n``."""
    if t >= n:
        return [0]
    return list(range(0, n - t, t)) + [n - t]


@dataclass(frozen=True)
class ConvShape:
    """An int8 2-D convolution (batch 1, groups 1, dilation 1): input ``(1, C, H, W)``,
    weight ``(O, C, KH, KW)``, ``pads`` (top, left, bottom, right)."""

    C: int
    H: int
    W: int
    O: int
    KH: int
    KW: int
    strides: tuple = (1, 1)
    pads: tuple = (0, 0, 0, 0)

    @property
    def OH(self):
        return (self.H + self.pads[0] + self.pads[2] - self.KH) // self.strides[0] + 1

    @property
    def OW(self):
        return (self.W + self.pads[1] + self.pads[3] - self.KW) // self.strides[1] + 1

    @property
    def macs(self):
        return self.O * self.C * self.KH * self.KW * self.OH * self.OW


@dataclass(frozen=True)
class Tiling:
    """Tile sizes (in blocks / rows / columns) and the virtual-thread count."""

    t_ocb: int
    t_oh: int
    t_ow: int
    t_icb: int
    vthreads: int
    IHt: int
    IWt: int

    @property
    def P(self):
        return self.t_oh * self.t_ow

    @classmethod
    def make(cls, s: "ConvShape", t_ocb, t_oh, t_ow, t_icb, vthreads=2) -> "Tiling":
        """A tiling of ``s`` with the input tile derived from the output tile."""
        t_oh, t_ow = min(t_oh, s.OH), min(t_ow, s.OW)
        return cls(t_ocb, t_oh, t_ow, t_icb, vthreads, (t_oh - 1) * s.strides[0] + s.KH,
                   (t_ow - 1) * s.strides[1] + s.KW)


def _footprint_ok(cfg, s: ConvShape, t, nvt):
    t_ocb, t_oh, t_ow, t_icb = t
    kk = s.KH * s.KW
    iht = (t_oh - 1) * s.strides[0] + s.KH
    iwt = (t_ow - 1) * s.strides[1] + s.KW
    fails = []
    if t_icb * iht * iwt > cfg.depth("inp") // nvt:
        fails.append("inp")
    if t_ocb * t_icb * kk > cfg.depth("wgt") // nvt:
        fails.append("wgt")
    if t_ocb * (t_oh * t_ow + 1) > cfg.depth("acc") // nvt:
        fails.append("acc")
    if 2 * nvt * nvt * t_ocb * (t_icb * kk + 1) + nvt * nvt * t_ocb > cfg.depth("uop"):
        fails.append("uop")
    if s.strides[0] * iwt >= 1 << 11 or t_ow >= 1 << 11:
        fails.append("inp")  # loop factors of the GEMM instruction
    return fails


def choose_tiling(cfg: NPUConfig, s: ConvShape, vthreads: int = 2) -> Tiling:
    """The tile sizes of the lowest estimated cycle count that fit the scratchpads.

    Raises ``TargetError`` naming the scratchpad when not even a 1x1x1x1-block tile fits.
    """
    bi, bo = cfg.block_in, cfg.block_out
    icb_n, ocb_n = -(-s.C // bi), -(-s.O // bo)
    oh, ow = s.OH, s.OW
    kk = s.KH * s.KW

    def cands(n):
        return sorted({-(-n // k) for k in range(1, n + 1)}, reverse=True)

    best = None
    for t_icb in cands(icb_n):
        n_k = -(-icb_n // t_icb)
        for t_ocb in cands(ocb_n):
            if _footprint_ok(cfg, s, (t_ocb, 1, 1, t_icb), vthreads):
                continue
            for t_ow in cands(ow):
                if _footprint_ok(cfg, s, (t_ocb, 1, t_ow, t_icb), vthreads):
                    continue
                for t_oh in cands(oh):
                    t = (t_ocb, t_oh, t_ow, t_icb)
                    if _footprint_ok(cfg, s, t, vthreads):
                        continue
                    iht = (t_oh - 1) * s.strides[0] + s.KH
                    iwt = (t_ow - 1) * s.strides[1] + s.KW
                    n_sp = len(_starts(oh, t_oh)) * len(_starts(ow, t_ow))
                    n_g = len(_starts(ocb_n, t_ocb))
                    tiles = n_sp * n_g
                    comp = tiles * t_ocb * t_oh * t_ow * (icb_n * kk + 8)
                    inp_b = tiles * icb_n * iht * iwt * bi
                    wgt_b = (n_g if n_k == 1 else tiles) * t_ocb * icb_n * kk * bi * bo
                    out_b = tiles * t_ocb * t_oh * t_ow * bo
                    n_dma = tiles * (icb_n + t_ocb + n_k)
                    mem = (inp_b + wgt_b + out_b) / cfg.dram_bytes_per_cycle + n_dma * (
                        cfg.dram_latency_cycles + cfg.dma_setup_cycles)
                    cost = max(comp, mem) if vthreads > 1 else comp + mem
                    key = (cost, mem, -t_oh * t_ow)
                    if best is None or key < best[0]:
                        best = (key, Tiling(t_ocb, t_oh, t_ow, t_icb, vthreads, iht, iwt))
    if best is None:
        fails = _footprint_ok(cfg, s, (1, 1, 1, 1), vthreads)
        buf = fails[0] if fails else "uop"
        raise TargetError(
            f"NPU config {cfg.name!r}: the {buf} scratchpad ({cfg.depth(buf)} entries, "
            f"{vthreads} virtual thread(s)) cannot hold one tile of the {s.KH}x{s.KW} "
            f"convolution {s.C}->{s.O} channels; use a config with a larger "
            f"{buf.upper()}_BUFF_BYTES or virtual_threads=1")
    return best[1]


def pack_input(x: np.ndarray, block: int = 16) -> np.ndarray:
    """(1, C, H, W) int8 -> NCHW{block}c ``(ceil(C/block), H, W, block)``, zero-filled."""
    _, c, h, w = x.shape
    cb = -(-c // block)
    out = np.zeros((cb * block, h, w), np.int8)
    out[:c] = x[0]
    return np.ascontiguousarray(out.reshape(cb, block, h, w).transpose(0, 2, 3, 1))


def pack_weight(w: np.ndarray, bo: int = 16, bi: int = 16) -> np.ndarray:
    """(O, C, KH, KW) int8 -> ``(OCB, ICB, KH, KW, bo, bi)``, zero-filled."""
    o, c, kh, kw = w.shape
    ob, ib = -(-o // bo), -(-c // bi)
    out = np.zeros((ob * bo, ib * bi, kh, kw), np.int8)
    out[:o, :c] = w
    return np.ascontiguousarray(out.reshape(ob, bo, ib, bi, kh, kw).transpose(0, 2, 4, 5, 1, 3))


def unpack_output(y: np.ndarray, o: int) -> np.ndarray:
    """``(OCB, OH, OW, 16)`` -> ``(1, O, OH, OW)``."""
    ob, oh, ow, b = y.shape
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2).reshape(1, ob * b, oh, ow)[:, :o])


@dataclass
class Program:
    """An NPU program: instructions, micro-ops and its DRAM image. ``regions`` maps
    ``"uop" | "inp" | "wgt" | "bias" | "out"`` to ``(byte offset, bytes)``; ``image`` holds
    the compile-time contents (micro-ops, packed weights and bias)."""

    instrs: list
    uops: list
    regions: dict
    image: np.ndarray

    def text(self) -> str:
        from .asm import disassemble
        return disassemble(self.instrs, self.uops)

    def binary(self) -> bytes:
        return isa.encode_program(self.instrs)


@dataclass
class NPUKernel:
    """A compiled layer: ``run(x)`` -> ``(y, Stats)``. ``x``/``y`` are the layer's int8 arrays
    in their natural layout (conv: NCHW; dense: (N, K) / (N, M))."""

    cfg: NPUConfig
    shape: ConvShape
    tiling: Tiling
    intrinsic: str
    program: Program
    dense: bool = False

    @property
    def macs(self) -> int:
        return self.shape.macs

    def run(self, x: np.ndarray, mode: str = "functional", check: bool = True):
        """Simulate on input ``x``; returns ``(y int8, Stats)``. Raises ``InputError`` for a
        wrong shape or dtype."""
        from ..errors import InputError
        s = self.shape
        want = (s.H, s.C) if self.dense else (1, s.C, s.H, s.W)
        if x.shape != want or x.dtype != np.int8:
            raise InputError(f"NPU kernel input must be int8 of shape {want}, got {x.dtype} "
                             f"{x.shape}")
        xi = x.T.reshape(1, s.C, s.H, 1) if self.dense else x
        dram = self.program.image.copy()
        off, n = self.program.regions["inp"]
        dram[off:off + n] = pack_input(xi, self.cfg.block_in).view(np.uint8).ravel()
        stats = Simulator(self.cfg).run(self.program.instrs, dram, mode=mode, check=check)
        off, n = self.program.regions["out"]
        ob = -(-s.O // self.cfg.block_out)
        y = dram[off:off + n].view(np.int8).reshape(ob, s.OH, s.OW, self.cfg.block_out)
        y = unpack_output(y, s.O)
        if self.dense:
            y = np.ascontiguousarray(y[0, :, :, 0].T)
        return y, stats


class _Emitter:
    """Instructions under construction (dicts) so flags can be set on the first/last of a
    group; frozen into dataclasses at the end."""

    def __init__(self):
        self.items = []

    def emit(self, cls, **kw):
        self.items.append([cls, kw])
        return len(self.items) - 1

    def flag(self, idx, name):
        self.items[idx][1][name] = True

    def freeze(self):
        return [cls(**kw) for cls, kw in self.items]


def lower_conv2d(weight, bias=None, *, input_shape, strides=(1, 1), pads=(0, 0, 0, 0),
                 multiplier=1, shift=0, relu=False, virtual_threads=2, intrinsic=None,
                 config: NPUConfig | None = None, tiling: Tiling | None = None) -> NPUKernel:
    """Compile one int8 convolution (+ bias, requantize, ReLU) for the NPU.

    Args:
        weight: (O, C, KH, KW) int8. bias: (O,) int32 or None.
        input_shape: (1, C, H, W). strides: (sh, sw). pads: (top, left, bottom, right), each
            at most 15 (the DMA's padding fields).
        multiplier, shift, relu: the requantize of :class:`ember.npu.intrin.Requant`.
        virtual_threads: 1 or 2 (double buffering). intrinsic: force ``"gemm"`` or
            ``"gemm_rs"`` (default: the registry's best match).
        config: the hardware (default: ``load_config()``).

    Returns an :class:`NPUKernel` whose ``run(x)`` simulates it. Raises ``NPUError`` for an
    unsupported form, ``TargetError`` when no tile fits the scratchpads.
    """
    cfg = config or load_config()
    weight = np.asarray(weight)
    if weight.dtype != np.int8 or weight.ndim != 4:
        raise NPUError(f"NPU conv2d: weight must be int8 (O, C, KH, KW), got {weight.dtype} "
                       f"{weight.shape}")
    if len(input_shape) != 4 or input_shape[0] != 1 or input_shape[1] != weight.shape[1]:
        raise NPUError(f"NPU conv2d: input shape {tuple(input_shape)} must be (1, C, H, W) "
                       f"with C = {weight.shape[1]} (batch 1, groups 1)")
    if bias is not None:
        bias = np.asarray(bias)
        if bias.dtype != np.int32 or bias.shape != (weight.shape[0],):
            raise NPUError(f"NPU conv2d: bias must be int32 ({weight.shape[0]},), got "
                           f"{bias.dtype} {bias.shape}")
    if len(strides) != 2 or any(int(st) < 1 for st in strides):
        raise NPUError(f"NPU conv2d: strides {tuple(strides)} must be two integers >= 1 "
                       f"(stride_h, stride_w)")
    if len(pads) != 4:
        raise NPUError(f"NPU conv2d: pads {tuple(pads)} must be four integers (top, left, "
                       f"bottom, right)")
    if any(not 0 <= p <= 15 for p in pads):
        raise NPUError(f"NPU conv2d: pads {tuple(pads)} must each be in [0, 15] (the DMA's "
                       f"4-bit padding fields)")
    if virtual_threads not in (1, 2):
        raise NPUError(f"virtual_threads={virtual_threads}: use 1 or 2")
    o, c, kh, kw = weight.shape
    s = ConvShape(c, input_shape[2], input_shape[3], o, kh, kw, tuple(strides), tuple(pads))
    if s.OH < 1 or s.OW < 1:
        raise NPUError(f"NPU conv2d: empty output for {s}")
    rq = Requant(int(multiplier), int(shift), bool(relu), bias is not None)
    it = select_intrinsic(rq, intrinsic)
    if it.block != (cfg.batch, cfg.block_in, cfg.block_out):
        raise TargetError(f"NPU intrinsic {it.name} computes {it.block} blocks; the config "
                          f"has {(cfg.batch, cfg.block_in, cfg.block_out)}")
    if tiling is None:
        t = choose_tiling(cfg, s, virtual_threads)
    else:
        t = Tiling.make(s, min(tiling.t_ocb, -(-s.O // cfg.block_out)), tiling.t_oh,
                        tiling.t_ow, min(tiling.t_icb, -(-s.C // cfg.block_in)),
                        tiling.vthreads)
        fails = _footprint_ok(cfg, s, (t.t_ocb, t.t_oh, t.t_ow, t.t_icb), t.vthreads)
        if fails:
            raise TargetError(f"NPU: tiling {t} does not fit the {fails[0]} scratchpad "
                              f"({cfg.depth(fails[0])} entries, {t.vthreads} virtual "
                              f"thread(s)); use smaller tiles")
    prog = _generate(cfg, s, t, rq, it, weight, bias)
    return NPUKernel(cfg, s, t, it.name, prog)


def lower_dense(weight, bias=None, *, batch, multiplier=1, shift=0, relu=False,
                virtual_threads=2, intrinsic=None, config=None) -> NPUKernel:
    """Compile an int8 dense layer ``y (N, M) = requant(x (N, K) @ weight (M, K).T + bias)``:
    a 1x1 convolution over ``N`` positions (see :func:`lower_conv2d` for the arguments)."""
    weight = np.asarray(weight)
    if weight.dtype != np.int8 or weight.ndim != 2:
        raise NPUError(f"NPU dense: weight must be int8 (M, K), got {weight.dtype} "
                       f"{weight.shape}")
    k = lower_conv2d(weight[:, :, None, None], bias, input_shape=(1, weight.shape[1], batch, 1),
                     multiplier=multiplier, shift=shift, relu=relu,
                     virtual_threads=virtual_threads, intrinsic=intrinsic, config=config)
    k.dense = True
    return k


def _generate(cfg, s: ConvShape, t: Tiling, rq: Requant, it, weight, bias) -> Program:
    bi, bo = cfg.block_in, cfg.block_out
    icb_n, ocb_n = -(-s.C // bi), -(-s.O // bo)
    kk = s.KH * s.KW
    sh, sw = s.strides
    pt, pl = s.pads[0], s.pads[1]
    nvt = t.vthreads
    t_oh, t_ow = min(t.t_oh, s.OH), min(t.t_ow, s.OW)
    t_ocb, t_icb = min(t.t_ocb, ocb_n), min(t.t_icb, icb_n)
    iht, iwt, P = t.IHt, t.IWt, t_oh * t_ow
    chunks = [(c0, min(t_icb, icb_n - c0)) for c0 in range(0, icb_n, t_icb)]
    stationary = len(chunks) == 1
    inp_half, wgt_half, acc_half = (cfg.depth(b) // nvt for b in ("inp", "wgt", "acc"))

    # DRAM image
    regions, off = {}, 0
    eb = cfg.entry_bytes
    sizes = {"uop": cfg.depth("uop") * 4, "inp": icb_n * s.H * s.W * eb["inp"],
             "wgt": ocb_n * icb_n * kk * eb["wgt"], "bias": ocb_n * eb["acc"],
             "out": ocb_n * s.OH * s.OW * eb["out"]}
    for name in ("uop", "inp", "wgt", "bias", "out"):
        regions[name] = (off, sizes[name])
        off += -(-sizes[name] // ALIGN) * ALIGN
    image = np.zeros(off, np.uint8)
    wp = pack_weight(weight, bo, bi)
    image[regions["wgt"][0]:regions["wgt"][0] + wp.nbytes] = wp.view(np.uint8).ravel()
    if bias is not None:
        bp = np.zeros(ocb_n * bo, np.int32)
        bp[:s.O] = bias
        image[regions["bias"][0]:regions["bias"][0] + bp.nbytes] = bp.view(np.uint8)
    base = {k: regions[k][0] // eb["acc" if k == "bias" else k] for k in ("inp", "wgt", "bias")}
    base["out"] = regions["out"][0] // eb["out"]

    # micro-op kernels, allocated once each
    uops, kernels = [], {}

    def kernel(key, make):
        if key not in kernels:
            b = len(uops)
            uops.extend(make())
            kernels[key] = (b, len(uops))
        return kernels[key]

    def epi_kernel(acc_b, bias_b):
        return kernel(("epi", acc_b, bias_b), lambda: [
            isa.Uop(dst=acc_b + j * P, src=bias_b + j) for j in range(t_ocb)])

    def gemm_kernel(inp_b, wgt_b, acc_b, n_ic):
        return kernel(("gemm", inp_b, wgt_b, acc_b, n_ic), lambda: [
            isa.Uop(dst=acc_b + j * P, src=inp_b + ib * iht * iwt + a * iwt + b,
                    wgt=wgt_b + (j * t_icb + ib) * kk + a * s.KW + b)
            for j in range(t_ocb) for ib in range(n_ic) for a in range(s.KH)
            for b in range(s.KW)])

    e = _Emitter()
    uop_load = e.emit(isa.Load, mem=isa.MEM_UOP, sram_base=0, dram_base=regions["uop"][0] // 4,
                      y_size=1, x_size=1, x_stride=0)
    oc_starts = _starts(ocb_n, t_ocb)
    sp = [(a, b) for a in _starts(s.OH, t_oh) for b in _starts(s.OW, t_ow)]
    n_tiles = len(oc_starts) * len(sp)
    n_iter = n_tiles * len(chunks)
    i = tile = 0
    for g, oc0 in enumerate(oc_starts):
        wgt_g = (g % nvt) * wgt_half
        bias_b = (g % nvt) * acc_half + t_ocb * P
        for spi, (oh0, ow0) in enumerate(sp):
            acc_b = (tile % nvt) * acc_half
            for k, (ic0, n_ic) in enumerate(chunks):
                inp_b = (i % nvt) * inp_half
                wgt_b = wgt_g if stationary else (i % nvt) * wgt_half
                last_k = k == len(chunks) - 1
                # ---- load unit
                loads = []
                if spi == 0 and k == 0 and bias is not None:
                    loads.append(e.emit(isa.Load, mem=isa.MEM_ACC, sram_base=bias_b,
                                        dram_base=base["bias"] + oc0, y_size=1, x_size=t_ocb,
                                        x_stride=0))
                if (stationary and spi == 0) or not stationary:
                    if n_ic == t_icb:
                        loads.append(e.emit(
                            isa.Load, mem=isa.MEM_WGT, sram_base=wgt_b,
                            dram_base=base["wgt"] + (oc0 * icb_n + ic0) * kk, y_size=t_ocb,
                            x_size=n_ic * kk, x_stride=icb_n * kk))
                    else:
                        for j in range(t_ocb):
                            loads.append(e.emit(
                                isa.Load, mem=isa.MEM_WGT, sram_base=wgt_b + j * t_icb * kk,
                                dram_base=base["wgt"] + ((oc0 + j) * icb_n + ic0) * kk,
                                y_size=1, x_size=n_ic * kk, x_stride=0))
                r0, c0 = oh0 * sh - pt, ow0 * sw - pl
                yp0, xp0 = max(0, -r0), max(0, -c0)
                yp1, xp1 = max(0, r0 + iht - s.H), max(0, c0 + iwt - s.W)
                ny, nx = max(0, iht - yp0 - yp1), max(0, iwt - xp0 - xp1)
                for ib in range(n_ic):
                    loads.append(e.emit(
                        isa.Load, mem=isa.MEM_INP, sram_base=inp_b + ib * iht * iwt,
                        dram_base=base["inp"] + ((ic0 + ib) * s.H + max(r0, 0)) * s.W
                        + max(c0, 0), y_size=ny, x_size=nx, x_stride=s.W,
                        y_pad0=yp0, y_pad1=iht - yp0 - ny, x_pad0=xp0, x_pad1=iwt - xp0 - nx))
                if i >= nvt:
                    e.flag(loads[0], "pop_next")
                e.flag(loads[-1], "push_next")
                # ---- compute unit
                comp = []
                loop = dict(iter_out=t_oh, iter_in=t_ow, dst_fo=t_ow, dst_fi=1)
                if k == 0:
                    ub, ue = epi_kernel(acc_b, bias_b)
                    comp.append(e.emit(isa.Gemm, reset=1, uop_bgn=ub, uop_end=ue, src_fo=0,
                                       src_fi=0, **loop))
                    for op, use_imm, imm in it.pre_alu(rq):
                        comp.append(e.emit(isa.Alu, op=op, use_imm=use_imm, imm=imm,
                                           uop_bgn=ub, uop_end=ue, **loop))
                ub, ue = gemm_kernel(inp_b, wgt_b, acc_b, n_ic)
                ins = it.accumulate(last_k, rq, uop_bgn=ub, uop_end=ue, src_fo=sh * iwt,
                                    src_fi=sw, **loop)
                comp.append(e.emit(type(ins), **{f: getattr(ins, f) for f, _, _ in
                                                 ins.kind.fields}))
                if last_k:
                    ub, ue = epi_kernel(acc_b, bias_b)
                    for op, use_imm, imm in it.post_alu(rq):
                        comp.append(e.emit(isa.Alu, op=op, use_imm=use_imm, imm=imm,
                                           uop_bgn=ub, uop_end=ue, **loop))
                e.flag(comp[0], "pop_prev")
                if k == 0 and tile >= nvt:
                    e.flag(comp[0], "pop_next")
                if i + nvt < n_iter:
                    e.flag(comp[-1], "push_prev")
                if last_k:
                    e.flag(comp[-1], "push_next")
                    # ---- store unit
                    st = [e.emit(isa.Store, sram_base=acc_b + j * P,
                                 dram_base=base["out"] + ((oc0 + j) * s.OH + oh0) * s.OW + ow0,
                                 y_size=t_oh, x_size=t_ow, x_stride=s.OW)
                          for j in range(t_ocb)]
                    e.flag(st[0], "pop_prev")
                    if tile + nvt < n_tiles or tile == n_tiles - 1:
                        e.flag(st[-1], "push_prev")
                    tile += 1
                i += 1
    e.emit(isa.Finish, pop_next=True)
    if len(uops) > cfg.depth("uop"):
        raise TargetError(f"NPU: the uop scratchpad ({cfg.depth('uop')} entries) cannot hold "
                          f"the {len(uops)} micro-ops of this layer's tiling {t}")
    e.items[uop_load][1]["x_size"] = len(uops)
    words = isa.encode_uops(uops)
    image[regions["uop"][0]:regions["uop"][0] + words.nbytes] = words.view(np.uint8)
    return Program(e.freeze(), uops, regions, image)


def simulate(kernel: NPUKernel, x: np.ndarray, mode: str = "cycle") -> tuple:
    """``kernel.run(x, mode)`` plus the utilization ``macs / (cycles * macs_per_cycle)``."""
    y, st = kernel.run(x, mode=mode)
    util = kernel.macs / (st.cycles * kernel.cfg.macs_per_cycle) if st.cycles else 0.0
    return y, st, util


__all__ = ["ConvShape", "Tiling", "Program", "NPUKernel", "Stats", "choose_tiling",
           "lower_conv2d", "lower_dense", "pack_input", "pack_weight", "unpack_output",
           "simulate"]
