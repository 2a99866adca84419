"""Vector code for ``vectorized`` loops: float32 lanes as GCC vector types of the target's width.

A vectorized loop whose body is a sequence of float32 stores, each contiguous in the loop
variable, becomes a loop stepping by ``L`` lanes (16 for AVX-512, 8 for AVX2, 4 otherwise) over
``ember_f32xL`` values: contiguous loads are vector loads, loads that do not move with the loop
are broadcast, arithmetic, ``min``/``max`` (NaN-propagating), comparisons and ``select`` are
lane-wise (selects on a lane-varying condition as bit blends of load-free branches, so no
branch and no reliance on the C compiler's if-conversion; a loop-invariant condition picks one
side, keeping guarded loads guarded), ``exp``/``tanh``/``erf``/``sigmoid``/``sqrt``... call vector helpers. A
remainder of ``extent % L`` iterations runs as scalar code. 8-bit integers (QDQ kernels):
unit-stride uint8/int8 loads widened to float32 lanes, ``float32(int8(v))`` of a clamped
``v`` (requantize then dequantize) and stores of a clamped float32 value to a uint8/int8
buffer convert lane-wise, truncating as the scalar C casts do. Loops this cannot express (other
dtypes, strided stores, nested loops) are printed as scalar loops under ``#pragma omp simd``.
"""

from __future__ import annotations

from ..tir.arith import collect, linear_terms
from ..tir.expr import BinOp, Call, Cast, Const, Expr, Load, Select, Unary, Var
from ..tir.stmt import For, Seq, Store

_FLOATS = ("float32", "bfloat16")  # bfloat16 values: float32 lanes, rounded where the IR rounds
_ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_INT8 = {"uint8": "ember_u8x", "int8": "ember_s8x"}  # vector type prefixes (unaligned)


def _is_clamped(e: Expr, dtype: str) -> bool:
    """True when float32 ``e`` is ``min(max(v, lo), hi)`` (either order) with constant bounds
    inside ``dtype``'s range, so converting it to ``dtype`` cannot overflow."""
    lo_hi = {"uint8": (0, 255), "int8": (-128, 127)}[dtype]
    if not (isinstance(e, BinOp) and e.op in ("min", "max") and isinstance(e.b, Const)):
        return False
    inner = e.a
    if not (isinstance(inner, BinOp) and inner.op in ("min", "max") and inner.op != e.op
            and isinstance(inner.b, Const)):
        return False
    bounds = sorted((float(e.b.value), float(inner.b.value)))
    return lo_hi[0] <= bounds[0] and bounds[1] <= lo_hi[1]


_CALLS = {"exp", "tanh", "erf", "sigmoid", "sqrt", "log", "abs", "floor", "ceil", "round",
          "trunc"}


