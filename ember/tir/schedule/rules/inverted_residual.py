"""The fused inverted-residual kernel (``nn.inverted_residual``, ``ember.ops.inverted_residual``):
1x1 expand convolution + activation -> 3x3 depthwise convolution + activation -> 1x1 project
convolution [+ residual], channels-last, built directly from the ``gemm`` and ``dwconv``
micro-kernels so that the expanded and depthwise activations never leave the core's caches.

Structure of the kernel (``inverted_residual_body``), for an ``(N, H, W, Cin)`` input and an
``(N, OH, OW, Cout)`` output at stride ``s``:

- the output rows are cut into *bands* of ``band`` rows; one parallel loop runs over the
  ``N x ceil(OH / band)`` bands (a band is a contiguous range of output rows);
- per band, on the stack (per thread): ``E (R, W + 2, Ce)`` holds the ``R = (band - 1) * s + 3``
  expanded input rows the band's depthwise windows read, with a zero column on each side (the
  horizontal padding) and zero rows for input rows outside the image (the vertical padding), so
  the depthwise micro-kernel runs its unguarded straight-line path everywhere; each expanded
  row is one ``gemm`` micro-kernel pass (``W x Ce``, reduction ``Cin``) with the bias and
  activation applied to the accumulators before the store (the micro-kernels' register
  epilogue, ``ember.codegen.microkernel.EPI_PARAMS``). Rows shared with the
  neighbouring band (``3 - s`` of them) are computed by both (the halo);
- ``D (band * OW, Ce)``: the depthwise output of the band (``dwconv`` micro-kernel, bias and
  activation on each block);
- the project GEMM reads ``D`` and writes the output rows in place, bias and residual added
  to each register tile before it leaves L1.

Without the expand convolution (MobileNetV2's first block) the depthwise micro-kernel reads the
input image directly (guarded path at the borders) and ``E`` does not exist.

The kernel is built once by the operator's compute with the ``scalar`` micro-kernels (portable,
what schedule level 1 and 0 run) and again by ``inverted_residual_rule`` for the target's SIMD
instruction set: the geometry travels in ``func.attrs["inverted_residual"]``
(``IRGeometry.to_attrs``). Register blocks come from the GEMM rule's ``choose_tile`` and the
depthwise rule's ``choose_dw_tile``.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

from ....errors import ScheduleError
from ....target import Target
from ...expr import AddressOf, Const, Var, binop
from ...stmt import Allocate, Buffer, For, IfThenElse, PrimFunc, Stmt, Store, seq
from ..schedule import Schedule
from ..tensorize import ISAS, MAX_ACCUMULATORS, gemm_kernel_call
from ..tensorize_dwconv import dwconv_kernel_call

OP = "nn.inverted_residual"
BAND_BYTES = 768 * 1024   # stack scratch per band (E + D): well inside a 2 MB L2
MIN_BANDS = 2             # bands per batch when the thread count is not known
BANDS_PER_THREAD = 2      # the rule's bands per batch and thread (balance when a core is busy)


@dataclass(frozen=True)
class IRGeometry:
    """Shapes and attributes of one fused inverted-residual block (all ints/floats, JSON-able).

    ``act_expand``/``act_dw``: ``(lo, hi)`` clamps of the two activations (``hi`` ``None`` for
    ReLU). ``pads``: ``(top, left, bottom, right)``, each 0 or 1. ``band``: output rows per
    band (0: chosen by ``choose_band``)."""

    n: int
    h: int
    w: int
    cin: int
    ce: int
    cout: int
    oh: int
    ow: int
    stride: int
    pads: tuple
    expand: bool
    residual: bool
    act_expand: tuple
    act_dw: tuple
    band: int = 0

    def to_attrs(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_attrs(d: dict) -> "IRGeometry":
        d = dict(d)
        for k in ("pads", "act_expand", "act_dw"):
            d[k] = tuple(d[k])
        return IRGeometry(**d)

    def rows_in(self, band: int) -> int:
        """Expanded input rows one band of ``band`` output rows reads."""
        return (band - 1) * self.stride + 3


def scratch_bytes(g: IRGeometry, band: int) -> int:
    """Bytes of the per-band scratch ``E`` + ``D`` (float32)."""
    e = g.rows_in(band) * (g.w + 2) * g.ce if g.expand else 0
    return 4 * (e + band * g.ow * g.ce)


def choose_band(g: IRGeometry, budget: int | None = None, min_bands: int | None = None) -> int:
    """Output rows per band: as many as the scratch budget allows (fewer halo rows computed
    twice) while each image still splits into ``ceil(min_bands / N)`` bands (work for every
    thread; the rule passes its thread count); rows spread evenly over the bands. Defaults: ``BAND_BYTES``, ``MIN_BANDS``."""
    budget = BAND_BYTES if budget is None else budget
    min_bands = MIN_BANDS if min_bands is None else min_bands
    fit = 1
    while fit < g.oh and scratch_bytes(g, fit + 1) <= budget:
        fit += 1
    want = -(-g.oh // max(1, -(-min_bands // g.n)))
    bo = max(1, min(fit, want))
    nb = -(-g.oh // bo)
    return -(-g.oh // nb)


def _clamp(lohi) -> tuple:
    """``(lo, hi)`` of an activation for a micro-kernel's register epilogue (infinite bounds
    as ``None``)."""
    return tuple(None if (b is None or math.isinf(b)) else float(b) for b in lohi)


_ids = [0]


def _var(name: str) -> Var:
    _ids[0] += 1
    return Var(f"{name}{_ids[0]}")


def _loop(extent: int, body, name: str = "i", kind: str = "serial") -> Stmt:
    """``for v in range(extent): body(v)`` (the body alone when the extent is 1)."""
    if extent <= 0:
        return seq([])
    v = _var(name)
    return For(v, int(extent), body(v), kind)


def _zero(buf: Buffer, flat0, count: int) -> Stmt:
    """``buf[flat0 : flat0 + count] = 0`` (flat elements), vectorized."""
    return _loop(count, lambda j: Store(buf, _unflatten(buf, flat0 + j), Const(0.0, "float32")),
                 "j", "vectorized")


def _unflatten(buf: Buffer, flat) -> tuple:
    """Indices of ``buf`` addressing flat element ``flat``: zeros, then ``flat`` in the last
    dim (the code generator flattens them back to ``flat``; buffers are contiguous)."""
    return tuple([Const(0, "int64")] * (len(buf.shape) - 1)) + (flat,)


def _addr(buf: Buffer, flat) -> AddressOf:
    return AddressOf(buf, _unflatten(buf, flat))


def inverted_residual_body(g: IRGeometry, x: Buffer, w1, wd: Buffer, w2: Buffer, bias: Buffer,
                           out: Buffer, isa: str) -> Stmt:
    """The loop program of the fused block (see the module doc) over buffers ``x (N, H, W,
    Cin)``, ``w1 (Cin, Ce)`` (``None`` without expand), ``wd (3, 3, Ce)``, ``w2 (Ce, Cout)``,
    ``bias`` (``[b_expand (Ce)] + b_dw (Ce) + b_project (Cout)``), ``out (N, OH, OW, Cout)``,
    with ``isa``'s micro-kernels (``avx512``, ``avx2`` or ``scalar``).

    Raises:
        ScheduleError: ``isa`` has no micro-kernels, or a geometry the kernel does not cover.
    """
    if isa not in ISAS:
        raise ScheduleError(f"{OP}: no micro-kernels for isa {isa!r} (known: {sorted(ISAS)})")
    if g.stride not in (1, 2) or any(p not in (0, 1) for p in g.pads):
        raise ScheduleError(f"{OP}: stride {g.stride} / pads {g.pads} not covered (stride 1 or "
                            f"2, pads 0 or 1)")
    lanes, max_acc = ISAS[isa], MAX_ACCUMULATORS[isa]
    from .depthwise import choose_dw_tile
    from .gemm import choose_tile
    f32 = "float32"
    s, (pt, pl, _, _) = g.stride, g.pads
    ce, cin, cout = g.ce, g.cin, g.cout
    bo = g.band or choose_band(g)
    nb = -(-g.oh // bo)
    R = g.rows_in(bo)
    WE = g.w + 2
    b_dw0 = ce if g.expand else 0
    b_pj0 = b_dw0 + ce
    p = _var("band")
    n = p // nb
    oh0 = (p % nb) * bo

    def band_body(E: Buffer | None, D: Buffer) -> Stmt:
        parts = []
        if g.expand:
            # zero columns (horizontal padding) of every row
            def zcols(r):
                return seq([_zero(E, (r * WE + col) * ce, ce) for col in (0, WE - 1)])
            parts.append(_loop(R, zcols, "r"))
            mr, nr = choose_tile(g.w, ce, lanes, max_acc) or (1, 1)

            def ih_of(r):
                return oh0 * s - pt + r

            def inside(r):
                return binop("and", binop("ge", ih_of(r), Const(0, "int64")),
                             binop("lt", ih_of(r), Const(g.h, "int64")))

            def tile(r, mt, nt):
                c0 = (r * WE + 1 + mt * mr) * ce + nt * nr
                b0 = _addr(bias, nt * nr)
                return gemm_kernel_call(
                    isa, f32, mr, nr, _addr(E, c0),
                    _addr(x, ((n * g.h + ih_of(r)) * g.w + mt * mr) * cin),
                    _addr(w1, nt * nr), ce, cin, [(cin, 1, ce)], 0,
                    epi=(True, False) + _clamp(g.act_expand), epi_args=(b0, b0, 0))
            # weight panels outside the rows: each (Cin x nr) panel is reused by every row
            parts.append(_loop(ce // nr, lambda nt: _loop(R, lambda r: IfThenElse(
                inside(r), _loop(g.w // mr, lambda mt: tile(r, mt, nt), "mt")), "r"), "nt"))
            parts.append(_loop(R, lambda r: IfThenElse(
                ~inside(r), _zero(E, (r * WE + 1) * ce, g.w * ce)), "r"))
        # depthwise: D[orow, ow, c] over the band's rows
        wr, nrd = choose_dw_tile(g.ow, ce, lanes, max_acc)
        if g.expand:
            dparams = (wr, nrd, 3, 3, s, 1, 1, R, WE, WE * ce, ce, 3 * ce, ce, ce, 0)
        else:
            dparams = (wr, nrd, 3, 3, s, 1, 1, g.h, g.w, g.w * ce, ce, 3 * ce, ce, ce, 1)

        def drow(orow):
            def blk(wt, ct):
                d0 = (orow * g.ow + wt * wr) * ce + ct * nrd
                if g.expand:
                    src, ih0, iw0 = _addr(E, ct * nrd), orow * s, wt * (wr * s) + (1 - pl)
                else:
                    src = _addr(x, n * (g.h * g.w * ce) + ct * nrd)
                    ih0, iw0 = (oh0 + orow) * s - pt, wt * (wr * s) - pl
                b0 = _addr(bias, b_dw0 + ct * nrd)
                return dwconv_kernel_call(isa, f32, dparams, _addr(D, d0), src,
                                          _addr(wd, ct * nrd), ih0, iw0, 0,
                                          epi=(True, False) + _clamp(g.act_dw),
                                          epi_args=(b0, b0, 0))
            body = _loop(g.ow // wr, lambda wt: _loop(ce // nrd, lambda ct: blk(wt, ct), "ct"),
                         "wt")
            return IfThenElse(binop("lt", oh0 + orow, Const(g.oh, "int64")), body)
        parts.append(_loop(bo, drow, "orow"))
        # project: out rows of the band
        mp, np_ = choose_tile(g.ow, cout, lanes, max_acc) or (1, 1)

        def ptile(orow, mt, nt):
            o0 = ((n * g.oh + oh0 + orow) * g.ow + mt * mp) * cout + nt * np_
            b0 = _addr(bias, b_pj0 + nt * np_)
            # the residual: stride 1 and Cin == Cout, so x has the output's layout
            return gemm_kernel_call(isa, f32, mp, np_, _addr(out, o0),
                                    _addr(D, (orow * g.ow + mt * mp) * ce),
                                    _addr(w2, nt * np_), cout, ce, [(ce, 1, cout)], 0,
                                    epi=(True, g.residual, None, None),
                                    epi_args=(b0, _addr(x, o0) if g.residual else b0, cout))

        def prow(orow, nt):
            return IfThenElse(binop("lt", oh0 + orow, Const(g.oh, "int64")),
                              _loop(g.ow // mp, lambda mt: ptile(orow, mt, nt), "mt"))
        # weight panels outside the rows (as the expand GEMM)
        parts.append(_loop(cout // np_, lambda nt: _loop(bo, lambda orow: prow(orow, nt),
                                                         "orow"), "nt"))
        return seq(parts)

    D = Buffer(f"irD{_ids[0]}", (bo * g.ow, ce), f32, scope="local")
    if g.expand:
        E = Buffer(f"irE{_ids[0]}", (R, WE, ce), f32, scope="local")
        inner = Allocate(E, Allocate(D, band_body(E, D)))
    else:
        inner = Allocate(D, band_body(None, D))
    return For(p, g.n * nb, inner, "parallel")


def kernel_buffers(params: list, g: IRGeometry) -> tuple:
    """``(x, w1 | None, wd, w2, bias, out)`` from the kernel parameters ``params`` (inputs in
    the operator's order, then the output)."""
    ps = list(params)
    if g.expand:
        x, w1, wd, w2, bias, out = ps
    else:
        (x, wd, w2, bias, out), w1 = ps, None
    return x, w1, wd, w2, bias, out


def inverted_residual_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """The kernel of an ``nn.inverted_residual`` binding rebuilt with ``target``'s SIMD
    micro-kernels (the compute built it with the scalar ones); ``None`` for other kernels.
    Unless the graph forced a band height, each thread gets ``BANDS_PER_THREAD`` bands
    (``target.num_threads``, else the CPU count): more bands balance better when another
    process holds a core (the thread pool steals whole bands), fewer recompute fewer halo rows
    (``docs/performance.md``)."""
    geo = func.attrs.get("inverted_residual")
    if func.attrs.get("op") != OP or geo is None or target.isa not in ISAS:
        return None
    g = IRGeometry.from_attrs(geo)
    if not g.band:
        threads = target.num_threads or os.cpu_count() or 1
        g = IRGeometry(**{**g.to_attrs(),
                          "band": choose_band(g, min_bands=BANDS_PER_THREAD * threads)})
    body = inverted_residual_body(g, *kernel_buffers(func.params, g), target.isa)
    return Schedule(PrimFunc(func.name, list(func.params), body, dict(func.attrs)))


__all__ = ["IRGeometry", "choose_band", "scratch_bytes", "inverted_residual_body",
           "inverted_residual_rule", "BAND_BYTES", "MIN_BANDS"]
