"""Run-time invariants of compiled models: runs are independent of each other, never modify the
caller's inputs, return fresh arrays, and agree across thread counts; graph outputs that are
inputs or constants come back right."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.testing import assert_close
from ember.testing import models as M


def _bert_feeds(model, seed):
    return M.bert_inputs(model, seed=seed, pad=seed % 3)


CASES = {
    "mobilenet_v2": (lambda: M.mobilenet_v2(seed=2, image_size=32),
                     lambda m, s: {"input": np.random.default_rng(s).standard_normal(
                         (1, 3, 32, 32)).astype(np.float32)}),
    "bert": (lambda: M.bert_encoder(2, 32, 2, 8, seed=3), _bert_feeds),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def compiled(request):
    build, feeds = CASES[request.param]
    model = build()
    return ember.compile(model), model, feeds


def test_runs_are_independent(compiled):
    m, model, feeds = compiled
    a, b = feeds(model, 1), feeds(model, 2)
    ya = m.run(a)
    yb = m.run(b)
    ya2 = m.run(a)
    for x, y in zip(ya, ya2):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(ya, yb))


def test_inputs_are_not_modified_and_outputs_are_fresh(compiled):
    m, model, feeds = compiled
    x = feeds(model, 4)
    before = {k: v.copy() for k, v in x.items()}
    y1 = m.run(x)
    for k in x:
        np.testing.assert_array_equal(x[k], before[k])
    keep = [o.copy() for o in y1]
    for o in y1:
        o[...] = 0  # the caller owns its outputs
    y2 = m.run(x)
    for a, b in zip(y2, keep):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(y1, y2):
        assert not np.shares_memory(a, b)


def test_rebinding_follows_the_array_objects_and_their_contents(compiled):
    """Inputs are bound by address every run: the same object with new contents, the same
    object whose data ``ndarray.resize(refcheck=False)`` moved, a new object, the general path
    (a list, a non-contiguous view) and an address bound by hand in between (as the tuning
    worker does) all give the outputs of a fresh model on the same values."""
    m, model, feeds = compiled
    ref = ember.compile(model)  # its own executor: a fresh binding every call
    a, b = feeds(model, 6), feeds(model, 7)

    def same(got, x):
        for g, w in zip(got, ref.run({k: v.copy() for k, v in x.items()})):
            np.testing.assert_array_equal(g, w)
    same(m.run(a), a)
    for k in a:  # the same objects, new contents
        a[k][...] = b[k]
    same(m.run(a), b)
    c = feeds(model, 8)
    same(m.run(c), c)  # new objects
    name0 = m.input_names[0]
    moved = c[name0].copy()
    r = {**c, name0: moved}
    same(m.run(r), c)
    shape = moved.shape
    moved.resize((moved.size * 64,), refcheck=False)  # a new buffer: the old one is freed
    moved[:] = 0
    moved.resize(shape, refcheck=False)
    moved[...] = c[name0]
    same(m.run(r), c)
    name = m.input_names[0]
    if c[name].ndim >= 1 and c[name].shape[-1] > 1:  # a strided view: the general path
        wide = np.repeat(c[name], 2, axis=-1)
        v = dict(c, **{name: wide[..., ::2]})
        assert not v[name].flags.c_contiguous
        same(m.run(v), c)
    same(m.run([c[n] for n in m.input_names]), c)
    ex = m._executor
    if ex.use_aot:  # an address written by hand, then the last run's objects again
        ex.bind_pointers(ex._ext, ex._bind_inputs(feeds(model, 9)))
        same(m.run(c), c)


def test_thread_counts_agree(compiled):
    _, model, feeds = compiled
    x = feeds(model, 5)
    one = ember.compile(model, target="llvm -num-threads=1").run(x)
    two = ember.compile(model, target="llvm -num-threads=2").run(x)
    for a, b in zip(one, two):
        assert_close(b, a, 1e-6, 1e-6, "2 threads vs 1")


def test_outputs_that_are_inputs_constants_or_repeated():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ("same", "c", "r1", "r2")]
    c = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "cinit")
    nodes = [helper.make_node("Identity", ["x"], ["same"]),
             helper.make_node("Identity", ["cinit"], ["c"]),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Identity", ["r"], ["r1"]),
             helper.make_node("Identity", ["r"], ["r2"])]
    g = helper.make_graph(nodes, "g", [x], outs, [c])
    m = ember.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert m.output_names == ["same", "c", "r1", "r2"]
    xv = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    same, cv, r1, r2 = m.run({"x": xv})
    np.testing.assert_array_equal(same, xv)
    assert not np.shares_memory(same, xv)
    np.testing.assert_array_equal(cv, np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(r1, np.maximum(xv, 0))
    np.testing.assert_array_equal(r2, np.maximum(xv, 0))
    assert not np.shares_memory(r1, r2)
    cv[...] = -1
    assert m.run({"x": xv})[1][0, 1] == 1  # a constant output is not the model's own buffer


def _three_input_model():
    """x (2, 3, 5) float32, y (0, 5) float32 (empty), s () float32 -> [x * s, concat(y, x[0]),
    x] (the last an input returned as an output)."""
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5]),
           helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, 5]),
           helper.make_tensor_value_info("s", TensorProto.FLOAT, [])]
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    nodes = [helper.make_node("Mul", ["x", "s"], ["xs"]),
             helper.make_node("Gather", ["x", "zero"], ["x0"], axis=0),
             helper.make_node("Reshape", ["x0", "shape"], ["x0r"]),
             helper.make_node("Concat", ["y", "x0r"], ["cat"], axis=0),
             helper.make_node("Identity", ["x"], ["xo"])]
    shape = numpy_helper.from_array(np.array([3, 5], np.int64), "shape")
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("xs", "cat", "xo")]
    g = helper.make_graph(nodes, "g", ins, outs, [zero, shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_input_containers_and_layouts_two_models_sharing_a_library(tmp_path):
    """What the run's fast path (a plain dict of C-contiguous arrays) must not misread, against
    onnxruntime: other mappings (OrderedDict, a dict subclass, a read-only mapping proxy),
    read-only, Fortran-order and unaligned arrays, a 0-d and an empty input, the same objects
    mutated in place; two models of the same kernels (one library) run alternately on
    different objects, so each keeps its own bound addresses."""
    import collections
    import types
    ort = pytest.importorskip("onnxruntime")
    model = _three_input_model()
    sess = ort.InferenceSession(model.SerializeToString())
    ember.compile(model, target="llvm -num-threads=1").save(tmp_path / "m.ember")
    m1, m2 = ember.load(tmp_path / "m.ember"), ember.load(tmp_path / "m.ember")
    assert m1.lib_path == m2.lib_path and m1._executor is not m2._executor

    def feeds(seed):
        r = np.random.default_rng(seed)
        return {"x": r.standard_normal((2, 3, 5)).astype(np.float32),
                "y": np.zeros((0, 5), np.float32), "s": np.array(r.standard_normal(), np.float32)}

    def same(got, f):
        want = sess.run(None, {k: np.ascontiguousarray(v) for k, v in dict(f).items()})
        for g_, w in zip(got, want):
            assert g_.shape == w.shape
            np.testing.assert_allclose(g_, w, rtol=1e-6, atol=1e-6)

    class Sub(dict):
        pass
    a, b = feeds(1), feeds(2)
    for k in range(3):
        same(m1.run(a), a)
        same(m2.run(b), b)
        for wrap in (collections.OrderedDict, Sub, types.MappingProxyType):
            same(m1.run(wrap(a)), a)
        a["x"][...] += 1  # the same objects, new contents
        a["s"][()] = k - 1.5
        b["x"][...] *= -1
    ro = feeds(3)
    for v in ro.values():
        v.flags.writeable = False
    same(m1.run(ro), ro)
    same(m2.run(ro), ro)
    f = feeds(4)
    fortran = dict(f, x=np.asfortranarray(f["x"]))
    raw = bytearray(f["x"].nbytes + 1)  # float32 at an odd address
    unaligned = np.frombuffer(raw, np.float32, f["x"].size, offset=1).reshape(f["x"].shape)
    unaligned[...] = f["x"]
    for g_ in (fortran, dict(f, x=unaligned), f, dict(f, x=unaligned)):
        same(m1.run(g_), f)
        same(m2.run(b), b)


def test_pickling_a_compiled_model_names_save_and_load(tmp_path):
    import copy
    import pickle
    from ember.errors import EmberError
    model = M.mobilenet_v2(seed=1, image_size=32)
    cm = ember.compile(model)
    x = cm.random_inputs(seed=2)
    for dump in (pickle.dumps, copy.deepcopy):
        with pytest.raises(EmberError, match="ember.load"):
            dump(cm)
    same = copy.copy(cm)  # shallow: the same executor
    np.testing.assert_array_equal(same.run(x)[0], cm.run(x)[0])
    cm.save(tmp_path / "m.ember")
    np.testing.assert_array_equal(ember.load(tmp_path / "m.ember").run(x)[0], cm.run(x)[0])


def test_weights_change_in_place_and_refuse_a_new_binding():
    from ember.errors import EmberError
    b = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "B")
    graph = helper.make_graph([helper.make_node("Add", ["x", "B"], ["y"])], "add",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [b])
    cm = ember.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = np.ones((2, 3), np.float32)
    (name, w), = cm.params.items()
    np.testing.assert_array_equal(cm.run([x])[0], x + w)
    with pytest.raises(EmberError, match="in place"):
        cm.params[name] = np.zeros((2, 3), np.float32)  # the kernels would not see it
    with pytest.raises(EmberError, match="in place"):
        cm.params.update({name: np.zeros((2, 3), np.float32)})
    cm.params[name][...] = -2.0  # the kernels read this array
    np.testing.assert_array_equal(cm.run([x])[0], x - 2.0)
    assert isinstance(cm.params, dict) and dict(cm.params)[name] is cm.params[name]


def test_constant_output_weight_is_not_the_callers_array():
    """A parameter that is also a graph output is copied at build: the caller changing its own
    array afterwards changes neither the model's output nor ``model.params`` (and a write into
    ``model.params`` leaves the caller's array alone)."""
    from ember.frontend.onnx import from_onnx
    from ember.runtime.executor import aligned_empty
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["W"], ["w"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
              helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 4])])
    mod, _ = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    w = aligned_empty(64).view(np.float32).reshape(4, 4)  # aligned: nothing forced a copy
    w[...] = np.arange(16, dtype=np.float32).reshape(4, 4)
    expect = w.copy()
    params = {"W": w}
    cm = ember.build(mod, params=params)
    assert params["W"] is w
    x = np.ones((2, 4), np.float32)
    w[...] = -1.0
    np.testing.assert_array_equal(cm.run({"x": x})[1], expect)
    for v in cm.params.values():
        v[...] = 5.0
    np.testing.assert_array_equal(cm.run({"x": x})[1], np.full((4, 4), 5.0, np.float32))
    np.testing.assert_array_equal(w, -1.0)


