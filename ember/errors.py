"""Typed errors raised by ember.

Every failure that a user can cause (a bad model file, an unsupported operator, a wrong input, a
missing toolchain) is reported as a subclass of :class:`EmberError` whose message names the thing
at fault and, where there is one, the fix. Callers can catch ``EmberError`` to handle them all.
"""

from __future__ import annotations


class EmberError(Exception):
    """Base class of every error ember raises on purpose."""


class ModelLoadError(EmberError):
    """A model file is missing, is not an ONNX model, or is truncated/corrupted."""


class UnsupportedOpError(EmberError):
    """An operator (or an attribute/input form of it) that ember cannot compile.

    Attributes:
        op: operator type, e.g. ``"NonZero"``.
        node: the ONNX node name (or graph-IR binding) that uses it, or ``None``.
        opset: the opset version in force for the node's domain, or ``None``.
    """

    def __init__(self, message: str, op: str | None = None, node: str | None = None,
                 opset: int | None = None):
        super().__init__(message)
        self.op = op
        self.node = node
        self.opset = opset


class ShapeMismatchError(EmberError):
    """Tensor shapes or dtypes that an operator cannot accept (found during type inference)."""


class InputError(EmberError):
    """A run-time input that does not match the compiled model (name, shape or dtype), or a
    ``params`` entry given to ``ember.build`` that names no parameter of the graph."""


class IRParseError(EmberError):
    """The graph-IR text form could not be parsed; the message names line and column."""


class ToolchainError(EmberError):
    """No usable C compiler was found, or it cannot build shared libraries."""


class CodegenError(EmberError):
    """The generated native source failed to compile.

    Attributes:
        source: the generated source text.
        compiler_output: what the compiler printed.
    """

    def __init__(self, message: str, source: str = "", compiler_output: str = ""):
        super().__init__(message)
        self.source = source
        self.compiler_output = compiler_output


class LoweringError(EmberError):
    """An operator or expression could not be lowered to loop IR."""


class ScheduleError(EmberError):
    """A schedule primitive whose preconditions do not hold on the given block or loop."""


class ArtifactError(EmberError):
    """A saved ember artifact is missing, truncated or from an incompatible version."""


class TargetError(EmberError):
    """A target string that ember does not understand (kind or option)."""


class TuningError(EmberError):
    """Auto-tuning failed (no valid candidate, broken records file...)."""


class PassError(EmberError):
    """A graph pass was misconfigured (unknown pass name or config key) or produced an invalid
    module; the message names the pass."""


class RuntimeValueError(UnsupportedOpError):
    """A converter needs the *value* of a tensor (reduce axes, Reshape shape, TopK k, Pad pads...)
    that is only known at run time.

    The static compiler (``ember.compile``) reports it as unsupported; the staged executor
    (``ember.frontend.staging``) catches it and compiles a specialization for the run-time value.

    Attributes:
        value_name: the ONNX name of the tensor whose value is needed (``None`` when unknown).
        node_index: index of the ONNX node (in graph order) whose converter needed it.
    """

    def __init__(self, message: str, op: str | None = None, node: str | None = None,
                 opset: int | None = None, value_name: str | None = None,
                 node_index: int | None = None):
        super().__init__(message, op, node, opset)
        self.value_name = value_name
        self.node_index = node_index


class NPUError(EmberError):
    """An NPU instruction stream or kernel request that the NPU cannot run (``ember.npu``): an
    instruction field out of range, a token pop with no matching push, unbalanced tokens at
    FINISH, a deadlock, or a layer form the NPU kernel generator does not support."""


class HazardError(NPUError):
    """A scratchpad access on the NPU that no dependency token orders after the access it
    conflicts with (read after write, write after read or write after write across units).

    Attributes:
        pc: index of the offending instruction in the program.
        other_pc: index of the conflicting earlier instruction.
        buffer: the scratchpad (``"inp"``, ``"wgt"``, ``"acc"``, ``"uop"``).
    """

    def __init__(self, message: str, pc: int = -1, other_pc: int = -1, buffer: str = ""):
        super().__init__(message)
        self.pc = pc
        self.other_pc = other_pc
        self.buffer = buffer


