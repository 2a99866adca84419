"""Schedule primitives over loop IR, recorded as replayable traces.

    from ember.tir.schedule import Schedule
    sch = Schedule(func)
    i, j, k = sch.get_loops("matmul")
    io, ii = sch.split(i, [None, 8])
    sch.reorder(io, j, k, ii)
    sch.parallel(io)
    sch.trace.apply_to(func)   # rebuilds the same program

Primitives: split, fuse, reorder, parallel, vectorize, unroll, bind (GPU), cache_read, cache_write,
compute_at, reverse_compute_at, compute_inline, reverse_compute_inline, decompose_reduction,
storage_align, transform_layout, tensorize. Each raises ``ember.errors.ScheduleError`` naming the
primitive, the block or loop and the violated condition.
"""

from ...errors import ScheduleError  # noqa: F401
from .layout import IndexMap  # noqa: F401
from .schedule import LoopRV, Schedule  # noqa: F401
from .trace import LoopRef, Trace  # noqa: F401
