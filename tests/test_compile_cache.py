"""The compiled-model cache (``ember.compile_cache``): a model compiled again from a path, bytes
or a ModelProto is a cache hit, and an edited model is never served from the cache."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember


def _model(b: np.ndarray) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Add", ["x", "B"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [numpy_helper.from_array(b, "B")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBER_NO_MODEL_CACHE", raising=False)


X = np.ones((2, 3), np.float32)
B0 = np.arange(6, dtype=np.float32).reshape(2, 3)


def test_hits_and_an_edited_weight_is_never_stale(own_cache, tmp_path):
    path = tmp_path / "m.onnx"
    b1 = B0.copy()
    b1[0, 0] = 100.0  # same size: only the weight's bytes differ
    for k, b in enumerate((B0, b1)):
        onnx.save(_model(b), path)
        forms = (str(path), path.read_bytes(), onnx.load(path))
        for j, form in enumerate(forms):
            m = ember.compile(form)
            assert m.info.get("cache_hit", False) == (j > 0), (k, j)
            np.testing.assert_array_equal(m.run({"x": X})[0], X + b)


def test_a_file_changed_while_it_is_read_is_not_cached_under_its_new_hash(
        own_cache, tmp_path, monkeypatch):
    # was: the key hashed the file after it was parsed, so the old model was stored under the
    # new file's hash and every later compile of the new file returned the old weights
    import ember.frontend.onnx as fo
    path = tmp_path / "m.onnx"
    onnx.save(_model(B0), path)
    b1 = B0 + 10.0
    load = fo.load_model

    def load_then_edit(model, *args):
        proto = load(model, *args)
        onnx.save(_model(b1), path)  # another process rewrites the file right after the read
        return proto

    monkeypatch.setattr(fo, "load_model", load_then_edit)
    np.testing.assert_array_equal(ember.compile(path).run({"x": X})[0], X + B0)
    monkeypatch.setattr(fo, "load_model", load)
    np.testing.assert_array_equal(ember.compile(path).run({"x": X})[0], X + b1)


def test_external_data_is_read_and_an_edited_data_file_is_never_stale(own_cache, tmp_path):
    # was: the weights in external data files could not be read (a ModelLoadError saying the
    # data file "is not regular file"); the cache key must hash the data files too
    from ember.errors import ModelLoadError
    path = tmp_path / "m.onnx"

    def save(b):
        onnx.save(_model(b), path, save_as_external_data=True, all_tensors_to_one_file=True,
                  location="m.data", size_threshold=0)

    save(B0)
    m = ember.compile(path)
    np.testing.assert_array_equal(m.run({"x": X})[0], X + B0)
    assert ember.compile(str(path)).info.get("cache_hit")
    b1 = B0.copy()
    b1[1, 2] = -7.0
    save(b1)  # the .onnx file is the same bytes: only m.data changed
    m = ember.compile(path)
    assert not m.info.get("cache_hit")
    np.testing.assert_array_equal(m.run({"x": X})[0], X + b1)
    np.testing.assert_array_equal(ember.compile(onnx.load(path)).run({"x": X})[0], X + b1)
    with pytest.raises(ModelLoadError, match="external data.*pass the model's path"):
        ember.compile(path.read_bytes())
    with pytest.raises(ModelLoadError, match="external data.*pass the model's path"):
        ember.compile(onnx.load(path, load_external_data=False))
    (tmp_path / "m.data").unlink()
    with pytest.raises(ModelLoadError, match="external data cannot be read"):
        ember.compile(path)


# proto_digest: the key hashes each weight's buffer in place, never the serialized model ------

def _rich_model(w: np.ndarray, alpha: float = 0.1, const: float = 2.0,
                branch: float = 3.0) -> onnx.ModelProto:
    """Weights as raw_data and as float_data, an attribute, a Constant node's tensor and an
    If branch holding an initializer of its own (a subgraph)."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["y2", "T"], ["yt"])], "then", [],
        [helper.make_tensor_value_info("yt", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.full((2, 3), branch, np.float32), "T")])
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["y2"], ["ye"])], "else", [],
        [helper.make_tensor_value_info("ye", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("Add", ["x", "W"], ["y0"]),
             helper.make_node("Mul", ["y0", "F"], ["y1"]),
             helper.make_node("LeakyRelu", ["y1"], ["y2"], alpha=alpha),
             helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
                 np.array(const, np.float32))),
             helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    f = helper.make_tensor("F", TensorProto.FLOAT, [2, 3], [0.5] * 6)  # float_data, no raw
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [numpy_helper.from_array(w, "W"), f,
                           numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_proto_digest_is_equal_for_equal_models_and_sees_every_weight_byte_and_attribute():
    from ember.compile_cache import proto_digest
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    base = proto_digest(_rich_model(w))
    assert proto_digest(_rich_model(w.copy())) == base  # built twice
    parsed = onnx.ModelProto()
    parsed.ParseFromString(_rich_model(w).SerializeToString())
    assert proto_digest(parsed) == base  # round trip through bytes
    seen = {base}

    def differs(m):
        d = proto_digest(m)
        assert d not in seen
        seen.add(d)

    for byte in (0, 13, 23):  # one byte of the raw_data weight (first, middle, last)
        m = _rich_model(w)
        raw = bytearray(m.graph.initializer[0].raw_data)
        raw[byte] ^= 1
        m.graph.initializer[0].raw_data = bytes(raw)
        differs(m)
    m = _rich_model(w)
    m.graph.initializer[1].float_data[4] = 0.25  # a float_data weight
    differs(m)
    differs(_rich_model(w, alpha=0.2))  # a node attribute
    differs(_rich_model(w, const=2.5))  # a Constant node's tensor
    differs(_rich_model(w, branch=3.5))  # an initializer inside an If branch
    m = _rich_model(w)
    m.graph.initializer[0].name = "W2"  # a weight renamed (and its use kept)
    m.graph.node[0].input[1] = "W2"
    differs(m)
    m = _rich_model(w)
    m.graph.node[1].op_type = "Add"  # the structure
    differs(m)
    m = _rich_model(w)
    m.graph.initializer[0].dims[:] = [3, 2]  # a weight's shape, same bytes
    differs(m)
    m = _rich_model(w)
    m.opset_import[0].version = 18
    differs(m)
    # the weight's bytes moved from one tensor to another are not the same model
    a, b = np.zeros(3, np.float32), np.ones(3, np.float32)
    m1, m2 = _model(np.stack([a, b])), _model(np.stack([b, a]))
    assert proto_digest(m1) != proto_digest(m2)


def test_proto_digest_does_not_serialize_the_model(monkeypatch):
    """The key hashes the weights' buffers as they are: no part hashed is the serialized
    model or a serialized weight (that took most of a warm compile)."""
    from ember import compile_cache
    w = np.arange(600, dtype=np.float32)
    m = _model(w.reshape(2, 300)[:, :3].copy())
    m.graph.initializer.add().CopyFrom(numpy_helper.from_array(w, "big"))
    whole = len(m.SerializeToString())
    d = compile_cache.proto_digest(m)
    calls = []
    real = compile_cache._frame
    monkeypatch.setattr(compile_cache, "_frame", lambda h, tag, data: (
        calls.append((tag, len(data))), real(h, tag, data)))
    assert compile_cache.proto_digest(m) == d
    raw = [n for tag, n in calls if tag == b"R" + (9).to_bytes(4, "little")]
    assert sorted(raw) == [24, 2400]  # TensorProto.raw_data (field 9) of both weights
    assert max(n for tag, n in calls if not tag.startswith(b"R")) < whole - 2400


def test_changed_compile_flags_or_host_cpu_are_not_served_the_old_build(own_cache, monkeypatch):
    # EMBER_CFLAGS (e.g. -march=x86-64-v2 for a portable artifact) and the host CPU that
    # -mcpu=native resolves to change the machine code: a model compiled before under other
    # flags or on another CPU (a shared cache folder) must be built again, not loaded
    monkeypatch.delenv("EMBER_CFLAGS", raising=False)
    assert not ember.compile(_model(B0)).info.get("cache_hit")
    assert ember.compile(_model(B0)).info.get("cache_hit")
    monkeypatch.setenv("EMBER_CFLAGS", "-DEMBER_CACHE_KEY_TEST=1")
    c = ember.compile(_model(B0))
    assert not c.info.get("cache_hit")
    np.testing.assert_array_equal(c.run({"x": X})[0], X + B0)
    assert ember.compile(_model(B0)).info.get("cache_hit")
    from ember import compile_cache
    monkeypatch.setattr(compile_cache, "host_cpu_flags", lambda: "fpu sse sse2")
    assert not ember.compile(_model(B0)).info.get("cache_hit")


def test_shapes_given_as_numpy_integers_share_the_key_of_python_ints(own_cache):
    # shapes= dimensions computed with NumPy (np.int64, an array) are valid for the importer;
    # the key (JSON) raised "Object of type int64 is not JSON serializable"
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = -np.ones((4, 3), np.float32)
    assert not ember.compile(m, shapes={"x": (4, 3)}).info.get("cache_hit")
    for shp in ((np.int64(4), 3), np.array([4, 3]), [np.int32(4), np.int32(3)]):
        c = ember.compile(m, shapes={"x": shp})
        assert c.info.get("cache_hit")
        np.testing.assert_array_equal(c.run({"x": x})[0], np.zeros((4, 3), np.float32))
    assert not ember.compile(m, dynamic={"n": (1, 8)}).info.get("cache_hit")
    c = ember.compile(m, dynamic={"n": (np.int64(1), np.int64(8))})  # bounds too
    assert c.info.get("cache_hit")
    np.testing.assert_array_equal(c.run({"x": x[:3]})[0], np.zeros((3, 3), np.float32))
