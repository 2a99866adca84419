"""A 2-D transposed convolution as one ordinary convolution over its stride phases.

``nn.conv_transpose(x, w[, b])`` with constant weights, dilation 1 and stride ``(s1, s2)``
becomes (part of ``CanonicalizeOps``):

    z = nn.conv(x, Wc[, bc], strides 1, pads P, group g)    # (N, M*s1*s2, Q1, Q2)
    y = reshape(z, (N, M, s1, s2, Q1, Q2)) -> transpose(0, 1, 4, 2, 5, 3)
        -> reshape (N, M, Q1*s1, Q2*s2) -> strided_slice (the pads / output_padding crop)

Why it is exact: output position ``o`` of a transposed convolution reads ``x[i] * w[kk]`` for
every ``o + p = s*i + kk``. Writing ``o + p = s*q + r`` (phase ``r`` in ``[0, s)``), only taps
``kk = r + s*t`` contribute, from ``x[q - t]``: for each phase a plain correlation of ``x`` with
the sub-kernel ``w[r + s*t]`` reversed in ``t`` (length ``K = ceil(k/s)``, the taps past ``k``
zero). The ``s1*s2`` phases are the output channels of one convolution (channel
``(m*s1 + r1)*s2 + r2``, grouped as the transposed convolution's groups), and the
depth-to-space reshape/transpose interleaves them. So the fast convolution schedules (the
packed GEMM micro-kernels, 1x1 convolutions as GEMMs) run it, with no multiplications by the
zeros a zero-inserted input would have (the "sub-pixel convolution" view: Shi et al. 2016,
"Real-Time Single Image and Video Super-Resolution Using an Efficient Sub-Pixel CNN"; the
transposed-convolution arithmetic of Dumoulin & Visin 2016).

Other forms (non-constant weights, dilation > 1, 1-D/3-D, pads past the kernel) keep
``nn.conv_transpose``'s direct loop nest.
"""

from __future__ import annotations

import numpy as np

from ...ops.nn_ext import _ct_geom
from ..ir import Constant


def conv_transpose_as_conv(rw, x, w, b, attrs: dict):
    """Emit the phase form of ``nn.conv_transpose(x, w[, b], **attrs)`` on the rewriter ``rw``
    and return its output (same type: ``(N, M, *out)``), or ``None`` when the form does not
    apply (``w``/``b`` not ``Constant``, not 2-D, a dilation > 1, or pads so large that the
    convolution would need negative padding)."""
    if not isinstance(w, Constant) or (b is not None and not isinstance(b, Constant)):
        return None
    if x.type.ndim != 4:
        return None
    nsp, s, d, p, k, out = _ct_geom(x.type.shape, w.type.shape, attrs)
    if any(di != 1 for di in d):
        return None
    n, c = x.type.shape[:2]
    g = attrs["group"]
    cg, mg = c // g, w.type.shape[1]
    kt, pads_b, pads_a, qn, off = [], [], [], [], []
    for i in range(nsp):
        h = x.type.shape[2 + i]
        kk = -(-k[i] // s[i])
        q_lo, q_hi = p[i] // s[i], (p[i] + out[i] - 1) // s[i]
        q = q_hi - q_lo + 1
        pb = kk - 1 - q_lo
        pa = q - h - pb + kk - 1
        if pb < 0 or pa < 0:
            return None
        kt.append(kk)
        pads_b.append(pb)
        pads_a.append(pa)
        qn.append(q)
        off.append(p[i] - q_lo * s[i])
    (k1, k2), (s1, s2) = kt, s
    wd = w.data
    wext = np.zeros((c, mg, k1 * s1, k2 * s2), wd.dtype)
    wext[:, :, :k[0], :k[1]] = wd
    # tap kk = t*s + r; reversed in t: Wc[gi, m, r1, r2, ci, t1', t2'] = wext[.., K-1-t', r]
    wr = wext.reshape(g, cg, mg, k1, s1, k2, s2)[:, :, :, ::-1, :, ::-1, :]
    wc = np.ascontiguousarray(wr.transpose(0, 2, 4, 6, 1, 3, 5).reshape(g * mg * s1 * s2, cg,
                                                                         k1, k2))
    args = [x, Constant(wc)]
    if b is not None:
        args.append(Constant(np.ascontiguousarray(np.repeat(b.data.reshape(-1), s1 * s2))))
    z = rw.emit("nn.conv", args, {"strides": [1, 1], "pads": pads_b + pads_a,
                                  "dilations": [1, 1], "group": g})
    m = g * mg
    if s1 * s2 > 1:
        z = rw.emit("reshape", [z], {"newshape": (n, m, s1, s2, qn[0], qn[1])})
        z = rw.emit("transpose", [z], {"perm": (0, 1, 4, 2, 5, 3)})
        z = rw.emit("reshape", [z], {"newshape": (n, m, qn[0] * s1, qn[1] * s2)})
    if any(off) or qn[0] * s1 != out[0] or qn[1] * s2 != out[1]:
        z = rw.emit("strided_slice", [z], {"begin": [0, 0, off[0], off[1]],
                                           "end": [n, m, off[0] + out[0], off[1] + out[1]],
                                           "strides": [1, 1, 1, 1]})
    return z
