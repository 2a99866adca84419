"""Schedule primitives one by one: what they compute (against NumPy), the error each raises when
its precondition fails (naming primitive, block/loop and condition), and trace replay."""

from __future__ import annotations

import numpy as np
import pytest

from ember import te
from ember.codegen.c import emit_c_function
from ember.errors import ScheduleError
from ember.runtime.kernel import compile_prim_func
from ember.tir.schedule import IndexMap, Schedule, Trace

RNG = np.random.default_rng(0)


def _mm_relu(m=16, n=32, k=8, inline=True):
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r.var] * B[r.var, j], axis=r), name="mm")
    D = te.compute((m, n), lambda i, j: te.maximum(C[i, j], te.const(0.0, "float32")),
                   name="relu")
    return te.create_prim_func([A, B, D], "f", inline=inline)


def _data(func):
    n_in = func.attrs["num_inputs"]
    return [RNG.standard_normal(p.shape).astype(np.float32) for p in func.params[:n_in]]


def _run(func, ins):
    return compile_prim_func(func).run(ins)[0]


def _ref(ins):
    return np.maximum(ins[0] @ ins[1], 0)


def test_split_reorder_parallel_vectorize_compute_the_same():
    f = _mm_relu(inline=False)
    ins = _data(f)
    sch = Schedule(f)
    i, j = sch.get_loops("relu")
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(io, jo, ii, ji)
    sch.compute_at("mm", jo)
    sch.vectorize(ji)
    sch.parallel(io)
    np.testing.assert_allclose(_run(sch.func, ins), _ref(ins), rtol=1e-5, atol=1e-5)
    assert "ember_parallel_for" in emit_c_function(sch.func)


def test_non_divisible_split_predicates_the_tail():
    f = _mm_relu(m=10, inline=False)
    ins = _data(f)
    sch = Schedule(f)
    sch.split(sch.get_loops("relu")[0], [None, 4])  # 3 x 4 covers 10 with a predicate
    np.testing.assert_allclose(_run(sch.func, ins), _ref(ins), rtol=1e-5, atol=1e-5)


def test_fuse_and_unroll():
    f = _mm_relu(inline=False)
    ins = _data(f)
    sch = Schedule(f)
    i, j = sch.get_loops("relu")
    fused = sch.fuse(i, j)
    sch.unroll(sch.split(fused, [None, 4])[1])
    np.testing.assert_allclose(_run(sch.func, ins), _ref(ins), rtol=1e-5, atol=1e-5)


def test_cache_read_write_inline_and_decompose():
    f = _mm_relu(inline=False)
    ins = _data(f)
    sch = Schedule(f)
    sch.cache_read("mm", 0, "global")
    sch.cache_write("mm", 0, "global")
    i, j, k = sch.get_loops("mm")
    sch.decompose_reduction("mm", i)
    sch.reverse_compute_inline("relu")
    np.testing.assert_allclose(_run(sch.func, ins), _ref(ins), rtol=1e-5, atol=1e-5)


def test_reverse_compute_at_and_storage_align():
    f = _mm_relu(inline=False)
    ins = _data(f)
    sch = Schedule(f)
    sch.storage_align("mm", 0, 0, 16, 1)
    i = sch.get_loops("mm")[0]
    sch.reverse_compute_at("relu", i)
    np.testing.assert_allclose(_run(sch.func, ins), _ref(ins), rtol=1e-5, atol=1e-5)


