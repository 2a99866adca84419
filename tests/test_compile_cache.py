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
