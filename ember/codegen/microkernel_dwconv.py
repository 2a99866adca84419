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

The ``gconv`` family (below) is the same block for a grouped convolution with ``cg`` channels
per group: ``cg`` accumulator sets per pixel over rotated weights.

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


def _interior_open(p: dict) -> list[str]:
    """The C lines that open a block's fast path: every tap of every pixel inside the image
    (checked at run time when ``p["guarded"]``), with ``x0`` the input at tap (0, 0) of the
    block's first pixel."""
    last_h = (p["kh"] - 1) * p["dh"]
    last_w = (p["wr"] - 1) * p["sw"] + (p["kw"] - 1) * p["dw"]
    head = (f"  if (ih0 >= 0 && ih0 + {last_h} < {p['H']} && iw0 >= 0 && iw0 + {last_w} < "
            f"{p['W']}) {{" if p["guarded"] else "  {")
    return [head, f"    const float* x0 = X + ih0 * {p['sxh']}LL + iw0 * {p['sxw']}LL;"]


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
    # fast path: every tap inside the image, fully unrolled
    L += _interior_open(p)
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


# ---------------------------------------------------------------------------------------------
# ``gconv``: a grouped convolution with ``cg`` input = output channels per group (``cg`` divides
# the vector width; depthwise is ``cg = 1``). Lane ``c`` of a block is channel ``c`` of the image;
# the weights are packed *rotated*, ``Wt[r, s, t, c] = W[o, k, r, s]`` (element strides ``swh``,
# ``sww``, ``swt``, 1; the rule packs one panel per channel tile) with ``k = c % cg`` (the
# input channel lane ``c`` holds) and ``o = (c // cg) * cg + (k - t) mod cg``: accumulator set
# ``t`` of a pixel sums ``X[.., c] * Wt[r, s, t, c]``, lane ``c`` holding a partial sum of output
# channel ``(c // cg) * cg + (c % cg - t) mod cg``. The inner loop is plain lane-wise FMAs (no
# shuffles, one input vector load feeds ``cg`` FMAs); after the taps each set ``t > 0`` is
# rotated back within the groups (one in-register permute per set) and summed.

_GFIELDS = ("cg",) + _FIELDS[:13] + ("swt",) + _FIELDS[13:]


def gconv_params(key: tuple) -> dict:
    """The named parameters of a whole ``gconv`` micro-kernel key: ``cg, wr, nr, kh, kw, sw,
    dh, dw, H, W, sxh, sxw, swh, sww, swt, ldc, guarded[, epi]`` (``swt``: the weights' stride
    between rotations ``t``)."""
    p = dict(zip(_GFIELDS, key[3:]))
    p["epi"] = key[3 + len(_GFIELDS)] if len(key) > 3 + len(_GFIELDS) else None
    return p


