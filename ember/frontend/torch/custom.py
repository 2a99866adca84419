"""Custom PyTorch operators carried to ember: ``register_op("mylib::op", ...)``.

An operator defined with ``torch.library.custom_op("mylib::op", mutates_args=())`` (and a
``register_fake`` implementation so export can trace it) stays one node through
``torch.export`` and ``run_decompositions``. ``register_op`` registers, once, the graph operator
``"mylib.op"`` in ember's operator registry (``ember.ops.register_op``: its tensor-expression
compute, type relation and NumPy reference) and the converter that maps the torch node onto it:
the schema's tensor arguments become the operator's inputs, the others its attributes (with
the schema's defaults). It then compiles like any built-in operator for every target: the CPU
(``llvm``) and the GPU targets (``webgpu``, ``cuda``) from its tensor-expression compute (the GPU
default schedules bind any compute), and the NPU (``npu``) through the lowering given as
``npu=`` (``ember.npu.register_lowering``: it builds the layer with the NPU's kernel generator,
``lower_conv2d`` / ``lower_dense``); without one, the operator runs on the NPU target's host CPU.
"""

from __future__ import annotations

from typing import Callable

from ...errors import UnsupportedOpError
from ...ops.registry import REQUIRED, OpPattern
from ...ops.registry import register_op as _register_graph_op
from . import registry


def _schema(qualname: str):
    import torch
    ns, _, name = qualname.partition("::")
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        return packet.default._schema
    except (AttributeError, RuntimeError):
        raise UnsupportedOpError(
            f"torch operator {qualname!r} is not defined: define it first with "
            f"@torch.library.custom_op({qualname!r}, mutates_args=()) (and register_fake)",
            op=qualname) from None


def _is_tensor(arg) -> bool:
    return str(arg.type).startswith("Tensor")


def register_op(qualname: str, *, compute: Callable, shape_func: Callable,
                reference: Callable | None = None, pattern: OpPattern = OpPattern.OPAQUE,
                npu: Callable | None = None, override: bool = False):
    """Map the torch custom operator ``qualname`` (``"ns::name"``) to a new ember operator.

    Args:
        qualname: the name given to ``torch.library.custom_op``; the operator must be defined.
        compute: ``(input te.Tensors, attrs, output TensorTypes) -> te.Tensor | [te.Tensor]``:
            the tensor-expression compute (``ember.te``), inputs in schema order.
        shape_func: ``(input TensorTypes, attrs) -> TensorType | [TensorType]``: the type
            relation (output shapes and dtypes), raising ``ShapeMismatchError`` on inputs it
            cannot take; it must agree with the ``register_fake`` implementation (import
            checks it on every node).
        reference: ``(input ndarrays, attrs) -> ndarray | [ndarray]``, the NumPy reference
            (constant folding, the reference interpreter, tests).
        pattern: fusion kind (``OPAQUE``: never fused; ``ELEMWISE``/``INJECTIVE`` let the
            fusion pass merge it with neighbours).
        npu: ``(x_type, consts, attrs, cfg) -> NPUKernel``, how the NPU runs the operator (see
            ``ember.npu.register_lowering``): the first tensor argument is the activation, the
            others must be constants (module buffers / parameters) at build time. A call it
            refuses (``NPUError``) runs on the CPU, reported in ``info["npu"]["fallback"]``.
        override: replace an earlier registration of the same operator.
    Returns:
        the ``OpDef`` of the graph operator ``"ns.name"``; its attributes are the schema's
        non-tensor arguments with the schema's defaults.
    Raises:
        UnsupportedOpError: the torch operator is not defined.
        ValueError: registered already (without ``override``).
    """
    schema = _schema(qualname)
    ns, _, name = qualname.partition("::")
    graph_name = f"{ns}.{name}"
    tensors = [a.name for a in schema.arguments if _is_tensor(a)]
    attrs = {a.name: (a.default_value if a.has_default_value() else REQUIRED)
             for a in schema.arguments if not _is_tensor(a)}
    opdef = _register_graph_op(graph_name, type_rel=shape_func, compute=compute,
                               reference=reference, pattern=pattern, attrs=attrs,
                               num_inputs=(len(tensors), len(tensors)), override=override,
                               doc=f"torch custom operator {qualname}")
    arg_names = [a.name for a in schema.arguments]

    def convert(ctx, node, *args, **kwargs):
        bound = dict(zip(arg_names, args))
        bound.update(kwargs)
        ins = [bound[n] for n in tensors]
        at = {k: bound[k] for k in attrs if k in bound}
        return ctx.call(graph_name, ins, at)

    convert.__doc__ = f"torch custom operator {qualname} -> graph operator {graph_name}"
    registry.register_converter(qualname, convert, override=override)
    if npu is not None:
        from ...npu.offload import register_lowering
        register_lowering(graph_name, npu, override=override)
    return opdef


def unregister_op(qualname: str) -> None:
    """Remove what ``register_op(qualname, ...)`` registered (the graph operator, the
    converter, the NPU lowering), e.g. to register it again in one process."""
    from ...npu.offload import unregister_lowering
    from ...ops.registry import list_ops, unregister_op as unregister_graph_op
    ns, _, name = qualname.partition("::")
    if f"{ns}.{name}" in list_ops():
        unregister_graph_op(f"{ns}.{name}")
    registry.unregister_converter(qualname)
    unregister_lowering(f"{ns}.{name}")
