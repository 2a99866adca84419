"""Micro-kernels: register-blocked inner kernels that ``tensorize`` calls.

The registry maps ``(family, isa, dtype)`` to a generator of C source for a register block: a
``gemm`` micro-kernel for block ``mr x nr`` with ``k`` reduction loops computes

    C[i*ldc + j] (+)= sum over r0..rk-1 of A[i*lda + sum(r_t*sa_t)] * B[j + sum(r_t*sb_t)]

for ``i < mr``, ``j < nr``, keeping the ``mr x ceil(nr / lanes)`` accumulators in SIMD registers
(lanes: 16 for AVX-512, 8 for AVX2), broadcasting one ``A`` element per row and loading ``nr``
contiguous ``B`` elements per reduction step (a tail of ``nr % lanes`` lanes is masked). Covers
GEMM (dense, matmul, batch matmul, 1x1 convolution) and direct convolution (reduction loops over
input channels and kernel taps). New instruction sets register a generator with
``@register_microkernel``.
"""

from __future__ import annotations

from typing import Callable

from ..errors import LoweringError

_REGISTRY: dict[tuple[str, str, str], Callable[..., str]] = {}
PREFETCH_STEPS = 8  # reduction steps ahead that the SIMD kernels prefetch B


def register_microkernel(family: str, isa: str, dtype: str):
    """Decorator: register ``gen(name, mr, nr, nred, a_vec[, epi][, pf_next=True][, groups=G])
    -> C source`` for ``(family, isa, dtype)``; ``a_vec`` selects the lane-aligned variant (``A``
    loaded as vectors along ``n``, as depthwise convolution needs) instead of one broadcast ``A``
    element per row; ``epi`` is the register epilogue (``EPI_PARAMS``); ``pf_next`` adds a
    prefetch (into L2) of the ``B`` block the next call will read, ``B + k * sb`` of the
    innermost reduction loop (generators without prefetches may ignore it); ``groups`` (the
    SIMD ``gemm`` generators; default 1) splits the ``mr`` rows into ``G`` groups of ``mr / G`` rows whose ``A``
    rows start ``lda2`` elements apart (row ``i``: ``A + (i / (mr/G)) * lda2 + (i % (mr/G)) *
    lda``; an extra ``int64_t lda2`` argument follows ``lda``), so one call covers several
    output rows of an image whose rows are not evenly spaced in ``A`` (``row_groups``)."""
    def deco(gen):
        _REGISTRY[(family, isa, dtype)] = gen
        return gen
    return deco


def microkernel_source(name: str, key: tuple) -> str:
    """C definition of micro-kernel ``name`` for ``key = (family, isa, dtype, mr, nr, nred[,
    a_vec[, epi or None[, pf_next[, groups]]]])`` (``gemm``) or ``(family, isa, dtype,
    *params)`` (other families, e.g. ``dwconv``: ``ember.codegen.microkernel_dwconv``).

    Raises:
        LoweringError: no generator is registered for the family, ISA and dtype.
    """
    family, isa, dtype = key[:3]
    gen = _REGISTRY.get((family, isa, dtype))
    if gen is None:
        raise LoweringError(f"no {family} micro-kernel for isa={isa} dtype={dtype} (registered: "
                            f"{sorted(_REGISTRY)})")
    if family != "gemm":  # other families take their key's parameters as they are
        return gen(name, *key[3:])
    mr, nr, nred = key[3:6]
    a_vec = bool(key[6]) if len(key) > 6 else False
    epi = key[7] if len(key) > 7 else None
    kw = {"pf_next": True} if len(key) > 8 and key[8] else {}
    if len(key) > 9 and key[9] > 1:
        kw["groups"] = int(key[9])
    return gen(name, mr, nr, nred, a_vec, epi, **kw)


def _signature(name: str, nred: int, epi=None, groups: int = 1) -> str:
    red = "".join(f", int64_t k{t}, int64_t sa{t}, int64_t sb{t}" for t in range(nred))
    lda2 = ", int64_t lda2" if groups > 1 else ""
    # not inlined: inlined into a kernel with a heavy epilogue (GELU), the compiler hoisted the
    # epilogue's constants into registers and spilled the accumulators (3x slower)
    return (f"static __attribute__((noinline)) void {name}(float* restrict C, "
            f"const float* restrict A, const float* restrict B, int64_t ldc, int64_t lda{lda2}{red}, "
            f"int32_t accumulate{EPI_PARAMS if epi else ''})")


