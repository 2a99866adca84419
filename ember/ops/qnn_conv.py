"""``qnn.conv2d``: an int8 convolution or dense layer with requantization, the CPU's lowering of
``dequantize -> nn.conv / nn.dense / matmul (+ bias) [-> relu] -> quantize`` (made by
``ember.graph.passes.realize_qnn``).

Inputs:
    x: ``(N, C, H, W)`` (``layout="nchw"``) or ``(M, C)`` (``layout="rows"``, a dense layer:
        ``H = W = KH = KW = 1``), ``uint8`` or ``int8``, with zero point ``x_zp``.
    w: ``(Cout, Kp)`` int8, ``Kp = KH * KW * C4``, the weights in tap-major order ``k = (kh *
        KW + kw) * C4 + c`` with the channels zero-padded to ``C4`` (``C`` rounded up to a
        multiple of 4, so four channels of one tap fill one ``vpdpbusd`` lane): packed once at
        compile time (``pack_weight``). Symmetric (weight zero point 0).
    bias: ``(Cout,)`` int32: ``round(b / (x_scale * w_scale)) - x_zp_u * sum_k w[co, k]`` (the
        zero-point correction folded in; ``x_zp_u`` is ``x_zp`` in the unsigned domain, +128
        for an int8 input).
    mult: ``(Cout,)`` float32: ``x_scale * w_scale[co] / y_scale``.

Output: ``(N, Cout, OH, OW)`` or ``(M, Cout)``, ``out_dtype`` (``uint8``/``int8``):
``clamp(round_half_even(float32(acc + bias) * mult) + y_zp, lo, hi)`` with ``acc`` the exact
int32 sum of ``(x_u - 0) * w`` over the padded window (padding reads the zero point), ``lo``,
``hi`` the output dtype's range narrowed by a fused ReLU (``lo = y_zp``). This is ONNX
QLinearConv's arithmetic with the requantization in float32 (as onnxruntime's MLAS does).

``requant="fixed"`` (attrs ``rq_mult = M``, ``rq_shift = s``, one per-tensor pair; ``mult`` is
then unused) is the integer form the NPU computes (docs/npu.md, "Epilogue"), bit-exact across
targets: ``p = wrap32(wrap32(acc + bias) * M)``, ``v = floor((p + 2**(s-1)) / 2**s)`` (``v = p``
for ``s = 0``; computed as ``((p >> (s-1)) + 1) >> 1`` with arithmetic shifts, no overflow),
``y = clamp(v + y_zp, lo, hi)``. ``fixed_point_multiplier`` derives ``(M, s)`` from the float
scale ratio so that ``|acc + bias| * M < 2**31`` for every input (no wrap-around ever).

The kernel (``ember.codegen.microkernel_qconv``): a parallel loop over tasks (image x pixel tile
x channel chunk), each one ``qconv`` micro-kernel call: ``vpdpbusd`` on AVX-512 VNNI, else
portable scalar C with bit-identical results.
"""

from __future__ import annotations

import hashlib
from dataclasses import astuple, dataclass, fields, replace

import numpy as np

from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from .imperative import imperative_kernel
from .qnn import QDTYPES
from .registry import OpPattern, register_op

OP = "qnn.conv2d"
PANEL_BYTES = 256 * 1024  # largest per-task im2col panel (on the kernel's stack)
MAX_K = 65792  # 255 * 128 * K must fit int32
MAX_TILE_PIXELS = 256
MIN_TASKS = 8  # per image: work for the threads of a small image (ResNet's 7x7 stage)


