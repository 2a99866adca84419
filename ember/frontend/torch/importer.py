"""Import a ``torch.export.ExportedProgram`` into the graph IR (``from_exported_program``).

The program is first decomposed to the core ATen operator set (``run_decompositions()``), then
every ``call_function`` node goes through the converter registered for its ATen overload
(``registry.py``), which emits graph-IR calls through the ONNX frontend's ``ImportContext``
(so calls on compile-time constants fold with the operators' NumPy references, exactly as in
``from_onnx``). Parameters, buffers and lifted constants enter as constants named by their
qualified names (``"layer1.0.conv1.weight"``); those with more than 16 elements that reach a
compiled operator become weight parameters (``params``) under that name, smaller ones stay
inline, as ONNX initializers do. User inputs become the function's parameters, in order.

Every output of a converter is checked against the shape and dtype torch recorded for the node
(``node.meta["val"]``), so a converter that disagrees with torch fails at import, naming the node,
instead of computing other numbers.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import (EmberError, ModelLoadError, ShapeFunctionMissingError, ShapeMismatchError,
                       UnsupportedOpError)
from ...graph.ir import Constant, IRModule, TensorType
from ..onnx import ImportContext
from . import registry
from .symbols import program_symbols

#: FX targets that compute nothing at inference (assertions, metadata checks)
_NO_OPS = {"aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
           "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg",
           "aten.sym_constrain_range.default"}

REGISTER_HINT = ("register a converter with ember.frontend.torch.register_converter("
                 "'<overload>', fn) (fn(ctx, node, *args) emits graph-IR calls, see "
                 "docs/torch.md), or for an operator of your own "
                 "ember.frontend.torch.register_op('ns::op', compute=..., shape_func=..., "
                 "reference=...)")


def torch_dtype_name(dt) -> str:
    """ember dtype name of a ``torch.dtype`` (``torch.float32`` -> ``"float32"``).

    Raises:
        UnsupportedOpError: complex, quantized or other dtypes ember has no type for."""
    name = str(dt).replace("torch.", "")
    if name in ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
                "uint8", "uint16", "uint32", "uint64", "bool"):
        return name
    raise UnsupportedOpError(f"torch dtype {dt} is not supported by ember")


def to_numpy(t) -> np.ndarray:
    """A NumPy copy of a CPU torch tensor (bfloat16 through ``ml_dtypes``)."""
    import torch
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


def source_line(fx_node) -> str:
    """``"file.py:12: code"`` of the user's line that made ``fx_node`` (the innermost frame of
    ``node.meta["stack_trace"]``), or ``""`` when torch recorded none."""
    trace = fx_node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.strip().splitlines()]
    for k in range(len(lines) - 1, -1, -1):
        if lines[k].startswith("File "):
            parts = lines[k].split(", ")
            path = parts[0][len("File "):].strip('"')
            lineno = parts[1].replace("line ", "") if len(parts) > 1 else "?"
            code = lines[k + 1] if k + 1 < len(lines) and not lines[k + 1].startswith("File ") \
                else ""
            return f"{path}:{lineno}: {code}".rstrip(": ").rstrip()
    return ""


class TorchNode:
    """What a converter sees of one FX node: ``name``, ``op_type`` (the overload name),
    ``fx`` (the node), ``val`` (torch's fake output value), ``shape``/``dtype`` of a single
    tensor output, and ``where`` (the prefix of error messages, with the source line)."""

    def __init__(self, fx_node, symbols=None):
        self.fx = fx_node
        self.symbols = symbols
        self.name = fx_node.name
        self.op_type = registry.overload_name(fx_node.target)
        self.outputs = [fx_node.name]
        self.val = fx_node.meta.get("val")
        self.source = source_line(fx_node)

    @property
    def where(self) -> str:
        src = f" at {self.source}" if self.source else ""
        return f"node {self.name!r} ({self.op_type}{src}): "

    @property
    def shape(self) -> tuple:
        """The recorded output shape: ints, or ``tir`` expressions for symbolic sizes."""
        return shape_of(self.val, self.symbols)

    @property
    def dtype(self) -> str:
        return torch_dtype_name(self.val.dtype)


def shape_of(val, symbols=None) -> tuple:
    """Dimensions of a fake tensor: ints, or (with ``symbols``, a ``TorchSymbols``) ember
    symbolic dimensions for its ``SymInt`` sizes."""
    if symbols is None:
        return tuple(int(d) for d in val.shape)
    return tuple(symbols.dim(d) for d in val.shape)


def _is_sym_scalar(n) -> bool:
    """True for an FX node computing a symbolic size or predicate (``sym_size``, ``s0 * s1``,
    ``s1 >= 2``): its value is the expression torch recorded, not a kernel."""
    import torch
    return isinstance(n.meta.get("val"), (torch.SymInt, torch.SymBool))


def _static_type(val, what: str) -> TensorType:
    shape = []
    for k, d in enumerate(val.shape):
        try:
            shape.append(int(d))
        except Exception:  # a SymInt without a hint
            raise ShapeMismatchError(
                f"{what} has a symbolic dimension {k} ({d}): symbolic dimensions "
                f"(torch.export.Dim, dynamic_shapes=) are not supported yet; export with static "
                f"shapes (one compile per shape)") from None
        if not isinstance(d, int):
            raise ShapeMismatchError(
                f"{what} has a symbolic dimension {k} ({d}): symbolic dimensions "
                f"(torch.export.Dim, dynamic_shapes=) are not supported yet; export with static "
                f"shapes (one compile per shape)")
    return TensorType(tuple(shape), torch_dtype_name(val.dtype))


def data_dependent_nodes(graph) -> list:
    """The ``call_function`` nodes whose output shape depends on run-time values (torch gave
    it an unbacked symbol: boolean-mask indexing, ``nonzero``, ``.item()`` sizes)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    out = []
    for n in graph.nodes:
        if n.op != "call_function" or registry.overload_name(n.target).startswith(
                ("_operator.", "operator.")):
            continue
        v = n.meta.get("val")
        vals = v if isinstance(v, (list, tuple)) else [v]
        if any(hasattr(t, "shape") and free_unbacked_symbols(t) for t in vals
               if t is not None):
            out.append(n)
    return out


def data_dependent_error(nodes: Sequence) -> UnsupportedOpError:
    """One ``UnsupportedOpError`` listing the nodes of ``data_dependent_nodes`` (source lines)
    and what to do instead."""
    lines = []
    for n in nodes:
        src = source_line(n)
        lines.append(f"  node {n.name!r} ({registry.overload_name(n.target)})" +
                     (f" at {src}" if src else ""))
    err = UnsupportedOpError(
        f"{len(nodes)} operator{'s' if len(nodes) > 1 else ''} of the model "
        f"{'have' if len(nodes) > 1 else 'has'} an output shape that depends on run-time "
        f"values (boolean-mask indexing x[mask], nonzero, sizes from .item()); ember compiles "
        f"static shapes:\n" + "\n".join(lines) + "\nWhat to do: keep the shape static "
        f"(torch.where(mask, x, 0), masked_fill, x[mask] = v), or use "
        f"torch.compile(module, backend='ember'), which runs such operators in PyTorch and "
        f"compiles the rest", op=registry.overload_name(nodes[0].target), node=nodes[0].name)
    err.ops = sorted({registry.overload_name(n.target) for n in nodes})
    return err


def unsupported_nodes(graph) -> list:
    """The ``call_function`` nodes of an FX graph that have no converter."""
    return [n for n in graph.nodes if n.op == "call_function"
            and registry.overload_name(n.target) not in _NO_OPS and not _is_sym_scalar(n)
            and registry.lookup(n.target) is None]


def unsupported_error(nodes: Sequence) -> UnsupportedOpError:
    """One ``UnsupportedOpError`` listing every node of ``nodes`` (op, node name, source line)
    and how to register a converter."""
    by_op: dict[str, list] = {}
    for n in nodes:
        by_op.setdefault(registry.overload_name(n.target), []).append(n)
    lines = []
    for op, ns in by_op.items():
        lines.append(f"  {op} ({len(ns)} node{'s' if len(ns) > 1 else ''}):")
        for n in ns:
            src = source_line(n)
            lines.append(f"    node {n.name!r}" + (f" at {src}" if src else ""))
    ops = sorted(by_op)
    err = UnsupportedOpError(
        f"{len(ops)} PyTorch operator{'s' if len(ops) > 1 else ''} of the model "
        f"{'have' if len(ops) > 1 else 'has'} no ember converter:\n" + "\n".join(lines) +
        f"\nTo add one, {REGISTER_HINT}.", op=ops[0], node=nodes[0].name)
    err.ops = ops
    return err


def from_exported_program(ep, decompose: bool = True, input_names: Sequence[str] | None = None,
                          dynamic_shapes=None) -> tuple[IRModule, dict[str, np.ndarray]]:
    """Import a ``torch.export.ExportedProgram`` into the graph IR.

    Args:
        ep: ``torch.export.export(module, args, dynamic_shapes=...)``. Symbolic sizes
            (``torch.export.Dim``) become ember symbols with the bounds of
            ``ep.range_constraints`` (``main.attrs["symbol_bounds"]``; docs/torch.md).
        decompose: run ``ep.run_decompositions()`` first (the core ATen set the converters
            cover); pass ``False`` only for a program that is already decomposed.
        input_names: names of the function's parameters for the user inputs, in order
            (default: the exported placeholders' names, which are ``forward``'s argument names).
        dynamic_shapes: the spec the program was exported with; only used to name the
            symbols after their ``Dim``s (``Dim("seq")`` -> ``seq``; without it, an input
            axis's symbol is ``<input>_d<axis>``).
    Returns:
        ``(mod, params)``: ``mod["main"]`` takes the tensor user inputs, then the weights;
        ``params`` maps weight names (the parameters' and buffers' qualified names, e.g.
        ``"blocks.0.conv1.weight"``) to NumPy arrays. Outputs are the program's flattened user
        outputs, in order.
    Raises:
        ModelLoadError: ``ep`` is not an ``ExportedProgram``.
        UnsupportedOpError: one error listing every operator without a converter (with the
            nodes' source lines); one listing the operators whose output shape depends on
            run-time values (boolean-mask indexing); a buffer or input the program mutates; a converter's
            unsupported argument form (naming the node).
        ShapeMismatchError: a converter whose result disagrees with torch's recorded
            shape/dtype.
        ShapeFunctionMissingError: symbolic sizes reach operators without a symbolic shape
            function (every such operator listed, with ``ember.register_shape_func``).
    """
    import torch
    from torch.export import ExportedProgram
    from torch.export.graph_signature import InputKind, OutputKind
    if not isinstance(ep, ExportedProgram):
        raise ModelLoadError(f"from_exported_program expects a torch.export.ExportedProgram "
                             f"(torch.export.export(module, args)), got {type(ep).__name__}")
    if decompose:
        ep = ep.run_decompositions()
    graph = ep.graph
    dynamic = data_dependent_nodes(graph)
    if dynamic:
        raise data_dependent_error(dynamic)
    missing = unsupported_nodes(graph)
    if missing:
        raise unsupported_error(missing)
    sig = ep.graph_signature
    for spec in sig.output_specs:
        if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION,
                         OutputKind.PARAMETER_MUTATION):
            raise UnsupportedOpError(
                f"the program mutates {spec.target!r} in place ({spec.kind.name}); ember "
                f"compiles pure functions: keep state updates out of forward (eval mode for "
                f"batch norm)", op="mutation", node=spec.arg.name)
    ctx = ImportContext({})
    env: dict = {}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    user_inputs = []
    for n, spec in zip(placeholders, sig.input_specs):
        if spec.kind == InputKind.USER_INPUT and isinstance(n.meta.get("val"), torch.Tensor):
            k = len(user_inputs)
            name = input_names[k] if input_names is not None and k < len(input_names) else n.name
            user_inputs.append((name, n.name, n.meta["val"]))
    symbols = program_symbols(ep, user_inputs, dynamic_shapes) if ep.range_constraints \
        else None
    if symbols is not None:
        ctx.symbol_bounds = symbols.bounds
    user_k = 0
    for n, spec in zip(placeholders, sig.input_specs):
        if spec.kind == InputKind.USER_INPUT:
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor):
                name = user_inputs[user_k][0]
                user_k += 1
                ty = _static_type(val, f"input {name!r}") if symbols is None else \
                    TensorType(shape_of(val, symbols), torch_dtype_name(val.dtype))
                env[n] = ctx.fb.param(name, ty)
            else:  # an int/float argument: specialized into the program by export
                env[n] = val
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            t = ep.state_dict.get(spec.target) if spec.target in ep.state_dict else \
                ep.constants.get(spec.target)
            if not isinstance(t, torch.Tensor):
                raise UnsupportedOpError(f"{spec.kind.name.lower()} {spec.target!r} is not a "
                                         f"tensor ({type(t).__name__})", node=n.name)
            c = Constant(to_numpy(t))
            ctx.const_names[id(c)] = spec.target
            env[n] = c
        else:
            raise UnsupportedOpError(f"program input {n.name!r} of kind {spec.kind.name} "
                                     f"(script objects, effect tokens) is not supported",
                                     node=n.name)
    _convert_nodes(ctx, graph, env, symbols)
    if ctx.missing_shape_funcs:
        raise ShapeFunctionMissingError(ctx.missing_shape_funcs)
    out_node = next(n for n in graph.nodes if n.op == "output")
    flat = list(out_node.args[0]) if isinstance(out_node.args[0], (list, tuple)) \
        else [out_node.args[0]]
    outputs, names = [], []
    for spec, a in zip(sig.output_specs, flat):
        if spec.kind != OutputKind.USER_OUTPUT:
            continue
        v = env[a] if isinstance(a, torch.fx.Node) else a
        if v is None or isinstance(v, tuple):
            raise UnsupportedOpError(f"output {spec.arg.name!r} is not a tensor", node=str(a))
        if not hasattr(v, "type"):
            v = Constant(np.asarray(v))
        outputs.append(v)
        names.append(spec.arg.name)
    func = ctx.fb.finish(outputs)
    func.attrs["output_names"] = names
    if symbols is not None and symbols.used:
        func.attrs["symbol_bounds"] = symbols.symbol_bounds()
    return IRModule.from_function(func), ctx.params