def bf16_vector_helpers(lanes: int) -> str:
    """Lane-wise bfloat16 <-> float32 helpers for ``lanes``-wide vectors (bf16 stored as
    ``uint16_t``): ``ember_vdec_bf16_L(p)`` loads and widens, ``ember_vst_bf16_L(p, x)`` rounds
    (nearest even; NaN stays NaN, quieted) and stores, ``ember_vrnd_bf16_L(x)`` rounds in
    registers; the same bits as the scalar ``ember_enc_bfloat16``/``ember_dec_bfloat16``."""
    L = lanes
    f, u, h = f"ember_bf16f_x{L}", f"ember_bf16u_x{L}", f"ember_bf16h_x{L}"
    return (
        f"typedef float {f} __attribute__((vector_size({4 * L})));\n"
        f"typedef uint32_t {u} __attribute__((vector_size({4 * L})));\n"
        f"typedef uint16_t {h} __attribute__((vector_size({2 * L})));\n"
        f"static inline {f} ember_vdec_bf16_{L}(const uint16_t* p) {{ {h} x; memcpy(&x, p, "
        f"{2 * L}); {u} w = __builtin_convertvector(x, {u}) << 16; {f} r; memcpy(&r, &w, "
        f"{4 * L}); return r; }}\n"
        f"static inline {u} ember_venc_bf16_{L}({f} x) {{ {u} w; memcpy(&w, &x, {4 * L}); "
        f"{u} r = (w + 0x7fffu + ((w >> 16) & 1u)) >> 16, q = (w >> 16) | 0x40u; "
        f"{u} nan = ({u})((w & 0x7fffffffu) > 0x7f800000u); return (r & ~nan) | (q & nan); }}\n"
        + (_bf16_native_16() if L == 16 else "") +
        (f"#if !EMBER_NATIVE_BF16_{L}\n" if L == 16 else "") +
        f"static inline void ember_vst_bf16_{L}(uint16_t* p, {f} x) {{ "
        f"{h} y = __builtin_convertvector(ember_venc_bf16_{L}(x), {h}); memcpy(p, &y, {2 * L}); }}\n"
        f"static inline {f} ember_vrnd_bf16_{L}({f} x) {{ {u} w = ember_venc_bf16_{L}(x) << 16; "
        f"{f} r; memcpy(&r, &w, {4 * L}); return r; }}\n" + ("#endif\n" if L == 16 else ""))


def _bf16_native_16() -> str:
    """The 16-lane float32 -> bfloat16 rounding on ``vcvtneps2bf16`` (AVX512_BF16, where the
    C compiler targets it: ``EMBER_NATIVE_BF16_16``). The instruction rounds to nearest even
    and quiets NaNs (sets bit 6) exactly as ``ember_venc_bf16_16`` does, but reads a denormal
    input as zero (its result is the signed zero, where the reference rounds the denormal:
    ``0x007fffff`` -> ``0x0080``); the lanes with a zero exponent and a non-zero mantissa are
    redone with the integer rounding, on a branch that normal data never takes. Same bits as
    the reference over all 2^32 inputs (checked once; tests/test_bf16.py checks the edge
    classes and a strided subset)."""
    return (
        "#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)\n"
        "#include <immintrin.h>\n"
        "#define EMBER_NATIVE_BF16_16 1\n"
        "static inline __m256i ember_vcvt_bf16_16(ember_bf16f_x16 x) {\n"
        "  __m512i w = (__m512i)x;\n"
        "  __m256i r = (__m256i)_mm512_cvtneps_pbh((__m512)x);\n"
        "  __mmask16 den = _mm512_testn_epi32_mask(w, _mm512_set1_epi32(0x7f800000)) &\n"
        "                  _mm512_test_epi32_mask(w, _mm512_set1_epi32(0x007fffff));\n"
        "  if (__builtin_expect(den != 0, 0)) {  /* denormal inputs: the integer rounding */\n"
        "    __m512i one = _mm512_set1_epi32(1);\n"
        "    __m512i q = _mm512_add_epi32(_mm512_add_epi32(w, _mm512_set1_epi32(0x7fff)),\n"
        "                                 _mm512_and_si512(_mm512_srli_epi32(w, 16), one));\n"
        "    r = _mm256_mask_mov_epi16(r, den, _mm512_cvtepi32_epi16(_mm512_srli_epi32(q, 16)));\n"
        "  }\n"
        "  return r; }\n"
        "static inline void ember_vst_bf16_16(uint16_t* p, ember_bf16f_x16 x) {\n"
        "  _mm256_storeu_si256((__m256i*)p, ember_vcvt_bf16_16(x)); }\n"
        "static inline ember_bf16f_x16 ember_vrnd_bf16_16(ember_bf16f_x16 x) {\n"
        "  return (ember_bf16f_x16)_mm512_slli_epi32(_mm512_cvtepu16_epi32(ember_vcvt_bf16_16(x)),"
        " 16); }\n"
        "#else\n#define EMBER_NATIVE_BF16_16 0\n#endif\n")


