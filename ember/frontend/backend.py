"""ember as an ``onnx.backend.base.Backend``, so onnx's own ``BackendTest`` can drive it::

    import onnx.backend.test
    from ember.frontend import backend
    globals().update(onnx.backend.test.BackendTest(backend, __name__).test_cases)

A thin wrapper over the public door: ``prepare`` is ``ember.compile(model, target)`` (the
``"auto"`` executor: one static compiled model when shapes are static, else the staged executor,
``ember.frontend.staging``, which compiles segments for the shapes seen at run time and runs
strings, sequences, optionals, control flow and data-dependent shapes as host kernels), so the
backend suite measures what ``ember.compile`` users get. Only the CPU device is supported.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from ..errors import EmberError
from .staging import StagedModel, np_to_onnx_elem


class UnsupportedDeviceError(EmberError):
    """The backend was asked for a device other than the CPU."""


def _check_device(device) -> None:
    if not EmberBackend.supports_device(device):
        raise UnsupportedDeviceError(f"device {device!r} is not supported by ember's ONNX backend: "
                                     f"use 'CPU'")


class EmberBackendRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns the outputs as a tuple, in graph-output order.

    Attributes:
        model: what ``ember.compile`` returned (a ``CompiledModel`` or a ``StagedModel``;
            ``model.info["executor"]`` says which and why).
        staged: the ``StagedModel`` when the model runs staged (its ``report()`` lists compiled
            segments and host nodes), else ``None``.
    """

    def __init__(self, model: onnx.ModelProto, target: str = "llvm"):
        from ..driver import compile as ember_compile  # the driver sits above the frontend

        self.target = target
        self.model = ember_compile(model, target)

    @property
    def staged(self) -> StagedModel | None:
        return self.model if isinstance(self.model, StagedModel) else None

    def run(self, inputs: Any, **kwargs: Any) -> tuple:  # noqa: ARG002 - onnx's signature
        """Run on ``inputs`` (a list in graph-input order, a dict, or one array)."""
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        return tuple(self.model.run(inputs))


class EmberBackend(Backend):
    """onnx backend API over ember (``prepare``, ``run_model``, ``run_node``,
    ``supports_device``)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """True when ``device`` is supported (the CPU); the model itself is not inspected."""
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> EmberBackendRep:
        """Prepare ``model`` for running on ``device`` (``"CPU"``): ``ember.compile(model,
        target)``; ``target=`` picks the ember target (default ``"llvm"``).

        Raises:
            UnsupportedDeviceError: a device other than the CPU.
            ModelLoadError, UnsupportedOpError, ...: what ``ember.compile`` raises.
        """
        _check_device(device)
        return EmberBackendRep(model, kwargs.get("target", "llvm"))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple:
        """``prepare(model).run(inputs)``."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple] | None = None, **kwargs: Any) -> tuple:
        """Run one node on ``inputs`` (arrays in the node's input order); ``opset_version=``
        chooses the opset (default: the newest the installed onnx knows)."""
        _check_device(device)
        names = [n for n in node.input if n]
        vals = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
        ins = []
        for name, v in zip(names, vals):
            a = np.asarray(v)
            ins.append(helper.make_tensor_value_info(name, np_to_onnx_elem(a.dtype),
                                                     list(a.shape)))
        outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        g = helper.make_graph([node], f"run_node_{node.op_type}", ins, outs)
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        domain = node.domain or ""
        m = helper.make_model(g, opset_imports=[helper.make_opsetid(domain, opset)])
        return cls.prepare(m, device, **kwargs).run(vals)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """True for the CPU only."""
        try:
            return Device(device).type == DeviceType.CPU
        except Exception:  # noqa: BLE001 - an unparsable device name is not supported
            return False


prepare = EmberBackend.prepare
run_model = EmberBackend.run_model
run_node = EmberBackend.run_node
supports_device = EmberBackend.supports_device
