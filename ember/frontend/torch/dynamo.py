"""The ``torch.compile`` backend ``"ember"`` (registered through the ``torch_dynamo_backends``
entry point, so ``torch.compile(model, backend="ember")`` works once ember is installed).

TorchDynamo hands the backend each captured FX graph with example inputs; graph breaks (Python
that Dynamo does not trace, data-dependent control flow) have already split the model, and
the pieces between graphs run in PyTorch. For each graph the backend:

1. keeps the module state Dynamo passes as graph inputs (parameters and buffers, marked
   ``_dynamo_static_input_type``) as weights, bound at compile time;
2. captures the graph with ``torch.export.export(..., strict=False)`` and imports it with
   ``from_exported_program`` (the same ATen converter registry as ``ember.compile``);
3. compiles it with ``ember.build`` and returns a callable taking and returning torch tensors
   (outputs in the graph's structure).

A graph ember cannot take (an operator without a converter, symbolic shapes, inputs that need
gradients) runs eagerly in PyTorch, with a warning saying why. A weight replaced or updated in
place after compiling (a new tensor, or its ``_version`` counter moved) triggers a rebuild at
the next call, so the compiled graph never computes with stale weights.
"""

from __future__ import annotations

import warnings

import numpy as np

from ...errors import EmberError


class EmberFallbackWarning(UserWarning):
    """A graph handed to the ember backend runs in PyTorch instead (the message says why)."""


def _is_static(t) -> bool:
    import torch
    return isinstance(t, torch.nn.Parameter) or \
        getattr(t, "_dynamo_static_input_type", None) is not None


def _eager(gm, why: str):
    warnings.warn(f"ember backend: running this graph with PyTorch: {why}", EmberFallbackWarning,
                  stacklevel=3)
    return gm.forward


def _compile(gm, example_inputs, static_pos: list[int], target):
    """Export the graph with the static inputs as buffers and build it."""
    import torch
    from torch.utils import _pytree
    from ...driver import build
    from .importer import from_exported_program

    class _Graph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gm = gm
            for k in static_pos:
                self.register_buffer(f"w{k}", example_inputs[k].detach(), persistent=True)

        def forward(self, *dyn):
            it = iter(dyn)
            full = [getattr(self, f"w{k}") if k in static_pos else next(it)
                    for k in range(len(example_inputs))]
            return self.gm(*full)

    dyn = tuple(t for k, t in enumerate(example_inputs) if k not in static_pos)
    ep = torch.export.export(_Graph(), dyn, strict=False)
    mod, params = from_exported_program(ep, input_names=[f"input{k}" for k in range(len(dyn))])
    compiled = build(mod, target, params, _consume_params=True)
    out_spec = ep.call_spec.out_spec
    return compiled, (lambda outs: _pytree.tree_unflatten(outs, out_spec))


class EmberGraph:
    """The callable the backend returns for one graph: tensors in, tensors out.

    Attributes:
        compiled: the ``CompiledModel`` of the graph.
        builds: how many times the graph was compiled (1 + weight-change rebuilds).
    """

    def __init__(self, gm, example_inputs, static_pos, target):
        self.gm, self.static_pos, self.target = gm, static_pos, target
        self.builds = 0
        self._build(list(example_inputs))

    def _build(self, inputs):
        self.compiled, self._unflatten = _compile(self.gm, inputs, self.static_pos, self.target)
        self._weights = [(inputs[k], inputs[k]._version) for k in self.static_pos]
        self.builds += 1

    def __call__(self, *args):
        import torch
        for (t, ver), k in zip(self._weights, self.static_pos):
            if args[k] is not t or args[k]._version != ver:
                self._build(list(args))
                break
        ins = [np.ascontiguousarray(a.detach().cpu().numpy())
               for k, a in enumerate(args) if k not in self.static_pos]
        outs = [torch.from_numpy(o) for o in self.compiled.run(ins)]
        return self._unflatten(outs)


def ember_backend(gm, example_inputs, target: str = "llvm", **kwargs):
    """TorchDynamo backend: compile the FX graph ``gm`` for ``example_inputs`` with ember.

    Args:
        gm: the ``torch.fx.GraphModule`` Dynamo captured.
        example_inputs: its inputs (user tensors, and parameters/buffers as graph inputs).
        target: the ember target (``torch.compile(m, backend="ember",
            options={"target": "llvm -num-threads=2"})``).
    Returns:
        an ``EmberGraph`` (torch tensors in and out), or ``gm.forward`` (PyTorch runs the
        graph, with an ``EmberFallbackWarning``) when ember cannot compile it.
    """
    import torch
    from ...target import Target
    options = kwargs.get("options") or {}
    target = Target(options.get("target", target))
    if any(not isinstance(t, torch.Tensor) for t in example_inputs):
        return _eager(gm, "the graph takes symbolic sizes (dynamic shapes are not supported "
                          "yet; torch.compile(..., dynamic=False) specializes them)")
    if any(not isinstance(d, int) for t in example_inputs for d in t.shape):
        return _eager(gm, "the graph has symbolic dimensions (dynamic shapes are not supported "
                          "yet; torch.compile(..., dynamic=False) specializes them)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in example_inputs):
        return _eager(gm, "inputs require gradients and grad mode is on: ember compiles "
                          "inference only (wrap the call in torch.no_grad() or "
                          "torch.inference_mode())")
    if any(t.device.type != "cpu" for t in example_inputs):
        return _eager(gm, "inputs are not on the CPU (ember's torch backend runs on the CPU)")
    static_pos = [k for k, t in enumerate(example_inputs) if _is_static(t)]
    try:
        return EmberGraph(gm, list(example_inputs), static_pos, target)
    except EmberError as e:
        return _eager(gm, f"{type(e).__name__}: {e}")
