"""The fused inverted-residual kernel (``nn.inverted_residual``, ``ember.ops.inverted_residual``):
1x1 expand convolution + activation -> 3x3 depthwise convolution + activation -> 1x1 project
convolution [+ residual], channels-last, built directly from the ``gemm`` and ``dwconv``
micro-kernels so that the expanded and depthwise activations never leave the core's caches.

Structure of the kernel (``inverted_residual_body``), for an ``(N, H, W, Cin)`` input and an
``(N, OH, OW, Cout)`` output at stride ``s``:

- the output rows are cut into *bands* of ``band`` rows; one parallel loop runs over the
  ``N x ceil(OH / band)`` bands (a band is a contiguous range of output rows);
- per band, on the stack (per thread): ``E (3, W + 2, Ce)``, a ring of the three expanded input
  rows one output row's depthwise windows read (input row ``ih`` in slot ``ih mod 3``), with a
  zero column on each side (the horizontal padding); a row outside the image is a zero row
  (the vertical padding), so the depthwise micro-kernel runs its unguarded straight-line path
  everywhere. Output row by output row, the ``s`` new expanded rows (all three at the band's
  first row: the halo shared with the previous band is computed by both) are each one ``gemm``
  micro-kernel pass (``W x Ce``, reduction ``Cin``, weight panels outer) with the bias and
  activation applied to the accumulators before the store (the micro-kernels' register
  epilogue, ``ember.codegen.microkernel.EPI_PARAMS``);
- ``D (OW, Ce)``: the output row's depthwise result, three ``dwconv`` passes of one tap row
  each (one per ring slot: the slots are not contiguous in row order), the last with the bias
  and activation epilogue; it stays in L1 for
- the project GEMM, which writes the output row in place, bias and residual added in its
  register epilogue.

A band's working set is three expanded rows plus one depthwise row (MobileNetV2's largest:
3 x 114 x 96 + 56 x 96 floats = 153 KB), whatever the band's height, so the band count is
chosen for the threads alone (``BANDS_PER_THREAD``).

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
from dataclasses import asdict, dataclass, replace

from ....errors import ScheduleError
from ....target import Target
from ...expr import AddressOf, Const, Var, binop
from ...stmt import Allocate, Buffer, For, IfThenElse, PrimFunc, Stmt, Store, seq
from ..schedule import Schedule
from ..tensorize import ISAS, MAX_ACCUMULATORS, gemm_kernel_call
from ..tensorize_dwconv import dwconv_kernel_call

OP = "nn.inverted_residual"
MIN_BANDS = 2             # bands per batch when the thread count is not known
STACK_BYTES = 512 * 1024  # largest per-thread scratch kept on the stack (MobileNetV2: 153 KB)
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
        """The geometry as a JSON-able dict (``func.attrs["inverted_residual"]``)."""
        return asdict(self)

    @staticmethod
    def from_attrs(d: dict) -> "IRGeometry":
        """The geometry of a ``to_attrs`` dict (lists from JSON become tuples again).

        Raises:
            TypeError: ``d`` lacks a field or has an unknown one."""
        d = dict(d)
        for k in ("pads", "act_expand", "act_dw"):
            d[k] = tuple(d[k])
        return IRGeometry(**d)


def choose_band(g: IRGeometry, min_bands: int | None = None) -> int:
    """Output rows per band: each image split into ``ceil(min_bands / N)`` bands (default
    ``MIN_BANDS``; the rule passes ``BANDS_PER_THREAD`` x its thread count), rows spread evenly.
    Fewer bands compute fewer halo rows twice (``3 - stride`` per band boundary)."""
    min_bands = MIN_BANDS if min_bands is None else min_bands
    bo = -(-g.oh // max(1, -(-min_bands // g.n)))
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
    """``for v in range(extent): body(v)`` (nothing for an empty range)."""
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
    WE = g.w + 2
    b_dw0 = ce if g.expand else 0
    b_pj0 = b_dw0 + ce
    p = _var("band")
    n = p // nb
    oh0 = (p % nb) * bo

    def band_body(E: Buffer | None, D: Buffer) -> Stmt:
        """One band, output row by output row (see the module doc)."""
        parts = []
        wr, nrd = choose_dw_tile(g.ow, ce, lanes, max_acc)
        mp, np_ = choose_tile(g.ow, cout, lanes, max_acc) or (1, 1)
        if g.expand:
            parts.append(_loop(3, lambda r: seq([_zero(E, (r * WE + col) * ce, ce)
                                                 for col in (0, WE - 1)]), "r"))
            mr, nr = choose_tile(g.w, ce, lanes, max_acc) or (1, 1)

            def erow(ih):  # expanded input row ih into ring slot ih mod 3 (ih >= -1)
                slot = (ih + 3) % 3

                def tile(mt, nt):
                    b0 = _addr(bias, nt * nr)
                    return gemm_kernel_call(
                        isa, f32, mr, nr, _addr(E, (slot * WE + 1 + mt * mr) * ce + nt * nr),
                        _addr(x, ((n * g.h + ih) * g.w + mt * mr) * cin),
                        _addr(w1, nt * nr), ce, cin, [(cin, 1, ce)], 0,
                        epi=(True, False) + _clamp(g.act_expand), epi_args=(b0, b0, 0))
                inside = binop("and", binop("ge", ih, Const(0, "int64")),
                               binop("lt", ih, Const(g.h, "int64")))
                return IfThenElse(inside, _loop(ce // nr, lambda nt: _loop(
                    g.w // mr, lambda mt: tile(mt, nt), "mt"), "nt"),
                    _zero(E, (slot * WE + 1) * ce, g.w * ce))
            dp1 = (wr, nrd, 1, 3, s, 1, 1, 1, WE, WE * ce, ce, 3 * ce, ce, ce, 0)
        else:
            dp3 = (wr, nrd, 3, 3, s, 1, 1, g.h, g.w, g.w * ce, ce, 3 * ce, ce, ce, 1)

        def orow_body(o):
            oh = oh0 + o
            steps = []
            if g.expand:
                def need(t):  # tap row t of output row o: new unless the previous row had it
                    ih = oh * s - pt + t
                    if t >= 3 - s:
                        return erow(ih)
                    return IfThenElse(binop("eq", o, Const(0, "int64")), erow(ih))
                steps.append(seq([need(t) for t in range(3)]))

            def dblk(wt, ct):
                d0 = wt * wr * ce + ct * nrd
                b0 = _addr(bias, b_dw0 + ct * nrd)
                epi = (True, False) + _clamp(g.act_dw)
                if not g.expand:
                    return dwconv_kernel_call(
                        isa, f32, dp3, _addr(D, d0), _addr(x, n * (g.h * g.w * ce) + ct * nrd),
                        _addr(wd, ct * nrd), oh * s - pt, wt * (wr * s) - pl, 0,
                        epi=epi, epi_args=(b0, b0, 0))
                calls = []
                for t in range(3):
                    slot = (oh * s - pt + t + 3) % 3
                    calls.append(dwconv_kernel_call(
                        isa, f32, dp1, _addr(D, d0), _addr(E, slot * (WE * ce) + ct * nrd),
                        _addr(wd, t * 3 * ce + ct * nrd), 0, wt * (wr * s) + (1 - pl),
                        int(t > 0), epi=epi if t == 2 else None,
                        epi_args=(b0, b0, 0) if t == 2 else ()))
                return seq(calls)
            steps.append(_loop(g.ow // wr, lambda wt: _loop(ce // nrd, lambda ct: dblk(wt, ct),
                                                             "ct"), "wt"))

            def ptile(mt, nt):
                o0 = ((n * g.oh + oh) * g.ow + mt * mp) * cout + nt * np_
                b0 = _addr(bias, b_pj0 + nt * np_)
                return gemm_kernel_call(isa, f32, mp, np_, _addr(out, o0),
                                        _addr(D, mt * mp * ce),
                                        _addr(w2, nt * np_), cout, ce, [(ce, 1, cout)], 0,
                                        epi=(True, g.residual, None, None),
                                        epi_args=(b0, _addr(x, o0) if g.residual else b0, cout))
            steps.append(_loop(cout // np_, lambda nt: _loop(g.ow // mp, lambda mt: ptile(mt, nt),
                                                             "mt"), "nt"))
            return IfThenElse(binop("lt", oh, Const(g.oh, "int64")), seq(steps))
        parts.append(_loop(bo, orow_body, "orow"))
        return seq(parts)

    # per-thread scratch on the stack; on the heap (one allocation per band) when it would
    # not comfortably fit a thread's stack
    scope = "local" if 4 * ce * (g.ow + (3 * WE if g.expand else 0)) <= STACK_BYTES \
        else "global"
    D = Buffer(f"irD{_ids[0]}", (g.ow, ce), f32, scope=scope)
    if g.expand:
        E = Buffer(f"irE{_ids[0]}", (3, WE, ce), f32, scope=scope)
        return For(p, g.n * nb, Allocate(E, Allocate(D, band_body(E, D))), "parallel")
    return For(p, g.n * nb, Allocate(D, band_body(None, D)), "parallel")


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
        g = replace(g, band=choose_band(g, min_bands=BANDS_PER_THREAD * threads))
    body = inverted_residual_body(g, *kernel_buffers(func.params, g), target.isa)
    return Schedule(PrimFunc(func.name, list(func.params), body, dict(func.attrs)))


__all__ = ["IRGeometry", "choose_band", "inverted_residual_body", "inverted_residual_rule",
           "MIN_BANDS", "BANDS_PER_THREAD"]
