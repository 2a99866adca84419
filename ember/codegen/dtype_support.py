"""C support code for the narrow element types of ``ember.dtypes`` (bfloat16, float8, float4,
int4/uint4, int2/uint2).

Kernels compute narrow floats in ``float`` and narrow integers in 8-bit integers; this module
gives the printer, per type, the storage C type and the helpers it calls:

- ``ember_dec_T(bits) -> float`` (a 256-entry table for the 8/4-bit floats, built from
  ml_dtypes, so decoding is exact), ``ember_enc_T(float, sat) -> bits``: round to nearest even;
  a value beyond the largest finite one saturates (``sat``) or becomes inf (types with inf) or
  NaN (the others, as ml_dtypes and ONNX Cast with ``saturate=0``); ``fnuz`` types have no -0;
- ``ember_cvt_T(float, sat, mode) -> float``: the value rounded to T (ONNX Cast semantics:
  ``sat`` clamps to the finite range, as ``saturate=1`` does; ``float8_e8m0fnu`` follows
  ``onnx.numpy_helper.to_float8e8m0`` with ``mode`` 0 = up, 1 = down, 2 = nearest);
- sub-byte integers: ``ember_ld_T(bits)`` (sign-extending), ``ember_st_T(v)`` (low bits, as
  ml_dtypes stores them) and ``ember_cvt_T(double)`` (truncate toward zero and wrap, NaN/inf -> 0:
  ember's rule for ONNX Cast, ``ember.dtypes.to_sub_byte_int``, which the NumPy reference uses
  too, whatever the installed ml_dtypes does).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..dtypes import EXT_FLOAT, EXT_INT, ext_int_bits, np_dtype

ROUND_MODES = {"up": 0, "down": 1, "nearest": 2}


def storage_ctype(dtype: str) -> str:
    """C type holding one element in memory."""
    return "uint16_t" if dtype == "bfloat16" else "uint8_t"


def compute_dtype(dtype: str) -> str:
    """dtype a kernel computes a narrow type in."""
    if dtype in EXT_FLOAT:
        return "float32"
    bits, signed = ext_int_bits(dtype)
    return "int8" if signed else "uint8"


def _flit(v: float) -> str:
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return f"{float(np.float32(v)).hex()}f"


_BF16 = """static inline float ember_dec_bfloat16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f;
  memcpy(&f, &u, 4); return f; }
static inline uint16_t ember_enc_bfloat16(float x, int sat) { uint32_t u; memcpy(&u, &x, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
  uint32_t nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);  /* branch-free: vectorizes */
  return (uint16_t)((r & ~nan) | (q & nan)); }
static inline float ember_cvt_bfloat16(float x, int sat, int mode) {
  return ember_dec_bfloat16(ember_enc_bfloat16(x, sat)); }
"""

_E8M0 = """static inline uint8_t ember_enc_float8_e8m0fnu(float x, int sat, int mode) {
  uint32_t u; memcpy(&u, &x, 4); uint32_t e = (u >> 23) & 0xffu;
  if (e == 0xffu) return 0xffu;
  int up = 0;
  if (mode == 0) up = (u & 0x7fffffu) != 0;
  else if (mode == 2) { uint32_t g = (u >> 22) & 1u, r = (u >> 21) & 1u, s = (u & 0x1fffffu) != 0;
    up = g && (r || s || e > 0); }
  if (sat && e == 0xfeu) up = 0;
  return (uint8_t)(e + (uint32_t)up); }