def _compile_packed_and_unpacked(w):
    """``x @ W + W`` compiled with ``W`` the weight ``w``: the MatMul reads a packed copy of W,
    the Add W as is (skips when the default schedule does not pack W on this target)."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["a"]), helper.make_node("Add", ["a", "W"], ["c"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [16, 16])],
        [numpy_helper.from_array(w, "W")])
    cm = ember.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    if not any("@packed" in k for k in cm.params) or "W" not in cm.params:
        pytest.skip("the default schedule did not pack W for this matmul on this target")
    return cm


def test_weight_read_packed_and_unpacked_is_read_only():
    """A weight one kernel reads as is and another from a copy packed at compile time: an
    in-place write into it would change only the unpacked use (a wrong answer), so it is a
    typed error; the model's results stay those of the original weight."""
    from ember.errors import EmberError
    from ember.runtime.module import RepackedWeight
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    cm = _compile_packed_and_unpacked(w)
    x = rng.standard_normal((16, 16)).astype(np.float32)
    before = cm.run({"x": x})[0]
    assert_close(before, x @ w + w, rtol=1e-4, atol=1e-5)
    assert isinstance(cm.params["W"], RepackedWeight)
    with pytest.raises(EmberError, match="re-laid out.*build the model again"):
        cm.params["W"][...] = 0.0
    # every numpy write names the packed copies (was: np.copyto raised numpy's plain
    # read-only ValueError)
    W = cm.params["W"]
    writes = [lambda: np.copyto(W, 0.0), lambda: np.copyto(W[:2], np.zeros((2, 16), "f4")),
              lambda: np.put(W, [0], 1.0), lambda: np.place(W, W > 0, 1.0),
              lambda: np.putmask(W, W > 0, 1.0), lambda: np.fill_diagonal(W, 1.0),
              lambda: np.put_along_axis(W, np.zeros((16, 1), np.intp), 1.0, axis=1),
              lambda: np.dot(x, x, out=W), lambda: np.sum(x, axis=0, out=W[0]),
              lambda: W.fill(0.0), lambda: W.put([0], 1.0), lambda: W.sort(),
              lambda: W[1].partition(3)]
    for write in writes:
        with pytest.raises(EmberError, match="weight 'W'.*re-laid out.*build the model again"):
            write()
    np.testing.assert_array_equal(W, w)
    np.testing.assert_array_equal(cm.run({"x": x})[0], before)
    # reading functions and copies still work, and a copy can be written
    np.testing.assert_array_equal(np.concatenate([W, W])[:16], w)
    c = np.copy(W)
    np.copyto(c, 0.0)
    c.fill(1.0)
    assert not np.may_share_memory(c, W) and (c == 1.0).all()


