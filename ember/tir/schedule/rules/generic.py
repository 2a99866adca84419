"""The generic fallback rule: every top-level loop nest runs its outer data-parallel loops in
parallel (fused until there is enough work per thread) and vectorizes its innermost loop when it
is a contiguous spatial loop of an elementwise block."""

from __future__ import annotations

from ....errors import ScheduleError
from ....target import Target
from ...expr import Var
from ...stmt import Allocate, Block, For, PrimFunc, Seq
from ..analysis import blocks_in, loop_vars_used
from ..schedule import LoopRV, Schedule

MIN_PARALLEL = 8      # parallel iterations wanted before fusing more loops
MIN_PARALLEL_WORK = 4096  # elements: smaller nests stay serial (thread start-up dominates)


def _top_nests(body):
    out = []

    def visit(s):
        if isinstance(s, For):
            out.append(s)
        elif isinstance(s, Seq):
            for x in s.stmts:
                visit(x)
        elif isinstance(s, Allocate):
            visit(s.body)
    visit(body)
    return out


def _spatial_for_all(loop: For) -> bool:
    blocks = blocks_in(loop.body)
    if not blocks:
        return False
    for b in blocks:
        for iv, bind in zip(b.iter_vars, b.bindings):
            if iv.kind == "reduce" and id(loop.var) in loop_vars_used(bind):
                return False
    return True


def _work(loop: For) -> int:
    """Elements of the perfect nest under ``loop``; a symbolic extent (a dynamic dimension such
    as the token count) counts as enough work to run in parallel."""
    n, s = 1, loop
    while isinstance(s, For):
        if not isinstance(s.extent, int):
            return max(n, MIN_PARALLEL_WORK)
        n *= s.extent
        s = s.body
    return n


def finish_generic(sch: Schedule, target: Target, skip=frozenset()) -> None:
    """Parallelize and vectorize the nests of ``sch`` whose blocks are not in ``skip`` and are
    not yet parallel (best effort: primitives that refuse are skipped)."""
    for nest in _top_nests(sch.body):
        names = {b.name for b in blocks_in(nest)}
        if not names or names & set(skip):
            continue
        if any(isinstance(s, For) and s.kind == "parallel" for s in _walk(nest)):
            continue
        _vectorize_innermost(sch, nest, target)
        _parallelize(sch, nest)


def _walk(s):
    from ...arith import walk_stmt
    return walk_stmt(s)


def _parallelize(sch: Schedule, nest: For) -> None:
    if _work(nest) < MIN_PARALLEL_WORK:
        return
    chain = [nest]
    s = nest.body
    while isinstance(s, For) and s.kind == "serial":
        chain.append(s)
        s = s.body
    take, ext = [], 1
    for lp in chain:
        if lp.kind != "serial" or not _spatial_for_all(lp):
            break
        take.append(lp)
        if not isinstance(lp.extent, int):  # a symbolic extent: assumed long enough
            break
        ext *= lp.extent
        if ext >= MIN_PARALLEL:
            break
    if not take:
        return
    try:
        rv = sch.fuse(*[LoopRV(lp.var) for lp in take]) if len(take) > 1 else LoopRV(take[0].var)
        sch.parallel(rv)
    except ScheduleError:
        try:
            sch.parallel(LoopRV(take[0].var))
        except ScheduleError:
            pass


def _vectorize_innermost(sch: Schedule, nest: For, target: Target) -> None:
    lanes = target.vector_lanes
    for b in blocks_in(nest):
        if b.init is not None or not isinstance(b.body, type(b.body)):
            continue
        loops = sch.get_loops(b.name)
        if not loops:
            continue
        f, _ = sch.find_loop(loops[-1], "vectorize")
        if not isinstance(f.body, Block) or f.kind != "serial":
            continue
        last = b.iter_vars[-1] if b.iter_vars else None
        if last is None or not (isinstance(b.bindings[-1], Var) and b.bindings[-1] is f.var):
            continue
        if not isinstance(f.extent, int):
            continue  # a symbolic innermost loop: the C compiler's omp simd
        # a symbolic kernel splits every lane multiple: the head merge of attention reads
        # ``x[.., v // 16, .., v % 16]``, contiguous only within a split of 16 lanes
        split_min = lanes if sch.func.attrs.get("symbols") else 4 * lanes
        try:
            if f.extent > split_min and f.extent % lanes == 0:
                _, inner = sch.split(loops[-1], [None, lanes])
                sch.vectorize(inner)
            elif f.extent >= 4:
                sch.vectorize(loops[-1])
        except ScheduleError:
            pass


def generic_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """Parallel outer loops and vectorized inner loops for any kernel."""
    sch = Schedule(func)
    finish_generic(sch, target)
    return sch