def vector_types(lanes: int) -> str:
    """Type definitions and helpers for ``lanes``-wide float32 vectors."""
    L = lanes
    f, fu, i = f"ember_f32x{L}", f"ember_f32x{L}u", f"ember_i32x{L}"
    fns = []
    for name in sorted(_CALLS - set(_POLY)):
        c = {"abs": "fabsf", "round": "nearbyintf"}.get(name, f"{name}f")
        fns.append(f"static inline {f} ember_v{name}_{L}({f} x) {{ {f} r; "
                   f"for (int k = 0; k < {L}; ++k) r[k] = {c}(x[k]); return r; }}")
    for name in ("exp", "erf", "tanh", "sigmoid"):
        fns.append(_POLY[name].replace("FV", f).replace("IV", i).replace("_L(", f"_{L}(")
                   .replace("_L ", f"_{L} "))
    return (
        f"typedef float {f} __attribute__((vector_size({4 * L})));\n"
        f"typedef float {fu} __attribute__((vector_size({4 * L}), aligned(4)));\n"
        f"typedef int32_t {i} __attribute__((vector_size({4 * L})));\n"
        f"typedef uint8_t ember_u8x{L}u __attribute__((vector_size({L}), aligned(1)));\n"
        f"typedef int8_t ember_s8x{L}u __attribute__((vector_size({L}), aligned(1)));\n"
        f"static inline {f} ember_vsel_{L}({i} m, {f} a, {f} b) {{ return ({f})((m & ({i})a) | "
        f"(~m & ({i})b)); }}\n"
        f"static inline {f} ember_vmax_{L}({f} a, {f} b) {{ return ember_vsel_{L}((a > b) | "
        f"(a != a), a, b); }}\n"
        f"static inline {f} ember_vmin_{L}({f} a, {f} b) {{ return ember_vsel_{L}((a < b) | "
        f"(a != a), a, b); }}\n" + _select_minmax(L) + "\n".join(fns) + "\n")


_MINMAX_INTRIN = {16: ("__AVX512F__", "_mm512", "__m512"), 8: ("__AVX__", "_mm256", "__m256"),
                  4: ("__SSE__", "_mm", "__m128")}


def _select_minmax(L: int) -> str:
    """``ember_vgt_L(a, b)`` = ``a > b ? a : b`` and ``ember_vlt_L(a, b)`` = ``a < b ? a : b``
    lane-wise: exactly the x86 ``max``/``min`` instructions (the second operand when either is
    NaN or both are zeros), one instruction instead of a compare and a blend; a blend where the
    instruction set is not there."""
    f, i = f"ember_f32x{L}", f"ember_i32x{L}"
    macro, pre, ty = _MINMAX_INTRIN[L]
    out = [f"#if defined({macro})", "#include <immintrin.h>"]
    for name, op in (("gt", "max"), ("lt", "min")):
        out.append(f"static inline {f} ember_v{name}_{L}({f} a, {f} b) {{ return ({f}){pre}_{op}"
                   f"_ps(({ty})a, ({ty})b); }}")
    out.append("#else")
    for name, cmp in (("gt", ">"), ("lt", "<")):
        out.append(f"static inline {f} ember_v{name}_{L}({f} a, {f} b) {{ return "
                   f"ember_vsel_{L}(({i})(a {cmp} b), a, b); }}")
    out.append("#endif")
    return "\n".join(out) + "\n"


