"""InferType: recompute every binding's output types from its inputs (operator type
inference; a call of a module function takes the callee's output types).

Passes that change dtypes or shapes (ToMixedPrecision, hand-written rewrites) leave bindings
whose recorded types are stale; this pass rebuilds them and checks the whole module type-checks.
It raises ``ShapeMismatchError`` naming the binding that does not.
"""

from __future__ import annotations

from ..builder import infer_call
from ..ir import Binding, Call, Function, IRModule, Var
from .pass_manager import module_pass


def infer_function(func: Function, mod: IRModule) -> Function:
    """``func`` with every binding's types recomputed (unchanged bindings kept as they are)."""
    sub: dict[int, Var] = {}
    bindings = []
    for b in func.bindings:
        args = tuple(sub.get(id(a), a) if isinstance(a, Var) else a for a in b.call.args)
        where = f"@{func.name} %{b.outputs[0].name}: "
        if b.call.is_function_call:
            callee = mod[b.call.callee]
            attrs, types = b.call.attrs, callee.output_types
            for a, p in zip(args, callee.params):
                if a.type != p.type:
                    from ...errors import ShapeMismatchError
                    raise ShapeMismatchError(f"{where}argument {a.type} does not match parameter "
                                             f"%{p.name}: {p.type} of @{callee.name}")
        else:
            attrs, types = infer_call(b.call.op, list(args), dict(b.call.attrs), where)
        outs = []
        for o, t in zip(b.outputs, types):
            if o.type == t:
                outs.append(o)
            else:
                nv = Var(o.name, t)
                sub[id(o)] = nv
                outs.append(nv)
        changed = any(x is not y for x, y in zip(args, b.call.args)) or \
            any(x is not y for x, y in zip(outs, b.outputs)) or attrs != b.call.attrs
        bindings.append(Binding(tuple(outs), Call(b.call.op, args, attrs)) if changed else b)
    outputs = [sub.get(id(o), o) if isinstance(o, Var) else o for o in func.outputs]
    return Function(list(func.params), bindings, outputs, func.name, dict(func.attrs))


@module_pass("InferType", opt_level=0)
def InferType(mod: IRModule, ctx) -> IRModule:
    """Recompute the types of every function (fused functions first, then their callers)."""
    out = IRModule(mod.functions)
    for name in sorted(mod.functions, key=lambda n: n == "main"):
        out[name] = infer_function(mod[name], out)
    return out
