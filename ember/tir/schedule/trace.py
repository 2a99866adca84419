"""Schedule traces: the closed set of schedule actions, each a frozen record, and ``Trace``.

A trace names blocks by name and loops by ``LoopRef(block, index)`` (the ``index``-th loop, from
the outermost, around ``block`` at the time the action runs), so replaying the same actions on
the same unscheduled ``PrimFunc`` rebuilds the same program. Traces convert to and from JSON
(the form tuning records store).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

from ...errors import ScheduleError

if TYPE_CHECKING:  # pragma: no cover
    from .schedule import Schedule


@dataclass(frozen=True)
class LoopRef:
    """The ``index``-th loop (outermost first) around block ``block``."""

    block: str
    index: int


@dataclass(frozen=True)
class Split:
    """Record of ``Schedule.split``: ``loop`` split into nested loops of extents ``factors``
    (outermost first; ``None`` = inferred)."""

    loop: LoopRef
    factors: tuple


@dataclass(frozen=True)
class Fuse:
    """Record of ``Schedule.fuse``: the directly nested ``loops`` (``LoopRef``s, outermost first)
    fused into one."""

    loops: tuple


@dataclass(frozen=True)
class Reorder:
    """Record of ``Schedule.reorder``: ``loops`` (``LoopRef``s) put in this order, outermost
    first."""

    loops: tuple


@dataclass(frozen=True)
class Parallel:
    """Record of ``Schedule.parallel``: ``loop`` runs its iterations on parallel threads."""

    loop: LoopRef


@dataclass(frozen=True)
class Vectorize:
    """Record of ``Schedule.vectorize``: ``loop`` runs its iterations as SIMD lanes."""

    loop: LoopRef


@dataclass(frozen=True)
class Unroll:
    """Record of ``Schedule.unroll``: ``loop`` is fully unrolled."""

    loop: LoopRef


@dataclass(frozen=True)
class CacheRead:
    """Record of ``Schedule.cache_read``: the ``buffer_index``-th read buffer of ``block`` copied
    into a ``scope`` buffer."""

    block: str
    buffer_index: int
    scope: str


@dataclass(frozen=True)
class CacheWrite:
    """Record of ``Schedule.cache_write``: ``block`` writes its ``buffer_index``-th output through
    a ``scope`` buffer."""

    block: str
    buffer_index: int
    scope: str
    dtype: str | None = None  # the new buffer's element type (None: the original's)


@dataclass(frozen=True)
class ComputeAt:
    """Record of ``Schedule.compute_at``: producer ``block`` moved under consumer loop ``loop``."""

    block: str
    loop: LoopRef


@dataclass(frozen=True)
class ReverseComputeAt:
    """Record of ``Schedule.reverse_compute_at``: consumer ``block`` moved under producer loop
    ``loop``."""

    block: str
    loop: LoopRef


@dataclass(frozen=True)
class ComputeInline:
    """Record of ``Schedule.compute_inline``: elementwise producer ``block`` substituted into its
    consumers."""

    block: str


@dataclass(frozen=True)
class ReverseComputeInline:
    """Record of ``Schedule.reverse_compute_inline``: elementwise consumer ``block`` folded into
    its producer."""

    block: str


@dataclass(frozen=True)
class DecomposeReduction:
    """Record of ``Schedule.decompose_reduction``: ``block``'s init moved into its own block before
    ``loop``."""

    block: str
    loop: LoopRef


@dataclass(frozen=True)
class StorageAlign:
    """Record of ``Schedule.storage_align``: ``axis`` of ``block``'s ``buffer_index``-th written
    buffer padded so that ``stride % factor == offset`` (strides in elements)."""

    block: str
    buffer_index: int
    axis: int
    factor: int
    offset: int


@dataclass(frozen=True)
class TransformLayout:
    """Record of ``Schedule.transform_layout``: ``block``'s buffer ``("read"|"write", index)``
    stored in the layout ``index_map`` (the ``IndexMap.to_json()`` text)."""

    block: str
    buffer: tuple  # ("read" | "write", index)
    index_map: str  # IndexMap.to_json()


@dataclass(frozen=True)
class Tensorize:
    """Record of ``Schedule.tensorize``: the loop nest at ``loop`` replaced by a call of the tensor
    intrinsic registered as ``intrin``."""

    loop: LoopRef
    intrin: str


@dataclass(frozen=True)
class Bind:
    """Record of ``Schedule.bind``: ``loop`` bound to GPU ``thread_tag`` (``blockIdx.x``...)."""

    loop: LoopRef
    thread_tag: str


@dataclass(frozen=True)
class CrossThreadReduce:
    """Record of ``Schedule.cross_thread_reduce``: reduction ``loop`` run by ``threads``
    cooperating GPU threads."""

    loop: LoopRef
    threads: int


@dataclass(frozen=True)
class TileGemm:
    """Record of ``Schedule.tile_gemm``: GEMM-like ``block`` on shared/register tiles
    ``(tm, tn, tk, rm, rn)``."""

    block: str
    tiles: tuple


ACTIONS = {c.__name__: c for c in (Split, Fuse, Reorder, Parallel, Vectorize, Unroll, CacheRead,
                                    CacheWrite, ComputeAt, ReverseComputeAt, ComputeInline,
                                    ReverseComputeInline, DecomposeReduction, StorageAlign,
                                    TransformLayout, Tensorize, Bind, CrossThreadReduce, TileGemm)}


def _loop(sch: "Schedule", ref: LoopRef):
    loops = sch.get_loops(ref.block)
    if not 0 <= ref.index < len(loops):
        raise ScheduleError(f"trace replay: block {ref.block!r} has {len(loops)} loops, the "
                            f"trace refers to loop {ref.index}")
    return loops[ref.index]


def apply_action(sch: "Schedule", a) -> None:
    """Run one recorded action on ``sch`` (which records it again)."""
    from .layout import IndexMap
    if isinstance(a, Split):
        sch.split(_loop(sch, a.loop), list(a.factors))
    elif isinstance(a, Fuse):
        sch.fuse(*[_loop(sch, r) for r in a.loops])
    elif isinstance(a, Reorder):
        sch.reorder(*[_loop(sch, r) for r in a.loops])
    elif isinstance(a, Parallel):
        sch.parallel(_loop(sch, a.loop))
    elif isinstance(a, Vectorize):
        sch.vectorize(_loop(sch, a.loop))
    elif isinstance(a, Unroll):
        sch.unroll(_loop(sch, a.loop))
    elif isinstance(a, CacheRead):
        sch.cache_read(a.block, a.buffer_index, a.scope)
    elif isinstance(a, CacheWrite):
        sch.cache_write(a.block, a.buffer_index, a.scope, a.dtype)
    elif isinstance(a, ComputeAt):
        sch.compute_at(a.block, _loop(sch, a.loop))
    elif isinstance(a, ReverseComputeAt):
        sch.reverse_compute_at(a.block, _loop(sch, a.loop))
    elif isinstance(a, ComputeInline):
        sch.compute_inline(a.block)
    elif isinstance(a, ReverseComputeInline):
        sch.reverse_compute_inline(a.block)
    elif isinstance(a, DecomposeReduction):
        sch.decompose_reduction(a.block, _loop(sch, a.loop))
    elif isinstance(a, StorageAlign):
        sch.storage_align(a.block, a.buffer_index, a.axis, a.factor, a.offset)
    elif isinstance(a, TransformLayout):
        sch.transform_layout(a.block, tuple(a.buffer), IndexMap.from_json(a.index_map))
    elif isinstance(a, Tensorize):
        sch.tensorize(_loop(sch, a.loop), a.intrin)
    elif isinstance(a, Bind):
        sch.bind(_loop(sch, a.loop), a.thread_tag)
    elif isinstance(a, CrossThreadReduce):
        sch.cross_thread_reduce(_loop(sch, a.loop), a.threads)
    elif isinstance(a, TileGemm):
        sch.tile_gemm(a.block, *a.tiles)
    else:  # pragma: no cover - closed set
        raise ScheduleError(f"unknown schedule action {a!r}")


class Trace:
    """An ordered list of schedule actions that can be replayed on an unscheduled PrimFunc."""

    def __init__(self, actions=None):
        self.actions: list = list(actions or [])

    def append(self, action) -> None:
        """Add ``action`` (one of the records in ``ACTIONS``) at the end; no check is made."""
        self.actions.append(action)

    def __len__(self):
        return len(self.actions)

    def __iter__(self):
        return iter(self.actions)

    def apply_to(self, func) -> "Schedule":
        """A new ``Schedule`` of ``func`` with every action replayed.

        Raises:
            ScheduleError: an action's preconditions fail on ``func`` (names the action).
        """
        from .schedule import Schedule
        sch = Schedule(func)
        for a in self.actions:
            apply_action(sch, a)
        return sch

    def to_json(self) -> str:
        """JSON list of ``{"action": name, **fields}``."""
        out = []
        for a in self.actions:
            d = {"action": type(a).__name__}
            for f in fields(a):
                d[f.name] = _enc(getattr(a, f.name))
            out.append(d)
        return json.dumps(out)

    @staticmethod
    def from_json(text: str) -> "Trace":
        """Inverse of ``to_json``.

        Raises:
            ScheduleError: an unknown action name or malformed record.
        """
        acts = []
        for d in json.loads(text):
            d = dict(d)
            name = d.pop("action", None)
            cls = ACTIONS.get(name)
            if cls is None:
                raise ScheduleError(f"trace: unknown action {name!r} (known: {sorted(ACTIONS)})")
            acts.append(cls(**{k: _dec(v) for k, v in d.items()}))
        return Trace(acts)

    def __repr__(self):
        return "Trace([\n" + "".join(f"  {a!r},\n" for a in self.actions) + "])"


def _enc(v):
    if isinstance(v, LoopRef):
        return {"loop": asdict(v)}
    if isinstance(v, tuple):
        return [_enc(x) for x in v]
    return v


def _dec(v):
    if isinstance(v, dict) and "loop" in v:
        return LoopRef(**v["loop"])
    if isinstance(v, list):
        return tuple(_dec(x) for x in v)
    return v
