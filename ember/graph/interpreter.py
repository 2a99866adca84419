"""The reference executor: runs a graph function with each operator's NumPy reference.

It is the independent check for the compiled path (used by ``ember demo`` when onnxruntime is
not installed, and by tests): no loop IR, no codegen, just the registry's references.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import InputError
from ..ops import get_op
from ..tir import symbolic
from .ir import Constant, Function, IRModule


def run_reference(mod: IRModule | Function, inputs: Mapping[str, np.ndarray],
                  params: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Evaluate ``mod``'s main function on ``inputs`` (and ``params``) with NumPy references.

    A function with symbolic dimensions (``ember.tir.symbolic``) runs at the sizes of the
    given inputs: the symbols are bound from the input shapes (``bind_shapes``) and the
    symbolic attributes (a reshape's ``newshape``) evaluated before each reference runs.

    Raises:
        InputError: a parameter has no value.
        ShapeMismatchError: inputs that contradict a symbol or its bounds.
    """
    func = mod.main if isinstance(mod, IRModule) else mod
    params = dict(params or {})
    args = []
    for p in func.params:
        if p.name in inputs:
            args.append(np.asarray(inputs[p.name]))
        elif p.name in params:
            args.append(np.asarray(params[p.name]))
        else:
            raise InputError(f"no value for parameter %{p.name} ({p.type})")
    return run_function(func, args, mod if isinstance(mod, IRModule) else None)


def run_function(func: Function, args: list, mod: IRModule | None = None) -> list[np.ndarray]:
    """Evaluate ``func`` on positional ``args``; calls of other functions (fused groups,
    composites) are looked up in ``mod``.

    Raises:
        InputError: a called function is not in ``mod``.
    """
    env: dict[int, np.ndarray] = {id(p): a for p, a in zip(func.params, args)}
    sizes = {}
    if any(p.type.symbols for p in func.params):
        sizes = symbolic.bind_shapes([(p.name, p.type.shape) for p in func.params],
                                     {p.name: np.shape(a) for p, a in zip(func.params, args)},
                                     {k: tuple(v) for k, v in
                                      func.attrs.get("symbol_bounds", {}).items()})

    def val(a):
        return a.data if isinstance(a, Constant) else env[id(a)]

    for b in func.bindings:
        ins = [val(a) for a in b.call.args]
        if b.call.is_function_call:
            if mod is None or b.call.callee not in mod.functions:
                raise InputError(f"%{b.outputs[0].name} calls @{b.call.callee}, which is not a "
                                 f"function of the module")
            outs = run_function(mod[b.call.callee], ins, mod)
        else:
            attrs = symbolic.substitute_attrs(b.call.attrs, sizes) if sizes else b.call.attrs
            outs = get_op(b.call.op).reference(ins, attrs)
        for v, o in zip(b.outputs, outs):
            env[id(v)] = np.asarray(o)
    return [val(o) for o in func.outputs]
