"""Tuning tasks and the template registry.

A *template* is a function ``template(cfg, *args) -> PrimFunc`` registered under a name with
``@register_template(name)``. Run with a ``ConfigSpace`` as ``cfg`` it declares its knobs (and
its FLOPs via ``cfg.add_flop``); run with a ``ConfigEntity`` it builds the kernel for that
configuration. A ``Task`` is a template applied to concrete, JSON-able ``args`` for a target;
its ``key`` identifies the workload in records.

A template may also register ``reference=f(*args) -> PrimFunc``: the untuned kernel whose output
every candidate is checked against during measurement. Without one, the configuration at index
0 serves as the reference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import TuningError
from ..target import Target
from .space import ConfigEntity, ConfigSpace


@dataclass
class Template:
    """A registered template: ``func(cfg, *args)`` and an optional ``reference(*args)``."""

    name: str
    func: Callable
    reference: Callable | None = None


_TEMPLATES: dict[str, Template] = {}


def register_template(name: str, reference: Callable | None = None, override: bool = False):
    """Decorator registering ``func(cfg, *args) -> PrimFunc`` as template ``name``.

    Raises:
        TuningError: ``name`` is already registered (pass ``override=True`` to replace it).
    """
    def deco(func):
        if name in _TEMPLATES and not override and _TEMPLATES[name].func is not func:
            raise TuningError(f"template {name!r} is already registered")
        _TEMPLATES[name] = Template(name, func, reference)
        return func
    return deco


def get_template(name: str) -> Template:
    """The template registered as ``name``; raises ``TuningError`` naming the known ones."""
    _load_builtin_templates()
    try:
        return _TEMPLATES[name]
    except KeyError:
        raise TuningError(f"no tuning template {name!r} (known: {sorted(_TEMPLATES)})") from None


def _load_builtin_templates():
    from . import strategy, templates  # noqa: F401  (registers the built-in templates)


def task_key(name: str, args: Sequence[Any]) -> str:
    """Canonical workload key ``'["name", [args...]]'`` used in records."""
    return json.dumps([name, list(args)], separators=(",", ":"), sort_keys=True, default=list)


class Task:
    """A template applied to ``args`` for ``target``.

    Attributes:
        name, args, target: what is tuned.
        key: ``task_key(name, args)``, the workload identity in records.
        config_space: the knobs (a ``ConfigSpace``).
        flop: floating-point operations of one run (from the template's ``cfg.add_flop`` or the
            PrimFunc's ``attrs["flops"]``); 0 when unknown.

    Raises:
        TuningError: unknown template, or the template fails on ``args``.
    """

    def __init__(self, name: str, args: Sequence[Any], target: "str | Target" = "llvm",
                 template: Template | None = None):
        self.name = name
        self.args = tuple(args)
        self.target = Target(target)
        self.template = template or get_template(name)
        self.key = task_key(name, self.args)
        space = ConfigSpace()
        try:
            func = self.template.func(space, *self.args)
        except TuningError:
            raise
        except Exception as e:  # noqa: BLE001 - report template bugs as tuning errors
            raise TuningError(f"template {name!r} failed to declare its space for args "
                              f"{self.args}: {type(e).__name__}: {e}") from e
        self.config_space = space
        self.flop = space.flop or float(getattr(func, "attrs", {}).get("flops", 0) or 0)

    def instantiate(self, config: ConfigEntity):
        """The kernel (``PrimFunc``) of ``config``."""
        return self.template.func(config, *self.args)

    def reference(self):
        """The untuned kernel every candidate is checked against."""
        if self.template.reference is not None:
            return self.template.reference(*self.args)
        return self.instantiate(self.config_space.get(0))

    def to_json(self) -> dict:
        """``{"name", "args", "key"}`` of the task (what records store)."""
        return {"name": self.name, "args": list(self.args), "key": self.key}

    def __repr__(self):
        return f"Task({self.name}, {list(self.args)}, space={len(self.config_space)})"


def create_task(name: str, args: Sequence[Any], target: "str | Target" = "llvm") -> Task:
    """``Task(name, args, target)`` (AutoTVM's spelling)."""
    return Task(name, args, target)
