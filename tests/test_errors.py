"""Bad input gets a clear, typed ``ember.errors`` error that names the thing at fault and the
fix, never a bare traceback from deep inside and never a wrong answer."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ember
from ember.errors import (ArtifactError, EmberError, InputError, ModelLoadError,
                          ShapeMismatchError, ToolchainError, UnsupportedOpError)
from ember.testing import models as M


def tiny_model(op="Relu", opset=13, name="the_node", shape=(2, 3), **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    r = helper.make_node(op, ["x"], ["r"], name=name, **attrs)
    add = helper.make_node("Add", ["r", "x"], ["y"], name="add")
    g = helper.make_graph([r, add], "tiny", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def two_input_model():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Gather", ["a", "ids"], ["y"], axis=1)], "g",
                          [a, ids], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


# model files ----------------------------------------------------------------------------------

def test_missing_file(tmp_path):
    path = tmp_path / "nope.onnx"
    with pytest.raises(ModelLoadError, match="does not exist") as e:
        ember.compile(path)
    assert str(path) in str(e.value)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ModelLoadError, match="directory"):
        ember.compile(tmp_path)


@pytest.mark.parametrize("content", [b"", b"this is a text file, not a model\n",
                                     b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4,
                                     b"\xff" * 100])
def test_file_that_is_not_onnx(tmp_path, content):
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match="not") as e:
        ember.compile(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("fraction", [0.02, 0.1, 0.3, 0.5, 0.75, 0.9, 0.99])
def test_truncated_model(tmp_path, fraction):
    """A model cut short anywhere fails to load with ModelLoadError, never a wrong model."""
    data = M.light_model("squeezenet").SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:int(len(data) * fraction)])
    with pytest.raises(ModelLoadError) as e:
        ember.compile(path)
    assert str(path) in str(e.value)


def test_truncated_model_bytes():
    data = tiny_model().SerializeToString()
    for n in range(1, len(data)):
        with pytest.raises(ModelLoadError):
            ember.frontend.from_onnx(data[:n])


def test_unsupported_op_names_op_node_and_opset():
    model = tiny_model("Hardmax", opset=13, name="my_hardmax")
    model.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(UnsupportedOpError) as e:
        ember.compile(model)
    err = e.value
    assert (err.op, err.node, err.opset) == ("NoSuchOp", "my_hardmax", 13)
    msg = str(err)
    assert "NoSuchOp" in msg and "my_hardmax" in msg and "13" in msg and "'x'" in msg


def test_unsupported_custom_domain_op():
    model = tiny_model("Relu")
    model.graph.node[0].domain = "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 3))
    with pytest.raises(UnsupportedOpError, match="com.example") as e:
        ember.compile(model)
    assert e.value.opset == 3 and e.value.node == "the_node"


def test_unsupported_attribute_value_is_typed():
    model = tiny_model("MaxPool", shape=(1, 1, 4, 4), kernel_shape=[2, 2], storage_order=1)
    with pytest.raises(UnsupportedOpError, match="storage_order") as e:
        ember.compile(model)
    assert e.value.op == "MaxPool" and e.value.node == "the_node"


@pytest.mark.parametrize("op,wshape", [("Conv", (2, 2, 1, 1)), ("ConvTranspose", (2, 2, 1, 1)),
                                       ("Gemm", (2, 2))])
def test_weight_of_another_dtype_names_the_node(op, wshape):
    # a float64 weight beside float32 data: the compute came out float64 while type inference
    # said float32 (an internal LoweringError naming no ONNX node) instead of a typed error
    xshape = [1, 2, 3, 3] if len(wshape) == 4 else [2, 2]
    attrs = {"kernel_shape": [1, 1]} if len(wshape) == 4 else {}
    node = helper.make_node(op, ["x", "w"], ["y"], name="the_node", **attrs)
    g = helper.make_graph([node], "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          xshape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [onnx.numpy_helper.from_array(np.ones(wshape, np.float64), "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ShapeMismatchError, match="dtypes differ.*cast") as e:
        ember.compile(model)
    assert "the_node" in str(e.value)


# run-time inputs ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compiled():
    return ember.compile(two_input_model())


def good_inputs():
    return {"a": np.ones((2, 3), np.float32), "ids": np.array([0, 2, -1, 1], np.int64)}


def test_good_inputs_run(compiled):
    y, = compiled.run(good_inputs())
    np.testing.assert_array_equal(y, np.ones((2, 4), np.float32))


def test_input_of_wrong_shape(compiled):
    x = good_inputs()
    x["a"] = np.ones((3, 2), np.float32)
    with pytest.raises(InputError) as e:
        compiled.run(x)
    msg = str(e.value)
    assert "'a'" in msg and "(2, 3)" in msg and "(3, 2)" in msg


def test_input_of_wrong_rank(compiled):
    x = good_inputs()
    x["ids"] = np.zeros((1, 4), np.int64)
    with pytest.raises(InputError, match=r"'ids'.*\(4,\).*\(1, 4\)"):
        compiled.run(x)


def test_input_of_wrong_dtype(compiled):
    x = good_inputs()
    x["ids"] = x["ids"].astype(np.int32)
    with pytest.raises(InputError) as e:
        compiled.run(x)
    msg = str(e.value)
    assert "'ids'" in msg and "int64" in msg and "int32" in msg


def test_missing_input(compiled):
    x = good_inputs()
    del x["ids"]
    with pytest.raises(InputError, match="ids"):
        compiled.run(x)


def test_unknown_input_name(compiled):
    x = good_inputs()
    x["b"] = np.zeros(3, np.float32)
    with pytest.raises(InputError) as e:
        compiled.run(x)
    assert "'b'" in str(e.value) and "'a'" in str(e.value)


def test_wrong_number_of_positional_inputs(compiled):
    with pytest.raises(InputError, match="2 input"):
        compiled.run([np.ones((2, 3), np.float32)])


def test_positional_inputs_in_graph_order(compiled):
    x = good_inputs()
    y, = compiled.run([x["a"], x["ids"]])
    np.testing.assert_array_equal(y, compiled.run(x)[0])


def test_non_contiguous_input_is_accepted(compiled):
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T[:2, :]  # (2, 3), strided
    x = {"a": np.asarray(a), "ids": np.array([2, 1, 0, 0], np.int64)}
    y, = compiled.run(x)
    np.testing.assert_array_equal(y, np.ascontiguousarray(a)[:, [2, 1, 0, 0]])


# toolchain ------------------------------------------------------------------------------------

def _fresh_model(tag: float):
    """A model whose kernels are not in any cache yet (a unique constant)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    c = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.FLOAT,
                                                                          [], [tag]))
    g = helper.make_graph([c, helper.make_node("Mul", ["x", "c"], ["y"])], "g", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_cc_pointing_to_a_missing_program(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "/no/such/compiler-xyz")
    with pytest.raises(ToolchainError) as e:
        ember.compile(_fresh_model(1.25))
    assert "CC" in str(e.value) and "/no/such/compiler-xyz" in str(e.value)


def test_no_compiler_on_path(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CC", raising=False)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ToolchainError) as e:
        ember.compile(_fresh_model(2.5))
    assert "CC" in str(e.value)


def test_cc_that_is_not_a_c_compiler(monkeypatch, tmp_path):
    """A CC that runs but cannot build (here: `false`) is a ToolchainError/CodegenError, typed."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", shutil.which("false") or "/bin/false")
    with pytest.raises(EmberError) as e:
        ember.compile(_fresh_model(3.75))
    assert "false" in str(e.value)


# kernel cache ---------------------------------------------------------------------------------

def _cached_libs(cache: Path):
    return sorted(p for p in cache.glob("*.so"))


def _compile_in_subprocess(tag: float, cache: Path):
    """Fill ``cache`` from another process (a library loaded in this one must not be damaged
    under it: its pages are mapped)."""
    code = ("import sys, numpy as np, ember; sys.path.insert(0, sys.argv[2]); "
            "from test_errors import _fresh_model; "
            "m = ember.compile(_fresh_model(float(sys.argv[1]))); "
            "print(m.run([np.ones(3, np.float32)])[0].tolist())")
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join([str(Path(ember.__file__).parent.parent),
                                           os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code, str(tag), str(Path(__file__).parent)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str([tag] * 3)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "sidecar", "no-sidecar"])
def test_corrupted_cache_entry_is_rebuilt(monkeypatch, tmp_path, damage):
    # the kernel build cache is under test: keep the compiled-model cache out of the way
    monkeypatch.setenv("EMBER_NO_MODEL_CACHE", "1")
    cache = tmp_path / "cache"
    tag = 0.5 + len(damage) / 64  # a kernel of its own per case
    _compile_in_subprocess(tag, cache)
    libs = _cached_libs(cache)
    assert libs, "the build cache holds no library"
    sizes = {}
    for lib in libs:
        data = lib.read_bytes()
        sizes[lib.name] = len(data)
        side = Path(str(lib) + ".sha256")
        if damage == "truncate":
            lib.write_bytes(data[:len(data) // 3])
        elif damage == "garbage":
            lib.write_bytes(bytes(len(data)))
        elif damage == "empty":
            lib.write_bytes(b"")
        elif damage == "sidecar":
            side.write_text("0" * 64)
        else:
            side.unlink()
    monkeypatch.setenv("EMBER_CACHE_DIR", str(cache))
    m = ember.compile(_fresh_model(tag))
    assert m.run([np.ones(3, np.float32)])[0].tolist() == [tag] * 3
    for lib in _cached_libs(cache):
        assert lib.stat().st_size == sizes[lib.name]
        assert Path(str(lib) + ".sha256").exists()


def test_cache_dir_is_created_on_demand(monkeypatch, tmp_path):
    cache = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(cache))
    ember.compile(_fresh_model(0.75))
    assert _cached_libs(cache)


# artifacts ------------------------------------------------------------------------------------

def test_save_load_round_trip(tmp_path):
    model = M.mobilenet_v2(seed=1, image_size=32)
    m = ember.compile(model)
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    want = m.run(x)
    path = tmp_path / "mbv2.ember"
    m.save(path)
    loaded = ember.load(path)
    got = loaded.run(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert loaded.input_names == m.input_names and loaded.output_names == m.output_names
    assert loaded.graph_text == m.graph_text


def test_load_works_with_an_empty_cache(tmp_path, monkeypatch):
    m = ember.compile(_fresh_model(1.5))
    path = tmp_path / "m.ember"
    m.save(path)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "fresh-cache"))
    assert ember.load(path).run([np.ones(3, np.float32)])[0].tolist() == [1.5, 1.5, 1.5]


def test_failed_save_leaves_no_file(tmp_path, monkeypatch):
    m = ember.compile(_fresh_model(1.5))
    path = tmp_path / "m.ember"

    def boom(*a, **k):
        raise OSError("disk full (simulated)")
    monkeypatch.setattr(zipfile.ZipFile, "write", boom)
    with pytest.raises(ArtifactError, match="disk full"):
        m.save(path)
    assert list(tmp_path.iterdir()) == []


def test_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    m = ember.compile(_fresh_model(1.5))
    path = tmp_path / "m.ember"
    m.save(path)
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full (simulated)")
    monkeypatch.setattr(zipfile.ZipFile, "write", boom)
    with pytest.raises(ArtifactError):
        m.save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.ember"]


def test_save_into_a_missing_folder_is_typed(tmp_path):
    m = ember.compile(_fresh_model(1.5))
    with pytest.raises(ArtifactError, match="no-such-dir"):
        m.save(tmp_path / "no-such-dir" / "m.ember")


def test_load_missing_artifact(tmp_path):
    with pytest.raises(ArtifactError, match="does not exist"):
        ember.load(tmp_path / "nothing.ember")


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9])
def test_load_truncated_artifact(tmp_path, fraction):
    m = ember.compile(_fresh_model(1.5))
    path = tmp_path / "m.ember"
    m.save(path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * fraction)])
    with pytest.raises(ArtifactError):
        ember.load(path)


def test_load_an_onnx_file_as_artifact(tmp_path):
    path = tmp_path / "model.ember"
    onnx.save(tiny_model(), path)
    with pytest.raises(ArtifactError):
        ember.load(path)


def test_symbolic_input_dim_asks_for_shapes():
    model = M.bert_encoder(1, 32, 2, 8)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "sequence"
    with pytest.raises(ember.errors.ShapeMismatchError) as e:
        ember.compile(model, executor="static")
    msg = str(e.value)
    assert "input_ids" in msg and "sequence" in msg and "shapes=" in msg
    # the default executor runs it staged (compiled per run-time shape) and says why
    staged = ember.compile(model)
    assert staged.info["executor"] == "staged"
    assert "input_ids" in staged.info["staged_reason"] and "shapes=" in staged.info["staged_reason"]


def test_shapes_of_the_wrong_rank_are_refused():
    with pytest.raises(ember.errors.ShapeMismatchError, match="rank"):
        ember.compile(tiny_model(), shapes={"x": (2, 3, 1)})


@pytest.mark.parametrize("opset", [1, 11, 13])
def test_softmax_axis_out_of_range_is_typed(opset):
    """Softmax-1/11 default to axis 1, out of range on a 1-D input: an error, not a guess."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    attrs = {} if opset < 13 else {"axis": 1}
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], name="sm", **attrs)], "g",
                          [x], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    with pytest.raises(ember.errors.ShapeMismatchError, match="axis") as e:
        ember.compile(model)
    assert "sm" in str(e.value)


