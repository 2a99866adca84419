"""``ember.compile(module, example_inputs=...)`` for PyTorch modules (the driver's torch door).

A ``torch.nn.Module`` is captured with ``torch.export.export(module, example_inputs)`` and
imported with ``from_exported_program``; a ``torch.jit.ScriptModule`` (TorchScript, which
``torch.export`` cannot take) goes through torch's TorchScript ONNX exporter
(``torch.onnx.export(..., dynamo=False)``) into ember's ONNX frontend. Either way the result is
compiled by ``ember.build`` like any imported model.
"""

from __future__ import annotations

import inspect
import io

from ...errors import InputError, ShapeMismatchError, TorchExportError


def forward_arg_names(module, count: int) -> list[str]:
    """The first ``count`` positional parameter names of ``module.forward`` (``input{k}``
    where the signature has none, e.g. ``*args``)."""
    try:
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:count]]
    return names + [f"input{k}" for k in range(len(names), count)]


def _script_arg_names(module, count: int) -> list[str]:
    try:
        args = [a.name for a in module.forward.schema.arguments[1:]]  # drop self
    except (AttributeError, RuntimeError):
        args = []
    return (args + [f"input{k}" for k in range(len(args), count)])[:count]


def _export_hint(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    lines = text.strip().splitlines()
    return "\n".join(lines[:12]) + ("\n..." if len(lines) > 12 else "")


def export_module(module, example_inputs: tuple, dynamic_shapes=None):
    """``torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes)`` under
    ``torch.no_grad()``.

    Raises:
        TorchExportError: export could not trace the module (torch's message kept, with what
            to do: data-dependent Python control flow -> ``torch.cond`` or a fixed branch;
            unsupported Python -> ``torch.compile(backend="ember")``, which breaks the graph
            and runs the rest in PyTorch)."""
    import torch
    try:
        with torch.no_grad():
            return torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes)
    except Exception as e:
        raise TorchExportError(
            f"torch.export could not trace {type(module).__name__}.forward with the given "
            f"example_inputs; torch says:\n{_export_hint(e)}\nWhat to do: make forward "
            f"traceable (no Python branching on tensor values: use torch.where/torch.cond; "
            f"no .item()/.tolist() feeding control flow), or use "
            f"torch.compile(module, backend='ember'), which splits the model at untraceable "
            f"code and runs those parts in PyTorch", torch_error=e) from e


def _as_tuple(example_inputs) -> tuple:
    import torch
    if example_inputs is None:
        raise InputError("compiling a torch.nn.Module needs example_inputs=(x, ...): tensors "
                         "of the shapes and dtypes it will be run with")
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def compile_module(module, example_inputs, target="llvm", dynamic_shapes=None):
    """Compile a ``torch.nn.Module`` (or ``torch.jit.ScriptModule``) for ``target``.

    Args:
        module: the module, normally in ``eval()`` mode.
        example_inputs: a tuple of tensors (a single tensor is accepted) fixing the input
            shapes and dtypes.
        dynamic_shapes: torch's own spec, passed to ``torch.export.export``
            (``{"x": {0: Dim("batch", min=1, max=8), 1: Dim("seq", max=128)}}``): those
            sizes become ember symbols named after the Dims, with their bounds, and the model
            compiles once for every size within them (docs/torch.md).
    Returns:
        a ``CompiledModel`` whose ``input_names`` are ``forward``'s parameter names, whose
        ``run`` takes NumPy arrays and returns the flattened outputs as NumPy arrays.
    Raises:
        InputError: no ``example_inputs``.
        ShapeMismatchError: ``dynamic_shapes`` for a TorchScript module; at run time, sizes
            outside a Dim's bounds or contradicting a symbol (naming the input and symbol).
        ShapeFunctionMissingError: symbolic sizes reach operators without a shape function.
        TorchExportError: torch could not capture the module.
        UnsupportedOpError: the module's unsupported operators, all in one error.
    """
    import torch
    from ...driver import build
    from ...target import Target
    args = _as_tuple(example_inputs)
    target = Target(target)
    if isinstance(module, torch.jit.ScriptModule):
        if dynamic_shapes is not None:
            raise ShapeMismatchError(
                "dynamic_shapes= (torch.export.Dim) needs torch.export, which cannot take a "
                "torch.jit.ScriptModule: compile the eager module instead")
        return _compile_script(module, args, target)
    from .importer import from_exported_program
    ep = export_module(module, args, dynamic_shapes)
    n_tensors = sum(isinstance(a, torch.Tensor) for a in args)
    names = forward_arg_names(module, len(args))
    names = [n for n, a in zip(names, args) if isinstance(a, torch.Tensor)][:n_tensors]
    mod, params = from_exported_program(ep, input_names=names, dynamic_shapes=dynamic_shapes)
    del ep
    compiled = build(mod, target, params, _consume_params=True)
    compiled.info.update(executor="static", frontend="torch.export")
    return compiled


def _compile_script(module, args: tuple, target):
    """TorchScript: torch's TorchScript ONNX exporter, then ember's ONNX frontend."""
    import torch
    from ...driver import compile as compile_onnx
    names = _script_arg_names(module, len(args))
    buf = io.BytesIO()
    try:
        torch.onnx.export(module, args, buf, dynamo=False, input_names=names)
    except Exception as e:
        raise TorchExportError(
            f"torch's TorchScript ONNX exporter (torch.onnx.export(..., dynamo=False)) could "
            f"not export {type(module).__name__}; torch says:\n{_export_hint(e)}\nWhat to do: "
            f"compile the eager module (not torch.jit.script'ed) with "
            f"ember.compile(module, example_inputs)", torch_error=e) from e
    compiled = compile_onnx(buf.getvalue(), target=target, executor="static")
    compiled.info.update(frontend="torchscript-onnx")
    return compiled
