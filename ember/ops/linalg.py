"""Linear-algebra operators: Einstein summation (ONNX Einsum) and determinants (ONNX Det).

``einsum`` compiles to one kernel: each output letter is a loop axis, each letter absent from
the output a reduction axis, and the body multiplies the operands' elements (a letter repeated in
one operand reads its diagonal; ``...`` dims broadcast NumPy-style). Half-precision operands
accumulate in float32. ``det`` is an imperative kernel: LU factorization with partial pivoting
per matrix.
"""

from __future__ import annotations

import string

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..tir.expr import is_float
from .imperative import imperative_kernel
from .registry import REQUIRED, OpPattern, broadcast_shapes, register_op

LETTERS = set(string.ascii_letters)


def parse_einsum(equation: str, shapes) -> tuple[list[list], list, dict, tuple]:
    """``(input terms, output term, letter sizes, ellipsis shape)`` of an einsum; a term is a
    list of letters and ``"..."``. Implicit output: the letters used once, sorted, after the
    broadcast ellipsis dims.

    Raises:
        ShapeMismatchError: malformed equation or operand shapes that do not fit it.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms_s = lhs.split(",")
    where = f"einsum {equation!r}: "
    if len(terms_s) != len(shapes):
        raise ShapeMismatchError(f"{where}{len(terms_s)} operand terms for {len(shapes)} inputs")

    def tokens(t):
        out, i = [], 0
        while i < len(t):
            if t.startswith("...", i):
                out.append("...")
                i += 3
            elif t[i] in LETTERS:
                out.append(t[i])
                i += 1
            else:
                raise ShapeMismatchError(f"{where}unexpected character {t[i]!r}")
        return out

    terms = [tokens(t) for t in terms_s]
    sizes: dict = {}
    ell_shapes = []
    for term, shp in zip(terms, shapes):
        n_ell = len(shp) - (len(term) - (1 if "..." in term else 0))
        if ("..." not in term and n_ell != 0) or n_ell < 0:
            raise ShapeMismatchError(f"{where}term {''.join(term)!r} does not match the rank of "
                                     f"shape {tuple(shp)}")
        k = 0
        for tok in term:
            if tok == "...":
                ell_shapes.append(tuple(shp[k:k + n_ell]))
                k += n_ell
                continue
            d = shp[k]
            k += 1
            if tok in sizes and sizes[tok] != d and 1 not in (d, sizes[tok]):
                raise ShapeMismatchError(f"{where}letter {tok!r} has sizes {sizes[tok]} and {d}")
            sizes[tok] = max(sizes.get(tok, d), d) if 1 in (d, sizes.get(tok, d)) else d
    ell = broadcast_shapes(*ell_shapes, where=where) if ell_shapes else ()
    if arrow:
        out = tokens(rhs)
        if ell and "..." not in out:
            raise ShapeMismatchError(f"{where}the output must keep '...'")
        for tok in out:
            if tok != "..." and tok not in sizes:
                raise ShapeMismatchError(f"{where}output letter {tok!r} is in no operand")
    else:
        counts: dict = {}
        for term in terms:
            for tok in term:
                if tok != "...":
                    counts[tok] = counts.get(tok, 0) + 1
        out = (["..."] if ell else []) + sorted(t for t, c in counts.items() if c == 1)
    return terms, out, sizes, tuple(ell)


def _einsum_type(types, attrs):
    terms, out, sizes, ell = parse_einsum(attrs["equation"], [t.shape for t in types])
    dts = {t.dtype for t in types}
    if len(dts) != 1:
        raise ShapeMismatchError(f"einsum: operand dtypes differ: {sorted(dts)}")
    shape = []
    for tok in out:
        shape.extend(ell if tok == "..." else (sizes[tok],))
    return [TensorType(tuple(shape), types[0].dtype)]


def _einsum_ref(xs, attrs):
    dt = xs[0].dtype
    wide = [x.astype(np.float64) if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else x
            for x in xs]
    terms, out, _, _ = parse_einsum(attrs["equation"], [x.shape for x in xs])
    eq = ",".join("".join(t) for t in terms) + "->" + "".join(out)
    return [np.asarray(np.einsum(eq, *wide)).astype(dt)]


def _einsum_compute(inputs, attrs, out_types):
    terms, out, sizes, ell = parse_einsum(attrs["equation"], [t.shape for t in inputs])
    dt = inputs[0].dtype
    acc = "float32" if dt in ("float16", "bfloat16") else dt
    red_letters = sorted({tok for term in terms for tok in term
                          if tok != "..." and tok not in out})
    raxes = {tok: te.reduce_axis(sizes[tok], f"es_{tok}") for tok in red_letters}

    def f(*idx):
        env, k = {}, 0
        ell_vars = ()
        for tok in out:
            if tok == "...":
                ell_vars = idx[k:k + len(ell)]
                k += len(ell)
            else:
                env[tok] = idx[k]
                k += 1
        for tok, ax in raxes.items():
            env[tok] = ax.var
        prod = None
        for term, t in zip(terms, inputs):
            n_ell = t.ndim - (len(term) - (1 if "..." in term else 0))
            index, k = [], 0
            for tok in term:
                if tok == "...":
                    for j in range(n_ell):  # right-aligned broadcast into the output's dims
                        d = t.shape[k + j]
                        index.append(0 if d == 1 else ell_vars[len(ell) - n_ell + j])
                    k += n_ell
                else:
                    index.append(0 if t.shape[k] == 1 and sizes[tok] != 1 else env[tok])
                    k += 1
            v = te.cast(acc, t[tuple(index)])
            prod = v if prod is None else prod * v
        if raxes:
            return te.sum(prod, axis=list(raxes.values()))
        return prod
    y = te.compute(out_types[0].shape, f, name="einsum")
    if y.dtype != dt:
        y = te.compute(y.shape, lambda *i: te.cast(dt, y[i]), name="einsum_cast")
    return [y]


register_op("einsum", infer_type=_einsum_type, reference=_einsum_ref, compute=_einsum_compute,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(1, None),
            attrs={"equation": REQUIRED},
            doc="Einstein summation by equation (explicit or implicit output, repeated letters "
                "as diagonals, '...' broadcast) (ONNX Einsum-12)")


# det -------------------------------------------------------------------------------------------

def _det_type(types, attrs):
    x = types[0]
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or not is_float(x.dtype):
        raise ShapeMismatchError(f"det: input must be floating point (..., n, n), got {x.shape} "
                                 f"{x.dtype}")
    return [TensorType(x.shape[:-2], x.dtype)]


def _det_ref(xs, attrs):
    x = xs[0]
    return [np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)]


def _det_compute(inputs, attrs, out_types):
    n = inputs[0].shape[-1]
    batch = out_types[0].shape

    def body(k):
        x, = k.inputs
        y, = k.outputs
        rd = k.read

        def one(*b):
            def with_a(a):
                def with_det(det):
                    def with_piv(piv):
                        copy = k.loop((n, n), lambda i, j: k.store(a, (i, j), rd(x, b + (i, j))))

                        def column(c):
                            def better(r):
                                cand = te.abs(rd(a, (r, c)))
                                best = te.abs(rd(a, (rd(piv, ()), c)))
                                return k.if_(te.all_of(te.gt(r, c), te.gt(cand, best)),
                                             k.store(piv, (), r))
                            p = rd(piv, ())

                            def swap(j):
                                return k.local((), "float64", lambda t: k.seq(
                                    k.store(t, (), rd(a, (c, j))),
                                    k.store(a, (c, j), rd(a, (p, j))),
                                    k.store(a, (p, j), rd(t, ()))), "swap")

                            def eliminate(r):
                                def update(j):
                                    f = rd(a, (r, c)) / rd(a, (c, c))
                                    return k.if_(te.gt(j, c), k.store(
                                        a, (r, j), rd(a, (r, j)) - f * rd(a, (c, j))))
                                return k.if_(te.all_of(te.gt(r, c), te.ne(rd(a, (c, c)), 0.0)),
                                             k.loop((n,), update))
                            return k.seq(
                                k.store(piv, (), c),
                                k.loop((n,), better),
                                k.if_(te.ne(p, c), k.seq(k.loop((n,), swap),
                                                         k.store(det, (), -rd(det, ())))),
                                k.store(det, (), rd(det, ()) * rd(a, (c, c))),
                                k.loop((n,), eliminate))
                        return k.seq(copy, k.store(det, (), te.const(1.0, "float64")),
                                     k.loop((n,), column), k.store(y, b, rd(det, ())))
                    return k.local((), "int64", with_piv, "piv")
                return k.local((), "float64", with_det, "det")
            return k.local((n, n), "float64", with_a, "lu")
        return k.loop(batch, one) if batch else one()
    return imperative_kernel(inputs, out_types, body, "det")


register_op("det", infer_type=_det_type, reference=_det_ref, compute=_det_compute,
            pattern=OpPattern.OPAQUE,
            doc="determinant of each (n, n) matrix of x (..., n, n), by LU factorization with "
                "partial pivoting in double precision (ONNX Det)")
