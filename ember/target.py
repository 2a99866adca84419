"""Compilation targets.

``Target("llvm -mcpu=native")`` is the host CPU (the kind keeps TVM's spelling ``llvm``; ``cpu``
and ``c`` name the same target: ember generates C and builds it with the system compiler).
Options: ``-mcpu=NAME`` (passed to the C compiler as ``-march=NAME``; ``native`` by default),
``-num-threads=N`` (OpenMP threads; default: the OpenMP runtime's choice) and ``-isa=NAME``
(``avx512``, ``avx2`` or ``scalar``: cap the SIMD instruction set that schedules and micro-kernels
use below what ``-mcpu`` allows).
"""

from __future__ import annotations

import functools
import shutil
import subprocess

from .errors import TargetError

CPU_KINDS = {"llvm", "cpu", "c"}


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
            if k not in ("mcpu", "num-threads", "isa"):
                raise TargetError(f"unknown target option -{k} (known: -mcpu, -num-threads, "
                                  f"-isa)")
            if k == "num-threads" and not (v.isdigit() and int(v) > 0):
                raise TargetError(f"-num-threads={v}: expected a positive integer")
            if k == "isa" and v not in ("avx512", "avx2", "scalar"):
                raise TargetError(f"unknown -isa={v}: use avx512, avx2 or scalar")
            self.options[k] = v

    @property
    def mcpu(self) -> str:
        return self.options.get("mcpu", "native")

    @property
    def features(self) -> frozenset:
        """Instruction-set features the C compiler enables for ``-march=mcpu`` (``native``: the
        host's), e.g. ``{"avx512f", "avx2", "fma"}``; empty when no compiler can be asked."""
        return _march_features(self.mcpu)

    @property
    def isa(self) -> str:
        """The SIMD instruction set code generation uses: ``"avx512"``, ``"avx2"`` or
        ``"scalar"``."""
        f = self.features
        best = "avx512" if "avx512f" in f else ("avx2" if "avx2" in f and "fma" in f
                                                else "scalar")
        cap = self.options.get("isa")
        order = ["scalar", "avx2", "avx512"]
        if cap and order.index(cap) < order.index(best):
            return cap
        return best

    @property
    def vector_lanes(self) -> int:
        """float32 lanes of one SIMD register (16 for AVX-512, 8 for AVX2, 4 otherwise)."""
        return {"avx512": 16, "avx2": 8}.get(self.isa, 4)

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


_MACROS = {"__AVX512F__": "avx512f", "__AVX2__": "avx2", "__FMA__": "fma", "__AVX__": "avx",
           "__SSE4_2__": "sse4.2", "__AVX512BW__": "avx512bw", "__AVX512VL__": "avx512vl"}


@functools.lru_cache(maxsize=None)
def _march_features(mcpu: str) -> frozenset:
    import os
    cc = os.environ.get("CC", "").split()[:1] or [c for c in ("cc", "gcc", "clang")
                                                  if shutil.which(c)][:1]
    if not cc:
        return frozenset()
    try:
        r = subprocess.run(cc + [f"-march={mcpu}", "-dM", "-E", "-x", "c", "-"], input="",
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    if r.returncode != 0:
        raise TargetError(f"the C compiler rejects -march={mcpu}: {r.stderr.strip()[:300]}; use "
                          f"-mcpu=native or a CPU name it knows")
    return frozenset(v for k, v in _MACROS.items() if f"#define {k} " in r.stdout)
