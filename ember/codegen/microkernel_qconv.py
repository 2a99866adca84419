"""The ``qconv`` micro-kernel family: one task of an int8 convolution / dense layer
(``qnn.conv2d``, ``ember.ops.qnn_conv``), u8 x s8 -> s32 with the requantization in the
epilogue.

The layer is the GEMM ``acc[co, p] = sum_k Xcol[k, p] * W[co, k]`` over output pixels ``p``
(``P = OH * OW`` per image; for a dense layer the rows of ``x``) and the reduction ``k = (kh, kw, c)``
(tap-major, channels padded to ``C4``, a multiple of 4), followed by

    y[co, p] = clamp(round_half_even(float32(acc + bias[co]) * mult[co]) + y_zp, lo, hi)

``bias`` (int32) already holds the zero-point correction ``-x_zp * sum_k W[co, k]`` (folded at
compile time), ``mult = x_scale * w_scale[co] / y_scale`` (float32), ``[lo, hi]`` is the output
dtype's range narrowed by a fused ReLU. Activations are unsigned bytes inside the kernel: an
int8 input is shifted by 128 (``x ^ 0x80``) as it is packed, and its zero point with it.

One task (the ``task`` argument, run by the caller's parallel loop) is one image, one tile of
``PT`` output pixels and one chunk of ``CC`` output channels. It first packs the pixel tile's
``im2col`` panel on the stack in the layout ``vpdpbusd`` reads, ``Xp[p / S][k / 4][p % S][k % 4]``
with ``S = 16 * NV`` the register block's pixels (four
consecutive channels of one tap of a pixel form one 32-bit lane, gathered from four input rows
a pixel run at a time; taps in the padding read the zero point, the padded channels carry
weight 0), then runs register blocks of ``MR`` channels
x ``16 * NV`` pixels: per reduction group of 4, ``NV`` vector loads of the panel, ``MR``
broadcasts of 4 weight bytes (``W`` is ``(Cout, KH * KW * C4)``, zero-padded:
the weights are packed once at compile time) and ``MR * NV`` ``vpdpbusd``. Accumulation is
int32 and exact for ``K < 65793`` (255 * 128 * K < 2**31).

With ``requant="fixed"`` the epilogue is the integer one (``ember.ops.qnn_conv``):
``p = (int32)((uint32)(acc + bias) * (uint32)M)`` (wrap-around, as the NPU's ALU),
``v = ((p >> (s - 1)) + 1) >> 1`` (arithmetic shifts; ``v = p`` for ``s = 0``), ``+ y_zp``, clamp;
the VNNI path computes it with ``vpmulld`` and ``vpsrad``, bit-identical.

ISAs: ``avx512vnni`` (AVX-512 F/BW/VL + VNNI) and ``scalar`` (portable C, bit-identical: the
same int32 sums, the same float32 multiply and round-to-nearest-even). Output layouts: ``nchw``
(``Y[b, co, p]``, a convolution) or ``rows`` (``Y[p, co]``, a dense layer).

Key: ``("qconv", isa, in_dtype, *geometry)`` with ``geometry`` the fields of ``QConvGeometry``
(``ember.ops.qnn_conv``); C signature ``void name(OUT_T* Y, const IN_T* X, const int8_t* W,
const int32_t* bias, const float* mult, int64_t task)``.
"""

from __future__ import annotations

from .microkernel import register_microkernel

FIELDS = ("layout", "c", "h", "w", "cout", "kh", "kw", "sh", "sw", "pt", "pl", "dh", "dw",
          "oh", "ow", "kp", "x_zp", "y_zp", "lo", "hi", "out_dtype", "pt_pixels", "cc", "mr",
          "nv", "requant", "rq_mult", "rq_shift")
FMAX = 1e9  # float clamp before the float -> int32 conversion (both paths)
CT = {"uint8": "uint8_t", "int8": "int8_t", "float32": "float"}


def _step(g: dict) -> int:
    """Pixels per register block (16 lanes x ``nv`` vectors); the panel is stored in blocks of
    this many pixels, so one block's reduction is one contiguous stream."""
    return 16 * g["nv"]


def _params(key_tail: tuple) -> dict:
    return dict(zip(FIELDS, key_tail))


