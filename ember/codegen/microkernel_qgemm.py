"""The ``qgemm`` micro-kernel family: one task of a channels-last int8 convolution / dense layer
(``qnn.conv2d`` with ``w_layout="blocked"``, ``ember.ops.qnn_conv``), u8 x s8 -> s32 with the
requantization, and an optional fused residual add, in the epilogue.

Layouts: ``nhwc`` (``X[b, ih, iw, c]`` -> ``Y[b, oh, ow, co]``), ``nchw_nhwc`` (the stem: an
NCHW input, ``X[b, c, ih, iw]``, an NHWC output) and ``rows`` (``X[p, c]`` -> ``Y[p, co]``, a
dense layer). The layer is the GEMM ``acc[p, co] = sum_k A[p, k] * W[k, co]`` over the output
pixels ``p`` and the reduction ``k = (kh, kw, c)`` (tap-major, channels padded to ``C4``):

- ``A``: row ``p`` is the pixel's receptive field, ``KP = KH * KW * C4`` unsigned bytes. For a
  1x1 convolution without padding on uint8 NHWC data with ``C % 4 == 0`` (and a dense layer)
  the row is read in place (``X + pixel * C``, strided pixels included): no copy. Otherwise the
  task's ``PT`` rows are packed on the stack (a ``memcpy`` of ``C`` bytes per tap in NHWC, a
  gather per channel from NCHW, the zero point for taps in the padding, 0 for the padded
  channels, ``^ 0x80`` for an int8 input, which makes it unsigned with its zero point + 128).
- ``W``: ``(COUTP, KP)`` int8 with ``COUTP`` the output channels rounded up to 16, stored as
  ``W[co / 16][k / 4][co % 16][k % 4]`` (``ember.ops.qnn_conv.pack_weight_blocked``, once at
  compile time): one 64-byte vector holds four reduction elements of 16 output channels, the
  operand ``vpdpbusd`` multiplies against a broadcast 32-bit group of four activation bytes.
- register block: ``MR`` pixels x ``NV`` vectors of 16 output channels: per reduction group of
  4, ``NV`` weight vector loads, ``MR`` 32-bit broadcasts of ``A`` and ``MR * NV`` ``vpdpbusd``
  (output channels in the lanes, so the epilogue's per-channel bias / scale are vectors and
  the store is 16 contiguous bytes).

Epilogue, per output element (the int32 ``bias`` already holds the zero-point correction
``-x_zp_u * sum_k W``)::

    c = clamp(round_half_even(float32(acc + bias[co]) * mult[co]) + y_zp, lo, hi)

(or the integer ``requant="fixed"`` form, see ``ember.codegen.microkernel_qconv``), and with a
fused residual ``S`` (same layout as ``Y``, the other operand of ``dequantize(c) +
dequantize(S)``, then ``relu``, then ``quantize``)::

    f = (float32(c) - float32(y_zp)) * c_scale + (float32(s) - float32(s_zp)) * s_scale
    y = clamp(round_half_even(f / o_scale) + o_zp, o_lo, o_hi)

each operation rounded to float32 (no contraction into FMA: the kernels are compiled with
``fp-contract=off``), the ONNX DequantizeLinear / Add / QuantizeLinear arithmetic; a ReLU is
``o_lo = o_zp``. Accumulation is exact for ``K < 65793``.

ISAs: ``avx512vnni``, ``avx2`` (no VNNI: ``vpmaddwd`` on widened int16, which cannot
saturate; ``_avx2_body``) and ``scalar`` (portable C); all bit-identical. Key: ``("qgemm", isa,
in_dtype, skip_dtype, *geometry)`` (``QConvGeometry`` fields, ``ember.ops.qnn_conv``); C
signature ``void name(OUT_T* Y, const IN_T* X, const int8_t* W, const int32_t* bias, const
float* mult, const SKIP_T* S, int64_t task)`` (``S`` unused without a residual).
"""

from __future__ import annotations

from .microkernel import register_microkernel
from .microkernel_qconv import CT, FMAX

FIELDS = ("layout", "c", "h", "w", "cout", "kh", "kw", "sh", "sw", "pt", "pl", "dh", "dw",
          "oh", "ow", "kp", "x_zp", "y_zp", "lo", "hi", "out_dtype", "pt_pixels", "cc", "mr",
          "nv", "requant", "rq_mult", "rq_shift", "w_layout", "skip", "c_scale", "s_scale",
          "s_zp", "o_scale", "o_zp", "o_lo", "o_hi", "direct", "kdense", "o_relu")
