"""EliminateDeadCode: drop bindings whose results nothing reads (every graph operator is pure),
and module functions that no binding calls (``main`` always stays)."""

from __future__ import annotations

from ..ir import Function, IRModule, Var
from .pass_manager import module_pass


def dce_function(func: Function) -> Function:
    """``func`` without unused bindings (a backward liveness sweep)."""
    live = {id(o) for o in func.outputs if isinstance(o, Var)}
    keep = []
    for b in reversed(func.bindings):
        if any(id(o) in live for o in b.outputs):
            keep.append(b)
            live.update(id(a) for a in b.call.args if isinstance(a, Var))
    keep.reverse()
    if len(keep) == len(func.bindings):
        return func
    return Function(list(func.params), keep, list(func.outputs), func.name, dict(func.attrs))


@module_pass("EliminateDeadCode", opt_level=1)
def EliminateDeadCode(mod: IRModule, ctx) -> IRModule:
    """Dead bindings out of every function; unreachable functions out of the module."""
    funcs = {n: dce_function(f) for n, f in mod.functions.items()}
    reach, stack = set(), ["main"] if "main" in funcs else list(funcs)
    while stack:
        n = stack.pop()
        if n in reach or n not in funcs:
            continue
        reach.add(n)
        stack.extend(b.call.callee for b in funcs[n].bindings if b.call.is_function_call)
    return IRModule({n: f for n, f in funcs.items() if n in reach})