# The optional register epilogue of a micro-kernel (``gemm`` key position 7, ``dwconv`` 16):
# ``(bias, residual, lo, hi)``: before the store, each accumulator row gets ``bias[j]`` added
# (``bias`` true), then ``R[i*ldr + j]`` (``residual`` true), then is clamped to ``[lo, hi]``
# (``None``: unbounded) with NaN passing through, as ``clip``. The kernel then takes three more
# arguments, ``EPI_PARAMS``; unused ones may be null. Kernels built directly from micro-kernels
# (``rules/inverted_residual``) use it so the output tile is written once.
EPI_PARAMS = ", const float* restrict bias, const float* restrict R, int64_t ldr"


def epilogue_lines(epi, acc, nv, lanes, vt, load, loadm, tail, add, vmax, vmin,
                   set1) -> list[str]:
    """C lines applying register epilogue ``epi`` (see ``EPI_PARAMS``) to accumulators
    ``acc[i][j]`` (row ``i``, vector ``j``; row ``i`` of ``R`` starts at ``i * ldr``)."""
    if not epi:
        return []
    has_bias, has_res, lo, hi = epi
    L = []
    if has_bias:
        for j in range(nv):
            ld = loadm if (tail and j == nv - 1) else load
            L.append(f"  const {vt} bias{j} = {ld(f'bias + {j * lanes}')};")
    if lo is not None:
        L.append(f"  const {vt} vlo = {set1(repr(float(lo)) + 'f')};")
    if hi is not None:
        L.append(f"  const {vt} vhi = {set1(repr(float(hi)) + 'f')};")
    for i, row in enumerate(acc):
        for j, a in enumerate(row):
            if has_bias:
                L.append(f"  {a} = {add(a, f'bias{j}')};")
            if has_res:
                ld = loadm if (tail and j == nv - 1) else load
                L.append(f"  {a} = {add(a, ld(f'R + {i} * ldr + {j * lanes}'))};")
            if lo is not None:  # constant first: x86 max/min return the second operand on NaN
                L.append(f"  {a} = {vmax('vlo', a)};")
            if hi is not None:
                L.append(f"  {a} = {vmin('vhi', a)};")
    return L


def _loops(nred: int) -> tuple[list[str], str, str, str]:
    """Reduction loop headers, their closing, and the A/B offset expressions."""
    heads = []
    for t in range(nred):
        pragma = "  #pragma GCC unroll 2\n" if t == nred - 1 else ""
        heads.append(f"{pragma}  for (int64_t r{t} = 0; r{t} < k{t}; ++r{t}) {{")
    close = "  }" * nred
    aoff = " + ".join([f"r{t} * sa{t}" for t in range(nred)]) or "0"
    boff = " + ".join([f"r{t} * sb{t}" for t in range(nred)]) or "0"
    return heads, close, aoff, boff


