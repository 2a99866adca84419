"""The named TIR pass list of each target kind: what runs between the schedule and the printer.

``PASSES[kind]`` is a readable list of ``(name, pass)``; a pass is ``fn(func, target) ->
PrimFunc`` and can be tested alone as loop-IR text in and out (``ember.tir.text.func_text``).
``lower_for_target(func, target)`` runs the list of ``target.kind``.

- ``llvm`` (CPU): lower blocks, expand unrolled loops whose variable decides a select, split
  bounds-checked loops into border and interior ranges, pair micro-kernel calls over row blocks
  (``ember.tir.transform``).
- ``webgpu`` / ``cuda`` (GPU): lower blocks, expand unrolled loops, verify the GPU kernel
  against the target's limits (``ember.tir.gpu.verify_gpu_kernel``: a ``ScheduleError`` naming
  the loop); the WGSL legalization (dtypes, 32-bit indices) runs in the WGSL printer's
  ``legalize_wgsl`` pass, added by ``ember.codegen.wgsl`` for ``webgpu``.
"""

from __future__ import annotations

from .transform import expand_unrolled, lower_blocks, partition_loops, row_groups


def _ignore_target(fn):
    def run(func, target):
        return fn(func)
    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def _verify_gpu(func, target):
    from .gpu import verify_gpu_kernel
    verify_gpu_kernel(func, target)
    return func


_CPU = [("lower_blocks", _ignore_target(lower_blocks)),
        ("expand_unrolled", _ignore_target(expand_unrolled)),
        ("partition_loops", _ignore_target(partition_loops)),
        ("row_groups", _ignore_target(row_groups))]
_GPU = [("lower_blocks", _ignore_target(lower_blocks)),
        ("expand_unrolled", _ignore_target(expand_unrolled)),
        ("verify_gpu_kernel", _verify_gpu)]

PASSES: dict[str, list] = {"llvm": _CPU, "webgpu": list(_GPU), "cuda": list(_GPU)}


def register_pass(kind: str, name: str, fn, after: str | None = None) -> None:
    """Add pass ``fn(func, target)`` named ``name`` to target ``kind``'s list (at the end, or
    right after the pass named ``after``); registering a name again replaces it."""
    lst = PASSES.setdefault(kind, [])
    lst[:] = [(n, f) for n, f in lst if n != name]
    at = len(lst) if after is None else [n for n, _ in lst].index(after) + 1
    lst.insert(at, (name, fn))


def lower_for_target(func, target):
    """``func`` after every pass of ``target.kind``'s list, in order."""
    for _, fn in PASSES.get(target.kind, _CPU):
        func = fn(func, target)
    return func


__all__ = ["PASSES", "lower_for_target", "register_pass"]
