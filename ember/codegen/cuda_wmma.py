"""Tensor-core tiles for the CUDA target: the ``wmma`` intrinsic's device functions.

A ``KernelCall`` whose key is ``("wmma", low, a_dtype, b_dtype, fm, fn)`` (made by
``ember.tir.schedule.rules.cuda_tensorcore``) is one warp computing the float32 tile

    ct[r * TN + c] = sum over k < K of low(A[r * sam + k * sak]) * low(B[k * sbk + c * sbn])

for ``r < TM = 16 * fm``, ``c < TN = 16 * fn``, with the products of the ``low`` dtype
(``float16`` or ``bfloat16``) values accumulated in float32 on the tensor cores through CUDA's
``nvcuda::wmma`` API (``mma.h``; 16x16x16 fragments, ``fm x fn`` accumulator fragments per
warp). Per 16-deep step of ``K`` the 32 lanes stage ``A``'s ``TM x 16`` and ``B``'s ``16 x TN``
slices in the warp's shared-memory tiles ``sa`` / ``sb`` (converting ``float32`` operands to
``low`` with round-to-nearest-even, the conversion ToMixedPrecision's casts compute; a ``K``
that is not a multiple of 16 is padded with zeros), load the fragments from there, and
multiply-accumulate. Any element strides work (row- or column-major operands, transposed
weights, batch offsets): only the shared tiles must be 256-bit aligned (the printer declares
tiles named ``*_tc`` with ``__align__(32)``). The function ends with ``__syncwarp()``: after
it, every lane of the warp may read ``ct``.

Reference: CUDA C++ Programming Guide, "Warp Matrix Functions" (wmma, compute capability 7.0+;
``__nv_bfloat16`` fragments need 8.0+).
"""

from __future__ import annotations

from ..errors import LoweringError
from ..tir.schedule.rules.cuda_tensorcore import wmma_name  # noqa: F401 (the symbols' names)

CTYPE = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float"}
TO_FLOAT = {"float16": "__half2float", "bfloat16": "__bfloat162float"}
FROM_FLOAT = {"float16": "__float2half_rn", "bfloat16": "__float2bfloat16_rn"}
FRAGMENT = 16  # the m16n16k16 fragment shape


def _convert(src: str, low: str, x: str) -> str:
    if src == low:
        return x
    if src == "float32":
        return f"{FROM_FLOAT[low]}({x})"
    return f"{FROM_FLOAT[low]}({TO_FLOAT[src]}({x}))"