def test_transform_layout_of_a_parameter_is_recorded_for_the_caller():
    f = _mm_relu()
    ins = _data(f)
    sch = Schedule(f)
    imap = IndexMap.from_func(2, lambda k, j: (j // 8, k, j % 8))
    sch.transform_layout("mm", ("read", 1), imap)
    lay = sch.func.attrs["param_layouts"][1]
    assert lay["shape"] == [8, 32]
    packed = IndexMap.from_json(lay["index_map"]).apply_numpy(ins[1])
    assert packed.shape == (4, 8, 8)
    np.testing.assert_allclose(_run(sch.func, [ins[0], packed]), _ref(ins), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("step, match", [
    (lambda s: s.parallel(s.get_loops("mm")[2]), r"parallel of loop .*reduction iterator"),
    (lambda s: s.vectorize(s.get_loops("mm")[2]), r"vectorize of loop .*reduction iterator"),
    (lambda s: s.split(s.get_loops("mm")[0], [3, 2]), r"split of loop .* cover only 6"),
    (lambda s: s.split(s.get_loops("mm")[0], [None, None]), r"at most one factor may be None"),
    (lambda s: s.fuse(s.get_loops("mm")[0], s.get_loops("relu")[1]),
     r"fuse of loops .* is not the only statement"),
    (lambda s: s.compute_inline("mm"), r"compute_inline of block 'mm': the block is a reduction"),
    (lambda s: s.compute_at("relu", s.get_loops("mm")[0]),
     r"compute_at of block 'relu' .* function output"),
    (lambda s: s.decompose_reduction("relu", s.get_loops("relu")[0]),
     r"decompose_reduction of block 'relu' .* no init"),
    (lambda s: s.storage_align("relu", 0, 0, 16, 1), r"storage_align .* function parameter"),
    (lambda s: s.cache_read("mm", 5, "local"), r"cache_read: block 'mm' reads 2 buffers"),
    (lambda s: s.cache_read("mm", 0, "texture"), r"unknown storage scope 'texture'"),
    (lambda s: s.get_block("nope"), r"no block named 'nope'"),
    (lambda s: s.tensorize(s.get_loops("mm")[0], "gemm.neon.f32"), r"unknown intrinsic"),
    (lambda s: s.tensorize(s.get_loops("mm")[0], "gemm.avx512.f32.pfsoon"),
     r"unknown intrinsic .*options from \['pfnext'\]"),
    (lambda s: s.tensorize(s.get_loops("mm")[0], "dwconv.avx512.f32.pfnext"),
     r"unknown intrinsic"),
    (lambda s: s.tensorize(s.get_loops("relu")[0], "gemm.avx512.f32"),
     r"tensorize of loop .* is not an update C = C \+ A \* B"),
    (lambda s: s.transform_layout("mm", ("read", 0), IndexMap.from_func(
        2, lambda i, k: (i % 2, k))), r"sends two elements to the same place"),
])
def test_preconditions_raise_named_errors_and_leave_the_schedule_unchanged(step, match):
    sch = Schedule(_mm_relu(inline=False))
    before = emit_c_function(sch.func)
    with pytest.raises(ScheduleError, match=match):
        step(sch)
    assert emit_c_function(sch.func) == before and len(sch.trace) == 0


def _tiled_mm_relu(f, nr: int) -> Schedule:
    """``f`` (``_mm_relu``) with 4 x ``nr`` register tiles of ``mm`` computed at the relu's
    column tiles and the reduction loop outside the tile loops: ready to tensorize."""
    sch = Schedule(f)
    i, j = sch.get_loops("relu")
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, nr])
    sch.reorder(io, jo, ii, ji)
    sch.compute_at("mm", jo)
    loops = sch.get_loops("mm")
    sch.reorder(loops[-1], loops[-3], loops[-2])
    return sch


def test_tensorize_gemm_micro_kernel_matches_numpy():
    f = _mm_relu(m=16, n=32, k=24)
    ins = _data(f)
    sch = _tiled_mm_relu(f, nr=32)
    sch.tensorize(sch.get_loops("mm")[2], "gemm.scalar.f32")
    src = emit_c_function(sch.func)
    assert "ember_ukr_gemm_scalar_f32_4x32_r1" in src
    np.testing.assert_allclose(_run(sch.func, ins), _ref(ins), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "scalar"])
def test_tensorize_pfnext_option_prefetches_the_next_block_and_matches_numpy(isa):
    """``gemm.<isa>.f32.pfnext``: the micro-kernel also prefetches ``B + k * sb`` of its last
    reduction loop (the next call's block) into L2; the result is unchanged."""
    from ember.codegen.microkernel import microkernel_source
    from ember.target import Target
    if isa != "scalar" and {"avx512": "avx512f"}.get(isa, isa) not in Target("llvm").features:
        pytest.skip(f"host has no {isa}")
    f = _mm_relu(m=16, n=32, k=24)
    ins = _data(f)
    sch = _tiled_mm_relu(f, nr=16)
    sch.tensorize(sch.get_loops("mm")[2], f"gemm.{isa}.f32.pfnext")
    assert f"ember_ukr_gemm_{isa}_f32_4x16_r1_pn" in emit_c_function(sch.func)
    mk = microkernel_source("k", ("gemm", isa, "float32", 4, 16, 1, 0, None, 1))
    plain = microkernel_source("k", ("gemm", isa, "float32", 4, 16, 1, 0))
    if isa != "scalar":
        assert "b + k0 * sb0 + 0), _MM_HINT_T1" in mk and "_MM_HINT_T1" not in plain
    np.testing.assert_allclose(_run(sch.func, ins), _ref(ins), rtol=1e-5, atol=1e-5)