def _rewrite_artifact(src, dst, edit_manifest=None, drop=()):
    """Copy artifact ``src`` to ``dst`` with its manifest edited and members dropped."""
    import json
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            if item.filename in drop:
                continue
            data = zin.read(item.filename)
            if item.filename == "manifest.json" and edit_manifest is not None:
                man = json.loads(data)
                edit_manifest(man)
                data = json.dumps(man).encode()
            zout.writestr(item, data)


def _tamper_param_shape(man):
    for s in man["plan"]["slots"]:
        if s["kind"] == "param":
            s["shape"] = [d * 2 for d in s["shape"]] or [2]
            return


def _tamper_arena_offset(man):
    for s in man["plan"]["slots"]:
        if s["kind"] == "arena":
            s["offset"] = man["plan"]["arena_bytes"] + 4096
            return


def _tamper_symbol(man):
    man["plan"]["steps"][0]["symbol"] = "no_such_kernel"


def _tamper_step_slot(man):
    man["plan"]["steps"][0]["args"][0] = 10_000


@pytest.mark.parametrize("edit,match", [
    (_tamper_param_shape, "weights and the plan disagree"),
    (_tamper_arena_offset, "outside the"),
    (_tamper_symbol, "no symbol 'no_such_kernel'"),
    (_tamper_step_slot, "does not have"),
])
def test_artifact_whose_plan_disagrees_is_refused(tmp_path, edit, match):
    m = ember.compile(M.mobilenet_v2(seed=1, image_size=32))
    m.save(tmp_path / "ok.ember")
    _rewrite_artifact(tmp_path / "ok.ember", tmp_path / "bad.ember", edit)
    with pytest.raises(ArtifactError, match=match):
        ember.load(tmp_path / "bad.ember")


