"""The runtime of symbolic plans (issue 18): one native call per run through the generated
``ember_run_sym`` entry (and the kernel-by-kernel fallback), outputs written in place, the
arena sized once from declared bounds, per-kernel profiles, typed errors, and warm hits of the
compiled-model cache for ``ember.compile(..., dynamic=...)``."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember import compile_cache
from ember.errors import InputError, ShapeMismatchError

from test_dynamic_model import _two_input_model
from test_dynamic_shapes import _attention_like_model

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")


def _session(m):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def _embedding_model():
    """``LayerNorm(table[ids])`` plus the ids passed through as a second output: a gather
    (whose kernel checks its indices) over ``(batch, seq)`` token ids."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "table"),
             numpy_helper.from_array(np.ones(8, np.float32), "g"),
             numpy_helper.from_array(np.zeros(8, np.float32), "b")]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
             helper.make_node("LayerNormalization", ["e", "g", "b"], ["y"], axis=-1)]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])]
    return helper.make_model(helper.make_graph(nodes, "emb", [ids], outs, inits),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("use_aot", [True, False], ids=["aot", "kernel_by_kernel"])
def test_aot_entry_and_fallback_match_onnxruntime_at_several_shapes(use_aot):
    m = _attention_like_model()
    model = ember.compile(m, dynamic={"seq": (1, 32)})
    ex = model._executor
    assert model.plan["aot"] == "ember_run_sym" and ex.symbolic.has_aot and ex.use_aot
    assert "ember_run_sym" in model.source
    ex.use_aot = use_aot
    sess = _session(m)
    rng = np.random.default_rng(11)
    for b, s in [(1, 1), (3, 16), (2, 5), (1, 32), (3, 16)]:
        x = rng.standard_normal((b, s, 16)).astype(np.float32)
        got = model.run({"x": x})[0]
        np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert ex.symbolic.layouts_planned == 4  # (3, 16) again: its prepared run is reused
    assert model.info["compile_count"] == 1


def test_aot_and_fallback_agree_bit_for_bit_and_outputs_are_fresh_arrays():
    m = _two_input_model()
    model = ember.compile(m, dynamic={"seq": (1, 16)})
    ex = model._executor
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 7, 8)).astype(np.float32)
    ex.use_aot = True
    y1 = model.run({"a": a, "b": a})[0]
    ex.use_aot = False
    y2 = model.run([a, a])[0]
    np.testing.assert_array_equal(y1, y2)
    # outputs are written in place by their kernel: a later run must not touch an earlier
    # result, at the same shape or another one
    ex.use_aot = True
    keep = y1.copy()
    model.run({"a": 2 * a, "b": a})
    model.run({"a": a[:, :3].copy(), "b": a[:, :3].copy()})
    np.testing.assert_array_equal(y1, keep)
    assert y1 is not y2 and y1.flags.owndata and y1.flags.writeable


def test_contradicting_inputs_raise_shape_mismatch_after_shapes_are_cached():
    model = ember.compile(_two_input_model(), dynamic={"seq": (1, 16)})
    a = np.ones((2, 5, 8), np.float32)
    for use_aot in (True, False):
        model._executor.use_aot = use_aot
        model.run({"a": a, "b": a})  # (2, 5) is prepared now
        with pytest.raises(ShapeMismatchError, match=r"symbol 'seq': input 'a' axis 1 gives 5 "
                                                     r"but input 'b' axis 1 gives 6"):
            model.run({"a": a, "b": np.ones((2, 6, 8), np.float32)})
        with pytest.raises(ShapeMismatchError, match=r"'seq' = 17.*bounds \[1, 16\]"):
            big = np.ones((1, 17, 8), np.float32)
            model.run({"a": big, "b": big})
        with pytest.raises(ShapeMismatchError, match="axis 2 must be 8"):
            model.run({"a": np.ones((2, 5, 7), np.float32), "b": np.ones((2, 5, 7), np.float32)})
        with pytest.raises(InputError, match="dtype"):
            model.run({"a": a.astype(np.float64), "b": a})
        with pytest.raises(InputError, match="missing"):
            model.run({"a": a})


def test_arena_is_allocated_once_from_declared_bounds_and_grows_without_them():
    m, m2 = _attention_like_model(), _two_input_model()
    bounded = ember.compile(m, dynamic={"batch": (1, 4), "seq": (1, 32)})
    free = ember.compile(m2, dynamic=True)  # no bounds: sized by the runs
    rb, rf = bounded._executor.symbolic, free._executor.symbolic
    assert rb.arena_bytes_max is not None and rb.arena_allocations == 1
    assert rf.arena_bytes_max is None and rf.arena is None
    sess, sess2 = _session(m), _session(m2)
    rng = np.random.default_rng(2)
    arena = rb.arena
    for b, s in [(1, 2), (4, 32), (2, 9), (4, 31)]:
        x = rng.standard_normal((b, s, 16)).astype(np.float32)
        np.testing.assert_allclose(bounded.run({"x": x})[0], sess.run(None, {"x": x})[0],
                                   rtol=1e-4, atol=1e-5)
        a = rng.standard_normal((b, 4 * s, 8)).astype(np.float32)
        np.testing.assert_allclose(free.run({"a": a, "b": a})[0],
                                   sess2.run(None, {"a": a, "b": a})[0], rtol=1e-4, atol=1e-5)
    assert rb.arena is arena and rb.arena_allocations == 1
    assert rb.arena.nbytes == rb.arena_bytes_max
    assert rf.arena_allocations == 2  # (1, 8), then the larger (4, 128); never shrinks