def test_repacked_weight_views_keep_the_error_copies_are_plain_arrays():
    """A view of a weight that is also read packed (slice, transpose, reshape) is the model's
    memory: writing it (item assignment or an in-place ufunc) is the typed error naming the
    packed copies. A copy is a plain writable array independent of the model: writing it works
    and leaves the model's results as they were (was: a copy raised the read-only error, and an
    in-place ``+=`` on a view raised numpy's ValueError without the names)."""
    import copy
    import pickle
    from ember.errors import EmberError
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    cm = _compile_packed_and_unpacked(w)
    packed = sorted(k for k in cm.params if k.startswith("W@packed"))
    x = rng.standard_normal((16, 16)).astype(np.float32)
    before = cm.run({"x": x})[0]
    W = cm.params["W"]
    for view in (W[:4], W.T, W.reshape(256), W[::2, 1:]):
        assert view.packed == tuple(packed)
        with pytest.raises(EmberError, match=f"weight 'W'.*{packed[0]}.*build the model again"):
            view[...] = 0.0
        with pytest.raises(EmberError, match=packed[0]):
            view += 1.0
    with pytest.raises(EmberError, match=packed[0]):
        np.multiply(x, 2.0, out=W)
    for c in (W.copy(), copy.copy(W), copy.deepcopy(W), pickle.loads(pickle.dumps(W)), W + 0.0,
              W[[0, 1, 2]], W.astype(np.float64)):
        assert not getattr(c, "packed", ()) and not np.may_share_memory(c, W)
        c[...] = 7.0
        c += 1.0
        np.testing.assert_array_equal(c, 8.0)
    assert type(W.copy()) is np.ndarray
    np.testing.assert_array_equal(W, w)
    np.testing.assert_array_equal(cm.run({"x": x})[0], before)