def _convert_nodes(ctx, graph, env, symbols=None) -> None:
    """Convert every ``call_function`` node of ``graph`` in order, filling ``env`` (a
    symbolic size node gets the dimension expression torch recorded for it)."""
    import torch
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        view = TorchNode(n, symbols)
        if view.op_type in _NO_OPS:
            env[n] = None
            continue
        if _is_sym_scalar(n):
            v = n.meta["val"]
            env[n] = symbols.dim(v) if isinstance(v, torch.SymInt) and symbols else None
            continue
        conv = registry.lookup(n.target)
        args = torch.fx.node.map_arg(n.args, lambda a: env[a])
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: env[a])
        ctx.node = view
        try:
            out = _call_converter(ctx, view, conv, args, kwargs)
        except Exception:
            if ctx.missing_shape_funcs:  # placeholder types after an op without one
                raise ShapeFunctionMissingError(ctx.missing_shape_funcs) from None
            raise
        if not ctx.missing_shape_funcs:
            _check(view, out)
        env[n] = out


def _call_converter(ctx, view, conv, args, kwargs):
    """``conv(ctx, view, *args, **kwargs)`` with its errors named after the node."""
    try:
        return conv(ctx, view, *args, **kwargs)
    except EmberError as e:
        msg = str(e)
        if view.where not in msg:
            msg = view.where + msg
        err = UnsupportedOpError(msg, op=view.op_type, node=view.name) \
            if isinstance(e, UnsupportedOpError) else type(e)(msg)
        raise err from None
    except Exception as e:  # a converter's bug on an argument form it did not foresee
        raise UnsupportedOpError(f"{view.where}the converter failed on this argument form "
                                 f"({type(e).__name__}: {e}); {REGISTER_HINT}",
                                 op=view.op_type, node=view.name) from e


def _check(view: TorchNode, out) -> None:
    """Compare converter outputs with torch's recorded values (shape, dtype; symbolic
    dimensions by their normal forms)."""
    import torch
    from ...tir.symbolic import dims_equal
    vals = view.val if isinstance(view.val, (list, tuple)) else [view.val]
    outs = out if isinstance(out, (list, tuple)) else [out]
    for k, (o, v) in enumerate(zip(outs, vals)):
        if o is None or not isinstance(v, torch.Tensor) or not hasattr(o, "type"):
            continue
        want = TensorType(shape_of(v, view.symbols), torch_dtype_name(v.dtype))
        if len(o.type.shape) != len(want.shape) or o.type.dtype != want.dtype or not all(
                dims_equal(a, b) for a, b in zip(o.type.shape, want.shape)):
            raise ShapeMismatchError(f"{view.where}output {k} converts to {o.type}, torch "
                                     f"computes {want} (a converter bug: please report it)")