# lane-wise polynomial versions (no libm call per lane); FV/IV are the float/int vector types
_POLY = {
    # exp: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial (Cephes expf), 2^n from the
    # exponent bits; about 1 ulp on [-87, 88]; under/overflow to 0/inf, NaN kept
    "exp": """static inline FV ember_vexp_L(FV x) {
  FV xc = ember_vsel_L(x > 88.72283f, (FV){0} + 88.72283f, x);
  xc = ember_vsel_L(xc < -87.3365447504f, (FV){0} - 87.3365447504f, xc);
  FV fx = xc * 1.44269504088896341f + 0.5f;
  IV n = __builtin_convertvector(fx, IV);
  FV fn = __builtin_convertvector(n, FV);
  n = n - ((IV)(fn > fx) & 1);
  fn = __builtin_convertvector(n, FV);
  FV r = xc - fn * 0.693359375f + fn * 2.12194440e-4f;
  FV r2 = r * r;
  FV y = (FV){0} + 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f; y = y * r + 8.3334519073e-3f; y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f; y = y * r + 5.0000001201e-1f;
  y = y * r2 + r + 1.0f;
  IV n1 = n >> 1;  /* 2^n as 2^n1 * 2^(n-n1): each factor stays a normal float */
  FV out = (y * (FV)((n1 + 127) << 23)) * (FV)((n - n1 + 127) << 23);
  out = ember_vsel_L(x > 88.7228391f, (FV){0} + __builtin_inff(), out);
  out = ember_vsel_L(x < -87.3365447504f, (FV){0}, out);  /* subnormal results flush to 0 */
  return ember_vsel_L(x != x, x, out);
}""",
    # erf: one rational function, erf(a) = a P(a^2) / Q(a^2) on |x| = a <= 4 (P degree 6, Q
    # degree 4; fitted for ember by Lawson-weighted linearized least squares against mpmath's
    # erf: |relative error| < 7e-8 in exact arithmetic, < 3.5e-7 evaluated in float32, so
    # relative accuracy near 0 as well); a clamped to 4 (erf(4) = 1 - 1.5e-8) and the result
    # to 1; sign by bit operations; NaN propagates (the clamps' compares are false). 13 FMAs,
    # one division: about a third of the instructions of Abramowitz-Stegun 7.1.26 with its
    # inlined exp(-x*x) and a Taylor branch below 0.5, which it replaced (GELU epilogues).
    "erf": """static inline FV ember_verf_L(FV x) {
  IV sign = (IV)x & ((IV){0} + (-2147483647 - 1));
  FV a = (FV)((IV)x ^ sign);
  a = ember_vsel_L(a > 4.0f, (FV){0} + 4.0f, a);
  FV s = a * a;
  FV p = (FV){0} + 1.9096455972089643e-08f;
  p = p * s - 1.935642103489954e-06f; p = p * s + 1.4612394443247467e-04f;
  p = p * s + 3.947308752685785e-03f; p = p * s + 5.139249563217163e-02f;
  p = p * s + 2.061500996351242e-01f; p = p * s + 1.1283791065216064f;
  FV q = (FV){0} + 1.010198495350778e-03f;
  q = q * s + 1.4872271567583084e-02f; q = q * s + 1.1756439507007599e-01f;
  q = q * s + 5.160273313522339e-01f; q = q * s + 1.0f;
  FV y = a * p / q;
  y = ember_vsel_L(y > 1.0f, (FV){0} + 1.0f, y);
  return (FV)((IV)y | sign);
}""",
    # tanh: 1 - 2 / (e^{2|x|} + 1) with the sign put back; odd Taylor series near 0
    "tanh": """static inline FV ember_vtanh_L(FV x) {
  IV neg = x < 0;
  FV a = ember_vsel_L(neg, -x, x);
  FV e = ember_vexp_L(2.0f * ember_vsel_L(a > 20.0f, (FV){0} + 20.0f, a));
  FV r = 1.0f - 2.0f / (e + 1.0f);
  FV a2 = a * a;
  FV s = a * (1.0f + a2 * (-0.333333333f + a2 * (0.133333333f + a2 * -0.0539682540f)));
  r = ember_vsel_L(a < 0.0625f, s, r);
  r = ember_vsel_L(neg, -r, r);
  return ember_vsel_L(x != x, x, r);
}""",
    "sigmoid": """static inline FV ember_vsigmoid_L(FV x) {
  IV neg = x < 0;
  FV e = ember_vexp_L(ember_vsel_L(neg, x, -x));
  FV r = ember_vsel_L(neg, e / (1.0f + e), 1.0f / (1.0f + e));
  return ember_vsel_L(x != x, x, r);
}""",
}


