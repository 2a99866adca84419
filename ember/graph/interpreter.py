"""The reference executor: runs a graph function with each operator's NumPy reference.

It is the independent check for the compiled path (used by ``ember demo`` when onnxruntime is
not installed, and by tests): no loop IR, no codegen, just the registry's references.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import InputError
from ..ops import get_op
from .ir import Constant, Function, IRModule


def run_reference(mod: IRModule | Function, inputs: Mapping[str, np.ndarray],
                  params: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Evaluate ``mod``'s main function on ``inputs`` (and ``params``) with NumPy references.

    Raises:
        InputError: a parameter has no value.
    """
    func = mod.main if isinstance(mod, IRModule) else mod
    env: dict[int, np.ndarray] = {}
    params = dict(params or {})
    for p in func.params:
        if p.name in inputs:
            env[id(p)] = np.asarray(inputs[p.name])
        elif p.name in params:
            env[id(p)] = np.asarray(params[p.name])
        else:
            raise InputError(f"no value for parameter %{p.name} ({p.type})")

    def val(a):
        return a.data if isinstance(a, Constant) else env[id(a)]

    for b in func.bindings:
        outs = get_op(b.call.op).reference([val(a) for a in b.call.args], b.call.attrs)
        for v, o in zip(b.outputs, outs):
            env[id(v)] = np.asarray(o)
    return [val(o) for o in func.outputs]
