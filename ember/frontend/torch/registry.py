"""The ATen converter registry of the PyTorch frontend: one converter per operator overload.

A converter is registered with ``@aten("aten.convolution.default")`` (the overload's
``str(torch.ops.aten.convolution.default)``; several names may be given); custom operators are
keyed by their qualified name too (``"mylib.op.default"``), or by the packet (``"mylib::op"``)
for every overload. A converter gets the ``ImportContext``, the ``TorchNode`` (its FX node and
output metadata) and the node's arguments, with FX nodes replaced by graph values
(``Var``/``Constant``) and Python scalars, lists and ``None`` kept as they are; it returns the
node's value (a tuple for multi-output overloads, ``None`` for outputs it does not produce).
"""

from __future__ import annotations

from typing import Callable

_CONVERTERS: dict[str, Callable] = {}


def aten(*names: str):
    """Register the decorated function as the converter of each overload in ``names``."""
    def deco(fn):
        for n in names:
            _CONVERTERS[n] = fn
        return fn
    return deco


def register_converter(name: str, fn: Callable, override: bool = False) -> None:
    """Register ``fn`` as the converter of overload (or ``ns::op`` packet) ``name``.

    Raises:
        ValueError: ``name`` already has a converter and ``override`` is false."""
    if name in _CONVERTERS and not override:
        raise ValueError(f"{name!r} already has a converter (pass override=True to replace it)")
    _CONVERTERS[name] = fn


def unregister_converter(name: str) -> None:
    """Remove the converter of ``name`` (a no-op when it has none)."""
    _CONVERTERS.pop(name, None)


def overload_name(target) -> str:
    """The registry key of an FX ``call_function`` target: ``"aten.add.Tensor"``,
    ``"mylib.op.default"``, or the Python name of a plain function (``"operator.getitem"``)."""
    if hasattr(target, "_schema") and hasattr(target, "_overloadname"):
        return str(target)
    return f"{getattr(target, '__module__', '') or ''}.{getattr(target, '__name__', target)}"


def lookup(target) -> Callable | None:
    """The converter of an FX target, or ``None`` when it has none (by overload, then by the
    ``ns::op`` packet name of a custom operator)."""
    fn = _CONVERTERS.get(overload_name(target))
    if fn is None and hasattr(target, "_schema"):
        fn = _CONVERTERS.get(target._schema.name)  # "mylib::op"
    return fn


def supported_overloads() -> list[str]:
    """Every registered overload / packet name, sorted."""
    return sorted(_CONVERTERS)
