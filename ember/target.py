"""Compilation targets.

``Target("llvm -mcpu=native")`` is the host CPU (the kind keeps TVM's spelling ``llvm``; ``cpu``
and ``c`` name the same target: ember generates C and builds it with the system compiler).
Options: ``-mcpu=NAME`` (passed to the C compiler as ``-march=NAME``; ``native`` by default) and
``-num-threads=N`` (OpenMP threads; default: the OpenMP runtime's choice).
"""

from __future__ import annotations

from .errors import EmberError

CPU_KINDS = {"llvm", "cpu", "c"}


class TargetError(EmberError):
    """A target string that ember does not understand."""


class Target:
    """A parsed target: ``kind`` (``"llvm"`` for every CPU spelling) and ``options``."""

    def __init__(self, spec: "str | Target" = "llvm"):
        if isinstance(spec, Target):
            self.kind, self.options = spec.kind, dict(spec.options)
            return
        parts = str(spec).split()
        if not parts:
            raise TargetError("empty target string; use e.g. 'llvm -mcpu=native'")
        kind = parts[0].lower()
        if kind not in CPU_KINDS:
            raise TargetError(f"unknown target kind {parts[0]!r}: ember supports 'llvm' (also "
                              f"spelled 'cpu' or 'c') for the host CPU")
        self.kind = "llvm"
        self.options: dict[str, str] = {"mcpu": "native"}
        for p in parts[1:]:
            if not p.startswith("-") or "=" not in p:
                raise TargetError(f"bad target option {p!r}: expected -key=value")
            k, v = p.lstrip("-").split("=", 1)
            if k not in ("mcpu", "num-threads"):
                raise TargetError(f"unknown target option -{k} (known: -mcpu, -num-threads)")
            self.options[k] = v

    @property
    def mcpu(self) -> str:
        return self.options.get("mcpu", "native")

    @property
    def num_threads(self) -> int | None:
        v = self.options.get("num-threads")
        return int(v) if v else None

    def __str__(self):
        return " ".join([self.kind] + [f"-{k}={v}" for k, v in sorted(self.options.items())])

    def __repr__(self):
        return f"Target({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, Target) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))
