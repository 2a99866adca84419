"""GPU kernels in loop IR: the host/device split and the verification of a GPU kernel.

A scheduled GPU ``PrimFunc`` is host code: its top-level statement sequence, below the global
allocations, is a list of device kernels run one after the other. ``split_host_device`` cuts
it into ``DeviceKernel``s, each with its launch computed on the host from the (static) shapes:
the grid (blocks per dimension, from the extents of the loops bound to ``blockIdx.*``) and the
block (threads per dimension, from ``threadIdx.*`` loops), and hoists global allocations into
workspace buffers the runtime places in device memory. A top-level statement with no bound
loop runs as one thread (correct, slow: the GPU fallback rule binds every nest).

``verify_gpu_kernel`` checks every device kernel against the target (``max_threads_per_block``,
``max_shared_memory_per_block``) and that no ``Barrier`` sits under control flow that differs
between the threads of a block; it raises ``ScheduleError`` naming the kernel and the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CodegenError, ScheduleError
from .arith import collect, walk_stmt
from .expr import Load, Var
from .stmt import Allocate, Barrier, Buffer, For, IfThenElse, PrimFunc, Seq, Stmt

_DIMS = "xyz"


@dataclass
class DeviceKernel:
    """One device kernel of a GPU ``PrimFunc``.

    Attributes:
        body: its loop IR (thread-bound loops included; the printer maps them to built-ins).
        grid: blocks per dimension ``(x, y, z)``.
        block: threads per dimension ``(x, y, z)``.
        shared: the ``shared``-scope buffers it allocates (one copy per block).
        index: its position in the function's kernel sequence.
    """

    body: Stmt
    grid: tuple
    block: tuple
    shared: list = field(default_factory=list)
    index: int = 0


def _launch(body: Stmt) -> tuple[tuple, tuple]:
    grid, block = [1, 1, 1], [1, 1, 1]
    for s in walk_stmt(body):
        if isinstance(s, For) and s.kind == "thread_binding":
            tag = s.annotations["thread_tag"]
            d = _DIMS.index(tag[-1])
            tgt = grid if tag.startswith("blockIdx") else block
            tgt[d] = max(tgt[d], s.extent)
    return tuple(grid), tuple(block)


def _hoist_global(s: Stmt, workspace: list, where: str, under_thread: bool = False) -> Stmt:
    """``s`` with its global ``Allocate``s removed (their buffers appended to ``workspace``)."""
    if isinstance(s, Allocate):
        if s.buffer.scope == "global":
            if under_thread:
                raise CodegenError(f"{where}: global buffer {s.buffer.name} is allocated inside "
                                   f"a thread-bound loop; a GPU kernel cannot allocate device "
                                   f"memory (use scope 'local' or 'shared')")
            workspace.append(s.buffer)
            return _hoist_global(s.body, workspace, where, under_thread)
        return Allocate(s.buffer, _hoist_global(s.body, workspace, where, under_thread))
    if isinstance(s, For):
        inner = under_thread or s.kind == "thread_binding"
        return For(s.var, s.extent, _hoist_global(s.body, workspace, where, inner), s.kind,
                   dict(s.annotations))
    if isinstance(s, Seq):
        return Seq([_hoist_global(x, workspace, where, under_thread) for x in s.stmts])
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, _hoist_global(s.then, workspace, where, under_thread),
                          _hoist_global(s.else_, workspace, where, under_thread)
                          if s.else_ is not None else None)
    return s


def split_host_device(func: PrimFunc) -> tuple[list[Buffer], list[DeviceKernel]]:
    """``(workspace buffers, device kernels)`` of lowered GPU function ``func`` (no blocks
    left: run ``ember.tir.pipeline.lower_for_target`` first). Kernels run in list order; the
    workspace buffers live in device memory for the whole call.

    Raises:
        CodegenError: a global allocation inside a thread-bound loop."""
    workspace: list[Buffer] = []
    tops: list[Stmt] = []

    def visit(s):
        if isinstance(s, Allocate) and s.buffer.scope == "global":
            workspace.append(s.buffer)
            visit(s.body)
        elif isinstance(s, Seq):
            for x in s.stmts:
                visit(x)
        else:
            tops.append(s)
    visit(func.body)
    kernels = []
    for k, s in enumerate(tops):
        s = _hoist_global(s, workspace, f"kernel {func.name} (device kernel {k})")
        grid, block = _launch(s)
        shared = [x.buffer for x in walk_stmt(s)
                  if isinstance(x, Allocate) and x.buffer.scope == "shared"]
        kernels.append(DeviceKernel(s, grid, block, shared, k))
    return workspace, kernels


def _thread_vars(s: Stmt) -> set:
    return {id(x.var) for x in walk_stmt(s) if isinstance(x, For) and x.kind == "thread_binding"
            and x.annotations["thread_tag"].startswith("threadIdx")}


def _divergent(cond, tvars: set) -> bool:
    """A condition that may differ between the threads of one block: it reads a thread index
    or memory."""
    return any((isinstance(n, Var) and id(n) in tvars) or isinstance(n, Load)
               for n in collect(cond, lambda n: isinstance(n, (Var, Load))))


def _check_barriers(s: Stmt, tvars: set, launch: tuple, where: str, ctx: str | None) -> None:
    if isinstance(s, Barrier):
        if ctx is not None:
            raise ScheduleError(f"{where}: a barrier sits under {ctx}; threads of one block that "
                                f"skip it would hang the others (hoist it out of the "
                                f"condition)")
        return
    if isinstance(s, IfThenElse):
        c = ctx
        if c is None and _divergent(s.cond, tvars):
            c = "a condition that differs between threads"
        _check_barriers(s.then, tvars, launch, where, c)
        if s.else_ is not None:
            _check_barriers(s.else_, tvars, launch, where, c)
        return
    if isinstance(s, For):
        c = ctx
        if c is None and s.kind == "thread_binding" and s.annotations["thread_tag"].startswith(
                "threadIdx"):
            d = _DIMS.index(s.annotations["thread_tag"][-1])
            if s.extent < launch[d]:
                c = (f"loop {s.var.name}, bound to {s.annotations['thread_tag']} with extent "
                     f"{s.extent} < the block's {launch[d]} threads")
        _check_barriers(s.body, tvars, launch, where, c)
        return
    if isinstance(s, (Seq, Allocate)):
        for x in (s.stmts if isinstance(s, Seq) else [s.body]):
            _check_barriers(x, tvars, launch, where, ctx)


def verify_gpu_kernel(func: PrimFunc, target) -> None:
    """Check every device kernel of lowered GPU function ``func`` against ``target``.

    Raises:
        ScheduleError: naming the kernel and loop when the threads of a block exceed
            ``target.max_threads_per_block`` (or one dimension does), the shared buffers exceed
            ``target.max_shared_memory_per_block`` bytes, or a ``Barrier`` sits under control
            flow that differs between threads."""
    from ..dtypes import itemsize
    _, kernels = split_host_device(func)
    limit = target.max_threads_per_block
    smem_limit = target.max_shared_memory_per_block
    for k in kernels:
        where = f"kernel {func.name} (device kernel {k.index})"
        n = k.block[0] * k.block[1] * k.block[2]
        if n > limit:
            loops = [s for s in walk_stmt(k.body) if isinstance(s, For)
                     and s.kind == "thread_binding"
                     and s.annotations["thread_tag"].startswith("threadIdx")]
            big = max(loops, key=lambda s: s.extent)
            raise ScheduleError(f"{where}: loop {big.var.name} bound to "
                                f"{big.annotations['thread_tag']} (extent {big.extent}) makes "
                                f"{n} threads per block {k.block}, above the target's "
                                f"max_threads_per_block={limit} ({target.kind}); split it "
                                f"smaller")
        smem = sum(b.alloc_size * itemsize(b.dtype) for b in k.shared)
        if smem > smem_limit:
            names = ", ".join(b.name for b in k.shared)
            raise ScheduleError(f"{where}: shared buffers {names} take {smem} bytes per block, "
                                f"above the target's max_shared_memory_per_block={smem_limit}")
        _check_barriers(k.body, _thread_vars(k.body), k.block, where, None)


__all__ = ["DeviceKernel", "split_host_device", "verify_gpu_kernel"]