def wmma_source(name: str, key: tuple) -> str:
    """CUDA definition of tile function ``name`` for ``key = ("wmma", low, a_dtype, b_dtype,
    fm, fn)`` (see the module doc); it needs ``mma.h`` and the ``low`` dtype's header.

    Raises:
        LoweringError: a key with an unknown dtype or tile."""
    try:
        _, low, ta, tb, fm, fn = key
        low_t, a_t, b_t = CTYPE[low], CTYPE[ta], CTYPE[tb]
    except (ValueError, KeyError):
        raise LoweringError(f"no wmma tile function for key {key!r} (low dtype float16 or "
                            f"bfloat16, operands float32 or the low dtype)") from None
    if low not in FROM_FLOAT or fm not in (1, 2, 4) or fn not in (1, 2, 4):
        raise LoweringError(f"no wmma tile function for key {key!r}")
    tm, tn, f = FRAGMENT * fm, FRAGMENT * fn, FRAGMENT
    zero = f"{FROM_FLOAT[low]}(0.0f)"
    return f"""static __device__ __forceinline__ void {name}(float* __restrict__ ct,
    const {a_t}* __restrict__ a, int64_t sam, int64_t sak,
    const {b_t}* __restrict__ b, int64_t sbk, int64_t sbn, int64_t K,
    {low_t}* __restrict__ sa, {low_t}* __restrict__ sb) {{
  using namespace nvcuda;
  const int lane = threadIdx.x & 31;
  wmma::fragment<wmma::accumulator, {f}, {f}, {f}, float> acc[{fm}][{fn}];
#pragma unroll
  for (int i = 0; i < {fm}; ++i)
#pragma unroll
    for (int j = 0; j < {fn}; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += {f}) {{
    for (int e = lane; e < {tm * f}; e += 32) {{
      const int r = e / {f}, c = e % {f};
      const int64_t k = k0 + c;
      sa[e] = k < K ? {_convert(ta, low, "a[r * sam + k * sak]")} : {zero};
    }}
    for (int e = lane; e < {f * tn}; e += 32) {{
      const int r = e / {tn}, c = e % {tn};
      const int64_t k = k0 + r;
      sb[e] = k < K ? {_convert(tb, low, "b[k * sbk + c * sbn]")} : {zero};
    }}
    __syncwarp();
    wmma::fragment<wmma::matrix_a, {f}, {f}, {f}, {low_t}, wmma::row_major> fa[{fm}];
    wmma::fragment<wmma::matrix_b, {f}, {f}, {f}, {low_t}, wmma::row_major> fb[{fn}];
#pragma unroll
    for (int i = 0; i < {fm}; ++i) wmma::load_matrix_sync(fa[i], sa + i * {f * f}, {f});
#pragma unroll
    for (int j = 0; j < {fn}; ++j) wmma::load_matrix_sync(fb[j], sb + j * {f}, {tn});
#pragma unroll
    for (int i = 0; i < {fm}; ++i)
#pragma unroll
      for (int j = 0; j < {fn}; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    __syncwarp();
  }}
#pragma unroll
  for (int i = 0; i < {fm}; ++i)
#pragma unroll
    for (int j = 0; j < {fn}; ++j)
      wmma::store_matrix_sync(ct + i * {f * tn} + j * {f}, acc[i][j], {tn},
                              wmma::mem_row_major);
  __syncwarp();
}}
"""


def _c_reference(name: str, b_dtype: str, fm: int, fn: int, *, low: str, a_dtype: str) -> str:
    """The intrinsic's specification as plain C (the CPU check of the tensor-core schedule:
    ``tests/test_cuda_tensorcore.py`` prints the scheduled kernel with its GPU loops serial
    and runs it): the same tile, operands rounded to ``low`` (``_Float16``), float32 sums in
    ``k`` order. ``sa`` / ``sb`` are unused."""
    ct = {"float16": "_Float16", "float32": "float"}
    tm, tn = FRAGMENT * fm, FRAGMENT * fn
    return (f"static void {name}(float* restrict ct, const {ct[a_dtype]}* restrict a, "
            f"int64_t sam, int64_t sak, const {ct[b_dtype]}* restrict b, int64_t sbk, "
            f"int64_t sbn, int64_t K, _Float16* restrict sa, _Float16* restrict sb) {{\n"
            f"  (void)sa; (void)sb;\n"
            f"  for (int64_t r = 0; r < {tm}; ++r) for (int64_t c = 0; c < {tn}; ++c) {{\n"
            f"    float s = 0;\n"
            f"    for (int64_t k = 0; k < K; ++k) s += (float)(_Float16)a[r * sam + k * sak] * "
            f"(float)(_Float16)b[k * sbk + c * sbn];\n"
            f"    ct[r * {tn} + c] = s;\n  }}\n}}\n")


def register_c_reference() -> None:
    """Register ``_c_reference`` in the C micro-kernel registry (``ember.codegen.microkernel``)
    for the float16 keys, so the C printer can print a tensor-core schedule for the CPU check.
    Only that check calls this: a ``cuda`` build never prints its kernels as C."""
    from functools import partial

    from .microkernel import register_microkernel
    for ta in ("float16", "float32"):
        register_microkernel("wmma", "float16", ta)(partial(_c_reference, low="float16",
                                                            a_dtype=ta))


__all__ = ["FRAGMENT", "register_c_reference", "wmma_name", "wmma_source"]