def _rotate_src(j: int, cg: int, t: int) -> int:
    """The lane whose rotation-``t`` partial sum belongs to output lane ``j``."""
    return (j // cg) * cg + (j % cg + t) % cg


def _permute(isa: str, lanes: int, cg: int, t: int):
    """``f(v) -> C expression``: ``v`` with lane ``j`` taken from ``_rotate_src(j, cg, t)``."""
    if 4 % cg == 0:  # groups inside 128-bit lanes: an in-lane shuffle with an immediate
        imm = sum(_rotate_src(i, cg, t) << (2 * i) for i in range(4))
        fn = "_mm512_permute_ps" if isa == "avx512" else "_mm256_permute_ps"
        return lambda v: f"{fn}({v}, {imm})"
    idx = ", ".join(str(_rotate_src(j, cg, t)) for j in range(lanes))
    if isa == "avx512":
        return lambda v: f"_mm512_permutexvar_ps(_mm512_setr_epi32({idx}), {v})"
    return lambda v: f"_mm256_permutevar8x32_ps({v}, _mm256_setr_epi32({idx}))"


def _simd_grouped(name, p, isa, lanes, vt, load, loadm, store, storem, zero, fma, mask_decl,
                  set1, add, vmax, vmin):
    cg, wr, nr, kh, kw = p["cg"], p["wr"], p["nr"], p["kh"], p["kw"]
    sw, dh, dw, H, W = p["sw"], p["dh"], p["dw"], p["H"], p["W"]
    sxh, sxw, swh, sww, swt, ldc = p["sxh"], p["sxw"], p["swh"], p["sww"], p["swt"], p["ldc"]
    nv = -(-nr // lanes)
    tail = nr % lanes

    def ld(ptr, j):
        return loadm(ptr) if (tail and j == nv - 1) else load(ptr)

    acc = [[[f"c{i}_{t}_{j}" for j in range(nv)] for t in range(cg)] for i in range(wr)]
    L = [_signature(name, p["epi"]) + " {"]
    if tail:
        L.append(mask_decl(tail))
    L.append(f"  {vt} " + ", ".join(a for row in acc for ts in row for a in ts) + ";")
    for i in range(wr):
        for t in range(cg):
            for j in range(nv):
                init = f"accumulate ? {ld(f'C + {i * ldc + j * lanes}', j)} : {zero}" if t == 0 \
                    else zero
                L.append(f"  {acc[i][t][j]} = {init};")

    def tap(indent, xptr, wptr, pixels):
        out = []
        for t in range(cg):
            for j in range(nv):
                out.append(f"{indent}const {vt} w{t}_{j} = {ld(f'{wptr} + {t * swt + j * lanes}', j)};")
        for i, off in pixels:
            out.append(f"{indent}{{")
            for j in range(nv):
                out.append(f"{indent}  const {vt} xv{j} = {ld(xptr(i, off + j * lanes), j)};")
                for t in range(cg):
                    out.append(f"{indent}  {acc[i][t][j]} = {fma(f'xv{j}', f'w{t}_{j}', acc[i][t][j])};")
            out.append(f"{indent}}}")
        return out

    L += _interior_open(p)
    for r in range(kh):
        for s in range(kw):
            L.append("    {")
            L += tap("      ", lambda i, o: f"x0 + {o}", f"Wt + {r * swh + s * sww}",
                     [(i, r * dh * sxh + (i * sw + s * dw) * sxw) for i in range(wr)])
            L.append("    }")
    if p["guarded"]:
        # border blocks: the same unrolled taps, each tap row and pixel behind its bounds check
        # (a loop over the taps, as the dwconv kernel's, spilled the cg x nv weights)
        L.append("  } else {")
        # (integer offsets: no pointer is formed outside the image)
        L.append(f"    const int64_t xo = ih0 * {sxh}LL + iw0 * {sxw}LL;")
        nw = cg * nv
        for r in range(kh):
            L.append(f"    if (ih0 + {r * dh} >= 0 && ih0 + {r * dh} < {H}) {{")
            for s in range(kw):
                body = tap("      ", lambda i, o: f"X + (xo + {o})", f"Wt + {r * swh + s * sww}",
                           [(i, r * dh * sxh + (i * sw + s * dw) * sxw) for i in range(wr)])
                per = (len(body) - nw) // wr
                L.append("     {")
                L += body[:nw]
                for i in range(wr):
                    c = i * sw + s * dw
                    L.append(f"      if (iw0 + {c} >= 0 && iw0 + {c} < {W})")
                    L += body[nw + i * per: nw + (i + 1) * per]
                L.append("     }")
            L.append("    }")
    L.append("  }")
    out = [[f"c{i}_0_{j}" for j in range(nv)] for i in range(wr)]
    for t in range(1, cg):
        perm = _permute(isa, lanes, cg, t)
        for i in range(wr):
            for j in range(nv):
                L.append(f"  {out[i][j]} = {add(out[i][j], perm(acc[i][t][j]))};")
    L += epilogue_lines(p["epi"], out, nv, lanes, vt, load, loadm, tail, add=add, vmax=vmax,
                        vmin=vmin, set1=set1)
    for i in range(wr):
        for j in range(nv):
            ptr = f"C + {i * ldc + j * lanes}"
            L.append(f"  {storem(ptr, out[i][j]) if (tail and j == nv - 1) else store(ptr, out[i][j])};")
    L.append("}")
    return "#include <immintrin.h>\n" + "\n".join(L) + "\n"


@register_microkernel("gconv", "avx512", "float32")
def _gconv_avx512(name: str, *key) -> str:
    return _simd_grouped(name, gconv_params((None,) * 3 + key), "avx512", **SIMD_ISAS["avx512"])


@register_microkernel("gconv", "avx2", "float32")
def _gconv_avx2(name: str, *key) -> str:
    return _simd_grouped(name, gconv_params((None,) * 3 + key), "avx2", **SIMD_ISAS["avx2"])


def _scalar_taps(name: str, p: dict, inner: list[str]) -> str:
    """The portable C frame shared by the scalar ``dwconv`` and ``gconv`` micro-kernels: a
    ``wr x nr`` accumulator block, the kernel taps (skipping padding when ``p["guarded"]``),
    ``inner`` as the accumulation of one tap at pixel ``i`` (``xp``/``wp`` point at its input
    and weights), then the epilogue and the store."""
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
         *inner,
         "  }",
         *scalar_epilogue(p["epi"], wr, nr),
         f"  for (int i = 0; i < {wr}; ++i) for (int j = 0; j < {nr}; ++j) "
         f"C[i * {p['ldc']} + j] = c[i][j];",
         "}"]
    return "\n".join(L) + "\n"


@register_microkernel("gconv", "scalar", "float32")
def _gconv_scalar(name: str, *key) -> str:
    p = gconv_params((None,) * 3 + key)
    cg, nr = p["cg"], p["nr"]
    return _scalar_taps(name, p, [
        f"    for (int j = 0; j < {nr}; ++j) for (int k = 0; k < {cg}; ++k) {{",
        f"      const int l = (j / {cg}) * {cg} + k;  /* the input lane of channel k */",
        f"      c[i][j] += xp[l] * wp[((k - j % {cg} + {cg}) % {cg}) * {p['swt']}LL + l];",
        "    }"])


@register_microkernel("dwconv", "avx512", "float32")
def _dwconv_avx512(name: str, *key) -> str:
    return _simd(name, _params(key), **SIMD_ISAS["avx512"])


@register_microkernel("dwconv", "avx2", "float32")
def _dwconv_avx2(name: str, *key) -> str:
    return _simd(name, _params(key), **SIMD_ISAS["avx2"])


@register_microkernel("dwconv", "scalar", "float32")
def _dwconv_scalar(name: str, *key) -> str:
    p = _params(key)
    return _scalar_taps(name, p, [
        f"    for (int j = 0; j < {p['nr']}; ++j) c[i][j] += xp[j] * wp[j];"])
