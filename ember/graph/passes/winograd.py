"""WinogradConv: 3x3 stride-1 convolutions (NHWC, after ``ConvertLayout``) as Winograd
F(m x m, 3 x 3) (Lavin & Gray 2016; the transforms are ``ember.ops.winograd``).

A qualifying ``nn.conv`` (2-D, ``data_layout="NHWC"``, 3x3 kernel, stride 1, dilation 1, one
group, float32, weights a compile-time constant) becomes::

    %v = nn.winograd_input(%x, tile=m, pads=...)        # (n*n, P, C), n = m + 2
    %m = matmul(%v, U)                                  # U = G w G^T, folded here: (n*n, C, M)
    %y = nn.winograd_output(%m, tile=m, out_size=...)   # (N, OH, OW, M)
    %y = add(%y, %bias)                                 # when the conv had one

so the packed-GEMM schedule runs the products and ``FuseOps`` fuses the convolution's epilogue
(bias, folded batch norm, activation, residual add) into the output transform.

Which convolutions and which ``m`` (``choose_tile``) reflect measurements on AVX-512 (see
``docs/performance.md``, section Winograd). Config ``winograd.tile`` (PassContext): ``0``
(default) chooses per convolution, ``-1`` keeps every convolution direct, ``2``/``4``/``6``
forces that tile on every qualifying convolution. Disabling the pass
(``PassContext(disabled_pass=["WinogradConv"])``) or ``opt_level < 2`` also keeps them direct.

With ``winograd.tile = 0``, an algorithm chooser installed by ``algorithm_scope`` (tuning
records: ``ember.tune.apply_history_best`` installs one) is asked first for each qualifying
convolution, by its ``conv_workload``; it answers ``-1`` (direct), an ``m`` of ``POINTS``, or
``None`` (no record: ``choose_tile``'s heuristic decides).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from typing import Callable, Iterator

from ...ops.winograd import POINTS, num_tiles, weight_transform
from ..ir import Constant
from ..mutator import Rewriter
from .pass_manager import function_pass, register_config

WINOGRAD_TILE = register_config(
    "winograd.tile", int,
    "Winograd F(m x m, 3 x 3) for 3x3 stride-1 convolutions: 0 = m chosen per convolution "
    "(default), -1 = off (direct convolution), 2 / 4 / 6 = that m wherever it is legal")

MIN_CHANNELS = 16   # fewer input or output channels: the transforms cost more than they save
MIN_TILES = 32      # fewer tiles: see choose_tile
F4_MIN_SIZE = 28    # smaller outputs use F(2x2): F(4x4)'s 6x6 tiles waste work at their edges


def choose_tile(c: int, k: int, oh: int, ow: int, batch: int = 1) -> int | None:
    """Winograd tile ``m`` for a 3x3 stride-1 convolution with ``c`` input and ``k`` output
    channels and a ``batch x oh x ow`` output, or ``None`` for the direct convolution.

    F(4x4) needs 2.25x fewer multiplications than F(2x2) but its 6x6 tiles waste work on
    small images (7x7 -> 2x2 tiles of 4 = 8x8) and its transforms cost more per channel.
    Each transformed weight (``n^2 / 9`` times the direct weights' bytes) is used once per
    tile: with fewer than ``MIN_TILES`` tiles the products stream weights from memory at too
    few FMAs per byte (ResNet's 7x7 stage: 16 tiles; the direct K-blocked schedule reuses each
    weight 49 times)."""
    if c < MIN_CHANNELS or k < MIN_CHANNELS:
        return None
    m = 4 if min(oh, ow) >= F4_MIN_SIZE else 2
    if batch * num_tiles(oh, m) * num_tiles(ow, m) < MIN_TILES:
        return None
    return m


def padded_rows(tiles: int, k: int, lanes: int = 16, isa: str = "avx512") -> int:
    """Rows of the batched GEMM for ``tiles`` tiles and ``k`` output channels: padded by up to
    1/8 with zero rows when that gives the micro-kernel a register block with more
    accumulators (49 tiles -- 7x7 -- only allow 7-row blocks: 7x32, 14 accumulators; 54 rows
    take 6x64, 24), by the GEMM rule's own tile model for the target's ``isa`` and vector
    ``lanes`` (float32 lanes: 16 on AVX-512, 8 on AVX2, 4 scalar)."""
    from ...tir.schedule.rules.gemm import choose_tile as gemm_tile
    from ...tir.schedule.tensorize import MAX_ACCUMULATORS

    def acc(rows):
        t = gemm_tile(rows, k, lanes, MAX_ACCUMULATORS[isa])
        return 0 if t is None else t[0] * -(-t[1] // lanes) * t[1] / (-(-t[1] // lanes) * lanes)
    best, best_score = tiles, acc(tiles)
    for rows in range(tiles + 1, tiles + tiles // 8 + 1):
        score = acc(rows) * tiles / rows
        if score > best_score * 1.1:
            best, best_score = rows, score
    return best


def _target_lanes_isa() -> tuple[int, str]:
    """``(float32 vector lanes, isa)`` of the build's target (``algorithm_scope``); AVX-512's
    ``(16, "avx512")`` when no target is installed (a pass run outside ``ember.compile``)."""
    name = _TARGET.get()
    if not name:
        return 16, "avx512"
    from ...target import Target
    t = Target(name)
    return t.vector_lanes, t.isa


_CHOOSER: contextvars.ContextVar = contextvars.ContextVar("ember_conv_algorithm", default=None)
_TARGET: contextvars.ContextVar = contextvars.ContextVar("ember_winograd_target", default="")


@contextlib.contextmanager
def algorithm_scope(chooser: "Callable[[list, int, str], int | None] | None",
                    target: str | None = None) -> Iterator[None]:
    """Install ``chooser(workload, default, target) -> tile | None`` for the ``WinogradConv``
    passes run inside (``workload``: ``conv_workload`` of the convolution; ``default``: the
    heuristic's tile, -1 for direct; ``target``: the build's target string, "" when unknown).
    ``target`` (when given) is the target passed on to the chooser; ``chooser=None`` keeps the
    current one and only sets the target. Scopes nest; the innermost wins."""
    tokens = []
    if chooser is not None:
        tokens.append((_CHOOSER, _CHOOSER.set(chooser)))
    if target is not None:
        tokens.append((_TARGET, _TARGET.set(str(target))))
    try:
        yield
    finally:
        for var, tok in reversed(tokens):
            var.reset(tok)


def current_chooser():
    """The innermost chooser installed by ``algorithm_scope`` (``None`` when none)."""
    return _CHOOSER.get()


def current_target() -> str:
    """The build's target string installed by ``algorithm_scope`` ("" when unknown); passes
    that size their rewrites by the target (``SplitDense``) read it."""
    return _TARGET.get()


def conv_workload(call, out_type) -> list:
    """``[op, attrs, [input types], [output type]]`` (types as ``[shape, dtype]``; JSON-able)
    of a qualifying convolution ``call`` (data and weight only: a bias is added after either
    algorithm) with output type ``out_type``: the identity an algorithm choice is recorded
    under (the ``tile`` template's operator-workload form)."""
    attrs = json.loads(json.dumps(dict(call.attrs), sort_keys=True, default=list))
    types = [[list(a.type.shape), a.type.dtype] for a in call.args[:2]]
    return [call.op, attrs, types, [[list(out_type.shape), out_type.dtype]]]


def default_tile(workload: list) -> int:
    """The heuristic's choice (``choose_tile``) for a ``conv_workload``: ``m``, or -1 for the
    direct convolution."""
    c = workload[2][0][0][3]
    nb, oh, ow, k = workload[3][0][0]
    m = choose_tile(c, k, oh, ow, nb)
    return -1 if m is None else m


def _qualifies(call) -> bool:
    if call.op != "nn.conv" or len(call.args) < 2:
        return False
    a = call.attrs
    x, w = call.args[0], call.args[1]
    return (a.get("data_layout") == "NHWC" and x.type.ndim == 4
            and isinstance(w, Constant) and w.type.ndim == 4
            and tuple(w.type.shape[2:]) == (3, 3) and a.get("group", 1) == 1
            and all(s == 1 for s in (a.get("strides") or (1, 1)))
            and all(d == 1 for d in (a.get("dilations") or (1, 1)))
            and x.type.dtype == "float32" and w.type.dtype == "float32")


def winograd_function(func, tile: int = 0):
    """``func`` with its qualifying convolutions in Winograd form (see the module doc);
    ``tile`` as the ``winograd.tile`` config."""
    if tile < 0:
        return func
    chooser = _CHOOSER.get()

    def visit(b, args, rw: Rewriter):
        call = b.call
        if len(b.outputs) != 1 or not _qualifies(call):
            return None
        x, w = args[0], args[1]
        out = b.outputs[0]
        nb, oh, ow, k = out.type.shape
        c = x.type.shape[3]
        m = tile if tile in POINTS else choose_tile(c, k, oh, ow, nb)
        if tile == 0 and chooser is not None:
            got = chooser(conv_workload(call, out.type), -1 if m is None else m, _TARGET.get())
            if got is not None:
                m = got if got in POINTS else None
        if m is None:
            return None
        p = list(call.attrs.get("pads") or (0, 0, 0, 0))
        tiles = nb * num_tiles(oh, m) * num_tiles(ow, m)
        rows = padded_rows(tiles, k, *_target_lanes_isa())
        v = rw.emit("nn.winograd_input", [x], {"tile": m, "pads": p, "num_tiles": rows},
                    name=f"{out.name}_wgi")
        hint = getattr(w, "name_hint", None)
        u = Constant(weight_transform(w.data, m),
                     name_hint=f"{hint}@winograd{m}" if hint else None)
        mm = rw.emit("matmul", [v, u], name=f"{out.name}_wgm")
        y = rw.emit("nn.winograd_output", [mm], {"tile": m, "out_size": [oh, ow], "batch": nb},
                    name=out.name if len(args) == 2 else f"{out.name}_wgo")
        if len(args) == 3:
            y = rw.emit("add", [y, args[2]], name=out.name)
        return y
    return Rewriter(func).run(visit)


@function_pass("WinogradConv", opt_level=2)
def WinogradConv(func, mod, ctx):
    """3x3 stride-1 NHWC convolutions as Winograd transforms around a batched matmul."""
    return winograd_function(func, ctx.get_config(WINOGRAD_TILE, 0))


__all__ = ["WinogradConv", "winograd_function", "choose_tile", "padded_rows", "WINOGRAD_TILE",
           "algorithm_scope", "conv_workload", "default_tile", "current_chooser",
           "current_target"]