class DistributedError(EmberError):
    """Multi-device compilation or execution failed (``ember.distributed``): a cluster that
    cannot be started or reached, a rank that failed, a collective that timed out.

    Attributes:
        rank: the rank the error is about (``None`` when it concerns the whole cluster).
    """

    def __init__(self, message: str, rank: int | None = None):
        super().__init__(message)
        self.rank = rank


class RankFailedError(DistributedError):
    """One rank raised while building or running its shard; the message names the rank and
    carries its error (type and message).

    Attributes:
        rank: the rank that failed. error_type: the name of the rank's error class
            (``"InputError"`` for a bad index in a rank's data, ...), or ``None``.
    """

    def __init__(self, message: str, rank: int | None = None, error_type: str | None = None):
        super().__init__(message, rank)
        self.error_type = error_type


class CollectiveTimeoutError(DistributedError):
    """A collective or point-to-point transfer did not complete within the cluster's timeout
    (a rank hangs or died); the message names the rank(s) that did not answer."""


class RunAbortedError(DistributedError):
    """A rank stopped waiting in a collective because the driver aborted the run after another
    rank failed (what the other ranks report; the driver raises the failing rank's error)."""


class ShardingError(EmberError):
    """A model cannot be partitioned as asked: it does not fit ``memory_per_device`` on the
    ranks given (names the largest tensor and the budget), or a placement is invalid."""


class DeviceError(EmberError):
    """A compute device (a WebGPU adapter) is missing, or cannot hold or run a model: the
    message names the device, the kernel or tensor, the limit, and how to get a device."""


class QuantizationError(EmberError):
    """Post-training quantization cannot proceed: nothing to quantize, an unknown ``dtype`` or
    calibration method, or a calibration value that becomes NaN/inf (``ember.quantize``)."""


class HostValueError(UnsupportedOpError):
    """A graph input or output that is not a numeric tensor (a string tensor, a sequence, an
    optional or a map): a static compiled model has no slot for it. ``ember.compile`` with
    ``executor="auto"`` answers it with the staged executor, whose host kernels handle such
    values; ``executor="static"`` raises it."""


class SymbolicShapeError(ShapeMismatchError):
    """A graph input whose shape is not fixed (a symbolic dimension, or no shape at all) while
    the static executor needs every shape at compile time: pass ``shapes=`` (``--shape``).
    ``ember.compile(executor="auto")`` without ``shapes=`` runs such a model on the staged
    executor instead, which compiles for the shapes it is run on."""


class TorchExportError(ModelLoadError):
    """``torch.export`` (or torch's TorchScript ONNX exporter) could not capture a PyTorch
    module; the message carries torch's error and what to change.

    Attributes:
        torch_error: the exception torch raised.
    """

    def __init__(self, message: str, torch_error: BaseException | None = None):
        super().__init__(message)
        self.torch_error = torch_error


class ShapeFunctionMissingError(UnsupportedOpError):
    """A model with symbolic dimensions reaches operators that have no symbolic shape function
    (a type relation known to hold when dimensions are expressions over symbols), so the
    compiler cannot say what shapes they produce for every size.

    The message lists every such operator (with the first binding or node using each) and the
    fix: ``ember.register_shape_func("<op>", fn)``, or fixing the symbols with ``shapes=``.

    Attributes:
        ops: ``{operator name: [where it is used, ...]}``, in the order first met.
    """

    def __init__(self, ops: dict):
        self.ops = {k: list(v) for k, v in ops.items()}
        lines = [f"  {op}: used at {', '.join(w.rstrip(': ') or '?' for w in where[:3])}"
                 f"{' ...' if len(where) > 3 else ''}" for op, where in self.ops.items()]
        first = next(iter(self.ops), "op")
        super().__init__(
            f"{len(self.ops)} operator(s) reached with symbolic dimensions have no symbolic "
            f"shape function:\n" + "\n".join(lines) + "\n"
            f"fix: register one per operator, ember.register_shape_func({first!r}, "
            f"lambda types, attrs: [TensorType(...)]) (types carry symbolic dims, "
            f"ember.tir.symbolic), or compile for fixed sizes with shapes=",
            op=first)
