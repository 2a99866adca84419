"""Generate the C translation units of a list of kernels, sharing code between equal kernels."""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

from ..target import Target
from ..tir.stmt import PrimFunc
from .c import C_PRELUDE, C_UNIT_PRELUDE, emit_c_function

_SIGNATURE = re.compile(r"^int32_t KERNEL\((.*?)\) \{$", re.M)


def _emit_one(k: PrimFunc, target: Target, bodies: dict, support: dict, emitted: dict) -> str:
    """Print kernel ``k`` (once per distinct body) into ``bodies`` / ``support``; its symbol."""
    hit = emitted.get(id(k.body))
    if hit is None or hit[0] is not k.params:
        hit = emitted[id(k.body)] = (k.params, *emit_c_function(k, "KERNEL", target,
                                                               with_deps=True))
    _, text, deps = hit
    for name, src in deps.items():
        support.setdefault(name, src)
    sym = "ember_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    if sym not in bodies:
        m = _SIGNATURE.search(text)
        proto = f"int32_t {sym}({m.group(1)});" if m else f"int32_t {sym}();"
        bodies[sym] = (f"/* {k.attrs.get('op', '?')} */\n" + text.replace("KERNEL", sym),
                       list(deps), proto)
    return sym


def _emit_bodies(kernels: Sequence[PrimFunc], target: Target):
    """``(symbols, bodies, support)``: the exported symbol of each kernel, then per distinct
    symbol ``(C text, support names, prototype)`` and the support sources by name."""
    bodies: dict[str, tuple] = {}
    support: dict[str, str] = {}
    emitted: dict[int, tuple] = {}  # id(body) -> (params, text, deps): kernels sharing a body
    symbols = [_emit_one(k, target, bodies, support, emitted) for k in kernels]
    return symbols, bodies, support


def _unit_text(prelude: str, syms: Sequence[str], bodies: dict, support: dict) -> list[str]:
    need = [d for d in support if any(d in bodies[s][1] for s in syms)]
    return [prelude, "\n".join(support[d] for d in need), "\n".join(bodies[s][0] for s in syms)]


class UnitStream:
    """Kernels printed one at a time into C translation units, each handed to ``emit`` as soon
    as it holds ``per_unit`` distinct kernels (``codegen.build.StreamedBuild.add`` starts
    compiling it while the caller schedules the next kernels); ``finish`` gives the last
    unit, which holds the whole prelude with the thread pool, its own kernels and a prototype
    of every kernel of the other units (so code appended to it, the AOT entry, can call any
    of them). The other units declare the pool (``C_UNIT_PRELUDE``) and carry the
    (``static``) support functions their kernels call. Units depend only on the kernels and
    their order, so the same model gives the same units and cache keys."""

    def __init__(self, target: "Target | str | None", emit, per_unit: int):
        self.target = Target(target or "llvm")
        self.emit = emit
        self.per_unit = max(1, int(per_unit))
        self.symbols: list[str] = []
        self.units: list[str] = []  # the units handed to ``emit``, in order
        self._bodies: dict[str, tuple] = {}
        self._support: dict[str, str] = {}
        self._emitted: dict[int, tuple] = {}
        self._current: list[str] = []
        self._placed: list[str] = []

    def add(self, kernel: PrimFunc) -> str:
        """Print ``kernel``; its exported symbol (equal kernels share one)."""
        new = len(self._bodies)
        sym = _emit_one(kernel, self.target, self._bodies, self._support, self._emitted)
        self.symbols.append(sym)
        if len(self._bodies) > new:
            self._current.append(sym)
            if len(self._current) >= self.per_unit:
                text = "\n".join(_unit_text(C_UNIT_PRELUDE, self._current, self._bodies,
                                            self._support))
                self._placed += self._current
                self._current = []
                self.units.append(text)
                self.emit(text)
        return sym

    def finish(self) -> str:
        """The last unit (prelude, thread pool, its kernels, prototypes of the others)."""
        text = _unit_text(C_PRELUDE, self._current, self._bodies, self._support)
        if self._placed:
            text.append("\n".join(self._bodies[s][2] for s in self._placed))
        return "\n".join(text)


def generate_c_module(kernels: Sequence[PrimFunc], target: "Target | str | None" = None,
                      ) -> tuple[str, list[str]]:
    """C source for ``kernels`` and the exported symbol of each (equal kernels share a symbol).

    Symbols are ``ember_<digest>`` of the kernel's printed body, so they are stable across
    compilations and models (what the build cache keys on). ``target`` selects the SIMD width of
    vectorized loops and the micro-kernels' instruction set (default: the host).
    """
    units, symbols = generate_c_units(kernels, target, 1)
    return units[0], symbols


def generate_c_units(kernels: Sequence[PrimFunc], target: "Target | str | None" = None,
                     units: int = 1) -> tuple[list[str], list[str]]:
    """The kernels' C source split into up to ``units`` translation units of similar size, and
    the exported symbol of each kernel, for ``codegen.build.build_library`` to compile side by
    side (one compiler process per unit) and link into one library.

    The first unit holds the whole prelude with the thread pool and, last, a prototype of every
    kernel (so code appended to it, the AOT entry, can call any of them); the others declare
    the pool (``C_UNIT_PRELUDE``). Each unit carries the support functions (micro-kernels) its
    kernels call; they are ``static``, so a micro-kernel two units use is compiled twice. Which
    unit a kernel lands in depends only on the kernels (largest first, onto the smallest unit),
    so the same model gives the same units and the same cache key.
    """
    target = Target(target or "llvm")
    symbols, bodies, support = _emit_bodies(kernels, target)
    n = max(1, min(int(units), len(bodies)))
    parts: list[list[str]] = [[] for _ in range(n)]
    sizes = [0] * n
    for sym in sorted(bodies, key=lambda s: (-len(bodies[s][0]), s)):
        u = min(range(n), key=lambda i: (sizes[i], i))
        parts[u].append(sym)
        sizes[u] += len(bodies[sym][0])
    order = {s: i for i, s in enumerate(bodies)}  # first-use order inside each unit
    out = []
    for u, syms in enumerate(parts):
        syms.sort(key=order.__getitem__)
        need = [d for d in support if any(d in bodies[s][1] for s in syms)]
        text = [C_PRELUDE if u == 0 else C_UNIT_PRELUDE, "\n".join(support[d] for d in need),
                "\n".join(bodies[s][0] for s in syms)]
        if u == 0 and n > 1:
            text.append("\n".join(bodies[s][2] for s in bodies if s not in syms))
        out.append("\n".join(text))
    return out, symbols