def test_tensorize_too_large_a_register_block_names_the_loop():
    # 4 x 32 on AVX2 needs 16 accumulators (12 fit): the error names the tensorized loop and
    # the intrinsic, as every tensorize error does
    f = _mm_relu(m=16, n=32, k=24)
    sch = _tiled_mm_relu(f, nr=32)
    with pytest.raises(ScheduleError, match=r"tensorize of loop .* gemm\.avx2\.f32.*16 "
                                            r"accumulators"):
        sch.tensorize(sch.get_loops("mm")[2], "gemm.avx2.f32")


def test_trace_replays_through_json():
    f = _mm_relu(inline=False)
    sch = Schedule(f)
    i, j = sch.get_loops("relu")
    sch.split(j, [None, 8])
    sch.compute_at("mm", sch.get_loops("relu")[1])
    sch.parallel(sch.get_loops("relu")[0])
    text = sch.trace.to_json()
    replay = Trace.from_json(text).apply_to(f)
    assert emit_c_function(replay.func) == emit_c_function(sch.func)
    with pytest.raises(ScheduleError, match="unknown action"):
        Trace.from_json('[{"action": "Explode"}]')


@pytest.mark.parametrize("fn, shape", [
    (lambda i, j: (j // 4, i, j % 4), (3, 10)),       # panel packing: injective (padded)
    (lambda i, j: (i, j // 2), (3, 10)),              # two columns to one place: not injective
    (lambda i, j: (j, i), (5, 7)),                    # transpose
    (lambda i, j: ((i + j) % 5, 0), (5, 5)),          # a wrap that collides
])
def test_index_map_is_injective_agrees_with_brute_force_at_any_chunk(fn, shape):
    imap = IndexMap.from_func(2, fn)
    seen, injective = set(), True
    for i in range(shape[0]):
        for j in range(shape[1]):
            key = tuple(int(v) for v in fn(i, j))
            injective &= key not in seen
            seen.add(key)
    for chunk in (1, 3, 7, 1 << 16):  # chunk boundaries inside a row and across rows
        assert imap.is_injective(shape, chunk=chunk) is injective


def test_index_map_of_an_empty_buffer_is_injective():
    # was: a raw ValueError (negative dimensions) from the map's extents over an empty axis
    for fn in (lambda a, b, c: (a + b, c), lambda a, b, c: (b, a * 2 + c % 2, c // 2)):
        imap = IndexMap.from_func(3, fn)
        for shape in ((0, 0, 4), (0, 3, 0), (2, 0, 5)):
            assert imap.is_injective(shape, chunk=2) is True


def test_split_permute_index_maps_pack_by_reshape_and_agree_with_the_scatter():
    """``IndexMap.apply_numpy`` carries out a split/permute map (weight packing) as a reshape
    and a transpose, and ``is_injective`` accepts it without mapping every index: both must
    agree with the generic scatter / check, padding included."""
    import numpy as np
    from ember.tir.schedule import IndexMap
    rng = np.random.default_rng(0)
    maps = [
        (lambda o, i, h, w: (o // 32, h, w, i, o % 32), [(64, 3, 7, 7), (40, 5, 1, 1),
                                                          (7, 2, 3, 3)]),
        (lambda b, k, n: (b, n // 32, k, n % 32), [(36, 64, 64), (2, 5, 70)]),
        (lambda o, i: (o // 50, i, o % 50), [(1000, 8), (120, 3)]),
        (lambda a, b: (b, a), [(3, 5)]),
        (lambda a, b: (a // 4, b, a % 4, 0 * b), None),  # not a split/permute: generic path
        (lambda a, b: (a + b,), None),
    ]
    for fn, shapes in maps:
        imap = IndexMap.from_func(len(shapes[0]) if shapes else 2, fn)
        for shape in shapes or [(6, 4)]:
            arr = rng.standard_normal(shape).astype(np.float32)
            fast = imap._split_plan(shape) is not None
            assert fast == (shapes is not None)
            got = imap.apply_numpy(arr, pad_value=-1)
            ref = np.full(imap.new_shape(shape), -1, np.float32)  # the generic scatter
            grids = np.indices(arr.shape, sparse=True)
            try:
                ref[tuple(imap.eval_numpy(list(grids)))] = arr
            except Exception:
                continue
            np.testing.assert_array_equal(got, ref)
            if fast:
                assert imap.is_injective(shape)
                np.testing.assert_array_equal(imap.unapply_numpy(got, shape), arr)
    drop = IndexMap.from_func(2, lambda a, b: (a,))  # drops b: injective only when b is 1
    assert drop._split_plan((3, 1)) is not None and drop._split_plan((3, 2)) is None
    assert not drop.is_injective((3, 2))