"""


@functools.lru_cache(maxsize=None)
def support_source(dtype: str) -> str:
    """The C helpers of one narrow type (see the module doc)."""
    if dtype == "bfloat16":
        return _BF16
    if dtype in EXT_INT:
        bits, signed = ext_int_bits(dtype)
        mask = (1 << bits) - 1
        sh = 8 - bits
        ld = (f"(int8_t)(((int8_t)(uint8_t)(b << {sh})) >> {sh})" if signed
              else f"(uint8_t)(b & {mask})")
        ct = "int8_t" if signed else "uint8_t"
        wrap = (f"(int8_t)(((int8_t)(uint8_t)(((uint64_t)v) << {sh})) >> {sh})" if signed
                else f"(uint8_t)(((uint64_t)v) & {mask})")
        return (f"static inline {ct} ember_ld_{dtype}(uint8_t b) {{ return {ld}; }}\n"
                f"static inline uint8_t ember_st_{dtype}(int64_t v) {{ return (uint8_t)(v & {mask}); }}\n"
                f"static inline {ct} ember_wrap_{dtype}(int64_t v) {{ return {wrap}; }}\n"
                f"static inline {ct} ember_cvt_{dtype}(double x) {{\n"
                f"  if (!(x == x) || isinf(x) || fabs(x) >= 9.2e18) return 0;\n"
                f"  return ember_wrap_{dtype}((int64_t)x); }}\n")
    t = np_dtype(dtype)
    nbits = 4 if dtype == "float4_e2m1fn" else 8
    codes = np.arange(1 << nbits, dtype=np.uint8)
    vals = codes.view(t).astype(np.float64)
    table = ", ".join(_flit(v) for v in vals)
    dec = (f"static const float ember_tab_{dtype}[{1 << nbits}] = {{{table}}};\n"
           f"static inline float ember_dec_{dtype}(uint8_t b) {{ return ember_tab_{dtype}[b]; }}\n")
    if dtype == "float8_e8m0fnu":
        return dec + _E8M0 + (f"static inline float ember_cvt_{dtype}(float x, int sat, int mode) "
                              f"{{ return ember_dec_{dtype}(ember_enc_{dtype}(x, sat, mode)); }}\n")
    half = 1 << (nbits - 1)  # the sign bit; positive codes are [0, half)
    pos = vals[:half]
    finite = [k for k in range(half) if math.isfinite(pos[k])]
    n = max(finite) + 1  # positive finite codes are 0..n-1, ascending in value
    maxv = float(pos[n - 1])
    ulp = maxv - float(pos[n - 2])
    thresh = maxv + ulp / 2  # ties round to the even code
    fnuz = dtype.endswith("fnuz")
    has_inf = any(math.isinf(v) for v in vals)
    nan_codes = [k for k in range(1 << nbits) if math.isnan(vals[k])]
    if has_inf:
        ovf = f"(uint8_t)({[k for k in range(half) if math.isinf(pos[k])][0]} | s)"
    elif nan_codes:
        ovf = f"(uint8_t){nan_codes[0]}"
    else:
        ovf = f"(uint8_t)({n - 1} | s)"  # no inf, no NaN (float4): saturate
    nan = f"(uint8_t){nan_codes[0]}" if nan_codes else f"(uint8_t){half}"
    mags = ", ".join(_flit(v) for v in pos[:n])
    tie_up = "1" if (n - 1) % 2 else "0"  # a tie at the top rounds up iff the max code is odd
    return dec + f"""static const float ember_mag_{dtype}[{n}] = {{{mags}}};
static inline uint8_t ember_enc_{dtype}(float x, int sat) {{
  if (x != x) return {nan};
  uint8_t s = signbit(x) ? {half} : 0;
  float a = fabsf(x);
  int code;
  if (a >= {_flit(maxv)}) {{
    if (a == {_flit(maxv)} || sat || a < {_flit(thresh)} || (a == {_flit(thresh)} && !{tie_up}))
      code = {n - 1};
    else return {ovf};
  }} else {{
    int lo = 0, hi = {n - 1};
    while (hi - lo > 1) {{ int mid = (lo + hi) / 2; if (ember_mag_{dtype}[mid] <= a) lo = mid; else hi = mid; }}
    float d0 = a - ember_mag_{dtype}[lo], d1 = ember_mag_{dtype}[hi] - a;
    code = (d0 < d1 || (d0 == d1 && (lo % 2) == 0)) ? lo : hi;
  }}
  {"if (code == 0) return 0;" if fnuz else ""}
  return (uint8_t)(code | s);
}}
static inline float ember_cvt_{dtype}(float x, int sat, int mode) {{
  return ember_dec_{dtype}(ember_enc_{dtype}(x, sat)); }}
"""