_PACKED_NAMES_SCRIPT = """
import json, numpy as np, ember
from onnx import TensorProto, helper, numpy_helper
from ember.frontend.onnx import from_onnx
w = np.arange(256, dtype=np.float32).reshape(16, 16) / 256
g = helper.make_graph(
    [helper.make_node("MatMul", ["x", "W"], ["a"]), helper.make_node("Add", ["a", "W"], ["c"])],
    "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])],
    [helper.make_tensor_value_info("c", TensorProto.FLOAT, [16, 16])],
    [numpy_helper.from_array(w, "W")])
mod, params = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
cm = ember.build(mod, params=params)
print(json.dumps([sorted(cm.params), [s["param"] for s in cm.plan["slots"]]]))
"""


def test_packed_weight_names_are_the_same_in_every_process():
    """The same model built in two processes (different ``PYTHONHASHSEED``) names its packed
    weights (``NAME@packed...``) and plan slots alike (was: Python's salted ``hash`` of the
    layout transform, so the names changed from one process to the next)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[1])
    runs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed,
                   PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        out = subprocess.run([sys.executable, "-c", _PACKED_NAMES_SCRIPT], env=env, cwd=root,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    names, slots = runs[0]
    if not any("@packed" in n for n in names):
        pytest.skip("the default schedule did not pack W for this matmul on this target")
    assert runs[1] == runs[0]


def _add_module(weight: str):
    """The graph-IR module of ``y = x + <weight>`` (float32 [2, 3]), ``weight`` a graph input
    that ``ember.build``'s ``params`` may bind."""
    from ember.frontend.onnx import from_onnx
    g = helper.make_graph(
        [helper.make_node("Add", ["x", weight], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info(weight, TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))[0]


def test_build_refuses_a_weight_of_another_shape():
    """``ember.build(mod, params=...)`` with a weight whose shape is not the parameter's is a
    typed error naming the parameter (was: a transposed (3, 2) weight was reshaped into the
    (2, 3) parameter and gave a wrong answer; a (1, 3) one raised a raw ValueError). Size-1
    dimensions may differ, and the caller's dict is left as it was."""
    from ember.errors import ShapeMismatchError
    mod = _add_module("B")
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    for bad in (b.T, b.T.copy(), b[:1], np.float32(3.0)):
        with pytest.raises(ShapeMismatchError, match=r"params\['B'\].*\(2, 3\)"):
            ember.build(mod, params={"B": bad})
    x = np.ones((2, 3), np.float32)
    params = {"B": b.reshape(1, 2, 3)}
    cm = ember.build(mod, params=params)
    np.testing.assert_array_equal(cm.run({"x": x})[0], x + b)
    assert params["B"].shape == (1, 2, 3)
    np.testing.assert_array_equal(params["B"][0], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_build_refuses_params_that_name_no_parameter(monkeypatch):
    """``ember.build(mod, params=...)`` with a name that is no parameter of the graph is a typed
    ``InputError`` naming it and listing the parameters, raised before any lowering (was: the
    entry was ignored silently, so a misspelled weight left its parameter a run-time input)."""
    import ember.driver
    from ember.errors import InputError
    mod = _add_module("Bias")
    b = np.arange(6, dtype=np.float32).reshape(2, 3)

    def no_lowering(*a, **k):
        raise AssertionError("lowered before the params were checked")
    with monkeypatch.context() as mp:
        mp.setattr(ember.driver, "lower_binding", no_lowering)
        params = {"bias": b, "Bias": b, "extra_weight": b}
        with pytest.raises(InputError) as e:
            ember.build(mod, params=params)
        msg = str(e.value)
        assert "'bias'" in msg and "'extra_weight'" in msg and "2 value(s)" in msg
        assert "its parameters are 'x', 'Bias'" in msg and "'bias' -> 'Bias'?" in msg
        assert sorted(params) == ["Bias", "bias", "extra_weight"]  # the caller's dict as it was
    cm = ember.build(mod, params={"Bias": b})
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(cm.run({"x": x})[0], x + b)
