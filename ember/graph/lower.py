"""Lower graph bindings to loop-IR kernels through each operator's tensor-expression compute."""

from __future__ import annotations

from typing import Sequence

from .. import te
from ..errors import EmberError, LoweringError, UnsupportedOpError
from ..ops import get_op
from ..tir.stmt import PrimFunc
from .ir import Binding, Function


def lower_binding(binding: Binding, name: str) -> PrimFunc:
    """One ``PrimFunc`` computing ``binding``; its parameters are the binding's arguments (in
    order, constants included) then its outputs.

    Raises:
        UnsupportedOpError: the operator has no compute (host-only).
        LoweringError: the compute failed; the message names the operator and binding.
    """
    call = binding.call
    opdef = get_op(call.op)
    if opdef.compute is None:
        raise UnsupportedOpError(f"operator {call.op} has no native compute", op=call.op)
    inputs = [te.placeholder(a.type.shape, a.type.dtype, f"in{k}") for k, a in enumerate(call.args)]
    out_types = [o.type for o in binding.outputs]
    where = f"{call.op} (binding %{binding.outputs[0].name})"
    try:
        outs = opdef.compute(inputs, call.attrs, out_types)
        for o, t in zip(outs, out_types):
            if tuple(o.shape) != tuple(t.shape) or o.dtype != t.dtype:
                raise LoweringError(f"{where}: compute produced {o.shape} {o.dtype}, type "
                                    f"inference said {t.shape} {t.dtype}")
        func = te.create_prim_func(inputs + list(outs), name, num_outputs=len(outs))
    except EmberError as e:
        if isinstance(e, LoweringError) and str(e).startswith(where):
            raise
        raise type(e)(f"{where}: {e}") from None
    func.attrs["op"] = call.op
    return func


def lower_function(func: Function, prefix: str = "k") -> list[tuple[Binding, PrimFunc]]:
    """A kernel per binding of ``func`` (in order)."""
    return [(b, lower_binding(b, f"{prefix}{k}")) for k, b in enumerate(func.bindings)]


def kernel_args(binding: Binding) -> Sequence:
    """Values passed to the kernel of ``binding``: arguments then outputs."""
    return list(binding.call.args) + list(binding.outputs)
