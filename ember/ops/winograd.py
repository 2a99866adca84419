"""Winograd minimal filtering for 3x3 stride-1 convolutions (channels-last).

Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (CVPR 2016, arXiv:1509.09308):
``F(m x m, r x r)`` computes an ``m x m`` output tile of a 2-D correlation with an ``r x r``
filter from an ``n x n`` input tile (``n = m + r - 1``) with ``n^2`` multiplications instead of
``m^2 r^2``::

    Y = A^T [ (G g G^T) (.) (B^T d B) ] A

Over a whole layer the ``(.)`` becomes, for each of the ``n^2`` tile positions ``t``, a matrix
product ``M[t] = V[t] @ U[t]`` of the transformed input tiles ``V[t]: (P, C)`` (``P`` tiles)
and the transformed weights ``U[t]: (C, M)``. ember splits a convolution into

- ``nn.winograd_input`` ``x (N, H, W, C) -> V (n*n, P, C)`` (``P = N * th * tw`` tiles, the
  padding read as zeros, partial tiles at the bottom/right edges filled with zeros);
- the weight transform ``U = G g G^T`` (``winograd_weight``, NumPy, once at compile time);
- a batched ``matmul`` ``V @ U -> (n*n, P, M)`` (the packed-GEMM schedule);
- ``nn.winograd_output`` ``(n*n, P, M) -> y (N, OH, OW, M)`` (``A^T . A``, partial tiles
  cropped), into which the convolution's elementwise epilogue fuses.

The matrices are derived here (``winograd_matrices``) by the modified Toom-Cook construction:
with evaluation points ``a_0..a_{n-2}`` and infinity, a linear convolution of polynomials is
``s = V^-1 [(E g) (.) (F h)]`` (``V, E, F`` Vandermonde matrices of ``n, r, m`` columns, the
infinity row selecting the leading coefficient); the correlation is its transpose, so
``A^T = F^T``, ``G = E``, ``B^T = V^-T`` (rows of ``B^T`` scaled to integers, ``G`` divided by
the same factors). Points: F(2,3) ``0, 1, -1``; F(4,3) ``0, 1, -1, 2, -2``; F(6,3) adds
``1/2, -1/2`` (its rounding error is larger; see ``docs/performance.md``).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from math import gcd, lcm

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from .registry import OpPattern, register_op

POINTS = {2: (0, 1, -1), 4: (0, 1, -1, 2, -2),
          6: (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2))}


def _inverse(a: list) -> list:
    """Exact inverse of a square matrix of Fractions (Gauss-Jordan)."""
    n = len(a)
    m = [list(r) + [Fraction(int(i == j)) for j in range(n)] for i, r in enumerate(a)]
    for c in range(n):
        p = next(r for r in range(c, n) if m[r][c] != 0)
        m[c], m[p] = m[p], m[c]
        piv = m[c][c]
        m[c] = [x / piv for x in m[c]]
        for r in range(n):
            if r != c and m[r][c] != 0:
                f = m[r][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [r[n:] for r in m]


@lru_cache(maxsize=None)
def winograd_matrices(m: int, r: int = 3) -> tuple:
    """``(A^T (m, n), G (n, r), B^T (n, n))`` of F(m x m, r x r) as tuples of ``Fraction`` rows
    (``n = m + r - 1``), derived by the modified Toom-Cook construction of the module doc.

    Raises:
        ShapeMismatchError: no evaluation points are defined for ``m`` (2, 4 and 6 are).
    """
    if m not in POINTS or r != 3:
        raise ShapeMismatchError(f"winograd: F({m}x{m}, {r}x{r}) is not defined (tiles "
                                 f"{sorted(POINTS)} with 3x3 filters)")
    pts = [Fraction(p) for p in POINTS[m]]
    n = m + r - 1

    def vander(k):
        rows = [[p ** i for i in range(k)] for p in pts]
        return rows + [[Fraction(0)] * (k - 1) + [Fraction(1)]]
    vinv = _inverse(vander(n))
    bt = [[vinv[i][j] for i in range(n)] for j in range(n)]      # V^-T
    f = vander(m)
    at = [[f[j][i] for j in range(n)] for i in range(m)]         # F^T
    g = vander(r)                                                 # E
    for j in range(n):  # row j of B^T times s, row j of G divided by s: integer B^T
        den = lcm(*[x.denominator for x in bt[j]])
        num = 0
        for x in bt[j]:
            num = gcd(num, (x * den).numerator)
        s = Fraction(den, num or 1)
        bt[j] = [x * s for x in bt[j]]
        g[j] = [x / s for x in g[j]]
    return (tuple(map(tuple, at)), tuple(map(tuple, g)), tuple(map(tuple, bt)))


def _np(mat) -> np.ndarray:
    return np.array([[float(x) for x in row] for row in mat], np.float64)


def num_tiles(out_size: int, m: int) -> int:
    """Tiles of ``m`` outputs covering ``out_size`` (the last one partial when it does not
    divide)."""
    return -(-out_size // m)


def weight_transform(w: np.ndarray, m: int) -> np.ndarray:
    """``U (n*n, C, M)`` (float64 math, ``w``'s dtype) of weights ``w (M, C, 3, 3)``:
    ``U[a*n + b, c, k] = (G w[k, c] G^T)[a, b]``. Done once at compile time.

    Raises:
        ShapeMismatchError: ``w`` is not ``(M, C, 3, 3)``.
    """
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ShapeMismatchError(f"winograd weight transform: weights {w.shape} are not "
                                 f"(M, C, 3, 3)")
    _, g, _ = winograd_matrices(m)
    G = _np(g)
    n = G.shape[0]
    u = np.einsum("ai,kcij,bj->abck", G, w.astype(np.float64), G)
    return np.ascontiguousarray(u.reshape(n * n, w.shape[1], w.shape[0]).astype(w.dtype))


# nn.winograd_input ---------------------------------------------------------------------------

def _in_geom(shape, attrs):
    m = attrs["tile"]
    pt, pl, pb, pr = attrs["pads"]
    N, H, W, C = shape
    oh, ow = H + pt + pb - 2, W + pl + pr - 2
    return m, m + 2, (pt, pl), (oh, ow), num_tiles(oh, m), num_tiles(ow, m)


def _rows(shape, attrs, th, tw) -> int:
    """Rows of V: the tiles, or ``attrs["num_tiles"]`` when it pads them (zero rows)."""
    p = shape[0] * th * tw
    return max(p, attrs.get("num_tiles") or 0)


def _input_type(types, attrs):
    x = types[0]
    if x.ndim != 4 or attrs["tile"] not in POINTS or len(attrs["pads"]) != 4:
        raise ShapeMismatchError(f"nn.winograd_input: needs an NHWC input, tile in "
                                 f"{sorted(POINTS)} and 4 pads; got {x.shape}, {attrs}")
    m, n, _, (oh, ow), th, tw = _in_geom(x.shape, attrs)
    if oh < 1 or ow < 1:
        raise ShapeMismatchError(f"nn.winograd_input: a 3x3 window does not fit {x.shape} "
                                 f"with pads {attrs['pads']}")
    return [TensorType((n * n, _rows(x.shape, attrs, th, tw), x.shape[3]), x.dtype)]


def _input_ref(xs, attrs):
    x = xs[0]
    m, n, (pt, pl), _, th, tw = _in_geom(x.shape, attrs)
    N, H, W, C = x.shape
    xp = np.zeros((N, th * m + 2, tw * m + 2, C), np.float64)
    hh, ww = min(H, th * m + 2 - pt), min(W, tw * m + 2 - pl)
    xp[:, pt:pt + hh, pl:pl + ww] = x[:, :hh, :ww]
    idx_h = np.arange(th)[:, None] * m + np.arange(n)[None, :]   # (th, n)
    idx_w = np.arange(tw)[:, None] * m + np.arange(n)[None, :]
    d = xp[:, idx_h[:, :, None, None], idx_w[None, None, :, :]]   # N, th, n, tw, n, C
    BT = _np(winograd_matrices(m)[2])
    v = np.einsum("ia,jb,nyaxbc->ijnyxc", BT, BT, d).reshape(n * n, N * th * tw, C)
    out = np.zeros((n * n, _rows(x.shape, attrs, th, tw), C), x.dtype)
    out[:, :N * th * tw] = v
    return [out]


def _weighted_sum(terms, dtype: str):
    """``sum(coef * value)`` over ``terms`` with unit coefficients as plain adds/subtracts."""
    acc = None
    for c, v in terms:
        c = float(c)
        if acc is None:
            acc = v if c == 1 else (-v if c == -1 else te.const(c, dtype) * v)
        elif c == 1:
            acc = acc + v
        elif c == -1:
            acc = acc - v
        else:
            acc = acc + te.const(c, dtype) * v
    return acc if acc is not None else te.const(0.0, dtype)


def _chain(var, leaves):
    """``select(var == 0, leaves[0], select(var == 1, ...))``: resolved per value of ``var``
    once the schedule unrolls its loop (``ember.tir.transform.expand_unrolled``)."""
    e = leaves[-1]
    for k in range(len(leaves) - 2, -1, -1):
        e = te.select(te.eq(var, k), leaves[k], e)
    return e


def _input_compute(inputs, attrs, out_types):
    x = inputs[0]
    m, n, (pt, pl), _, th, tw = _in_geom(x.shape, attrs)
    N, H, W, C = x.shape
    bt = winograd_matrices(m)[2]

    padded = out_types[0].shape[1] > N * th * tw

    def f(t, p, c):
        ty, tx = (p // tw) % th, p % tw
        nb = p // (th * tw)
        loads = {}

        def d(a, b):
            if (a, b) not in loads:
                h, w = ty * m + (a - pt), tx * m + (b - pl)
                conds = [te.ge(h, 0), te.lt(h, H), te.ge(w, 0), te.lt(w, W)]
                cond = te.all_of(*(conds + ([te.lt(p, N * th * tw)] if padded else [])))
                loads[(a, b)] = te.select(cond, x[nb, h, w, c], te.const(0.0, x.dtype))
            return loads[(a, b)]
        # separable: rows r[i][b] = (B^T d)[i, b] are shared DAG nodes, so once the schedule
        # puts every position in one loop body the C compiler computes each once
        rows = {}

        def r(i, b):
            if (i, b) not in rows:
                rows[(i, b)] = _weighted_sum([(bt[i][a], d(a, b)) for a in range(n)
                                              if bt[i][a] != 0], x.dtype)
            return rows[(i, b)]
        leaves = [_weighted_sum([(bt[j][b], r(i, b)) for b in range(n) if bt[j][b] != 0],
                                x.dtype) for i in range(n) for j in range(n)]
        return _chain(t, leaves)
    return [te.compute(out_types[0].shape, f, name="winograd_input")]


register_op("nn.winograd_input", infer_type=_input_type, reference=_input_ref,
            compute=_input_compute, pattern=OpPattern.OPAQUE, num_inputs=(1, 1),
            attrs={"tile": 2, "pads": (1, 1, 1, 1), "num_tiles": None},
            doc="Winograd input transform of a 3x3 stride-1 convolution: x (N, H, W, C) -> "
                "V (n*n, P, C), V[t] = B^T d B per tile (n = tile + 2); P = N*th*tw, or "
                "num_tiles when larger (zero rows: a row count the GEMM tiles well); see "
                "ember.ops.winograd")


# nn.winograd_output --------------------------------------------------------------------------

def _out_geom(shape, attrs):
    m = attrs["tile"]
    oh, ow = attrs["out_size"]
    th, tw = num_tiles(oh, m), num_tiles(ow, m)
    return m, m + 2, (oh, ow), th, tw, attrs.get("batch") or shape[1] // (th * tw)


def _output_type(types, attrs):
    y = types[0]
    m = attrs["tile"]
    if m not in POINTS or y.ndim != 3 or y.shape[0] != (m + 2) ** 2:
        raise ShapeMismatchError(f"nn.winograd_output: needs ((tile+2)^2, P, M) with tile in "
                                 f"{sorted(POINTS)}; got {y.shape}, tile {m}")
    _, _, (oh, ow), th, tw, N = _out_geom(y.shape, attrs)
    if N < 1 or N * th * tw > y.shape[1] or (not attrs.get("batch") and N * th * tw != y.shape[1]):
        raise ShapeMismatchError(f"nn.winograd_output: {y.shape[1]} tiles do not cover an "
                                 f"output of {oh}x{ow} in {m}x{m} tiles")
    return [TensorType((N, oh, ow, y.shape[2]), y.dtype)]


def _output_ref(xs, attrs):
    y = xs[0]
    m, n, (oh, ow), th, tw, N = _out_geom(y.shape, attrs)
    AT = _np(winograd_matrices(m)[0])
    mm = y[:, :N * th * tw].astype(np.float64).reshape(n, n, N, th, tw, -1)
    o = np.einsum("ia,jb,abnyxk->nyixjk", AT, AT, mm).reshape(N, th * m, tw * m, -1)
    return [np.ascontiguousarray(o[:, :oh, :ow].astype(y.dtype))]


def _output_compute(inputs, attrs, out_types):
    y = inputs[0]
    m, n, _, th, tw, _ = _out_geom(y.shape, attrs)
    at = winograd_matrices(m)[0]

    def f(nb, h, w, k):
        i, j = h % m, w % m
        p = (nb * th + h // m) * tw + w // m
        # separable: s[a_][b] = (A^T m)[a_, b] shared by the m outputs of row a_
        rows = []
        for a_ in range(m):
            s = [_weighted_sum([(at[a_][a], y[a * n + b, p, k]) for a in range(n)
                                if at[a_][a] != 0], y.dtype) for b in range(n)]
            leaves = [_weighted_sum([(at[b_][b], s[b]) for b in range(n) if at[b_][b] != 0],
                                    y.dtype) for b_ in range(m)]
            rows.append(_chain(j, leaves))
        return _chain(i, rows)
    return [te.compute(out_types[0].shape, f, name="winograd_output")]


register_op("nn.winograd_output", infer_type=_output_type, reference=_output_ref,
            compute=_output_compute, pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(1, 1),
            attrs={"tile": 2, "out_size": None, "batch": None},
            doc="Winograd output transform: (n*n, P, M) -> y (N, OH, OW, M), y tile = A^T m A, "
                "partial tiles cropped; P = N*th*tw, or more (padding rows, ignored) when "
                "batch gives N; elementwise epilogues fuse into it")


__all__ = ["winograd_matrices", "weight_transform", "num_tiles", "POINTS"]
