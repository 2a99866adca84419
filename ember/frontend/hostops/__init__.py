"""Host kernels: ONNX operators that run on the host (Python/NumPy) in the staged executor.

An operator runs on the host when it cannot be compiled to a static-shape native kernel: it works
on strings, sequences or optionals, its output shape depends on the input *data* (``NonZero``,
``Unique``, ``Compress``...), or it is control flow (``If``, ``Loop``, ``Scan``: those run their
bodies as compiled segments). Every numeric tensor operator stays compiled; the staged executor's
report lists the nodes that ran on the host.

A host kernel is registered with ``@host_op("NonZero")`` and called as
``fn(hctx, inputs) -> list of outputs`` where ``inputs`` holds numpy arrays, Python lists
(sequences) or ``None`` (omitted inputs / empty optionals), in ONNX input order, and ``hctx`` is a
``HostContext`` (node view with attributes and opset, plus a runner for subgraphs).
"""

from __future__ import annotations

from typing import Callable

_HOST: dict[tuple[str, str], tuple[Callable, str]] = {}


def host_op(op_type: str, domain: str = "", mode: str = "always"):
    """Register a host kernel for ``domain.op_type``.

    ``mode`` is ``"always"`` (the op always runs on the host: strings, sequences, data-dependent
    shapes, control flow) or ``"fallback"`` (the op is normally compiled and runs on the host only
    when one of its values is a string/sequence/optional tensor, e.g. ``Identity`` on strings).
    """
    if mode not in ("always", "fallback"):
        raise ValueError(f"host_op mode must be 'always' or 'fallback', got {mode!r}")

    def deco(fn):
        _HOST[(domain, op_type)] = (fn, mode)
        return fn
    return deco


def lookup_host_op(domain: str, op_type: str) -> tuple[Callable, str] | None:
    """``(kernel, mode)`` registered for an op, or ``None``."""
    return _HOST.get(("" if domain == "ai.onnx" else domain, op_type))


def host_ops() -> dict[tuple[str, str], str]:
    """``{(domain, op_type): mode}`` of every host kernel."""
    return {k: m for k, (_, m) in sorted(_HOST.items())}


class HostContext:
    """What a host kernel sees: the node (``attr``, ``op_type``, ``opset``, ``name``) and
    ``run_graph(graph, inputs, outer)`` to run a subgraph (If/Loop/Scan bodies) compiled."""

    def __init__(self, node, opset: int, opsets: dict, run_graph: Callable | None = None,
                 outer: dict | None = None):
        from ..onnx import NodeView
        self.view = NodeView(node, [], opset)
        self.proto = node
        self.op_type = node.op_type
        self.name = self.view.name
        self.opset = opset
        self.opsets = opsets
        self.run_graph = run_graph
        self.outer = outer or {}

    def attr(self, name: str, default=None):
        """Attribute value (tensors as numpy arrays, strings decoded, graphs as GraphProto)."""
        return self.view.attr(name, default)

    @property
    def where(self) -> str:
        return self.view.where


from . import control, data, image, ml, sequence, strings  # noqa: E402,F401  (register the kernels)
