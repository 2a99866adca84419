"""The bfloat16 ``gemm`` micro-kernel: ``vdpbf16ps`` (AVX512_BF16) register blocks with float32
accumulation, registered as ``("gemm", "avx512", "bfloat16")`` beside the float32 ones.

``vdpbf16ps acc, a, b`` adds, in each of the 16 float32 lanes ``j``, the dot product of the
lane's bf16 pair: ``acc[j] += a[2j] * b[2j] + a[2j+1] * b[2j+1]`` (products exact, sums in
float32; Intel SDM, VDPBF16PS). A register block ``mr x nr`` therefore consumes the reduction two
elements at a time:

- ``A`` (bfloat16, the activation): row ``i``'s pair ``A[i*lda + off], A[i*lda + off + 1]`` is
  one 32-bit word broadcast to all lanes (the two reduction elements must be adjacent in memory:
  the contiguous innermost reduction dim, input channels or ``k``);
- ``B`` (bfloat16, the packed weights): the *K-pair-interleaved* layout, per reduction pair ``nr``
  columns of ``[k even, k odd]``: ``B[off + 2*j + t]`` is column ``j``'s element ``2p + t``, so
  16 columns of one pair are one 512-bit load (a tail of ``nr % 16`` columns is a masked load of
  ``2 * (nr % 16)`` halves);
- ``C`` (float32): the ``mr x ceil(nr / 16)`` accumulators, stored (or added to ``C``) after the
  optional register epilogue of ``microkernel.EPI_PARAMS`` (float32 bias, residual, clamp).

The kernel's reduction loops are those of the fp32 kernel minus the pair: offsets advance by
``sa_t``/``sb_t`` elements per step of loop ``t`` and each innermost step covers one pair
(``ember.tir.schedule.tensorize`` folds the pair loop, extent 2 with unit strides, into the
call). Signature: ``(float* C, const uint16_t* A, const uint16_t* B, ldc, lda[, lda2],
(k_t, sa_t, sb_t)..., accumulate[, bias, R, ldr])`` (bf16 is stored as ``uint16_t`` in C).
"""

from __future__ import annotations

from .microkernel import (PREFETCH_STEPS, EPI_PARAMS, SIMD_ISAS, _a_row, _loops,
                          accumulator_init, epilogue_lines, register_microkernel)

LANES = 16


def _signature(name: str, nred: int, epi, groups: int) -> str:
    red = "".join(f", int64_t k{t}, int64_t sa{t}, int64_t sb{t}" for t in range(nred))
    lda2 = ", int64_t lda2" if groups > 1 else ""
    return (f"static __attribute__((noinline)) void {name}(float* restrict C, "
            f"const uint16_t* restrict A, const uint16_t* restrict B, int64_t ldc, "
            f"int64_t lda{lda2}{red}, int32_t accumulate{EPI_PARAMS if epi else ''})")


@register_microkernel("gemm", "avx512", "bfloat16")
def gemm_avx512_bf16(name: str, mr: int, nr: int, nred: int, a_vec: bool = False, epi=None,
                     pf_next: bool = False, groups: int = 1) -> str:
    """C source of the ``mr x nr`` bf16 register block with ``nred`` reduction loops (see the
    module doc); ``a_vec`` (lane-aligned ``A``) has no bf16 form.

    Raises:
        ValueError: ``a_vec`` or ``nred == 0`` (there is always the pair loop's parent)."""
    if a_vec:
        raise ValueError("gemm avx512 bfloat16: no lane-aligned-A (depthwise) variant")
    if nred < 1:
        raise ValueError("gemm avx512 bfloat16: needs a reduction loop over the pairs")
    isa = SIMD_ISAS["avx512"]
    nv = -(-nr // LANES)
    tail = nr % LANES
    L = [_signature(name, nred, epi, groups) + " {"]
    if tail:
        L.append(f"  const __mmask16 tail_mask = (__mmask16){(1 << tail) - 1};")
        L.append(f"  const __mmask32 pair_mask = (__mmask32){(1 << (2 * tail)) - 1}u;")
    acc = [[f"c{i}_{j}" for j in range(nv)] for i in range(mr)]
    L += accumulator_init(acc, LANES, isa["vt"], isa["load"], isa["loadm"], isa["zero"], tail)
    heads, close, aoff, boff = _loops(nred)
    L += heads
    L.append(f"    const uint16_t* a = A + {aoff};")
    L.append(f"    const uint16_t* b = B + {boff};")
    last = nred - 1
    for j in range(nv):  # the B stream a few pairs ahead (weights come from memory)
        L.append(f"    _mm_prefetch((const char*)(b + {PREFETCH_STEPS} * sb{last} + "
                 f"{2 * j * LANES}), _MM_HINT_T0);")
    if pf_next:
        for j in range(nv):
            L.append(f"    _mm_prefetch((const char*)(b + k{last} * sb{last} + "
                     f"{2 * j * LANES}), _MM_HINT_T1);")
    for j in range(nv):
        p = f"b + {2 * j * LANES}"
        ld = (f"_mm512_maskz_loadu_epi16(pair_mask, {p})" if (tail and j == nv - 1)
              else f"_mm512_loadu_si512((const void*)({p}))")
        L.append(f"    const __m512bh b{j} = (__m512bh){ld};")
    for i in range(mr):
        L.append(f"    {{ int32_t w{i}; memcpy(&w{i}, a + {_a_row(i, mr, groups)}, 4);")
        L.append(f"      const __m512bh a{i} = (__m512bh)_mm512_set1_epi32(w{i});")
        for j in range(nv):
            L.append(f"      {acc[i][j]} = _mm512_dpbf16_ps({acc[i][j]}, a{i}, b{j});")
        L.append("    }")
    L.append(close)
    L += epilogue_lines(epi, acc, nv, LANES, isa["vt"], isa["load"], isa["loadm"], tail,
                        add=isa["add"], vmax=isa["vmax"], vmin=isa["vmin"], set1=isa["set1"])
    for i in range(mr):
        for j in range(nv):
            st = isa["storem"] if (tail and j == nv - 1) else isa["store"]
            L.append(f"  {st(f'C + {i} * ldc + {j * LANES}', acc[i][j])};")
    L.append("}")
    return "#include <immintrin.h>\n#include <string.h>\n" + "\n".join(L) + "\n"


def pack_pairs_numpy(b, nr: int):
    """Reference packing (tests, docs): a ``(K, N)`` bf16 matrix with ``K`` even, ``N % nr == 0``
    as the micro-kernel's K-pair-interleaved panels ``(N // nr, K // 2, nr, 2)``."""
    import numpy as np
    k, n = b.shape
    return np.ascontiguousarray(b.reshape(k // 2, 2, n // nr, nr).transpose(2, 0, 3, 1))
