"""Build graph-IR functions one binding at a time, with type inference on every call."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..errors import EmberError, ShapeFunctionMissingError, ShapeMismatchError
from ..ops import get_op
from .ir import Binding, Call, Constant, Function, TensorType, Value, Var, normalize_attrs


def infer_call(op: str, args: Sequence[Value], attrs: dict, where: str = "") -> tuple[dict, list]:
    """Normalize ``attrs`` for ``op`` and infer its output types.

    Returns:
        ``(attrs, [TensorType...])``.
    Inputs with symbolic dimensions go through the operator's shape function (``OpDef.infer``).

    Raises:
        UnsupportedOpError: unknown op or attribute.
        ShapeFunctionMissingError: symbolic inputs reach an operator without a shape function.
        ShapeMismatchError: the inputs do not type-check (message prefixed by ``where``).
    """
    opdef = get_op(op)
    opdef.check_arity(len(args), where)
    attrs = opdef.normalize_attrs(normalize_attrs(attrs), where)
    try:
        types = opdef.infer([a.type for a in args], attrs)
    except ShapeFunctionMissingError as e:
        raise ShapeFunctionMissingError({op: [where or "?"] for op in e.ops}) from None
    except ShapeMismatchError as e:
        raise ShapeMismatchError(f"{where}{e}") from None
    except EmberError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise ShapeMismatchError(f"{where}type inference of {op} failed on input types "
                                 f"{[str(a.type) for a in args]} with {attrs}: {e}") from None
    return attrs, list(types)


class FunctionBuilder:
    """Accumulates parameters and bindings, then ``finish(outputs)`` makes the ``Function``."""

    def __init__(self, name: str = "main"):
        self.name = name
        self.params: list[Var] = []
        self.bindings: list[Binding] = []
        self._names: set[str] = set()
        self._counter = 0

    def fresh_name(self, hint: str | None = None) -> str:
        """A variable name not used yet in this function (``hint`` when free)."""
        if hint:
            base = hint
            name, k = base, 1
            while name in self._names:
                name = f"{base}_{k}"
                k += 1
        else:
            while str(self._counter) in self._names:
                self._counter += 1
            name = str(self._counter)
            self._counter += 1
        self._names.add(name)
        return name

    def param(self, name: str, type: TensorType) -> Var:
        """Add a function parameter."""
        v = Var(self.fresh_name(name), type)
        self.params.append(v)
        return v

    def call(self, op: str, args: Sequence[Value], attrs: dict | None = None,
             names: Sequence[str] | None = None, where: str = "") -> Var | tuple:
        """Append ``op(args, attrs)``; returns its output ``Var`` (a tuple for multi-output ops)."""
        attrs, types = infer_call(op, list(args), dict(attrs or {}), where)
        outs = tuple(Var(self.fresh_name(names[k] if names and k < len(names) else None), t)
                     for k, t in enumerate(types))
        self.bindings.append(Binding(outs, Call(op, tuple(args), attrs)))
        return outs[0] if len(outs) == 1 else outs

    def finish(self, outputs: Sequence[Value]) -> Function:
        """The finished ``Function`` returning ``outputs``."""
        return Function(list(self.params), list(self.bindings), list(outputs), self.name)


def const(value, dtype: str | None = None) -> Constant:
    """A graph ``Constant`` from a Python or numpy value."""
    return Constant(np.asarray(value, dtype=dtype))


_IDENT = re.compile(r"[^A-Za-z0-9_]")


def sanitize(name: str) -> str:
    """An identifier-safe version of a name (for C symbols and file names)."""
    s = _IDENT.sub("_", name)
    return s if s and not s[0].isdigit() else "v" + s
