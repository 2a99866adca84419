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
A ``torch.jit.ScriptModule`` calling the operator reaches the same registration through torch's
TorchScript ONNX exporter: ``register_op`` also registers an ONNX symbolic writing it as a node
of the custom domain ``ns`` and the ONNX converter of that node.
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
    _register_onnx(qualname, schema, tensors, attrs, graph_name)
    if npu is not None:
        from ...npu.offload import register_lowering
        register_lowering(graph_name, npu, override=override)
    return opdef


#: parse_args codes of torch's TorchScript ONNX exporter for schema argument types
_ARG_CODES = {"int": "i", "SymInt": "i", "float": "f", "bool": "b", "str": "s", "int[]": "is",
              "SymInt[]": "is", "float[]": "fs"}
_ATTR_SUFFIX = {"i": "_i", "f": "_f", "b": "_i", "s": "_s", "is": "_i", "fs": "_f"}


def _register_onnx(qualname: str, schema, tensors: list[str], attrs: dict,
                   graph_name: str) -> None:
    """The TorchScript route (``torch.jit.ScriptModule`` -> torch's TorchScript ONNX exporter
    -> ember's ONNX frontend): an ONNX symbolic writing the operator as a node of the custom
    domain ``ns`` (tensors as inputs, the other arguments as attributes), and the ONNX
    converter of that ``ns.name`` node onto the same graph operator. Arguments of other types
    (tensor lists, optionals) keep the operator off this route (the exporter then names it)."""
    import torch
    from ..converters import converter
    ns, _, name = qualname.partition("::")
    codes = []
    for a in schema.arguments:
        t = str(a.type)
        codes.append("v" if a.name in tensors else _ARG_CODES.get(t))
    if None in codes or str(schema.returns[0].type) != "Tensor" or len(schema.returns) != 1:
        return
    from torch.onnx import symbolic_helper
    arg_names = [a.name for a in schema.arguments]

    def symbolic(g, *values):
        # what symbolic_helper.parse_args does, per schema argument (its decorator reads the
        # argument names from the function's signature, which a generic *values hides)
        args = [v if c == "v" else symbolic_helper._parse_arg(v, c, n, qualname)
                for v, c, n in zip(values, codes, arg_names)]
        ins = [v for n, v in zip(arg_names, args) if n in tensors]
        kw = {n + _ATTR_SUFFIX[c]: (int(v) if c == "b" else v)
              for n, c, v in zip(arg_names, codes, args) if c != "v"}
        return g.op(f"{ns}::{name}", *ins, **kw)

    torch.onnx.register_custom_op_symbolic(qualname, symbolic, 1)
    kinds = dict(zip(arg_names, codes))

    def convert_onnx(ctx, node):
        at = {}
        for k in attrs:
            if k in node.attrs:
                v = node.attrs[k]
                at[k] = bool(v) if kinds[k] == "b" else (list(v) if isinstance(v, list) else v)
        return [ctx.call(graph_name, list(node.inputs), at)]

    convert_onnx.__doc__ = f"ONNX node {ns}.{name} (torch custom operator {qualname})"
    converter(name, since=1, domain=ns)(convert_onnx)


def unregister_op(qualname: str) -> None:
    """Remove what ``register_op(qualname, ...)`` registered (the graph operator, the ATen
    converter, the ONNX symbolic and converter, the NPU lowering), e.g. to register it again in
    one process."""
    from ...npu.offload import unregister_lowering
    from ...ops.registry import list_ops, unregister_op as unregister_graph_op
    ns, _, name = qualname.partition("::")
    if f"{ns}.{name}" in list_ops():
        unregister_graph_op(f"{ns}.{name}")
    registry.unregister_converter(qualname)
    unregister_lowering(f"{ns}.{name}")
    from ..converters import _CONVERTERS as onnx_converters
    if onnx_converters.pop((ns, name), None) is not None:
        import torch
        torch.onnx.unregister_custom_op_symbolic(qualname, 1)
