"""``Schedule``: rewrites a ``PrimFunc``'s loops with primitives, recording each as a trace action.

Blocks are addressed by name (``sch.get_block("conv")``), loops by the ``LoopRV`` handles that
``get_loops``, ``split`` and ``fuse`` return. Every primitive checks its preconditions and raises
``ScheduleError`` naming the primitive, the block or loop, and the condition that failed; a failed
primitive leaves the schedule unchanged. ``sch.func`` is the scheduled ``PrimFunc`` and
``sch.trace`` the replayable record (``Trace.apply_to(unscheduled_func)``).
"""

from __future__ import annotations

import copy
from typing import Sequence

from ...errors import ScheduleError
from ..stmt import Block, For, PrimFunc, Stmt
from . import trace as T
from .analysis import blocks_in, find_path, verify_well_formed


class LoopRV:
    """A handle on one loop of a schedule (identified by its loop variable)."""

    __slots__ = ("var",)

    def __init__(self, var):
        self.var = var

    def __eq__(self, other):
        return isinstance(other, LoopRV) and other.var is self.var

    def __hash__(self):
        return id(self.var)

    def __repr__(self):
        return f"LoopRV({self.var.name})"


class Schedule:
    """A schedule of one ``PrimFunc`` (the function is copied; the original is not changed).

    Attributes:
        func: the scheduled ``PrimFunc``.
        trace: the ``Trace`` of the primitives applied so far.
    """

    def __init__(self, func: PrimFunc):
        self.func = PrimFunc(func.name, list(func.params), func.body, copy.deepcopy(func.attrs))
        self.trace = T.Trace()

    # navigation --------------------------------------------------------------------------------
    @property
    def body(self) -> Stmt:
        return self.func.body

    @body.setter
    def body(self, s: Stmt) -> None:
        """Replace the scheduled function's body with ``s``."""
        self.func.body = s

    def block_names(self) -> list[str]:
        """Names of all blocks in program order."""
        return [b.name for b in blocks_in(self.body)]

    def get_block(self, name: str) -> str:
        """The block called ``name`` (blocks are addressed by name).

        Raises:
            ScheduleError: no such block.
        """
        self.find_block(name, "get_block")
        return name

    def find_block(self, name: str, prim: str) -> tuple[Block, list[Stmt]]:
        """``(block, path from the root to it)``; raises ``ScheduleError`` naming ``prim``."""
        if not isinstance(name, str):
            raise ScheduleError(f"{prim}: blocks are addressed by name (a str), got {name!r}")
        path = find_path(self.body, lambda s: isinstance(s, Block) and s.name == name)
        if path is None:
            raise ScheduleError(f"{prim}: no block named {name!r} in {self.func.name} "
                                f"(blocks: {self.block_names()})")
        return path[-1], path

    def find_loop(self, loop: LoopRV, prim: str) -> tuple[For, list[Stmt]]:
        """``(For, path from the root to it)``; raises ``ScheduleError`` naming ``prim``."""
        if not isinstance(loop, LoopRV):
            raise ScheduleError(f"{prim}: expected a loop handle (LoopRV), got {loop!r}")
        path = find_path(self.body, lambda s: isinstance(s, For) and s.var is loop.var)
        if path is None:
            raise ScheduleError(f"{prim}: loop {loop.var.name} no longer exists in "
                                f"{self.func.name} (it was split, fused or removed)")
        return path[-1], path

    def get_loops(self, block: str) -> list[LoopRV]:
        """The loops around ``block``, outermost first."""
        _, path = self.find_block(block, "get_loops")
        return [LoopRV(s.var) for s in path if isinstance(s, For)]

    def _ref(self, loop: LoopRV, prim: str) -> T.LoopRef:
        f, _ = self.find_loop(loop, prim)
        inner = blocks_in(f)
        if not inner:
            raise ScheduleError(f"{prim}: loop {loop.var.name} contains no block")
        b = inner[0].name
        return T.LoopRef(b, self.get_loops(b).index(loop))

    def _do(self, action, fn, *args):
        """Run primitive ``fn`` transactionally and record ``action``."""
        saved = (self.func.body, list(self.func.params), copy.copy(self.func.attrs))
        try:
            out = fn(self, *args)
            bad = verify_well_formed(self.func)
            if bad:
                raise ScheduleError(f"{type(action).__name__}: the result would be ill-formed: "
                                    f"{bad}")
        except Exception:
            self.func.body, self.func.params, self.func.attrs = saved
            raise
        self.trace.append(action)
        return out

    # loop transformations ----------------------------------------------------------------------
    def split(self, loop: LoopRV, factors: Sequence[int | None]) -> list[LoopRV]:
        """Split ``loop`` into nested loops of extents ``factors`` (outermost first; one may be
        ``None`` = inferred). A product above the extent adds a predicate to the blocks below."""
        from .loops import split
        return self._do(T.Split(self._ref(loop, "split"), tuple(factors)), split, loop, factors)

    def fuse(self, *loops: LoopRV) -> LoopRV:
        """Fuse directly nested ``loops`` (outermost first) into one loop."""
        from .loops import fuse
        refs = tuple(self._ref(lp, "fuse") for lp in loops)
        return self._do(T.Fuse(refs), fuse, loops)

    def reorder(self, *loops: LoopRV) -> None:
        """Put ``loops`` (on one perfectly nested chain) in the given order, outermost first."""
        from .loops import reorder
        refs = tuple(self._ref(lp, "reorder") for lp in loops)
        return self._do(T.Reorder(refs), reorder, loops)

    def parallel(self, loop: LoopRV) -> None:
        """Run ``loop``'s iterations on parallel threads (OpenMP)."""
        from .loops import annotate_kind
        return self._do(T.Parallel(self._ref(loop, "parallel")), annotate_kind, loop, "parallel")

    def vectorize(self, loop: LoopRV) -> None:
        """Run ``loop``'s iterations as SIMD lanes."""
        from .loops import annotate_kind
        return self._do(T.Vectorize(self._ref(loop, "vectorize")), annotate_kind, loop,
                        "vectorized")

    def unroll(self, loop: LoopRV) -> None:
        """Unroll ``loop`` fully."""
        from .loops import annotate_kind
        return self._do(T.Unroll(self._ref(loop, "unroll")), annotate_kind, loop, "unrolled")

    def bind(self, loop: LoopRV, thread_tag: str) -> None:
        """Bind ``loop`` to GPU ``thread_tag`` (``"blockIdx.x"``..., ``"threadIdx.x"``...): its
        iterations become the blocks or threads of the kernel's launch (preconditions:
        ``ember.tir.schedule.gpu.bind``)."""
        from .gpu import bind
        return self._do(T.Bind(self._ref(loop, "bind"), thread_tag), bind, loop, thread_tag)

    def cross_thread_reduce(self, loop: LoopRV, threads: int) -> None:
        """Run reduction loop ``loop`` cooperatively on ``threads`` GPU threads of one block
        (partials in shared memory, a barrier-separated tree; see
        ``ember.tir.schedule.gpu.cross_thread_reduce``)."""
        from .gpu import cross_thread_reduce
        return self._do(T.CrossThreadReduce(self._ref(loop, "cross_thread_reduce"), threads),
                        cross_thread_reduce, loop, threads)

    def tile_gemm(self, block: str, tm: int, tn: int, tk: int, rm: int, rn: int) -> None:
        """Run GEMM-like reduction ``block`` (matmul, convolution as implicit GEMM) on GPU
        blocks of ``tm x tn`` outputs staged through ``tk``-deep shared-memory tiles, each
        thread accumulating ``rm x rn`` outputs in registers (see
        ``ember.tir.schedule.gpu_tile.tile_gemm``)."""
        from .gpu_tile import tile_gemm
        return self._do(T.TileGemm(block, (tm, tn, tk, rm, rn)), tile_gemm, block, tm, tn, tk,
                        rm, rn)

    # data movement ----------------------------------------------------------------------------
    def cache_read(self, block: str, read_buffer_index: int, scope: str = "local") -> str:
        """Copy ``block``'s ``read_buffer_index``-th read buffer into a new ``scope`` buffer that
        ``block`` reads instead; returns the copy block's name."""
        from .cache import cache_read
        return self._do(T.CacheRead(block, read_buffer_index, scope), cache_read, block,
                        read_buffer_index, scope)

    def cache_write(self, block: str, write_buffer_index: int, scope: str = "local",
                    dtype: str | None = None) -> str:
        """Make ``block`` write a new ``scope`` buffer copied out to the original afterwards;
        returns the copy block's name. ``dtype``: the new buffer's element type (default the
        original's; ``"float32"`` keeps a bfloat16 reduction's running value unrounded in
        float32, rounded once by the copy-out)."""
        from .cache import cache_write
        return self._do(T.CacheWrite(block, write_buffer_index, scope, dtype), cache_write,
                        block, write_buffer_index, scope, dtype)

    def compute_at(self, block: str, loop: LoopRV) -> None:
        """Move producer ``block`` under ``loop`` of its consumers, computing only the region
        they read in one iteration (the intermediate buffer shrinks to that region)."""
        from .compute_location import compute_at
        return self._do(T.ComputeAt(block, self._ref(loop, "compute_at")), compute_at, block,
                        loop)

    def reverse_compute_at(self, block: str, loop: LoopRV) -> None:
        """Move consumer ``block`` under ``loop`` of its producer, consuming the region the
        producer writes in one iteration."""
        from .compute_location import reverse_compute_at
        return self._do(T.ReverseComputeAt(block, self._ref(loop, "reverse_compute_at")),
                        reverse_compute_at, block, loop)

    def compute_inline(self, block: str) -> None:
        """Substitute elementwise producer ``block`` into its consumers and remove it."""
        from .compute_location import compute_inline
        return self._do(T.ComputeInline(block), compute_inline, block)

    def reverse_compute_inline(self, block: str) -> None:
        """Fold elementwise consumer ``block`` into its (single, non-reduction) producer."""
        from .compute_location import reverse_compute_inline
        return self._do(T.ReverseComputeInline(block), reverse_compute_inline, block)

    def decompose_reduction(self, block: str, loop: LoopRV) -> str:
        """Move reduction ``block``'s init into its own block placed before ``loop``; returns the
        init block's name."""
        from .reduction import decompose_reduction
        return self._do(T.DecomposeReduction(block, self._ref(loop, "decompose_reduction")),
                        decompose_reduction, block, loop)

    # layout -----------------------------------------------------------------------------------
    def storage_align(self, block: str, buffer_index: int, axis: int, factor: int,
                      offset: int) -> None:
        """Pad the stride of ``axis`` of ``block``'s ``buffer_index``-th written buffer so that
        ``stride % factor == offset`` (avoids cache-set conflicts)."""
        from .layout import storage_align
        return self._do(T.StorageAlign(block, buffer_index, axis, factor, offset), storage_align,
                        block, buffer_index, axis, factor, offset)

    def transform_layout(self, block: str, buffer: tuple, index_map) -> None:
        """Store ``block``'s buffer ``buffer`` (``("read"|"write", index)``) in the layout
        ``index_map`` (an ``IndexMap``) everywhere in the function. A parameter's new layout is
        recorded in ``func.attrs["param_layouts"]``: callers pass it pre-transformed (the driver
        packs constant weights once at compile time)."""
        from .layout import IndexMap, transform_layout
        if not isinstance(index_map, IndexMap):
            raise ScheduleError(f"transform_layout: expected an IndexMap, got {index_map!r}")
        return self._do(T.TransformLayout(block, tuple(buffer), index_map.to_json()),
                        transform_layout, block, tuple(buffer), index_map)

    def tensorize(self, loop: LoopRV, intrin: str) -> None:
        """Replace the loop nest rooted at ``loop`` by a call of tensor intrinsic ``intrin``
        (see ``ember.tir.schedule.intrin``)."""
        from .tensorize import tensorize
        return self._do(T.Tensorize(self._ref(loop, "tensorize"), intrin), tensorize, loop,
                        intrin)