@dataclass(frozen=True)
class QConvGeometry:
    """The compile-time constants of one ``qnn.conv2d`` kernel (the ``qconv`` micro-kernel key;
    see ``ember.codegen.microkernel_qconv``)."""

    layout: str
    c: int
    h: int
    w: int
    cout: int
    kh: int
    kw: int
    sh: int
    sw: int
    pt: int
    pl: int
    dh: int
    dw: int
    oh: int
    ow: int
    kp: int
    x_zp: int
    y_zp: int
    lo: int
    hi: int
    out_dtype: str
    pt_pixels: int = 32
    cc: int = 64
    mr: int = 8
    nv: int = 2
    requant: str = "float"
    rq_mult: int = 0
    rq_shift: int = 0
    w_layout: str = "tap"
    skip: bool = False
    c_scale: float = 0.0
    s_scale: float = 0.0
    s_zp: int = 0
    o_scale: float = 1.0
    o_zp: int = 0
    o_lo: int = 0
    o_hi: int = 0
    direct: bool = False
    kdense: bool = False
    o_relu: bool = False

    @property
    def coutp(self) -> int:
        """Output channels as stored in the weights: rounded up to 16 for ``w_layout="blocked"``."""
        return -(-self.cout // 16) * 16 if self.w_layout == "blocked" else self.cout

    @property
    def n_tasks_per_image(self) -> int:
        return -(-(self.oh * self.ow) // self.pt_pixels) * -(-self.coutp // self.cc)


LAYOUTS = ("nchw", "rows", "nhwc", "nchw_nhwc")
# the order of the reduction: "tap4" ``k = (kh * KW + kw) * C4 + c`` (the channels of a tap
# padded to 4), "dense" ``k = (kh * KW + kw) * C + c`` padded to 4 only at the end (a stem
# with C = 3: 37 instead of 49 four-byte groups per pixel for a 7x7 kernel; the NCHW stem
# kernel packs it from an NHWC strip of the input rows, ``microkernel_qgemm``)
K_LAYOUTS = ("tap4", "dense")
CHANNELS_LAST = ("rows", "nhwc", "nchw_nhwc")


def geometry(types, attrs) -> tuple[int, QConvGeometry]:
    """``(batch, QConvGeometry)`` of inputs ``types`` (``x, w, bias, mult[, skip]``) and
    ``attrs``.

    Raises:
        ShapeMismatchError: shapes/dtypes that do not fit the module doc."""
    x, w, b, m = types[:4]
    skip = types[4] if len(types) > 4 else None
    layout = attrs["layout"]
    w_layout = attrs.get("w_layout", "tap")
    if x.dtype not in QDTYPES or w.dtype != "int8" or b.dtype != "int32" or m.dtype != "float32":
        raise ShapeMismatchError(f"{OP}: x must be uint8/int8, w int8, bias int32, mult float32; "
                                 f"got {x.dtype}, {w.dtype}, {b.dtype}, {m.dtype}")
    if layout not in LAYOUTS:
        raise ShapeMismatchError(f"{OP}: layout must be one of {LAYOUTS}, got {layout!r}")
    ok = {"nchw": ("tap",), "rows": ("tap", "blocked"), "nhwc": ("blocked",),
          "nchw_nhwc": ("blocked",)}[layout]
    if w_layout not in ok:
        raise ShapeMismatchError(f"{OP}: w_layout {w_layout!r} does not fit layout {layout!r} "
                                 f"(nchw: 'tap'; nhwc, nchw_nhwc: 'blocked'; rows: either)")
    if skip is not None and w_layout != "blocked":
        raise ShapeMismatchError(f"{OP}: a fused residual needs w_layout='blocked'")
    kh, kw = attrs["kernel"]
    if layout == "rows":
        if x.ndim != 2 or (kh, kw) != (1, 1):
            raise ShapeMismatchError(f"{OP}: layout rows needs x (M, C) and a 1x1 kernel")
        n, c, h, wd = 1, x.shape[1], 1, 1
    elif x.ndim != 4:
        raise ShapeMismatchError(f"{OP}: x must be rank 4 for layout {layout}, got {x.shape}")
    elif layout == "nhwc":
        n, h, wd, c = x.shape
    else:
        n, c, h, wd = x.shape
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    dh, dw = attrs["dilations"]
    k = c * kh * kw
    k_layout = attrs.get("k_layout") or "tap4"
    if k_layout not in K_LAYOUTS:
        raise ShapeMismatchError(f"{OP}: k_layout must be one of {K_LAYOUTS}, got {k_layout!r}")
    kdense = k_layout == "dense"
    if kdense and (w_layout, layout) != ("blocked", "nchw_nhwc"):
        raise ShapeMismatchError(f"{OP}: k_layout 'dense' needs layout 'nchw_nhwc' and "
                                 f"w_layout 'blocked', got {layout!r}, {w_layout!r}")
    kp = -(-k // 4) * 4 if kdense else kh * kw * (-(-c // 4) * 4)
    cout = int(attrs.get("cout") or 0) if w_layout == "blocked" else w.shape[0]
    coutp = -(-cout // 16) * 16 if w_layout == "blocked" else cout
    if w.ndim != 2 or tuple(w.shape) != (coutp, kp) or tuple(b.shape) != (coutp,) or \
            tuple(m.shape) != (coutp,) or cout < 1:
        raise ShapeMismatchError(f"{OP}: w must be ({coutp}, {kp}), bias and mult ({coutp},) "
                                 f"(cout={cout}, w_layout={w_layout}); got {w.shape}, "
                                 f"{b.shape}, {m.shape}")
    if k > MAX_K:
        raise ShapeMismatchError(f"{OP}: reduction of {k} elements may overflow int32 "
                                 f"(at most {MAX_K})")
    if layout == "rows":
        oh, ow = x.shape[0], 1
    else:
        oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
        ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ShapeMismatchError(f"{OP}: the window does not fit {x.shape}")
    out = attrs["out_dtype"]
    if out not in QDTYPES and not (out == "float32" and skip is not None):
        raise ShapeMismatchError(f"{OP}: out_dtype must be int8/uint8 (float32 only with a "
                                 f"fused residual), got {out}")
    mid = attrs.get("mid_dtype") or out
    if mid not in QDTYPES:
        raise ShapeMismatchError(f"{OP}: mid_dtype must be int8/uint8, got {mid}")
    qlo, qhi = QDTYPES[mid if skip is not None else out]
    lo, hi = max(qlo, int(attrs["lo"])), min(qhi, int(attrs["hi"]))
    requant = attrs.get("requant", "float")
    rq_mult, rq_shift = int(attrs.get("rq_mult", 0)), int(attrs.get("rq_shift", 0))
    if requant not in ("float", "fixed"):
        raise ShapeMismatchError(f"{OP}: requant must be 'float' or 'fixed', got {requant!r}")
    if requant == "fixed" and not (abs(rq_mult) < 2**31 and 0 <= rq_shift <= 31):
        raise ShapeMismatchError(f"{OP}: fixed requantize needs |rq_mult| < 2**31 and rq_shift "
                                 f"in [0, 31], got {rq_mult}, {rq_shift}")
    if out == "float32" and requant == "fixed":
        raise ShapeMismatchError(f"{OP}: a float32 output needs requant='float'")
    extra = {}
    if skip is not None:
        oshape = (oh, cout) if layout == "rows" else (n, oh, ow, cout)
        if skip.dtype not in QDTYPES or tuple(skip.shape) != oshape:
            raise ShapeMismatchError(f"{OP}: the residual must be uint8/int8 of the output "
                                     f"shape {oshape}, got {skip.dtype} {skip.shape}")
        if out == "float32":  # the float sum itself, [relu]: what feeds a float operator
            extra = dict(skip=True, c_scale=float(np.float32(attrs["c_scale"])),
                         s_scale=float(np.float32(attrs["s_scale"])), s_zp=int(attrs["s_zp"]),
                         o_relu=bool(attrs.get("o_relu", False)))
        else:
            olo, ohi = QDTYPES[out]
            extra = dict(skip=True, c_scale=float(np.float32(attrs["c_scale"])),
                         s_scale=float(np.float32(attrs["s_scale"])), s_zp=int(attrs["s_zp"]),
                         o_scale=float(np.float32(attrs["o_scale"])), o_zp=int(attrs["o_zp"]),
                         o_lo=max(olo, int(attrs.get("o_lo", olo))),
                         o_hi=min(ohi, int(attrs.get("o_hi", ohi))))
    direct = (w_layout == "blocked" and x.dtype == "uint8" and c % 4 == 0 and
              layout in ("nhwc", "rows") and (kh, kw) == (1, 1) and
              (pt, pl, pb, pr) == (0, 0, 0, 0))
    g = QConvGeometry(layout, c, h, wd, cout, kh, kw, sh, sw, pt, pl, dh, dw, oh, ow, kp,
                      int(attrs["x_zp"]), int(attrs["y_zp"]), lo, hi, out, requant=requant,
                      rq_mult=rq_mult, rq_shift=rq_shift, w_layout=w_layout, direct=direct,
                      kdense=kdense, **extra)
    return n, (_tile_cl(g) if w_layout == "blocked" else _tile(g))


def pack_weight(w: np.ndarray) -> np.ndarray:
    """ONNX-order weights ``(Cout, C, KH, KW)`` (or ``(Cout, C)``) int8 as ``qnn.conv2d``'s
    ``(Cout, KH * KW * C4)`` tap-major, channel-padded layout (the module doc)."""
    if w.ndim == 2:
        w = w[:, :, None, None]
    cout, c, kh, kw = w.shape
    out = np.zeros((cout, kh, kw, -(-c // 4) * 4), np.int8)
    out[..., :c] = w.transpose(0, 2, 3, 1)
    return out.reshape(cout, -1)


def pack_weight_blocked(wp: np.ndarray) -> np.ndarray:
    """``pack_weight``'s ``(Cout, KP)`` weights as the channels-last kernel's
    ``(COUTP, KP)`` (``COUTP``: ``Cout`` rounded up to 16, zero rows) stored
    ``[co / 16][k / 4][co % 16][k % 4]`` (``ember.codegen.microkernel_qgemm``)."""
    cout, kp = wp.shape
    coutp = -(-cout // 16) * 16
    w = np.zeros((coutp, kp), np.int8)
    w[:cout] = wp
    return np.ascontiguousarray(w.reshape(coutp // 16, 16, kp // 4, 4).transpose(0, 2, 1, 3)
                                ).reshape(coutp, kp)


def unpack_weight_blocked(wb: np.ndarray, cout: int) -> np.ndarray:
    """The inverse of ``pack_weight_blocked``: ``(Cout, KP)`` tap-major weights."""
    coutp, kp = wb.shape
    return np.ascontiguousarray(wb.reshape(coutp // 16, kp // 4, 16, 4).transpose(0, 2, 1, 3)
                                ).reshape(coutp, kp)[:cout]


def dense_k_weight(wp: np.ndarray, kh: int, kw: int, c: int) -> np.ndarray:
    """``pack_weight``'s tap-major ``(Cout, KH * KW * C4)`` weights in the ``"dense"``
    reduction order ``(Cout, KPD)``: ``k = (kh * KW + kw) * C + c``, zero-padded to ``KPD``,
    ``KH * KW * C`` rounded up to 4 (``K_LAYOUTS``)."""
    cout = wp.shape[0]
    w = wp.reshape(cout, kh * kw, -1)[:, :, :c].reshape(cout, -1)
    out = np.zeros((cout, -(-w.shape[1] // 4) * 4), np.int8)
    out[:, :w.shape[1]] = w
    return out


def use_dense_k(layout: str, c: int, attrs: dict) -> bool:
    """Whether the channels-last kernel of ``layout`` with ``c`` input channels packs its
    reduction densely (``K_LAYOUTS``): the NCHW stem with channels that do not fill the
    four-byte groups and unit width dilation (each kernel row of taps is one contiguous run
    of the input strip)."""
    kh, kw = attrs["kernel"]
    return layout == "nchw_nhwc" and c % 4 != 0 and tuple(attrs["dilations"])[1] == 1 and \
        -(-c * kh * kw // 4) < kh * kw * -(-c // 4)


def blocked_form(w: np.ndarray, bias: np.ndarray, mult: np.ndarray, attrs: dict,
                 layout: str, c: int | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """The constants and attributes of a ``w_layout="tap"`` ``qnn.conv2d`` (``w`` ``(Cout,
    KP)``, ``bias``/``mult`` ``(Cout,)``) as the channels-last kernel's ``layout`` (``nhwc``,
    ``nchw_nhwc`` or ``rows``): blocked weights, bias and mult zero-padded to ``COUTP``. With
    the input channels ``c`` given, a stem that gains from it (``use_dense_k``) gets the
    ``"dense"`` reduction order (the zero-point correction in ``bias`` is unchanged: the same
    weights, only reordered)."""
    cout = w.shape[0]
    coutp = -(-cout // 16) * 16
    pad = lambda a: np.concatenate([a, np.zeros(coutp - cout, a.dtype)])  # noqa: E731
    extra = {}
    if c is not None and use_dense_k(layout, c, attrs):
        w = dense_k_weight(w, *attrs["kernel"], c)
        extra = {"k_layout": "dense"}
    return (pack_weight_blocked(w), pad(np.asarray(bias)), pad(np.asarray(mult)),
            {**attrs, "layout": layout, "w_layout": "blocked", "cout": cout, **extra})


MR_CL, NV_CL, MAX_TILE_PIXELS_CL = 6, 4, 96
DENSE_TILE_PIXELS = 256  # the dense-K stem's tile: as many whole output rows as fit


def _tile_cl(g: QConvGeometry, mr: int = MR_CL, nv: int = NV_CL,
             pt: int | None = None) -> QConvGeometry:
    """Tiles of the channels-last kernel: ``PT`` pixels (at most ``MAX_TILE_PIXELS_CL``, a
    packed panel within ``PANEL_BYTES``), channel chunks (multiples of 16) only as far as
    needed for ``MIN_TASKS`` tasks per image; ``mr x nv`` the register block. ``pt`` (a
    tuning knob, ``qgemm_knobs``) overrides the pixel tile."""
    p = g.oh * g.ow
    if pt is None:
        cap = MAX_TILE_PIXELS_CL if g.direct else max(
            MR_CL, min(MAX_TILE_PIXELS_CL, (PANEL_BYTES // g.kp) // MR_CL * MR_CL))
        if g.kdense:  # whole output rows: each task transposes its input rows into a strip
            cap = g.ow * max(1, min(g.oh, DENSE_TILE_PIXELS // g.ow,
                                    PANEL_BYTES // (g.kp * g.ow)))
        pt = min(p, cap)
    tiles = -(-p // pt)
    coutp = -(-g.cout // 16) * 16
    chunks = max(1, min(-(-MIN_TASKS // tiles), coutp // 16))
    cc = -(-(-(-coutp // chunks)) // 16) * 16
    return replace(g, pt_pixels=pt, cc=cc, mr=mr, nv=nv)


MAX_ACC_CL = 24  # accumulators of a register block (zmm8..zmm31, microkernel_qgemm)
BLOCK_KNOBS = ((6, 4), (8, 3), (4, 6), (12, 2), (4, 4), (3, 8), (24, 1))
PIXEL_KNOBS = (24, 48, 96, 144, 192, 256)


def qgemm_knobs(g: QConvGeometry) -> dict | None:
    """The tuning knobs of a channels-last (``w_layout="blocked"``) kernel on AVX-512 VNNI,
    ``{knob: [values]}`` with the default first (``ember.tir.schedule.rules.qnn``):
    ``tile`` ``[mr, nv]``, the register block (``mr`` pixels x ``nv`` vectors of 16 channels,
    ``mr * nv <= MAX_ACC_CL``), and ``pixels``, the pixel tile of one task (its packed panel
    within ``PANEL_BYTES``); ``None`` for the NCHW ``qconv`` kernel."""
    if g.w_layout != "blocked":
        return None
    p = g.oh * g.ow
    nvecs = -(-g.cout // 16)
    tiles = [[g.mr, g.nv]]
    for mr, nv in BLOCK_KNOBS:
        if [mr, nv] not in tiles and mr * nv <= MAX_ACC_CL and nv <= nvecs and mr <= p:
            tiles.append([mr, nv])
    pixels = [g.pt_pixels]
    for pt in PIXEL_KNOBS:
        if pt not in pixels and pt <= min(p, MAX_TILE_PIXELS) and \
                (g.direct or pt * g.kp <= PANEL_BYTES):
            pixels.append(pt)
    return {"tile": tiles, "pixels": pixels}


def retile(g: QConvGeometry, cfg: dict) -> QConvGeometry:
    """``g`` with the register block and pixel tile of tuning configuration ``cfg``
    (``qgemm_knobs``; a missing knob keeps its default). The results do not change: every
    block shape and tile computes the same exact sums and epilogue.

    Raises:
        ValueError: a block of more than ``MAX_ACC_CL`` accumulators or a pixel tile out of
            range."""
    mr, nv = cfg.get("tile", (g.mr, g.nv))
    pt = int(cfg.get("pixels", g.pt_pixels))
    if not (1 <= mr and 1 <= nv and mr * nv <= MAX_ACC_CL):
        raise ValueError(f"register block {mr}x{nv} needs 1..{MAX_ACC_CL} accumulators")
    if not 1 <= pt <= MAX_TILE_PIXELS or (not g.direct and pt * g.kp > PANEL_BYTES):
        raise ValueError(f"pixel tile {pt} out of range (1..{MAX_TILE_PIXELS}, panel of at "
                         f"most {PANEL_BYTES} bytes)")
    return _tile_cl(g, int(mr), int(nv), min(pt, g.oh * g.ow))


def _tile(g: QConvGeometry) -> QConvGeometry:
    """Pixel-tile and channel-chunk sizes: the panel fits ``PANEL_BYTES`` (at most
    ``MAX_TILE_PIXELS``); channels are chunked (multiples of ``mr``) only as far as needed to
    give ``MIN_TASKS`` tasks, since every chunk packs the tile's panel again."""
    step = 16 * g.nv
    p = g.oh * g.ow
    cap = max(step, (PANEL_BYTES // g.kp) // step * step)
    pt = min(-(-p // step) * step, cap, MAX_TILE_PIXELS)
    tiles = -(-p // pt)
    chunks = max(1, min(-(-MIN_TASKS // tiles), -(-g.cout // g.mr)))
    cc = -(-(-(-g.cout // chunks)) // g.mr) * g.mr
    return replace(g, pt_pixels=pt, cc=cc)


def _infer(types, attrs):
    n, g = geometry(types, attrs)
    if g.layout == "rows":
        return [TensorType((g.oh, g.cout), g.out_dtype)]
    if g.layout in ("nhwc", "nchw_nhwc"):
        return [TensorType((n, g.oh, g.ow, g.cout), g.out_dtype)]
    return [TensorType((n, g.cout, g.oh, g.ow), g.out_dtype)]


MAX_MULT = 2**15  # the NPU's ALU immediate (docs/npu.md): |M| < 2**15


def fixed_point_multiplier(ratio: float, acc_bound: int) -> tuple[int, int]:
    """``(M, s)`` with ``M / 2**s`` the nearest to ``ratio`` (the requantize scale ``x_scale *
    w_scale / y_scale``, > 0) such that ``1 <= M < 2**15``, ``s`` in ``{0} | [2, 31]`` (the
    NPU's ALU: a 16-bit immediate, the split rounding shift) and ``acc_bound * M < 2**31``
    (``acc_bound``: the largest ``|acc + bias|`` any int8 input can give, so the int32 product
    never wraps). The largest such ``s`` is taken (the most precise ``M``).

    Raises:
        ValueError: no such pair (``ratio`` too small or too large for the bound); the caller
            keeps the float requantization."""
    if not ratio > 0:
        raise ValueError(f"requantize scale {ratio} must be positive")
    for s in list(range(31, 1, -1)) + [0]:
        m = int(np.rint(ratio * 2.0**s))
        if 1 <= m < MAX_MULT and m * max(int(acc_bound), 1) < 2**31:
            return m, s
    raise ValueError(f"no fixed-point multiplier for the scale ratio {ratio:.3g} with "
                     f"|acc| <= {acc_bound}: M in [1, 2**15) and |acc| * M < 2**31")


def fixed_requantize(acc: np.ndarray, mult: int, shift: int) -> np.ndarray:
    """The integer requantization of ``requant="fixed"`` on int64 NumPy (before the zero point
    and the clamp): ``floor((wrap32(wrap32(acc) * mult) + 2**(shift-1)) / 2**shift)``."""
    def wrap32(v):
        return ((np.asarray(v, np.int64) + 2**31) % 2**32) - 2**31
    p = wrap32(wrap32(acc) * np.int64(mult))
    if shift == 0:
        return p
    return (p + (1 << (shift - 1))) >> shift  # int64: no overflow; >> floors


def qconv_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray, mult: np.ndarray,
                    *rest) -> np.ndarray:
    """The integer NumPy reference of ``qnn.conv2d``: ``qconv_reference(x, w, bias, mult[,
    skip], attrs)`` (int64 sums, float32 requantization, ``np.rint``: round half to even; or
    the integer ``fixed_requantize`` for ``requant="fixed"``; a fused residual ``skip`` with
    the float32 dequantize / add / quantize of the module doc, each step rounded to
    float32)."""
    attrs = rest[-1]
    skip = rest[0] if len(rest) > 1 else None
    arrays = (x, w, bias, mult) + ((skip,) if skip is not None else ())
    n, g = geometry([TensorType(a.shape, str(a.dtype)) for a in arrays], attrs)
    if g.w_layout == "blocked":
        w, bias, mult = unpack_weight_blocked(w, g.cout), bias[:g.cout], mult[:g.cout]
    if g.layout == "nhwc":
        x = x.transpose(0, 3, 1, 2)
    shift = 128 if x.dtype == np.int8 else 0
    xu = x.astype(np.int64) + shift
    zp = g.x_zp + shift
    c4 = g.kp // (g.kh * g.kw)
    if g.layout == "rows":
        cols = np.zeros((1, xu.shape[0], c4), np.int64)
        cols[0, :, :g.c] = xu  # (1, M, C4)
    else:
        xp = np.pad(xu, ((0, 0), (0, 0), (g.pt, g.dh * (g.kh - 1) + g.sh * g.oh),
                         (g.pl, g.dw * (g.kw - 1) + g.sw * g.ow)), constant_values=zp)
        cw = g.c if g.kdense else c4
        cols = np.zeros((n, g.oh * g.ow, g.kh, g.kw, cw), np.int64)
        for r in range(g.kh):
            for s in range(g.kw):
                win = xp[:, :, r * g.dh:r * g.dh + g.sh * g.oh:g.sh,
                         s * g.dw:s * g.dw + g.sw * g.ow:g.sw]  # (n, C, OH, OW)
                cols[:, :, r, s, :g.c] = win.reshape(n, g.c, -1).transpose(0, 2, 1)
        cols = cols.reshape(n, g.oh * g.ow, -1)
        if cols.shape[2] < g.kp:  # "dense": the padding of the last group
            cols = np.concatenate([cols, np.zeros(cols.shape[:2] + (g.kp - cols.shape[2],),
                                                  np.int64)], axis=2)
    acc = cols @ w.astype(np.int64).T + bias.astype(np.int64)  # (n, P, Cout)
    if g.requant == "fixed":
        v = fixed_requantize(acc, g.rq_mult, g.rq_shift) + g.y_zp
    else:
        f = acc.astype(np.int32).astype(np.float32) * mult.astype(np.float32)
        v = np.rint(np.clip(f, -1e9, 1e9)).astype(np.int64) + g.y_zp
    v = np.clip(v, g.lo, g.hi)
    if skip is not None:  # (n, P, Cout) in the pixel-major order of the output
        f32 = np.float32
        sk = skip.reshape(n, g.oh * g.ow, g.cout).astype(f32)
        h = (v.astype(f32) - f32(g.y_zp)) * f32(g.c_scale)
        h = h + (sk - f32(g.s_zp)) * f32(g.s_scale)
        if g.out_dtype == "float32":
            v = np.maximum(h, f32(0)) if g.o_relu else h
        else:
            h = h / f32(g.o_scale)
            v = np.clip(np.rint(np.clip(h, -1e9, 1e9)).astype(np.int64) + g.o_zp, g.o_lo,
                        g.o_hi)
    y = v.astype(g.out_dtype)
    if g.layout == "rows":
        return y[0]
    if g.layout in ("nhwc", "nchw_nhwc"):
        return y.reshape(n, g.oh, g.ow, g.cout)
    return y.transpose(0, 2, 1).reshape(n, g.cout, g.oh, g.ow)


def qconv_body(n: int, g: QConvGeometry, in_dtype: str, params, isa: str):
    """The kernel body: a parallel loop over ``n * tasks`` micro-kernel calls: ``qconv``
    (``w_layout="tap"``) or ``qgemm`` (``"blocked"``, channels-last, with the optional
    residual); ``params``: the buffers ``x, w, bias, mult[, skip], y``."""
    from ..tir.expr import AddressOf, Const, Var
    from ..tir.stmt import For, KernelCall
    x, w, b, m = params[:4]
    y = params[-1]
    sk = params[4] if len(params) == 6 else None
    t = Var("task")
    zero = lambda buf: AddressOf(buf, [Const(0, "int64")] * len(buf.shape))  # noqa: E731
    if g.w_layout == "blocked":
        skd = sk.dtype if sk is not None else "none"
        key = ("qgemm", isa, f"{in_dtype}:{skd}") + astuple(g)
        args = [zero(y), zero(x), zero(w), zero(b), zero(m),
                zero(sk) if sk is not None else zero(x), t]
        reads = [x, w, b, m] + ([sk] if sk is not None else [])
    else:
        key = ("qconv", isa, in_dtype) + astuple(g)
        args = [zero(y), zero(x), zero(w), zero(b), zero(m), t]
        reads = [x, w, b, m]
    name = f"{key[0]}_{isa}_{in_dtype}_" + hashlib.sha1(repr(key).encode()).hexdigest()[:10]
    call = KernelCall(name, args, key, reads=reads, writes=[y])
    total = n * g.n_tasks_per_image
    return For(t, total, call, "parallel" if total > 1 else "serial")


def _compute(inputs, attrs, out_types):
    n, g = geometry([TensorType(tuple(t.shape), t.dtype) for t in inputs], attrs)

    def body(k):
        return qconv_body(n, g, inputs[0].dtype, k.params + k.outputs, "scalar")
    f = imperative_kernel(inputs, out_types, body, "qconv")
    f.attrs["qconv"] = {"n": n, "in_dtype": inputs[0].dtype,
                        **{fl.name: getattr(g, fl.name) for fl in fields(g)}}
    f.attrs["flops"] = 2 * n * g.oh * g.ow * g.cout * g.c * g.kh * g.kw
    return [f]


register_op(OP, infer_type=_infer,
            reference=lambda xs, a: [qconv_reference(*xs, a)], compute=_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(4, 5),
            attrs={"layout": "nchw", "kernel": (1, 1), "strides": (1, 1), "pads": (0, 0, 0, 0),
                   "dilations": (1, 1), "x_zp": 0, "y_zp": 0, "lo": -128, "hi": 255,
                   "out_dtype": "uint8", "requant": "float", "rq_mult": 0, "rq_shift": 0,
                   "w_layout": "tap", "cout": 0, "mid_dtype": None, "c_scale": 0.0,
                   "s_scale": 0.0, "s_zp": 0, "o_scale": 1.0, "o_zp": 0, "o_lo": -128,
                   "o_hi": 255, "k_layout": "tap4", "o_relu": False},
            doc="int8 convolution / dense layer u8|s8 x s8 -> s32 with the requantization "
                "(bias, scale, round half even, ReLU, saturation) fused; see ember.ops.qnn_conv")
