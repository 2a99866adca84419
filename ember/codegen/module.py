"""Generate one C translation unit for a list of kernels, sharing code between equal kernels."""

from __future__ import annotations

import hashlib
from typing import Sequence

from ..target import Target
from ..tir.stmt import PrimFunc
from .c import C_PRELUDE, emit_c_function


def generate_c_module(kernels: Sequence[PrimFunc], target: "Target | str | None" = None,
                      ) -> tuple[str, list[str]]:
    """C source for ``kernels`` and the exported symbol of each (equal kernels share a symbol).

    Symbols are ``ember_<digest>`` of the kernel's printed body, so they are stable across
    compilations and models (what the build cache keys on). ``target`` selects the SIMD width of
    vectorized loops and the micro-kernels' instruction set (default: the host).
    """
    target = Target(target or "llvm")
    symbols: list[str] = []
    bodies: dict[str, str] = {}
    support: dict[str, str] = {}
    for k in kernels:
        text, deps = emit_c_function(k, "KERNEL", target, with_deps=True)
        for name, src in deps.items():
            support.setdefault(name, src)
        sym = "ember_" + hashlib.sha256(text.encode()).hexdigest()[:16]
        if sym not in bodies:
            bodies[sym] = f"/* {k.attrs.get('op', '?')} */\n" + text.replace("KERNEL", sym)
        symbols.append(sym)
    return (C_PRELUDE + "\n" + "\n".join(support.values()) + "\n" + "\n".join(bodies.values()),
            symbols)