def test_gather_out_of_range_is_an_input_error_naming_the_node_on_both_paths():
    m = _embedding_model()
    model = ember.compile(m, dynamic={"seq": (1, 64)})
    sess = _session(m)
    ids = np.array([[1, 9, 0], [4, 4, 2]], np.int64)
    y, ids_out = model.run({"ids": ids})
    want_y, want_ids = sess.run(None, {"ids": ids})
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(ids_out, want_ids)
    assert ids_out is not ids  # an input passed through is copied
    bad = ids.copy()
    bad[1, 2] = 10
    for use_aot in (True, False):
        model._executor.use_aot = use_aot
        with pytest.raises(InputError, match=r"node .*out of range"):
            model.run({"ids": bad})
    model._executor.use_aot = True
    np.testing.assert_allclose(model.run({"ids": ids})[0], want_y, rtol=1e-4, atol=1e-5)


def test_profile_of_a_symbolic_model_times_each_kernel_at_the_inputs_sizes():
    from ember.runtime.profiler import profile
    model = ember.compile(_attention_like_model(), dynamic={"seq": (1, 32)})
    x = np.random.default_rng(0).standard_normal((2, 12, 16)).astype(np.float32)
    steps = model.profile({"x": x}, repeat=2)
    assert [s["name"] for s in steps] == [st["name"] for st in model.plan["steps"]]
    assert all(s["ms"] >= 0 for s in steps)
    report = profile(model, {"x": x}, repeat=2, warmup=1)
    assert len(report.kernels) == len(model.plan["steps"]) and "ms" in report.table()


def test_prepared_runs_are_bounded_and_evicted_oldest_first():
    m = _two_input_model()
    model = ember.compile(m, dynamic={"seq": (1, 16)})
    r = model._executor.symbolic
    r.MAX_PREPARED = 3
    sess = _session(m)
    rng = np.random.default_rng(9)
    for s in (1, 2, 3, 4, 5, 1):
        a = rng.standard_normal((1, s, 8)).astype(np.float32)
        np.testing.assert_allclose(model.run({"a": a, "b": a})[0],
                                   sess.run(None, {"a": a, "b": a})[0], rtol=1e-4, atol=1e-5)
        assert len(r._prepared) <= 3
    assert r.layouts_planned == 6  # (1, 1) was evicted before it came back


@pytest.fixture
def model_cache(tmp_path, monkeypatch):
    """The compiled-model cache in a folder of its own (the kernel cache stays warm)."""
    monkeypatch.delenv("EMBER_NO_MODEL_CACHE", raising=False)
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setattr(compile_cache, "_folder", lambda: folder)
    return folder


def test_second_symbolic_compile_is_a_warm_cache_hit(model_cache, tmp_path, monkeypatch):
    import onnx
    import ember.driver as driver
    m = _two_input_model()
    path = tmp_path / "two.onnx"
    onnx.save(m, path)
    first = ember.compile(path, dynamic={"seq": (1, 16)})
    assert not first.info.get("cache_hit") and len(list(model_cache.glob("*.ember"))) == 1

    def no_build(*a, **k):
        raise AssertionError("a warm hit must not compile")
    monkeypatch.setattr(driver, "build", no_build)
    for form in (path, path.read_bytes(), m):
        again = ember.compile(form, dynamic={"seq": (1, 16)})
        assert again.info["cache_hit"] and again.info["compile_count"] == 1
        assert again.info["symbols"] == {"batch": [0, None], "seq": [1, 16]}
        assert again._executor.symbolic.has_aot
    sess = _session(m)
    rng = np.random.default_rng(4)
    for b, s in [(1, 1), (3, 16), (2, 7)]:
        a = rng.standard_normal((b, s, 8)).astype(np.float32)
        np.testing.assert_allclose(again.run({"a": a, "b": 2 * a})[0],
                                   sess.run(None, {"a": a, "b": 2 * a})[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeMismatchError, match=r"'seq' = 17"):
        big = np.ones((1, 17, 8), np.float32)
        again.run({"a": big, "b": big})
    monkeypatch.undo()  # build again; the fixture's folder stays patched below
    monkeypatch.delenv("EMBER_NO_MODEL_CACHE", raising=False)
    monkeypatch.setattr(compile_cache, "_folder", lambda: model_cache)
    # other bounds, dynamic=True, shapes naming symbols and a static compile are other keys
    others = [ember.compile(path, dynamic={"seq": (1, 8)}), ember.compile(path, dynamic=True),
              ember.compile(path, shapes={"a": ("n", 3, 8), "b": ("n", 3, 8)}),
              ember.compile(path, shapes={"a": (1, 3, 8), "b": (1, 3, 8)})]
    assert [o.info.get("cache_hit", False) for o in others] == [False] * 4
    assert others[0].info["symbols"]["seq"] == [1, 8]
    assert ember.compile(path, dynamic=True).info["cache_hit"]


def test_a_plan_without_the_entry_runs_kernel_by_kernel():
    # an artifact saved before ``ember_run_sym`` existed has no ``plan["aot"]``
    from ember.runtime.executor import GraphExecutor
    m = _two_input_model()
    model = ember.compile(m, dynamic={"seq": (1, 16)})
    plan = {k: v for k, v in model.plan.items() if k not in ("aot", "aot_symbols")}
    ex = GraphExecutor(model._executor.lib, plan, dict(model.params))
    assert not ex.use_aot and not ex.symbolic.has_aot
    a = np.random.default_rng(1).standard_normal((3, 4, 8)).astype(np.float32)
    np.testing.assert_allclose(ex.run({"a": a, "b": a})[0],
                               _session(m).run(None, {"a": a, "b": a})[0], rtol=1e-4, atol=1e-5)