def _simd_gemm(name, mr, nr, nred, lanes, vt, load, loadm, store, storem, zero, set1, fma,
               mask_decl, add, vmax, vmin, a_vec=False, epi=None, pf_next=False, groups=1):
    nv = -(-nr // lanes)
    tail = nr % lanes
    L = [_signature(name, nred, epi, groups) + " {"]
    if tail:
        L.append(mask_decl(tail))
    acc = [[f"c{i}_{j}" for j in range(nv)] for i in range(mr)]
    L += accumulator_init(acc, lanes, vt, load, loadm, zero, tail)
    heads, close, aoff, boff = _loops(nred)
    L += heads
    L.append(f"    const float* a = A + {aoff};")
    L.append(f"    const float* b = B + {boff};")
    if nred:  # software prefetch of the B stream a few steps ahead (weights come from DRAM)
        for j in range(0, nv, 1):
            L.append(f"    _mm_prefetch((const char*)(b + {PREFETCH_STEPS} * sb{nred - 1} + "
                     f"{j * lanes}), _MM_HINT_T0);")
    if nred and pf_next:  # the next call's B block (K-blocked weights: the next kc x nr slice)
        for j in range(nv):
            L.append(f"    _mm_prefetch((const char*)(b + k{nred - 1} * sb{nred - 1} + "
                     f"{j * lanes}), _MM_HINT_T1);")
    for j in range(nv):
        ld = loadm if (tail and j == nv - 1) else load
        L.append(f"    {vt} b{j} = {ld(f'b + {j * lanes}')};")
    for i in range(mr):
        if a_vec:
            for j in range(nv):
                ld = loadm if (tail and j == nv - 1) else load
                L.append(f"    {acc[i][j]} = {fma(ld(f'a + {i} * lda + {j * lanes}'), f'b{j}', acc[i][j])};")
            continue
        L.append(f"    {{ {vt} a{i} = {set1(f'a[{_a_row(i, mr, groups)}]')};")
        for j in range(nv):
            L.append(f"      {acc[i][j]} = {fma(f'a{i}', f'b{j}', acc[i][j])};")
        L.append("    }")
    L.append(close)
    L += epilogue_lines(epi, acc, nv, lanes, vt, load, loadm, tail, add=add, vmax=vmax,
                        vmin=vmin, set1=set1)
    for i in range(mr):
        for j in range(nv):
            st = storem if (tail and j == nv - 1) else store
            L.append(f"  {st(f'C + {i} * ldc + {j * lanes}', acc[i][j])};")
    L.append("}")
    return "#include <immintrin.h>\n" + "\n".join(L) + "\n"


def accumulator_init(acc, lanes, vt, load, loadm, zero, tail) -> list[str]:
    """C lines declaring the accumulators ``acc[i][j]`` (row ``i``, vector ``j``) and loading
    them from ``C`` (row stride ``ldc``; the last vector masked when ``tail``) when
    ``accumulate`` is set, else zeroing them. Shared by the float32 and bf16 gemm kernels."""
    nv = len(acc[0])
    L = [f"  {vt} " + ", ".join(x for row in acc for x in row) + ";", "  if (accumulate) {"]
    for i, row in enumerate(acc):
        for j, a in enumerate(row):
            ld = loadm if (tail and j == nv - 1) else load
            L.append(f"    {a} = {ld(f'C + {i} * ldc + {j * lanes}')};")
    L.append("  } else {")
    L += [f"    {a} = {zero};" for row in acc for a in row]
    L.append("  }")
    return L


def _a_row(i: int, mr: int, groups: int) -> str:
    """The offset of row ``i``'s ``A`` element in a micro-kernel with ``groups`` row groups."""
    if groups <= 1:
        return f"{i} * lda"
    g = mr // groups
    return f"{i // g} * lda2 + {i % g} * lda"


def _avx2_mask_decl(t: int) -> str:
    bits = ", ".join("-1" if k < t else "0" for k in range(8))
    return f"  const __m256i tail_mask = _mm256_setr_epi32({bits});"


# The float32 intrinsics of each SIMD instruction set, shared by the micro-kernel families
# (``gemm`` here, ``dwconv`` in ``microkernel_dwconv``): lanes, vector type, (masked) load and
# store, zero, broadcast (``set1``), fused multiply-add, add / max / min (register epilogues) and
# the tail-mask declaration.
SIMD_ISAS: dict[str, dict] = {
    "avx512": dict(
        lanes=16, vt="__m512",
        load=lambda p: f"_mm512_loadu_ps({p})",
        loadm=lambda p: f"_mm512_maskz_loadu_ps(tail_mask, {p})",
        store=lambda p, v: f"_mm512_storeu_ps({p}, {v})",
        storem=lambda p, v: f"_mm512_mask_storeu_ps({p}, tail_mask, {v})",
        zero="_mm512_setzero_ps()", set1=lambda x: f"_mm512_set1_ps({x})",
        fma=lambda a, b, c: f"_mm512_fmadd_ps({a}, {b}, {c})",
        add=lambda a, b: f"_mm512_add_ps({a}, {b})",
        vmax=lambda a, b: f"_mm512_max_ps({a}, {b})",
        vmin=lambda a, b: f"_mm512_min_ps({a}, {b})",
        mask_decl=lambda t: f"  const __mmask16 tail_mask = (__mmask16){(1 << t) - 1};"),
    "avx2": dict(
        lanes=8, vt="__m256",
        load=lambda p: f"_mm256_loadu_ps({p})",
        loadm=lambda p: f"_mm256_maskload_ps({p}, tail_mask)",
        store=lambda p, v: f"_mm256_storeu_ps({p}, {v})",
        storem=lambda p, v: f"_mm256_maskstore_ps({p}, tail_mask, {v})",
        zero="_mm256_setzero_ps()", set1=lambda x: f"_mm256_set1_ps({x})",
        fma=lambda a, b, c: f"_mm256_fmadd_ps({a}, {b}, {c})",
        add=lambda a, b: f"_mm256_add_ps({a}, {b})",
        vmax=lambda a, b: f"_mm256_max_ps({a}, {b})",
        vmin=lambda a, b: f"_mm256_min_ps({a}, {b})",
        mask_decl=_avx2_mask_decl),
}


@register_microkernel("gemm", "avx512", "float32")
def _gemm_avx512(name: str, mr: int, nr: int, nred: int, a_vec: bool = False,
                 epi=None, pf_next: bool = False, groups: int = 1) -> str:
    return _simd_gemm(name, mr, nr, nred, a_vec=a_vec, epi=epi, pf_next=pf_next,
                      groups=groups, **SIMD_ISAS["avx512"])


@register_microkernel("gemm", "avx2", "float32")
def _gemm_avx2(name: str, mr: int, nr: int, nred: int, a_vec: bool = False, epi=None,
               pf_next: bool = False, groups: int = 1) -> str:
    return _simd_gemm(name, mr, nr, nred, a_vec=a_vec, epi=epi, pf_next=pf_next,
                      groups=groups, **SIMD_ISAS["avx2"])


def scalar_epilogue(epi, rows: int, cols: int) -> list[str]:
    """C lines applying register epilogue ``epi`` to a scalar ``float c[rows][cols]`` tile."""
    if not epi:
        return []
    has_bias, has_res, lo, hi = epi
    ops = []
    if has_bias:
        ops.append("v += bias[j];")
    if has_res:
        ops.append("v += R[i * ldr + j];")
    if lo is not None:
        ops.append(f"if (v < {float(lo)!r}f) v = {float(lo)!r}f;")
    if hi is not None:
        ops.append(f"if (v > {float(hi)!r}f) v = {float(hi)!r}f;")
    return [f"  for (int i = 0; i < {rows}; ++i) for (int j = 0; j < {cols}; ++j) "
            f"{{ float v = c[i][j]; {' '.join(ops)} c[i][j] = v; }}"]


@register_microkernel("gemm", "scalar", "float32")
def _gemm_scalar(name: str, mr: int, nr: int, nred: int, a_vec: bool = False,
                 epi=None, pf_next: bool = False) -> str:
    heads, close, aoff, boff = _loops(nred)
    L = [_signature(name, nred, epi) + " {", f"  float c[{mr}][{nr}];",
         f"  for (int i = 0; i < {mr}; ++i) for (int j = 0; j < {nr}; ++j) "
         f"c[i][j] = accumulate ? C[i * ldc + j] : 0.0f;"]
    L += heads
    L += [f"    const float* a = A + {aoff};", f"    const float* b = B + {boff};",
          f"    for (int i = 0; i < {mr}; ++i) {{ const float* ai = a + i * lda;",
          f"      for (int j = 0; j < {nr}; ++j) c[i][j] += ai[{'j' if a_vec else '0'}] * b[j]; }}"]
    L.append(close)
    L += scalar_epilogue(epi, mr, nr)
    L.append(f"  for (int i = 0; i < {mr}; ++i) for (int j = 0; j < {nr}; ++j) "
             f"C[i * ldc + j] = c[i][j];")
    L.append("}")
    return "\n".join(L) + "\n"


def registered() -> list[tuple[str, str, str]]:
    """The registered ``(family, isa, dtype)`` keys."""
    return sorted(_REGISTRY)


from . import microkernel_dwconv  # noqa: E402,F401 - registers the dwconv family
from . import microkernel_qconv  # noqa: E402,F401 - registers the int8 qconv family
from . import microkernel_qgemm  # noqa: E402,F401 - registers the channels-last int8 qgemm family
from . import microkernel_bf16  # noqa: E402,F401 - registers the bf16 gemm (vdpbf16ps)
