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
        InputError: a name in ``params`` that is no parameter of ``main`` (the message names
            them and lists the parameters); checked before anything is bound.
        ShapeMismatchError: a value whose shape is not the parameter's (up to dimensions of
            size 1): reshaping a transposed or wrongly sized weight would be a wrong answer.
    """
    if not params:
        return mod
    f = mod.main
    _check_names(f, params)
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


def _check_names(f: Function, params: Mapping[str, np.ndarray]) -> None:
    """Raise ``InputError`` naming each key of ``params`` that is no parameter of ``f``: a
    misspelled or stale weight name would otherwise be ignored silently, and the parameter it
    was meant for would become a run-time input."""
    names = [p.name for p in f.params]
    known = set(names)
    unknown = [k for k in params if k not in known]
    if not unknown:
        return
    import difflib
    from ...errors import InputError
    hints = []
    for k in unknown[:5]:
        close = difflib.get_close_matches(str(k), names, n=1)
        if close:
            hints.append(f"{k!r} -> {close[0]!r}?")
    shown = ", ".join(repr(n) for n in names[:8]) or "none"
    if len(names) > 8:
        shown += f" (and {len(names) - 8} more)"
    bad = ", ".join(repr(k) for k in unknown[:10])
    if len(unknown) > 10:
        bad += f" (and {len(unknown) - 10} more)"
    raise InputError(f"params name {len(unknown)} value(s) that are no parameter of graph "
                     f"{f.name!r}: {bad}; its parameters are {shown}"
                     + (f" (did you mean {', '.join(hints)})" if hints else "")
                     + ": remove those entries or fix their names")


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