def test_artifact_with_a_weight_of_the_wrong_dtype_is_refused(tmp_path):
    m = ember.compile(M.mobilenet_v2(seed=1, image_size=32))
    m.save(tmp_path / "ok.ember")

    def edit(man):
        for s in man["plan"]["slots"]:
            if s["kind"] == "param" and s["dtype"] == "float32":
                s["dtype"] = "int32"
                return
    _rewrite_artifact(tmp_path / "ok.ember", tmp_path / "bad.ember", edit)
    with pytest.raises(ArtifactError, match="expects int32"):
        ember.load(tmp_path / "bad.ember")


# a required input left out ---------------------------------------------------------------------
@pytest.mark.parametrize("op,inputs,opset,missing", [
    ("SwiGLU", ["a"], 28, "B"), ("Attention", ["a", "a"], 23, "V"),
    ("RMSNormalization", ["a"], 23, "scale"), ("Add", ["a"], 17, "B"),
    ("Gemm", ["a", ""], 17, "B")])
def test_missing_required_input_is_model_load_error(op, inputs, opset, missing):
    """A node that omits a required input of its ONNX schema was an AttributeError from deep
    inside the converter; it is a ModelLoadError naming the node and the input."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node(op, inputs, ["y"], name="the_node")], "g", [a], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    with pytest.raises(ModelLoadError, match=rf"the_node.*{op}.*'{missing}'.*missing"):
        ember.compile(m)
