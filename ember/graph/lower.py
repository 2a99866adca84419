"""Lower graph bindings to loop-IR kernels through each operator's tensor-expression compute.

A binding of an operator lowers to one ``PrimFunc`` through the operator's compute. A binding
that calls a function of the module (a fused group from ``FuseOps`` or a composite from
``partition``) also lowers to ONE ``PrimFunc``: the member operators' computes are composed into
one tensor-expression graph, injective stages are inlined into their consumers, and an
elementwise epilogue over a reduction (conv + bias + relu) is applied to the reduction's
accumulator before its store (``ember.te.create_prim_func``), so the conv result never goes
through memory.

Scalar constants (one element) become immediates in the kernel instead of parameters.
"""

from __future__ import annotations

from typing import Sequence

from .. import te
from ..errors import EmberError, LoweringError, UnsupportedOpError
from ..ops import get_op
from ..tir.stmt import PrimFunc
from .ir import Binding, Call, Constant, Function, IRModule

MAX_INLINE_CONST = 64  # constants up to this size inside a fused function are written in code


def is_immediate(value) -> bool:
    """True for a one-element constant, which a kernel reads as an immediate (no parameter)."""
    return isinstance(value, Constant) and value.data.size == 1


def kernel_inputs(call: Call) -> list:
    """The arguments of ``call`` that are kernel parameters (in order): every argument but the
    one-element constants."""
    return [a for a in call.args if not is_immediate(a)]


def _const_tensor(c: Constant, name: str) -> te.Tensor:
    """A compute tensor holding the constant's values (immediates; a select chain over the flat
    index for small non-scalar constants)."""
    dt = c.type.dtype
    vals = c.data.reshape(-1).tolist()
    if len(vals) == 1:
        return te.compute(c.type.shape, lambda *i: te.const(vals[0], dt), name=name)
    if len(vals) > MAX_INLINE_CONST:
        raise LoweringError(f"constant {c.type} inside a fused function is too large to write "
                            f"in code ({len(vals)} > {MAX_INLINE_CONST} elements): pass it as a "
                            f"parameter of the function")
    from ..ops.transform import ravel

    def f(*i):
        flat = ravel(i, c.type.shape)
        e = te.const(vals[-1], dt)
        for k in range(len(vals) - 2, -1, -1):
            e = te.select(te.eq(flat, k), te.const(vals[k], dt), e)
        return e
    return te.compute(c.type.shape, f, name=name)


def _inputs_for(args: Sequence) -> tuple[list, list]:
    """(te tensor per argument, the placeholders among them in kernel-parameter order)."""
    tensors, params = [], []
    for k, a in enumerate(args):
        if is_immediate(a):
            tensors.append(_const_tensor(a, f"c{k}"))
        else:
            t = te.placeholder(a.type.shape, a.type.dtype, f"in{k}")
            tensors.append(t)
            params.append(t)
    return tensors, params


def _apply_op(call: Call, inputs: list, out_types: list, where: str) -> list:
    opdef = get_op(call.op)
    if opdef.compute is None:
        raise UnsupportedOpError(f"operator {call.op} has no native compute", op=call.op)
    outs = opdef.compute(inputs, call.attrs, out_types)
    if len(outs) == 1 and isinstance(outs[0], PrimFunc):  # imperative (ember.ops.imperative)
        return outs[0]
    for o, t in zip(outs, out_types):
        if tuple(o.shape) != tuple(t.shape) or o.dtype != t.dtype:
            raise LoweringError(f"{where}: compute produced {o.shape} {o.dtype}, type "
                                f"inference said {t.shape} {t.dtype}")
    return list(outs)