ATTR = "__attribute__((noinline, optimize(\"fp-contract=off\")))"


def _residual_bounded(g: dict) -> bool:
    """Whether the fused residual's ``|h / o_scale|`` stays far below 2**31 for every input
    (``|v - y_zp|, |s - s_zp| <= 255``), so its float clamp before the conversion is a no-op."""
    bound = 255.0 * (abs(g["c_scale"]) + abs(g["s_scale"])) / max(abs(g["o_scale"]), 1e-38)
    return bound * 1.01 < 2.0 ** 30


def _f(v: float) -> str:
    """A float32 literal of ``v`` (exactly ``v`` rounded to float32 by the caller)."""
    return f"{float(v)!r}f"


def _head(name: str, in_dtype: str, skip_dtype: str, g: dict) -> list[str]:
    P, PT, KP, C = g["oh"] * g["ow"], g["pt_pixels"], g["kp"], g["c"]
    c4 = KP // (g["kh"] * g["kw"])
    coutp = -(-g["cout"] // 16) * 16
    n_pt, n_ct = -(-P // PT), -(-coutp // g["cc"])
    x_zp_u = g["x_zp"] + (128 if in_dtype == "int8" else 0)
    sk = CT.get(skip_dtype, "void")
    L = [f"static {ATTR} void {name}({CT[g['out_dtype']]}* restrict Y, "
         f"const {CT[in_dtype]}* restrict X, const int8_t* restrict W, "
         f"const int32_t* restrict bias, const float* restrict mult, "
         f"const {sk}* restrict S, int64_t task) {{",
         f"  const int64_t b = task / {n_pt * n_ct}, rem = task % {n_pt * n_ct};",
         f"  const int64_t p0 = (rem / {n_ct}) * {PT}, c0 = (rem % {n_ct}) * {g['cc']};",
         f"  const int64_t np_ = {P} - p0 < {PT} ? {P} - p0 : {PT};",
         f"  const int64_t c1 = c0 + {g['cc']} < {coutp} ? c0 + {g['cc']} : {coutp};",
         "  const uint8_t* xq = (const uint8_t*)X;",
         f"  const uint8_t* arow[{PT}];",
         "  (void)S;"]
    if g["direct"]:
        if g["layout"] == "rows":
            L += ["  for (int64_t q = 0; q < np_; ++q) "
                  f"arow[q] = xq + (b * {P} + p0 + q) * {C};"]
        else:
            L += ["  for (int64_t q = 0; q < np_; ++q) {",
                  f"    const int64_t p = p0 + q, oh = p / {g['ow']}, ow = p % {g['ow']};",
                  f"    arow[q] = xq + ((b * {g['h']} + oh * {g['sh']}) * {g['w']} + ow * {g['sw']})"
                  f" * {C};",
                  "  }"]
        return L
    if g.get("kdense"):
        return L + _dense_head(in_dtype, g, x_zp_u)
    xor = " ^ 0x80" if in_dtype == "int8" else ""
    L += [f"  uint8_t panel[{PT * KP}] __attribute__((aligned(64)));",
          "  for (int64_t q = 0; q < np_; ++q) {",
          f"    uint8_t* dst = panel + q * {KP};",
          "    arow[q] = dst;"]
    if g["layout"] == "rows":
        L += [f"    const uint8_t* src = xq + (b * {P} + p0 + q) * {C};",
              f"    for (int64_t c = 0; c < {C}; ++c) dst[c] = src[c]{xor};",
              f"    for (int64_t c = {C}; c < {c4}; ++c) dst[c] = 0;",
              "  }"]
        return L
    L += [f"    const int64_t p = p0 + q, oh = p / {g['ow']}, ow = p % {g['ow']};",
          f"    for (int64_t r = 0; r < {g['kh']}; ++r) for (int64_t s = 0; s < {g['kw']}; ++s) {{",
          f"      uint8_t* d = dst + (r * {g['kw']} + s) * {c4};",
          f"      const int64_t ih = oh * {g['sh']} - {g['pt']} + r * {g['dh']};",
          f"      const int64_t iw = ow * {g['sw']} - {g['pl']} + s * {g['dw']};",
          f"      if (ih < 0 || ih >= {g['h']} || iw < 0 || iw >= {g['w']}) {{",
          f"        for (int64_t c = 0; c < {c4}; ++c) d[c] = {x_zp_u};",
          "        continue;",
          "      }"]
    if g["layout"] == "nchw_nhwc":
        L += [f"      const uint8_t* src = xq + b * {C * g['h'] * g['w']} + ih * {g['w']} + iw;",
              f"      for (int64_t c = 0; c < {C}; ++c) d[c] = src[c * {g['h'] * g['w']}]{xor};"]
    else:
        L += [f"      const uint8_t* src = xq + ((b * {g['h']} + ih) * {g['w']} + iw) * {C};"]
        L += ([f"      for (int64_t c = 0; c < {C}; ++c) d[c] = src[c]{xor};"] if xor else
              [f"      __builtin_memcpy(d, src, {C});"])
    L += [f"      for (int64_t c = {C}; c < {c4}; ++c) d[c] = 0;",
          "    }",
          "  }"]
    return L


def _dense_head(in_dtype: str, g: dict, x_zp_u: int) -> list[str]:
    """The panel of the ``"dense"`` reduction order (``k = (kh * KW + kw) * C + c``, the NCHW
    stem, ``ember.ops.qnn_conv.K_LAYOUTS``): the task's input rows are first transposed into
    an NHWC strip with the padding columns and rows holding the zero point (int8 input ``^
    0x80``), so a kernel row of ``KW`` taps is one contiguous run of ``KW * C`` bytes of the
    strip (unit width dilation) and a pixel's row of ``A`` is ``KH`` copies, no bounds
    checks."""
    C, H, W, OW = g["c"], g["h"], g["w"], g["ow"]
    P, PT, KP = g["oh"] * OW, g["pt_pixels"], g["kp"]
    kh, kw, sh, sw, dh, dw = g["kh"], g["kw"], g["sh"], g["sw"], g["dh"], g["dw"]
    span = min(g["oh"], (PT + OW - 2) // OW + 1)  # output rows one tile can touch
    rmax = (span - 1) * sh + (kh - 1) * dh + 1
    ws = max(W + g["pl"], (OW - 1) * sw + (kw - 1) * dw + 1)  # strip columns: iw + pl
    rs = ws * C
    right = ws - g["pl"] - W
    xor = " ^ 0x80" if in_dtype == "int8" else ""
    L = [f"  uint8_t panel[{PT * KP}] __attribute__((aligned(64)));",
         f"  uint8_t strip[{rmax * rs}] __attribute__((aligned(64)));",
         f"  const int64_t oh0 = p0 / {OW}, oh1 = (p0 + np_ - 1) / {OW};",
         f"  const int64_t nr = (oh1 - oh0) * {sh} + {(kh - 1) * dh + 1};",
         "  for (int64_t rr = 0; rr < nr; ++rr) {",
         f"    uint8_t* row = strip + rr * {rs};",
         f"    const int64_t ih = oh0 * {sh} - {g['pt']} + rr;",
         f"    if (ih < 0 || ih >= {H}) {{ __builtin_memset(row, {x_zp_u}, {rs}); continue; }}"]
    if g["pl"]:
        L.append(f"    __builtin_memset(row, {x_zp_u}, {g['pl'] * C});")
    if right > 0:
        L.append(f"    __builtin_memset(row + {(g['pl'] + W) * C}, {x_zp_u}, {right * C});")
    L += [f"    const uint8_t* src = xq + b * {C * H * W} + ih * {W};",
          f"    uint8_t* d = row + {g['pl'] * C};",
          f"    for (int64_t iw = 0; iw < {W}; ++iw) {{"]
    L += [f"      d[iw * {C} + {c}] = src[{c * H * W} + iw]{xor};" for c in range(C)]
    L += ["    }",
          "  }",
          "  for (int64_t q = 0; q < np_; ++q) {",
          f"    uint8_t* dst = panel + q * {KP};",
          "    arow[q] = dst;",
          f"    const int64_t p = p0 + q, oh = p / {OW}, ow = p % {OW};",
          f"    const uint8_t* s0 = strip + (oh - oh0) * {sh * rs} + ow * {sw * C};"]
    if dw == 1:
        L += [f"    for (int64_t r = 0; r < {kh}; ++r) "
              f"__builtin_memcpy(dst + r * {kw * C}, s0 + r * {dh * rs}, {kw * C});"]
    else:
        L += [f"    for (int64_t r = 0; r < {kh}; ++r) for (int64_t s = 0; s < {kw}; ++s) "
              f"__builtin_memcpy(dst + (r * {kw} + s) * {C}, s0 + r * {dh * rs} + s * {dw * C}, "
              f"{C});"]
    L += [f"    for (int64_t k = {kh * kw * C}; k < {KP}; ++k) dst[k] = 0;",
          "  }"]
    return L


def _out(g: dict, p: str, co: str) -> str:
    """Index of output (or residual) element at tile pixel ``p``, channel ``co``."""
    return f"(b * {g['oh'] * g['ow']} + p0 + {p}) * {g['cout']} + {co}"


# --- scalar -------------------------------------------------------------------------------


def _scalar_epilogue(g: dict, q: str) -> list[str]:
    """C lines: requantize ``int32_t acc`` of tile pixel ``q``, channel ``co`` and store it."""
    if g["requant"] == "fixed":
        s = int(g["rq_shift"])
        rnd = f"((pr >> {s - 1}) + 1) >> 1" if s > 0 else "pr"
        L = ["    const int32_t pr = (int32_t)(((uint32_t)acc + (uint32_t)bias[co]) * "
             f"(uint32_t)({int(g['rq_mult'])}));",
             f"    int32_t v = ({rnd}) + {g['y_zp']};"]
    else:
        L = ["    float f = (float)(acc + bias[co]) * mult[co];",
             f"    f = f < -{FMAX}f ? -{FMAX}f : (f > {FMAX}f ? {FMAX}f : f);",
             f"    int32_t v = (int32_t)nearbyintf(f) + {g['y_zp']};"]
    L.append(f"    v = v < {g['lo']} ? {g['lo']} : (v > {g['hi']} ? {g['hi']} : v);")
    if g["skip"]:
        L += [f"    float h = ((float)v - {_f(g['y_zp'])}) * {_f(g['c_scale'])};",
              f"    const float hs = ((float)S[{_out(g, q, 'co')}] - {_f(g['s_zp'])}) * "
              f"{_f(g['s_scale'])};",
              "    h = h + hs;"]
        if g["out_dtype"] == "float32":
            return L + ([f"    Y[{_out(g, q, 'co')}] = h < 0.0f ? 0.0f : h;"] if g["o_relu"] else
                        [f"    Y[{_out(g, q, 'co')}] = h;"])
        L += [f"    h = h / {_f(g['o_scale'])};",
              f"    h = h < -{FMAX}f ? -{FMAX}f : (h > {FMAX}f ? {FMAX}f : h);",
              f"    v = (int32_t)nearbyintf(h) + {g['o_zp']};",
              f"    v = v < {g['o_lo']} ? {g['o_lo']} : (v > {g['o_hi']} ? {g['o_hi']} : v);"]
    return L + [f"    Y[{_out(g, q, 'co')}] = ({CT[g['out_dtype']]})v;"]


def _scalar_body(g: dict) -> list[str]:
    K4 = g["kp"] // 4
    return ["  for (int64_t q = 0; q < np_; ++q)",
            f"  for (int64_t co = c0; co < c1 && co < {g['cout']}; ++co) {{",
            f"    const int8_t* wb = W + (co / 16) * {K4 * 64} + (co % 16) * 4;",
            "    int32_t acc = 0;",
            f"    for (int64_t k = 0; k < {g['kp']}; ++k) acc += (int32_t)arow[q][k] * "
            "(int32_t)wb[(k / 4) * 64 + k % 4];"] + _scalar_epilogue(g, "q") + ["  }"]


# --- AVX2 (no VNNI) -----------------------------------------------------------------------


def _avx2_body(g: dict) -> list[str]:
    """Two pixels x 16 channels per block. ``vpmaddwd`` on int16 (activations zero-extended,
    weights sign-extended): each product pair sums to at most 2 * 255 * 128, no saturation
    (``vpmaddubsw`` on the bytes would saturate at int16). A 16-byte weight chunk (4 channels x
    4 reduction elements) widens to 16 int16; the pixel's 4 activations, widened, are
    broadcast to every 64-bit lane; lane ``l`` of accumulator ``t`` sums channel ``4t + l/2``'s
    reduction elements ``2(l%2), 2(l%2)+1``; the pairs are added and the epilogue is the
    scalar one (bit-identical)."""
    K4 = g["kp"] // 4
    L = ["  for (int64_t cb = c0; cb < c1; cb += 16) {",
         f"    const int8_t* wb = W + (cb / 16) * {K4 * 64};",
         "    for (int64_t q0 = 0; q0 < np_; q0 += 2) {",
         "      const int two = q0 + 1 < np_;",
         "      const uint8_t* r0 = arow[q0]; const uint8_t* r1 = arow[two ? q0 + 1 : q0];",
         "      __m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00, "
         "c10 = c00, c11 = c00, c12 = c00, c13 = c00;",
         f"      for (int64_t k4 = 0; k4 < {K4}; ++k4) {{",
         "        const __m256i x0 = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128("
         "*(const qg_i32u*)(r0 + k4 * 4))));",
         "        const __m256i x1 = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128("
         "*(const qg_i32u*)(r1 + k4 * 4))));",
         "        const int8_t* wk = wb + k4 * 64;"]
    for t in range(4):
        L += [f"        {{ const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)"
              f"(wk + {16 * t})));",
              f"          c0{t} = _mm256_add_epi32(c0{t}, _mm256_madd_epi16(w, x0));",
              f"          c1{t} = _mm256_add_epi32(c1{t}, _mm256_madd_epi16(w, x1)); }}"]
    L += ["      }",
          "      int32_t t0[32], t1[32];"]
    for t in range(4):
        L += [f"      _mm256_storeu_si256((__m256i*)(t0 + {8 * t}), c0{t});",
              f"      _mm256_storeu_si256((__m256i*)(t1 + {8 * t}), c1{t});"]
    L += ["      for (int i = 0; i <= two; ++i) {",
          "        const int32_t* tt = i ? t1 : t0;",
          "        const int64_t q = q0 + i;",
          f"        for (int64_t co = cb; co < cb + 16 && co < {g['cout']}; ++co) {{",
          "    const int32_t acc = tt[2 * (co - cb)] + tt[2 * (co - cb) + 1];"]
    L += _scalar_epilogue(g, "q")
    L += ["        }", "      }", "    }", "  }"]
    return L


# --- AVX-512 VNNI -------------------------------------------------------------------------


def _vnni_block(g: dict, mr: int, nv: int, sk_signed: bool) -> list[str]:
    """One ``mr x 16*nv`` register block at pixel ``q``, channel ``cb`` of the tile."""
    K4 = g["kp"] // 4
    acc = [[f"a{i}_{j}" for j in range(nv)] for i in range(mr)]
    # the accumulators pinned to zmm8..zmm31 and vpdpbusd as inline asm: with the intrinsic
    # (GCC 12) every accumulator was copied around each vpdpbusd and half of them spilled
    assert mr * nv <= 24, "at most 24 accumulators (zmm8..zmm31)"
    L = ["    {",
         "      " + " ".join(f'register __m512i {a} __asm__("zmm{8 + k}") = _mm512_setzero_si512();'
                           for k, a in enumerate(x for r in acc for x in r)),
         f"      const int8_t* wb = W + (cb / 16) * {K4 * 64};"]
    L += [f"      const uint8_t* const r{i} = arow[q + {i}];" for i in range(mr)]
    L += [f"      for (int64_t k4 = 0; k4 < {K4}; ++k4) {{"]
    for j in range(nv):
        L.append(f"        const __m512i w{j} = _mm512_loadu_si512((const void*)(wb + {j * K4 * 64} "
                 "+ k4 * 64));")
    for i in range(mr):
        L.append(f"        {{ const __m512i x = _mm512_set1_epi32(*(const qg_i32u*)(r{i} + k4 * 4));")
        for j in range(nv):
            L.append(f'          __asm__("vpdpbusd %2, %1, %0" : "+v"({acc[i][j]}) : "v"(x), '
                     f'"vm"(w{j}));')
        L.append("        }")
    L.append("      }")
    L += _vnni_consts(g)  # after the reduction: the accumulators need the registers there
    for j in range(nv):
        L += [f"      const __m512i bi{j} = _mm512_loadu_si512((const void*)(bias + cb + {16 * j}));",
              f"      const __m512 mu{j} = _mm512_loadu_ps(mult + cb + {16 * j});",
              f"      const int64_t nl{j} = {g['cout']} - (cb + {16 * j});",
              f"      const __mmask16 m{j} = nl{j} >= 16 ? (__mmask16)0xFFFF : "
              f"(__mmask16)((1u << nl{j}) - 1);"]
    cvt = "_mm512_cvtepi8_epi32" if sk_signed else "_mm512_cvtepu8_epi32"
    for i in range(mr):
        for j in range(nv):
            a = acc[i][j]
            L.append("      {")
            if g["requant"] == "fixed":
                s = int(g["rq_shift"])
                L.append(f"      __m512i r = _mm512_mullo_epi32(_mm512_add_epi32({a}, bi{j}), vmq);")
                if s > 0:
                    L.append(f"      r = _mm512_srai_epi32(_mm512_add_epi32(_mm512_srai_epi32(r, "
                             f"{s - 1}), _mm512_set1_epi32(1)), 1);")
                L.append("      r = _mm512_add_epi32(r, vzp);")
            else:
                # the clamp to [lo - y_zp, hi - y_zp] in float before the rounding conversion:
                # rint(clamp(f, a, b)) = clamp(rint(f), a, b) for integer a, b (and it bounds
                # the conversion), so no integer clamp; with a residual r stays v - y_zp
                L += [f"      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32({a}, "
                      f"bi{j})), mu{j});",
                      "      f = _mm512_min_ps(_mm512_max_ps(f, vflz), vfhz);",
                      "      __m512i r = _mm512_cvtps_epi32(f);" if g["skip"] else
                      "      __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(f), vzp);"]
            if g["requant"] == "fixed":
                L.append("      r = _mm512_min_epi32(_mm512_max_epi32(r, vlo), vhi);")
            if g["skip"] and g["requant"] != "fixed":
                # float32(v) - float32(y_zp) is float32(v - y_zp) exactly (both small integers),
                # so the requantized value is kept as v - y_zp; the float clamp before the last
                # conversion is dropped where |h / o_scale| is bounded far below 2**31
                L += [f"      const __m512i sv = {cvt}(_mm_maskz_loadu_epi8(m{j}, (const void*)"
                      f"(S + {_out(g, f'q + {i}', f'cb + {16 * j}')})));",
                      "      __m512 h = _mm512_mul_ps(_mm512_cvtepi32_ps(r), vcs);",
                      "      const __m512 hs = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(sv), "
                      "vsz), vss);",
                      "      h = _mm512_add_ps(h, hs);"]
                if g["out_dtype"] == "float32":
                    if g["o_relu"]:
                        L.append("      h = _mm512_max_ps(h, _mm512_setzero_ps());")
                    L += [f"      _mm512_mask_storeu_ps((void*)(Y + "
                          f"{_out(g, f'q + {i}', f'cb + {16 * j}')}), m{j}, h);",
                          "      }"]
                    continue
                L.append("      h = _mm512_div_ps(h, vos);")
                if not _residual_bounded(g):
                    L.append("      h = _mm512_min_ps(_mm512_max_ps(h, vfl), vfh);")
                L += ["      r = _mm512_add_epi32(_mm512_cvtps_epi32(h), voz);",
                      "      r = _mm512_min_epi32(_mm512_max_epi32(r, volo), vohi);"]
            elif g["skip"]:
                L += [f"      const __m512i sv = {cvt}(_mm_maskz_loadu_epi8(m{j}, (const void*)"
                      f"(S + {_out(g, f'q + {i}', f'cb + {16 * j}')})));",
                      "      __m512 h = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(r), vcz), vcs);",
                      "      const __m512 hs = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(sv), "
                      "vsz), vss);",
                      "      h = _mm512_div_ps(_mm512_add_ps(h, hs), vos);",
                      "      h = _mm512_min_ps(_mm512_max_ps(h, vfl), vfh);",
                      "      r = _mm512_add_epi32(_mm512_cvtps_epi32(h), voz);",
                      "      r = _mm512_min_epi32(_mm512_max_epi32(r, volo), vohi);"]
            L.append(f"      _mm_mask_storeu_epi8((void*)(Y + {_out(g, f'q + {i}', f'cb + {16 * j}')}),"
                     f" m{j}, _mm512_cvtepi32_epi8(r));")
            L.append("      }")
    L.append("    }")
    return L


def _vnni_consts(g: dict) -> list[str]:
    L = [f"  const __m512 vfl = _mm512_set1_ps(-{FMAX}f), vfh = _mm512_set1_ps({FMAX}f);",
         f"  const __m512i vzp = _mm512_set1_epi32({g['y_zp']}), vlo = _mm512_set1_epi32({g['lo']}),"
         f" vhi = _mm512_set1_epi32({g['hi']});",
         f"  const __m512i vmq = _mm512_set1_epi32({int(g['rq_mult'])});",
         f"  const __m512 vflz = _mm512_set1_ps({_f(g['lo'] - g['y_zp'])}), vfhz = "
         f"_mm512_set1_ps({_f(g['hi'] - g['y_zp'])});",
         "  (void)vmq; (void)vfl; (void)vfh; (void)vflz; (void)vfhz; (void)vlo; (void)vhi;"]
    if g["skip"]:
        L += [f"  const __m512 vcz = _mm512_set1_ps({_f(g['y_zp'])}), vcs = _mm512_set1_ps("
              f"{_f(g['c_scale'])}), vsz = _mm512_set1_ps({_f(g['s_zp'])}), vss = _mm512_set1_ps("
              f"{_f(g['s_scale'])}), vos = _mm512_set1_ps({_f(g['o_scale'])});",
              f"  const __m512i voz = _mm512_set1_epi32({g['o_zp']}), volo = _mm512_set1_epi32("
              f"{g['o_lo']}), vohi = _mm512_set1_epi32({g['o_hi']});",
              "  (void)vcz;"]
    return L


def _vnni_blocks(name: str, in_dtype: str, skip_dtype: str, g: dict) -> list[str]:
    """One function per register block shape (``mr x nv`` and the tails): each is register-
    allocated on its own (in one function with the tails, GCC spilled the accumulators)."""
    sk = CT.get(skip_dtype, "void")
    L = []
    for v in range(g["nv"], 0, -1):
        for mr in sorted({g["mr"], 1}, reverse=True):
            L += [f"static {ATTR} void {name}_b{mr}x{v}({CT[g['out_dtype']]}* restrict Y, "
                  "const uint8_t* const* arow, const int8_t* restrict W, "
                  "const int32_t* restrict bias, const float* restrict mult, "
                  f"const {sk}* restrict S, int64_t b, int64_t p0, int64_t q, int64_t cb) {{",
                  "  (void)S;"]
            L += _vnni_block(g, mr, v, skip_dtype == "int8")
            L += ["}"]
    return L


def _vnni_body(name: str, g: dict) -> list[str]:
    mr, nv = g["mr"], g["nv"]
    args = "(Y, arow, W, bias, mult, S, b, p0, q, cb)"
    L = ["  for (int64_t cb = c0; cb < c1; ) {",
         f"    const int64_t nvb = (c1 - cb) / 16 < {nv} ? (c1 - cb) / 16 : {nv};",
         "    switch (nvb) {"]
    for v in range(nv, 0, -1):
        L += [f"    case {v}: {{",
              "      int64_t q = 0;",
              f"      for (; q + {mr} <= np_; q += {mr}) {name}_b{mr}x{v}{args};"]
        if mr > 1:
            L += [f"      for (; q < np_; ++q) {name}_b1x{v}{args};"]
        L += ["      break; }"]
    L += ["    default: break;", "    }", "    cb += nvb * 16;", "  }"]
    return L


def _gen(isa: str, in_dtype: str, skip_dtype: str):
    def gen(name: str, *key_tail) -> str:
        g = dict(zip(FIELDS, key_tail))
        L = ["typedef int32_t __attribute__((aligned(1), may_alias)) qg_i32u;"]
        if isa == "avx512vnni":
            L += _vnni_blocks(name, in_dtype, skip_dtype, g)
        L += _head(name, in_dtype, skip_dtype, g)
        L += {"avx512vnni": lambda: _vnni_body(name, g), "avx2": lambda: _avx2_body(g),
              "scalar": lambda: _scalar_body(g)}[isa]()
        L += ["}"]
        inc = "#include <immintrin.h>\n" if isa != "scalar" else ""
        return inc + "#include <math.h>\n#include <stdint.h>\n" + "\n".join(L) + "\n"
    return gen


SKIP_DTYPES = ("none", "uint8", "int8")
for _isa in ("avx512vnni", "avx2", "scalar"):
    for _dt in ("uint8", "int8"):
        for _sk in SKIP_DTYPES:
            register_microkernel("qgemm", _isa, f"{_dt}:{_sk}")(_gen(_isa, _dt, _sk))
