"""``tir.transform.partition_loops`` (bounds-checked loops split into border and interior
ranges at code generation), checked against NumPy on compiled kernels, and the structure it
produces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ember import te
from ember.runtime.kernel import compile_prim_func
from ember.tir import transform as T
from ember.tir.arith import collect_unique, stmt_exprs, walk_stmt
from ember.tir.expr import Select, Var
from ember.tir.stmt import For
from ember.tir.schedule.rules import schedule_default


def _pad_func(shape, pads, channels_last_from_first=False):
    """A zero-padding stage (the form ``nn.conv``'s materialized ``pad`` takes) of a 2-D
    image; with ``channels_last_from_first`` x is (C, H, W) and the output (H', W', C)."""
    (pt, pl, pb, pr) = pads
    if channels_last_from_first:
        c, h, w = shape
        x = te.placeholder((c, h, w), "float32", "x")

        def f(i, j, k):
            ok = te.all_of(te.ge(i - pt, 0), te.lt(i - pt, h), te.ge(j - pl, 0),
                           te.lt(j - pl, w))
            return te.select(ok, x[k, i - pt, j - pl], te.const(0, "float32"))
        y = te.compute((h + pt + pb, w + pl + pr, c), f, name="pad")
    else:
        h, w, c = shape
        x = te.placeholder((h, w, c), "float32", "x")

        def f(i, j, k):
            ok = te.all_of(te.ge(i - pt, 0), te.lt(i - pt, h), te.ge(j - pl, 0),
                           te.lt(j - pl, w))
            return te.select(ok, x[i - pt, j - pl, k], te.const(0, "float32"))
        y = te.compute((h + pt + pb, w + pl + pr, c), f, name="pad")
    return te.create_prim_func([x, y], "pad")


def _selects(s) -> int:
    return sum(len(collect_unique(e, lambda n: isinstance(n, Select)))
               for x in walk_stmt(s) for e in stmt_exprs(x))


@settings(max_examples=12, deadline=None)
@given(h=st.integers(1, 9), w=st.integers(1, 9), c=st.sampled_from([1, 3, 16]),
       pads=st.tuples(*[st.integers(0, 3)] * 4), cf=st.booleans())
def test_partitioned_pad_matches_numpy(h, w, c, pads, cf):
    f = schedule_default(_pad_func((c, h, w) if cf else (h, w, c), pads, cf), "llvm")
    x = np.random.default_rng(h * 100 + w).standard_normal((c, h, w) if cf else (h, w, c))
    x = x.astype(np.float32)
    xl = np.moveaxis(x, 0, -1) if cf else x
    ref = np.pad(xl, [(pads[0], pads[2]), (pads[1], pads[3]), (0, 0)])
    np.testing.assert_array_equal(compile_prim_func(f).run([x])[0], ref)


def test_interior_of_a_padded_row_has_no_select():
    """The pad of a 3-channel 224x224 image (1 pixel each side): the pixel loop becomes left
    border / interior / right border; only the row's (loop-invariant) check is left inside."""
    from ember.tir.transform import lower_blocks
    f = lower_blocks(_pad_func((3, 224, 224), (1, 1, 1, 1), True))
    g = T.partition_loops(f)
    before = [x for x in walk_stmt(f.body) if isinstance(x, For) and x.extent == 226]
    after = [x for x in walk_stmt(g.body) if isinstance(x, For)]
    assert len(before) == 2 and sorted({x.extent for x in after}) == [3, 224, 226]
    interior = [x for x in after if x.extent == 224][0]
    assert _selects(interior) == 1  # was a select on both the row and the pixel
    conds = [q.cond for x in walk_stmt(interior) for e in stmt_exprs(x)
             for q in collect_unique(e, lambda n: isinstance(n, Select))]
    assert not any(n is interior.var for c in conds
                   for n in collect_unique(c, lambda n: isinstance(n, Var)))


@pytest.mark.parametrize("limit", [0, 2])
def test_partition_declines_when_it_would_take_too_many_ranges(limit, monkeypatch):
    monkeypatch.setattr(T, "MAX_PARTITION_PARTS", limit)
    from ember.tir.transform import lower_blocks
    f = lower_blocks(_pad_func((6, 6, 3), (1, 1, 1, 1)))
    assert T.partition_loops(f) is f
