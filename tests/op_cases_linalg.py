"""Randomized cases for the linear-algebra operators (``ember.ops.linalg``). Registered into
``op_cases.CASES`` (imported at its end)."""

from __future__ import annotations

from hypothesis import strategies as st

from op_cases import FLOATS, Case, cases, one_of, rng, values

# (equation, operand letter strings for shapes); '.' marks an ellipsis of 0-2 dims
EQUATIONS = ["ij->ji", "ij,jk->ik", "bij,bjk->bik", "ii->i", "ii", "i,i", "ij->", "ij->i",
             "...ij,...jk->...ik", "i,j->ij", "ijk->kji", "bii->bi", "ij,ij->ij", "abc,cd->abd",
             "...i->...", "ij,jk,kl->il", "i->i", "iij->ij"]


@cases("einsum")
def einsum(draw, op):
    r = rng(draw)
    eq = one_of(draw, EQUATIONS, "equation")
    lhs = eq.split("->")[0]
    sizes = {c: draw(st.integers(1, 4), label=f"size {c}") for c in sorted(set(lhs) - {".", ","})}
    ell = tuple(draw(st.lists(st.integers(1, 3), max_size=2), label="ellipsis"))
    dt = one_of(draw, FLOATS + ["int32"], "dtype")
    ins = []
    for term in lhs.split(","):
        shp = []
        for tok in term.replace("...", "."):
            if tok == ".":
                k = draw(st.integers(0, len(ell)), label="ellipsis rank")
                shp.extend(d if draw(st.booleans(), label="keep") else 1
                           for d in ell[len(ell) - k:])
            else:
                shp.append(sizes[tok])
        ins.append(values(r, tuple(shp), dt, "small"))
    return Case(ins, {"equation": eq}, rtol=1e-4, atol=1e-5)


@cases("det")
def det(draw, op):
    r = rng(draw)
    n = draw(st.integers(1, 5), label="n")
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2), label="batch"))
    x = values(r, batch + (n, n), one_of(draw, FLOATS, "dtype"))
    if n > 1 and draw(st.integers(0, 4), label="singular") == 0:
        x[..., 1, :] = x[..., 0, :]  # singular: det 0
    return Case([x], {}, rtol=1e-4, atol=1e-4)