class _Unsupported(Exception):
    pass


class VectorLoop:
    """Prints one vectorized loop with ``printer`` (a ``CFunctionPrinter``); ``emit`` returns
    False (printing nothing) when the loop is not expressible (see the module doc)."""

    def __init__(self, printer, loop: For, lanes: int):
        self.p = printer
        self.loop = loop
        self.L = lanes
        self.v = loop.var
        self._uses_memo: dict = {}  # id(expr) -> (uses v, expr) for ``_uses_v``

    def _main(self, n) -> tuple:
        """``(main, n, tail)``: the C text of the vector part's end (a multiple of ``L``), of
        the extent, and whether a scalar remainder may follow. A symbolic extent (a row of
        ``seq`` elements, an ``int64`` argument) is split at run time."""
        L = self.L
        if isinstance(n, int):
            return n - n % L, n, n % L != 0
        text = self.p.extent_text(n)
        return f"(({text}) / {L} * {L})", f"({text})", True

    def _stores(self):
        body = self.loop.body
        stmts = body.stmts if isinstance(body, Seq) else [body]
        if not stmts or not all(isinstance(s, Store) for s in stmts):
            raise _Unsupported
        return stmts

    def _coef(self, buf, indices) -> int:
        from ..tir.arith import flat_index
        flat = flat_index(buf, indices, self.p.bounds)
        lt = linear_terms(flat)
        if lt is None:
            raise _Unsupported
        c = 0
        for atom, k in lt[0].values():
            if atom is self.v:
                c = k
            elif self._uses_v(atom):
                raise _Unsupported
        return c

    def _uses_v(self, e: Expr) -> bool:
        """True when ``e`` depends on the loop variable (memoized per node: expressions are
        DAGs whose shared parts would otherwise be walked once per use)."""
        from ..tir.arith import map_children
        memo = self._uses_memo
        r = memo.get(id(e))
        if r is None:
            if isinstance(e, Var):
                r = e is self.v
            else:
                kids: list = []
                map_children(e, lambda c: (kids.append(c), c)[1])
                r = any(self._uses_v(c) for c in kids)
            memo[id(e)] = (r, e)  # keeps e alive while its id is a key
            return r
        return r[0]

    def vexpr(self, e: Expr) -> str:
        """The C text of float32 (or bool mask) expression ``e`` as an ``ember_f32xL`` vector over
        the loop's ``L`` lanes: loop-invariant values broadcast, unit-stride loads as unaligned
        vector loads.

        Raises:
            _Unsupported: (internal, caught by ``emit``) ``e`` has no lane-wise form."""
        L = self.L
        if not self._uses_v(e):
            if e.dtype not in _FLOATS:
                raise _Unsupported
            return f"((ember_f32x{L}){{0}} + {self.p.expr(e)})"
        if e.dtype not in _FLOATS + ("bool",):
            raise _Unsupported
        if isinstance(e, Load) and e.src.dtype == "bfloat16":
            return self._vbf16(e)
        if isinstance(e, Load):
            if e.src.dtype != "float32":
                raise _Unsupported
            c = self._coef(e.src, e.indices)
            if c == 0:
                return f"((ember_f32x{L}){{0}} + {self.p.access(e.src, e.indices)})"
            if c != 1:
                raise _Unsupported
            return f"(*(const ember_f32x{L}u*)&{self.p.access(e.src, e.indices)})"
        if isinstance(e, BinOp):
            if e.op in _ARITH and e.dtype in _FLOATS:
                return f"({self.vexpr(e.a)} {_ARITH[e.op]} {self.vexpr(e.b)})"
            if e.op in ("max", "min") and e.dtype in _FLOATS:
                return f"ember_v{e.op}_{L}({self.vexpr(e.a)}, {self.vexpr(e.b)})"
            if e.op in _CMP and e.a.dtype in _FLOATS:
                return f"({self.vexpr(e.a)} {_CMP[e.op]} {self.vexpr(e.b)})"
            if e.op in ("and", "or") and e.dtype == "bool":
                return f"({self.vmask(e.a)} {'&' if e.op == 'and' else '|'} {self.vmask(e.b)})"
            raise _Unsupported
        if isinstance(e, Unary) and e.op == "neg" and e.dtype in _FLOATS:
            return f"(-{self.vexpr(e.a)})"
        if isinstance(e, Select) and e.dtype in _FLOATS:
            # a select guards its branches (a load may be out of bounds where not taken): a
            # loop-invariant condition picks one side; a lane-wise one blends branches whose
            # loads the condition itself already reads (relu-like selects)
            if not self._uses_v(e.cond):
                return f"(({self.p.expr(e.cond)}) ? {self.vexpr(e.t)} : {self.vexpr(e.f)})"
            from ..tir.arith import expr_key
            mm = self._minmax_select(e)
            if mm is not None:
                return mm
            safe = {expr_key(q) for q in collect(e.cond, lambda q: isinstance(q, Load))}
            for side in (e.t, e.f):
                if any(expr_key(q) not in safe
                       for q in collect(side, lambda q: isinstance(q, Load))):
                    raise _Unsupported  # a load only the condition makes safe
            return f"ember_vsel_{L}({self.vmask(e.cond)}, {self.vexpr(e.t)}, {self.vexpr(e.f)})"
        if isinstance(e, Call) and e.name in _CALLS and e.dtype == "float32" and len(e.args) == 1:
            return f"ember_v{e.name}_{L}({self.vexpr(e.args[0])})"
        if isinstance(e, Cast) and e.dtype == "float32" and e.value.dtype in _INT8 and \
                isinstance(e.value, Load) and self._coef(e.value.src, e.value.indices) == 1:
            # 8-bit integers (quantized activations) widen exactly to float32 lanes
            t = _INT8[e.value.dtype]
            return (f"__builtin_convertvector(*(const {t}{L}u*)&"
                    f"{self.p.access(e.value.src, e.value.indices)}, ember_f32x{L})")
        if isinstance(e, Cast) and e.dtype == "float32" and e.value.dtype in _INT8 and \
                isinstance(e.value, Cast) and e.value.value.dtype == "float32" and \
                _is_clamped(e.value.value, e.value.dtype):
            # requantize then dequantize (QDQ between fused ops): the clamped value truncated
            # to an integer, as the 8-bit cast does, and back to float32
            return (f"__builtin_convertvector(__builtin_convertvector("
                    f"{self.vexpr(e.value.value)}, ember_i32x{L}), ember_f32x{L})")
        if isinstance(e, Cast) and e.dtype == "float32" and e.value.dtype == "float32":
            return self.vexpr(e.value)
        if isinstance(e, Cast) and e.dtype == "float32" and e.value.dtype == "bfloat16":
            return self.vexpr(e.value)  # a bf16 value is exact in float32
        if (isinstance(e, Cast) and e.dtype == "bfloat16" and e.value.dtype == "float32") or (
                isinstance(e, Call) and e.name in ("cvt", "round_dtype") and e.dtype == "bfloat16"
                and e.args[0].dtype in _FLOATS):
            return self._vbf16(e)
        raise _Unsupported

    def _vbf16(self, e: Expr) -> str:
        """A bfloat16 value read as float32 lanes: a unit-stride bf16 load widened, or a float32
        expression rounded to bf16 (round to nearest even, NaN kept quiet: the scalar
        ``ember_enc_bfloat16``) and widened back."""
        L = self.L
        self.p.deps.setdefault(f"ember_vector_bf16_{L}", bf16_vector_helpers(L))
        if isinstance(e, Load) and self._coef(e.src, e.indices) == 1:
            return f"ember_vdec_bf16_{L}(&{self.p.access(e.src, e.indices)})"
        if isinstance(e, Cast):
            return f"ember_vrnd_bf16_{L}({self.vexpr(e.value)})"
        if isinstance(e, Call):  # cvt (saturation: bf16 has float32's range) / round_dtype
            return f"ember_vrnd_bf16_{L}({self.vexpr(e.args[0])})"
        raise _Unsupported

    def _store_line(self, st) -> str:
        """The vector store of ``st``: float32 lanes, or float32 lanes rounded to a bfloat16
        buffer (``Cast(bfloat16, float32 expression)``)."""
        L = self.L
        if self._coef(st.buffer, st.indices) != 1:
            raise _Unsupported
        ptr = f"&{self.p.access(st.buffer, st.indices)}"
        if st.buffer.dtype == "float32":
            return f"*(ember_f32x{L}u*){ptr} = {self.vexpr(st.value)};"
        v = st.value
        if st.buffer.dtype in _INT8 and isinstance(v, Cast) and v.dtype == st.buffer.dtype \
                and v.value.dtype == "float32" and _is_clamped(v.value, st.buffer.dtype):
            # a float32 value already clamped to the 8-bit range (qnn.quantize): the C cast
            # truncates it, lane-wise as the scalar code does
            t = _INT8[st.buffer.dtype]
            return (f"*({t}{L}u*){ptr} = __builtin_convertvector(__builtin_convertvector("
                    f"{self.vexpr(v.value)}, ember_i32x{L}), {t}{L}u);")
        if st.buffer.dtype == "bfloat16" and v.dtype in _FLOATS:
            # the store encodes the float value (round to nearest even), as the scalar code does
            self.p.deps.setdefault(f"ember_vector_bf16_{L}", bf16_vector_helpers(L))
            if isinstance(v, Cast) and v.value.dtype == "float32":
                v = v.value
            return f"ember_vst_bf16_{L}({ptr}, {self.vexpr(v)});"
        raise _Unsupported

    def _minmax_select(self, e: Select) -> "str | None":
        """``select(a > b, a, b)`` / ``select(a < b, a, b)`` (and the same with the comparison
        flipped: ``select(b < a, a, b)``...) as one max/min instruction with the same NaN and
        signed-zero behaviour (Clip and ReLU epilogues); ``None`` for any other select."""
        from ..tir.arith import expr_key
        c = e.cond
        if not (isinstance(c, BinOp) and c.op in ("lt", "gt") and c.a.dtype == "float32"):
            return None
        x, y = (c.a, c.b) if c.op == "gt" else (c.b, c.a)  # the condition is x > y
        kt, kf = expr_key(e.t), expr_key(e.f)
        if kt == expr_key(x) and kf == expr_key(y):      # x > y ? x : y
            return f"ember_vgt_{self.L}({self.vexpr(x)}, {self.vexpr(y)})"
        if kt == expr_key(y) and kf == expr_key(x):      # x > y ? y : x  ==  y < x ? y : x
            return f"ember_vlt_{self.L}({self.vexpr(y)}, {self.vexpr(x)})"
        return None

    def vmask(self, e: Expr) -> str:
        """The C text of bool expression ``e`` as an ``ember_i32xL`` lane mask (a loop-invariant
        condition broadcast to all-ones or zero)."""
        if e.dtype != "bool":
            raise _Unsupported
        if not self._uses_v(e):
            return f"((ember_i32x{self.L}){{0}} - (int32_t)({self.p.expr(e)}))"
        return self.vexpr(e)

    def emit(self, pad: str) -> bool:
        """Print the loop in steps of ``L`` lanes plus a scalar remainder, indented by ``pad``;
        returns False, printing nothing, when the extent is below ``L`` or the body is not a
        sequence of unit-stride float32 stores of vectorizable values."""
        L, n = self.L, self.loop.extent
        if isinstance(n, int) and n < L:
            return False
        try:
            stores = self._stores()
            lines = []
            for st in stores:
                lines.append(self._store_line(st))
        except _Unsupported:
            return False
        self.p.deps.setdefault(f"ember_vector_types_{L}", vector_types(L))
        v = self.p.expr(self.v)
        main, n, tail = self._main(n)
        self.p.lines.append(f"{pad}for (int64_t {v} = 0; {v} < {main}; {v} += {L}) {{")
        self.p.lines += [f"{pad}  {x}" for x in lines]
        self.p.lines.append(f"{pad}}}")
        if tail:
            self.p.lines.append(f"{pad}for (int64_t {v} = {main}; {v} < {n}; ++{v}) {{")
            ind = len(pad) // 2 + 1
            for st in stores:
                self.p.stmt(st, ind)
            self.p.lines.append(f"{pad}}}")
        return True


