"""The ``dwconv`` micro-kernel family: one register block of a depthwise 2-D convolution in NHWC.

A kernel computes ``wr`` consecutive output pixels of one output row times ``nr`` channels,
summing all ``kh x kw`` taps with the accumulators (``wr x ceil(nr / lanes)`` vectors) in SIMD
registers:

    C[i*ldc + j] (+)= sum over (r, s) of X[ih(r)*sxh + iw(i, s)*sxw + j] * Wt[r*swh + s*sww + j]
    ih(r) = ih0 + r*dh,  iw(i, s) = iw0 + i*sw + s*dw

for ``i < wr``, ``j < nr``. ``X`` points at the input image's pixel (0, 0) of the block's first
channel; ``ih0``/``iw0`` (run-time arguments) are the input coordinates of tap (0, 0) of output
pixel 0 and may lie in the padding. With ``guarded`` set, taps outside ``[0, H) x [0, W)`` read
zero (the convolution's zero padding, with no padded copy of the input): a block whose taps all
lie inside the image runs the fully unrolled fast path; border blocks take a path that checks
each row and pixel. Every shape constant (tap counts, strides, dilations, the image's extent
and element strides, the weight strides) is compiled in, so addresses are immediate offsets and
loads shared by neighbouring taps (stride 1) are loaded once.

Key: ``("dwconv", isa, dtype, wr, nr, kh, kw, sw, dh, dw, H, W, sxh, sxw, swh, sww, ldc,
guarded[, epi])``; C signature ``void name(float* C, const float* X, const float* Wt, int64_t
ih0, int64_t iw0, int32_t accumulate)``, with ``epi`` (a register epilogue, see
``microkernel.EPI_PARAMS``) three more arguments ``bias, R, ldr``.
"""

from __future__ import annotations

from .microkernel import EPI_PARAMS, SIMD_ISAS, epilogue_lines, register_microkernel, \
    scalar_epilogue

_FIELDS = ("wr", "nr", "kh", "kw", "sw", "dh", "dw", "H", "W", "sxh", "sxw", "swh", "sww",
           "ldc", "guarded")


def dwconv_params(key: tuple) -> dict:
    """The named parameters of a whole ``dwconv`` micro-kernel key (see the module doc),
    ``epi`` included (``_params``)."""
    return _params(key[3:])


def _signature(name: str, epi=None) -> str:
    return (f"static __attribute__((noinline)) void {name}(float* restrict C, "
            f"const float* restrict X, const float* restrict Wt, int64_t ih0, int64_t iw0, "
            f"int32_t accumulate{EPI_PARAMS if epi else ''})")


def _params(key: tuple) -> dict:
    """Named parameters of a key's shape part (``key[3:]``), ``epi`` (the optional register
    epilogue, ``microkernel.EPI_PARAMS``) ``None`` when absent."""
    p = dict(zip(_FIELDS, key))
    p["epi"] = key[len(_FIELDS)] if len(key) > len(_FIELDS) else None
    return p


