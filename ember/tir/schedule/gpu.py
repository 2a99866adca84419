"""The GPU loop primitive ``bind``: a loop's iterations become the blocks or threads of a GPU
launch (TVM's ``sch.bind(loop, "threadIdx.x")``)."""

from __future__ import annotations

from ...errors import ScheduleError
from ..arith import walk_stmt
from ..stmt import THREAD_TAGS, For
from .loops import check_independent


def bind(sch, loop, thread_tag: str) -> None:
    """Implementation of ``Schedule.bind`` on ``sch``: mark ``loop`` as a ``thread_binding``
    loop with ``annotations["thread_tag"] = thread_tag``.

    Preconditions (each refused with a ``ScheduleError`` naming the loop):
      - ``thread_tag`` is one of ``THREAD_TAGS`` (``blockIdx.{x,y,z}``, ``threadIdx.{x,y,z}``);
      - the loop is serial (not already parallel, vectorized, unrolled or bound);
      - its variable drives no reduction iterator (threads do not combine partial results
        without an explicit cooperative reduction) and the blocks under it share no buffer
        allocated outside it (iterations would race);
      - no enclosing or enclosed loop is bound to the same tag; a ``blockIdx`` loop is not
        nested in a ``threadIdx`` loop (blocks contain threads, not the other way round);
      - it is not nested in a CPU ``parallel`` or ``vectorized`` loop.
    """
    f, path = sch.find_loop(loop, "bind")
    where = f"bind of loop {f.var.name} (extent {f.extent}) to {thread_tag}"
    if thread_tag not in THREAD_TAGS:
        raise ScheduleError(f"{where}: unknown thread tag; use one of {list(THREAD_TAGS)}")
    if f.kind != "serial":
        raise ScheduleError(f"{where}: the loop is already {f.kind}"
                            + (f" ({f.annotations.get('thread_tag')})"
                               if f.kind == "thread_binding" else ""))
    check_independent(f, where, " (bind a spatial loop, or rfactor first)")
    outer = [s for s in path[:-1] if isinstance(s, For)]
    inner = [s for s in walk_stmt(f.body) if isinstance(s, For)]
    for s in outer + inner:
        if s.kind == "thread_binding" and s.annotations.get("thread_tag") == thread_tag:
            raise ScheduleError(f"{where}: loop {s.var.name} is already bound to {thread_tag}")
        if s.kind in ("parallel", "vectorized") and s in outer:
            raise ScheduleError(f"{where}: it is nested in {s.kind} loop {s.var.name}")
    if thread_tag.startswith("blockIdx"):
        for s in outer:
            if s.kind == "thread_binding" and s.annotations["thread_tag"].startswith("threadIdx"):
                raise ScheduleError(f"{where}: it is nested in loop {s.var.name}, bound to "
                                    f"{s.annotations['thread_tag']} (blocks contain threads)")
    ann = dict(f.annotations)
    ann["thread_tag"] = thread_tag
    from .analysis import replace_node
    sch.body = replace_node(sch.body, f, For(f.var, f.extent, f.body, "thread_binding", ann))


__all__ = ["bind"]