class VectorReduction(VectorLoop):
    """A serial loop ``acc = acc (+|max|min) f(v)`` into a scalar float32 accumulator, with
    ``f`` contiguous in the loop variable: lane-wise partial results in a vector accumulator,
    combined across lanes after the loop (floating-point sums are reassociated)."""

    _OPS = {"add": ("+", "0.0f"), "max": ("max", "(-__builtin_inff())"),
            "min": ("min", "__builtin_inff()")}

    def emit(self, pad: str) -> bool:
        """Print the reduction with a vector accumulator combined across lanes after the loop, plus
        a scalar remainder; returns False, printing nothing, when the loop is not such a reduction
        or the extent is below ``2 * L``."""
        L, n = self.L, self.loop.extent
        st = self.loop.body
        if (isinstance(n, int) and n < 2 * L) or not isinstance(st, Store) or st.indices or st.buffer.shape \
                or st.buffer.scope != "local" or st.buffer.dtype != "float32":
            return False
        val = st.value
        if not (isinstance(val, BinOp) and val.op in self._OPS):
            return False
        acc_side = [x for x in (val.a, val.b) if isinstance(x, Load) and x.src is st.buffer]
        if len(acc_side) != 1:
            return False
        rhs = val.b if acc_side[0] is val.a else val.a
        if any(isinstance(x, Load) and x.src is st.buffer
               for x in collect(rhs, lambda q: isinstance(q, Load))):
            return False
        try:
            vr = self.vexpr(rhs)
        except _Unsupported:
            return False
        op, ident = self._OPS[val.op]
        self.p.deps.setdefault(f"ember_vector_types_{L}", vector_types(L))
        acc = self.p.buf_name(st.buffer)
        v = self.p.expr(self.v)
        main, n, tail = self._main(n)
        comb = (lambda a, b: f"({a} + {b})") if op == "+" else \
            (lambda a, b: f"ember_v{op}_{L}({a}, {b})")
        scomb = (lambda a, b: f"({a} + {b})") if op == "+" else \
            (lambda a, b: f"ember_{op}_float32({a}, {b})")
        P = self.p.lines
        P.append(f"{pad}{{ ember_f32x{L} vacc_ = (ember_f32x{L}){{0}} + {ident};")
        P.append(f"{pad}  for (int64_t {v} = 0; {v} < {main}; {v} += {L}) "
                 f"vacc_ = {comb('vacc_', vr)};")
        P.append(f"{pad}  for (int k_ = 0; k_ < {L}; ++k_) {acc} = {scomb(acc, 'vacc_[k_]')}; }}")
        if tail:
            P.append(f"{pad}for (int64_t {v} = {main}; {v} < {n}; ++{v}) {{")
            self.p.stmt(st, len(pad) // 2 + 1)
            P.append(f"{pad}}}")
        return True
