"""The CPU target kind's instruction-set query.

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

from ..errors import TargetError

CPU_KINDS = {"llvm", "cpu", "c"}


_MACROS = {"__AVX512F__": "avx512f", "__AVX2__": "avx2", "__FMA__": "fma", "__AVX__": "avx",
           "__SSE4_2__": "sse4.2", "__AVX512BW__": "avx512bw", "__AVX512VL__": "avx512vl",
           "__AVX512VNNI__": "avx512vnni", "__AVX512BF16__": "avx512bf16"}


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
