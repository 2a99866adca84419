"""Bind weights into a module as constants, and lift large constants back out as parameters.

``ember.build`` binds ``params`` before the pass pipeline (so folding passes see weight values:
batch-norm folding, constant folding, combining parallel convolutions) and lifts the large
constants back to named parameters afterwards (so the kernels take weights as arguments and the
IR text stays small).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ir import Constant, Function, IRModule, Var
from ...dtypes import np_dtype

LIFT_LIMIT = 16  # constants with more elements become parameters (the frontend's limit)


def bind_params(mod: IRModule, params: Mapping[str, np.ndarray] | None) -> IRModule:
    """``mod`` with each parameter of ``main`` named in ``params`` replaced by a ``Constant``
    (its ``name_hint`` the parameter name); the other parameters (run-time inputs) stay.

    Raises:
        ShapeMismatchError: a value whose shape is not the parameter's (up to dimensions of
            size 1): reshaping a transposed or wrongly sized weight would be a wrong answer.
    """
    if not params:
        return mod
    f = mod.main
    sub: dict[int, Constant] = {}
    keep = []
    for p in f.params:
        if p.name in params:
            arr = np.asarray(params[p.name])
            if arr.dtype.kind != "V":
                arr = arr.astype(np_dtype(p.type.dtype), copy=False)
            _check_shape(p, arr)
            sub[id(p)] = Constant(arr.reshape(p.type.shape), name_hint=p.name)
        else:
            keep.append(p)
    out = IRModule(mod.functions)
    out["main"] = _substitute(f, sub, keep)
    return out


def _check_shape(p: Var, arr: np.ndarray) -> None:
    want = tuple(p.type.shape)
    if not all(isinstance(d, (int, np.integer)) for d in want):
        return
    if tuple(d for d in arr.shape if d != 1) == tuple(d for d in want if d != 1):
        return  # the same values: only size-1 dimensions added or dropped
    from ...errors import ShapeMismatchError
    raise ShapeMismatchError(f"params[{p.name!r}] has shape {tuple(arr.shape)}, but parameter "
                             f"{p.name!r} of the graph has shape {tuple(int(d) for d in want)}: "
                             f"pass an array of that shape (a transposed or differently sized "
                             f"weight cannot be reshaped into it)")


def _substitute(f: Function, sub: dict, params: list) -> Function:
    from ..ir import Binding, Call
    bindings = [Binding(b.outputs, Call(b.call.op, tuple(sub.get(id(a), a) if isinstance(a, Var)
                                                         else a for a in b.call.args),
                                        b.call.attrs)) for b in f.bindings]
    outs = [sub.get(id(o), o) if isinstance(o, Var) else o for o in f.outputs]
    return Function(params, bindings, outs, f.name, dict(f.attrs))


def lift_constants(mod: IRModule, limit: int = LIFT_LIMIT
                   ) -> tuple[IRModule, dict[str, np.ndarray]]:
    """Constants of more than ``limit`` elements used by ``main``'s bindings become parameters
    (appended after the existing ones, named from their ``name_hint`` when free).

    Returns:
        ``(mod, params)`` with ``params`` the lifted values by parameter name.
    """
    f = mod.main
    used = {p.name for p in f.params} | {o.name for b in f.bindings for o in b.outputs}
    params: dict[str, np.ndarray] = {}
    new_params = list(f.params)
    var_of: dict[int, Var] = {}

    def lift(a):
        if not isinstance(a, Constant) or a.data.size <= limit:
            return a
        v = var_of.get(id(a))
        if v is None:
            base = a.name_hint or "const"
            name, k = base, 1
            while name in used:
                name = f"{base}_{k}"
                k += 1
            used.add(name)
            v = Var(name, a.type)
            var_of[id(a)] = v
            new_params.append(v)
            params[name] = a.data
        return v

    from ..ir import Binding, Call
    bindings = [Binding(b.outputs, Call(b.call.op, tuple(lift(a) for a in b.call.args),
                                        b.call.attrs)) for b in f.bindings]
    out = IRModule(mod.functions)
    out["main"] = Function(new_params, bindings, list(f.outputs), f.name, dict(f.attrs))
    return out, params