def _head(name: str, in_dtype: str, g: dict) -> list[str]:
    p = g["oh"] * g["ow"]
    n_pt = -(-p // g["pt_pixels"])
    n_ct = -(-g["cout"] // g["cc"])
    xor = " ^ 0x80" if in_dtype == "int8" else ""
    x_zp_u = g["x_zp"] + (128 if in_dtype == "int8" else 0)
    PT = g["pt_pixels"]
    L = [f"static __attribute__((noinline)) void {name}({CT[g['out_dtype']]}* restrict Y, "
         f"const {CT[in_dtype]}* restrict X, const int8_t* restrict W, "
         f"const int32_t* restrict bias, const float* restrict mult, int64_t task) {{",
         f"  const int64_t b = task / {n_pt * n_ct}, rem = task % {n_pt * n_ct};",
         f"  const int64_t p0 = (rem / {n_ct}) * {PT}, c0 = (rem % {n_ct}) * {g['cc']};",
         f"  const int64_t np_ = {p} - p0 < {PT} ? {p} - p0 : {PT};",
         f"  const int64_t c1 = c0 + {g['cc']} < {g['cout']} ? c0 + {g['cc']} : {g['cout']};",
         f"  uint32_t xp32[{g['kp'] // 4 * PT}] __attribute__((aligned(64)));",
         f"  const uint8_t* xq = (const uint8_t*)X;",
         # lane (k4, q) of the panel: blocks of STEP pixels, each K4 x STEP contiguous
         f"#define XP(k4, q) xp32[((q) / {_step(g)}) * {g['kp'] // 4 * _step(g)} + (k4) * "
         f"{_step(g)} + ((q) % {_step(g)})]"]
    # the im2col panel: Xp[k/4][p][k%4], k = (kh * KW + kw) * C4 + c: one 32-bit lane holds
    # four channels of one tap of one pixel
    c4 = -(-g["c"] // 4) * 4
    if g["layout"] == "rows":
        L += [f"  for (int64_t q = 0; q < {PT}; ++q) {{",
              f"    const uint8_t* row = xq + (b * {p} + p0 + q) * {g['c']};",
              f"    for (int64_t k4 = 0; k4 < {c4 // 4}; ++k4) {{",
              "      uint32_t v = 0;",
              "      if (q < np_) for (int t = 0; t < 4; ++t) {",
              "        const int64_t kk = k4 * 4 + t;",
              f"        if (kk < {g['c']}) v |= (uint32_t)(uint8_t)(row[kk]{xor}) << (8 * t);",
              "      }",
              "      XP(k4, q) = v;",
              "    }",
              "  }"]
    else:
        img, hw = g["c"] * g["h"] * g["w"], g["h"] * g["w"]
        x4 = " ^ 0x80808080u" if in_dtype == "int8" else ""
        L += [f"  const uint32_t zp4 = {x_zp_u}u * 0x01010101u;",
              f"  for (int64_t r = 0; r < {g['kh']}; ++r) for (int64_t s = 0; s < {g['kw']}; ++s)",
              f"  for (int64_t cq = 0; cq < {c4 // 4}; ++cq) {{",
              f"    const int64_t k4 = (r * {g['kw']} + s) * {c4 // 4} + cq;",
              f"    const uint8_t* xc = xq + b * {img};",
              "    const uint8_t* ch[4];",
              "    for (int t = 0; t < 4; ++t) {",
              f"      const int64_t c = cq * 4 + t < {g['c']} ? cq * 4 + t : cq * 4;",
              f"      ch[t] = xc + c * {hw};",
              "    }",
              "    int64_t q = 0, pp = p0;",
              "    while (q < np_) {",
              f"      const int64_t oh = pp / {g['ow']}, ow0 = pp % {g['ow']};",
              f"      const int64_t n = {g['ow']} - ow0 < np_ - q ? {g['ow']} - ow0 : np_ - q;",
              f"      const int64_t ih = oh * {g['sh']} - {g['pt']} + r * {g['dh']};",
              f"      if (ih < 0 || ih >= {g['h']}) {{ for (int64_t j = 0; j < n; ++j) XP(k4, q + j) = zp4; }}",
              "      else {",
              f"        const uint8_t *r0 = ch[0] + ih * {g['w']}, *r1 = ch[1] + ih * {g['w']}, "
              f"*r2 = ch[2] + ih * {g['w']}, *r3 = ch[3] + ih * {g['w']};",
              f"        const int64_t iw0 = ow0 * {g['sw']} - {g['pl']} + s * {g['dw']};",
              "        for (int64_t j = 0; j < n; ++j) {",
              f"          const int64_t iw = iw0 + j * {g['sw']};",
              f"          XP(k4, q + j) = (iw >= 0 && iw < {g['w']}) ? (((uint32_t)r0[iw] | "
              f"(uint32_t)r1[iw] << 8 | (uint32_t)r2[iw] << 16 | (uint32_t)r3[iw] << 24){x4}) : zp4;",
              "        }",
              "      }",
              "      q += n; pp += n;",
              "    }",
              f"    for (; q < {PT}; ++q) XP(k4, q) = 0;",
              "  }"]
    return L


def _out_index(g: dict, co: str, p: str) -> str:
    n_pix = g["oh"] * g["ow"]
    if g["layout"] == "rows":
        return f"(b * {n_pix} + {p}) * {g['cout']} + {co}"
    return f"(b * {g['cout']} + {co}) * {n_pix} + {p}"


def _scalar_body(g: dict) -> list[str]:
    K4, PT = g["kp"] // 4, g["pt_pixels"]
    return [
        "  for (int64_t co = c0; co < c1; ++co) {",
        f"    const int8_t* wr = W + co * {g['kp']};",
        "    for (int64_t q = 0; q < np_; ++q) {",
        "      int32_t acc = 0;",
        f"      for (int64_t k4 = 0; k4 < {K4}; ++k4)",
        "        for (int t = 0; t < 4; ++t) acc += (int32_t)(uint8_t)(XP(k4, q) >> (8 * t)) * "
        "(int32_t)wr[k4 * 4 + t];",
    ] + _scalar_requant(g) + [
        f"      v = v < {g['lo']} ? {g['lo']} : (v > {g['hi']} ? {g['hi']} : v);",
        f"      Y[{_out_index(g, 'co', 'p0 + q')}] = ({CT[g['out_dtype']]})v;",
        "    }",
        "  }",
        f"  (void){PT};",
    ]


def _scalar_requant(g: dict) -> list[str]:
    """``int32_t v``: the requantized value (before the clamp) of ``acc`` at channel ``co``."""
    if g.get("requant", "float") == "fixed":
        s = int(g["rq_shift"])
        L = ["      const int32_t p = (int32_t)(((uint32_t)acc + (uint32_t)bias[co]) * "
             f"(uint32_t)({int(g['rq_mult'])}));"]
        rnd = f"((p >> {s - 1}) + 1) >> 1" if s > 0 else "p"
        return L + [f"      int32_t v = ({rnd}) + {g['y_zp']};"]
    return ["      float f = (float)(acc + bias[co]) * mult[co];",
            f"      f = f < -{FMAX}f ? -{FMAX}f : (f > {FMAX}f ? {FMAX}f : f);",
            f"      int32_t v = (int32_t)nearbyintf(f) + {g['y_zp']};"]


def _vnni_requant(g: dict, a: str, j: int) -> list[str]:
    """``__m512i r{j}``: the requantized lanes (before the clamp) of accumulator ``a``."""
    if g.get("requant", "float") == "fixed":
        s = int(g["rq_shift"])
        L = [f"        __m512i r{j} = _mm512_mullo_epi32(_mm512_add_epi32({a}, bi), vmq);"]
        if s > 0:
            L += [f"        r{j} = _mm512_srai_epi32(_mm512_add_epi32(_mm512_srai_epi32(r{j}, "
                  f"{s - 1}), _mm512_set1_epi32(1)), 1);"]
        return L + [f"        r{j} = _mm512_add_epi32(r{j}, vzp);"]
    return [f"        __m512 f{j} = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32({a}, bi)), mu);",
            f"        f{j} = _mm512_min_ps(_mm512_max_ps(f{j}, vfl), vfh);",
            f"        __m512i r{j} = _mm512_add_epi32(_mm512_cvtps_epi32(f{j}), vzp);"]


def _vnni_block(g: dict, mr: int, nv: int) -> list[str]:
    """One ``mr x 16*nv`` register block at channel ``co``, pixel ``q0`` of the tile."""
    K4 = g["kp"] // 4
    L = ["    {"]
    acc = [[f"a{i}_{j}" for j in range(nv)] for i in range(mr)]
    L.append("      __m512i " + ", ".join(f"{a} = _mm512_setzero_si512()" for r in acc for a in r)
             + ";")
    L.append(f"      for (int64_t k4 = 0; k4 < {K4}; ++k4) {{")
    for j in range(nv):
        L.append(f"        const __m512i x{j} = _mm512_load_si512((const void*)&XP(k4, q0 + {16 * j}));")
    for i in range(mr):
        L.append(f"        {{ const __m512i w = _mm512_set1_epi32(*(const int32_t*)"
                 f"(W + (co + {i}) * {g['kp']} + k4 * 4));")
        for j in range(nv):
            L.append(f"          {acc[i][j]} = _mm512_dpbusd_epi32({acc[i][j]}, x{j}, w); }}"
                     if j == nv - 1 else
                     f"          {acc[i][j]} = _mm512_dpbusd_epi32({acc[i][j]}, x{j}, w);")
    L.append("      }")
    store_rows = g["layout"] == "rows"
    for i in range(mr):
        L.append(f"      {{ const __m512i bi = _mm512_set1_epi32(bias[co + {i}]); "
                 f"const __m512 mu = _mm512_set1_ps(mult[co + {i}]);")
        for j in range(nv):
            a = acc[i][j]
            L += _vnni_requant(g, a, j)
            L += [f"        r{j} = _mm512_min_epi32(_mm512_max_epi32(r{j}, vlo), vhi);",
                  f"        const int64_t qq{j} = q0 + {16 * j};",
                  f"        if (qq{j} < np_) {{"]
            if store_rows:
                L += [f"          int32_t tmp[16]; _mm512_storeu_si512((void*)tmp, r{j});",
                      f"          const int64_t nn = np_ - qq{j} < 16 ? np_ - qq{j} : 16;",
                      f"          for (int64_t t = 0; t < nn; ++t) "
                      f"Y[{_out_index(g, f'co + {i}', f'p0 + qq{j} + t')}] = "
                      f"({CT[g['out_dtype']]})tmp[t];"]
            else:
                L += [f"          const __mmask16 m = np_ - qq{j} >= 16 ? (__mmask16)0xFFFF : "
                      f"(__mmask16)((1u << (np_ - qq{j})) - 1);",
                      f"          _mm_mask_storeu_epi8((void*)(Y + "
                      f"{_out_index(g, f'co + {i}', f'p0 + qq{j}')}), m, "
                      f"_mm512_cvtepi32_epi8(r{j}));"]
            L.append("        }")
        L.append("      }")
    L.append("    }")
    return L


def _vnni_body(g: dict) -> list[str]:
    mr, nv = g["mr"], g["nv"]
    step = 16 * nv
    L = [f"  const __m512 vfl = _mm512_set1_ps(-{FMAX}f), vfh = _mm512_set1_ps({FMAX}f);",
         f"  const __m512i vzp = _mm512_set1_epi32({g['y_zp']}), vlo = _mm512_set1_epi32({g['lo']}),"
         f" vhi = _mm512_set1_epi32({g['hi']});",
         f"  const __m512i vmq = _mm512_set1_epi32({int(g.get('rq_mult', 0))});",
         "  (void)vmq; (void)vfl; (void)vfh;",
         "  int64_t co = c0;",
         f"  for (; co + {mr} <= c1; co += {mr})",
         f"    for (int64_t q0 = 0; q0 < np_; q0 += {step})"]
    L += _vnni_block(g, mr, nv)
    L += ["  for (; co < c1; ++co)", f"    for (int64_t q0 = 0; q0 < np_; q0 += {step})"]
    L += _vnni_block(g, 1, nv)
    return L


def _gen(isa: str, in_dtype: str):
    def gen(name: str, *key_tail) -> str:
        g = _params(key_tail)
        L = _head(name, in_dtype, g)
        L += _vnni_body(g) if isa == "avx512vnni" else _scalar_body(g)
        L += ["}", "#undef XP"]
        inc = "#include <immintrin.h>\n" if isa == "avx512vnni" else ""
        return inc + "#include <math.h>\n" + "\n".join(L) + "\n"
    return gen


for _isa in ("avx512vnni", "scalar"):
    for _dt in ("uint8", "int8"):
        register_microkernel("qconv", _isa, _dt)(_gen(_isa, _dt))