def compose_function(func: Function, inputs: Sequence[te.Tensor],
                     mod: IRModule | None = None) -> list[te.Tensor]:
    """The te tensors of ``func``'s outputs given te tensors for its parameters: each binding's
    compute applied to the tensors of its arguments, in order (nested calls composed too).

    Raises:
        UnsupportedOpError: a member operator has no compute. LoweringError: a compute failed.
    """
    env = {id(p): t for p, t in zip(func.params, inputs)}

    def val(a, k):
        if isinstance(a, Constant):
            return _const_tensor(a, f"c{k}")
        return env[id(a)]

    for b in func.bindings:
        args = [val(a, k) for k, a in enumerate(b.call.args)]
        types = [o.type for o in b.outputs]
        where = f"@{func.name}: {b.call.op} (binding %{b.outputs[0].name})"
        if b.call.is_function_call:
            if mod is None or b.call.callee not in mod.functions:
                raise LoweringError(f"{where}: @{b.call.callee} is not a function of the module")
            outs = compose_function(mod[b.call.callee], args, mod)
        else:
            outs = _apply_op(b.call, args, types, where)
            if isinstance(outs, PrimFunc):
                raise LoweringError(f"{where}: an imperative kernel cannot be fused; its "
                                    f"operator must have the OPAQUE pattern")
        for v, t in zip(b.outputs, outs):
            env[id(v)] = t
    result = []
    for k, o in enumerate(func.outputs):
        t = val(o, k)
        if any(t is x for x in inputs) or any(t is r for r in result):  # own tensor per output
            src = t
            t = te.compute(src.shape, lambda *i, s=src: s[i], name=f"out{k}")
        result.append(t)
    return result


def lower_binding(binding: Binding, name: str, mod: IRModule | None = None) -> PrimFunc:
    """One ``PrimFunc`` computing ``binding``; its parameters are ``kernel_inputs(binding.call)``
    then the binding's outputs. A call of a module function (``mod`` needed) composes the
    function's operators into the one kernel.

    Raises:
        UnsupportedOpError: the operator has no compute (host-only).
        LoweringError: the compute failed; the message names the operator and binding.
    """
    call = binding.call
    out_types = [o.type for o in binding.outputs]
    where = f"{call.op} (binding %{binding.outputs[0].name})"
    tensors, params = _inputs_for(call.args)
    try:
        if call.is_function_call:
            if mod is None or call.callee not in mod.functions:
                raise LoweringError(f"{where}: @{call.callee} is not a function of the module")
            outs = compose_function(mod[call.callee], tensors, mod)
        else:
            outs = _apply_op(call, tensors, out_types, where)
        if isinstance(outs, PrimFunc):
            func = outs
            func.name = name
        else:
            func = te.create_prim_func(params + list(outs), name, num_outputs=len(outs))
    except EmberError as e:
        if str(e).startswith(where) or str(e).startswith("@"):
            raise
        raise type(e)(f"{where}: {e}") from None
    func.attrs["op"] = call.op
    if call.is_function_call and mod is not None and call.callee in mod.functions:
        func.attrs["ops"] = [b.call.op for b in mod[call.callee].bindings]
    return func


def lower_function(func: Function, prefix: str = "k",
                   mod: IRModule | None = None) -> list[tuple[Binding, PrimFunc]]:
    """A kernel per binding of ``func`` (in order)."""
    return [(b, lower_binding(b, f"{prefix}{k}", mod)) for k, b in enumerate(func.bindings)]


def kernel_args(binding: Binding) -> Sequence:
    """Values passed to the kernel of ``binding``: its kernel inputs then its outputs."""
    return kernel_inputs(binding.call) + list(binding.outputs)


def constant_args(binding: Binding, params) -> list[int]:
    """Positions of ``binding``'s kernel arguments that are compile-time constants (a
    ``Constant`` or a function parameter named in ``params``): the arguments a schedule may
    re-lay out (pack) once at compile time."""
    from .ir import Constant, Var
    out = []
    for k, a in enumerate(kernel_args(binding)):
        if isinstance(a, Constant) or (isinstance(a, Var) and a.name in params):
            out.append(k)
    return out


def count_kernels(mod: IRModule) -> int:
    """Kernels ``mod["main"]`` launches: one per binding (an operator or a fused group)."""
    return len(mod.main.bindings)


__all__ = ["lower_binding", "lower_function", "kernel_args", "constant_args", "kernel_inputs", "compose_function",
           "count_kernels", "is_immediate", "np"]
