"""DynamicToStatic: make every type static.

ember's frontend resolves shape-valued inputs (Reshape's shape, Slice's starts, Expand's shape)
at import time, so the graph operators have static attributes and this pass is thin: it binds
the symbolic dimensions of ``main``'s parameters to the sizes given in config
``DynamicToStatic.shapes`` (``{"batch": 1}``), re-infers every type, and leaves the module
unchanged when it has no symbolic dimension.

Raises ``ShapeMismatchError`` when a symbolic dimension would stay and the config asks for a
fully static module (``DynamicToStatic.strict``).
"""

from __future__ import annotations

from ...errors import ShapeMismatchError
from ...tir import symbolic
from ..ir import Function, IRModule, TensorType, Var
from .infer_type import infer_function
from .pass_manager import module_pass, register_config

SHAPES = register_config("DynamicToStatic.shapes", dict,
                         "sizes of symbolic dimensions: {name: int}")
STRICT = register_config("DynamicToStatic.strict", bool,
                         "fail when a symbolic dimension remains")


def _is_static(func: Function) -> bool:
    return all(p.type.is_static for p in func.params) and \
        all(o.type.is_static for b in func.bindings for o in b.outputs)


def bind_symbols(func: Function, sizes: dict) -> Function:
    """``func`` with the symbols named in ``sizes`` (``{name: int}``) replaced by the sizes in
    its parameters' dimensions (``(batch * seq)`` becomes an int once both are given); the
    caller re-infers the bindings' types (``infer_function``)."""
    params, sub = [], {}
    for p in func.params:
        shape = tuple(symbolic.substitute(d, sizes) for d in p.type.shape)
        if shape != p.type.shape:
            v = Var(p.name, TensorType(shape, p.type.dtype))
            sub[id(p)] = v
            params.append(v)
        else:
            params.append(p)
    if not sub:
        return func
    from ..ir import Binding, Call
    bindings = [Binding(b.outputs, Call(b.call.op, tuple(sub.get(id(a), a) for a in b.call.args),
                                        symbolic.substitute_attrs(b.call.attrs, sizes)))
                for b in func.bindings]
    outs = [sub.get(id(o), o) for o in func.outputs]
    return Function(params, bindings, outs, func.name, dict(func.attrs))


@module_pass("DynamicToStatic", opt_level=2)
def DynamicToStatic(mod: IRModule, ctx) -> IRModule:
    """Bind symbolic dimensions (config) and re-infer static types."""
    main = mod.main
    if _is_static(main):
        return mod
    sizes = ctx.get_config(SHAPES, {})
    out = IRModule(mod.functions)
    out["main"] = infer_function(bind_symbols(main, sizes), out)
    if ctx.get_config(STRICT, False) and not _is_static(out["main"]):
        left = sorted({n for p in out.main.params for n in p.type.symbols})
        raise ShapeMismatchError(f"DynamicToStatic: symbolic dimensions {left} remain; give their "
                                 f"sizes in PassContext(config={{'DynamicToStatic.shapes': "
                                 f"{{...}}}})")
    return out