def _simd(name, p, lanes, vt, load, loadm, store, storem, zero, fma, mask_decl,
          set1, add, vmax, vmin):
    wr, nr, kh, kw = p["wr"], p["nr"], p["kh"], p["kw"]
    sw, dh, dw, H, W = p["sw"], p["dh"], p["dw"], p["H"], p["W"]
    sxh, sxw, swh, sww, ldc = p["sxh"], p["sxw"], p["swh"], p["sww"], p["ldc"]
    nv = -(-nr // lanes)
    tail = nr % lanes

    def ld(ptr, j):
        return loadm(ptr) if (tail and j == nv - 1) else load(ptr)

    acc = [[f"c{i}_{j}" for j in range(nv)] for i in range(wr)]
    L = [_signature(name, p["epi"]) + " {"]
    if tail:
        L.append(mask_decl(tail))
    L.append(f"  {vt} " + ", ".join(x for row in acc for x in row) + ";")
    L.append("  if (accumulate) {")
    for i in range(wr):
        for j in range(nv):
            L.append(f"    {acc[i][j]} = {ld(f'C + {i * ldc + j * lanes}', j)};")
    L.append("  } else {")
    for i in range(wr):
        for j in range(nv):
            L.append(f"    {acc[i][j]} = {zero};")
    L.append("  }")
    last_h = (kh - 1) * dh
    last_w = (wr - 1) * sw + (kw - 1) * dw
    if p["guarded"]:
        L.append(f"  if (ih0 >= 0 && ih0 + {last_h} < {H} && iw0 >= 0 && iw0 + {last_w} < {W}) {{")
    else:
        L.append("  {")
    # fast path: every tap inside the image, fully unrolled
    L.append(f"    const float* x0 = X + ih0 * {sxh}LL + iw0 * {sxw}LL;")
    for r in range(kh):
        for s in range(kw):
            wv = [f"w{r}_{s}_{j}" for j in range(nv)]
            for j in range(nv):
                L.append(f"    const {vt} {wv[j]} = {ld(f'Wt + {r * swh + s * sww + j * lanes}', j)};")
            for i in range(wr):
                off = r * dh * sxh + (i * sw + s * dw) * sxw
                for j in range(nv):
                    L.append(f"    {acc[i][j]} = {fma(ld(f'x0 + {off + j * lanes}', j), wv[j], acc[i][j])};")
    if p["guarded"]:
        # border blocks: skip taps in the padding (rows, then pixels)
        L.append("  } else {")
        L.append(f"    for (int64_t r = 0; r < {kh}; ++r) {{")
        L.append(f"      const int64_t ih = ih0 + r * {dh};")
        L.append(f"      if (ih < 0 || ih >= {H}) continue;")
        L.append(f"      const float* xr = X + ih * {sxh}LL;")
        L.append(f"      for (int64_t s = 0; s < {kw}; ++s) {{")
        L.append(f"        const float* wp = Wt + r * {swh}LL + s * {sww}LL;")
        for j in range(nv):
            L.append(f"        const {vt} w{j} = {ld(f'wp + {j * lanes}', j)};")
        L.append(f"        const int64_t iwb = iw0 + s * {dw};")
        for i in range(wr):
            L.append(f"        if (iwb + {i * sw} >= 0 && iwb + {i * sw} < {W}) {{")
            L.append(f"          const float* xp = xr + (iwb + {i * sw}) * {sxw}LL;")
            for j in range(nv):
                L.append(f"          {acc[i][j]} = {fma(ld(f'xp + {j * lanes}', j), f'w{j}', acc[i][j])};")
            L.append("        }")
        L.append("      }")
        L.append("    }")
    L.append("  }")
    L += epilogue_lines(p["epi"], acc, nv, lanes, vt, load, loadm, tail, add=add, vmax=vmax,
                        vmin=vmin, set1=set1)
    for i in range(wr):
        for j in range(nv):
            ptr = f"C + {i * ldc + j * lanes}"
            L.append(f"  {storem(ptr, acc[i][j]) if (tail and j == nv - 1) else store(ptr, acc[i][j])};")
    L.append("}")
    return "#include <immintrin.h>\n" + "\n".join(L) + "\n"


@register_microkernel("dwconv", "avx512", "float32")
def _dwconv_avx512(name: str, *key) -> str:
    return _simd(name, _params(key), **SIMD_ISAS["avx512"])


@register_microkernel("dwconv", "avx2", "float32")
def _dwconv_avx2(name: str, *key) -> str:
    return _simd(name, _params(key), **SIMD_ISAS["avx2"])


@register_microkernel("dwconv", "scalar", "float32")
def _dwconv_scalar(name: str, *key) -> str:
    p = _params(key)
    wr, nr, kh, kw = p["wr"], p["nr"], p["kh"], p["kw"]
    guard = (f"if (ih < 0 || ih >= {p['H']} || iw < 0 || iw >= {p['W']}) continue;"
             if p["guarded"] else "")
    L = [_signature(name, p["epi"]) + " {",
         f"  float c[{wr}][{nr}];",
         f"  for (int i = 0; i < {wr}; ++i) for (int j = 0; j < {nr}; ++j) "
         f"c[i][j] = accumulate ? C[i * {p['ldc']} + j] : 0.0f;",
         f"  for (int64_t r = 0; r < {kh}; ++r) for (int64_t s = 0; s < {kw}; ++s) "
         f"for (int i = 0; i < {wr}; ++i) {{",
         f"    const int64_t ih = ih0 + r * {p['dh']}, iw = iw0 + i * {p['sw']} + s * {p['dw']};",
         f"    {guard}",
         f"    const float* xp = X + ih * {p['sxh']}LL + iw * {p['sxw']}LL;",
         f"    const float* wp = Wt + r * {p['swh']}LL + s * {p['sww']}LL;",
         f"    for (int j = 0; j < {nr}; ++j) c[i][j] += xp[j] * wp[j];",
         "  }",
         *scalar_epilogue(p["epi"], wr, nr),
         f"  for (int i = 0; i < {wr}; ++i) for (int j = 0; j < {nr}; ++j) "
         f"C[i * {p['ldc']} + j] = c[i][j];",
         "}"]
    return "\n".join(L) + "\n"
