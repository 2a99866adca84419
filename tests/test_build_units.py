"""Compile-time machinery: equal kernels scheduled once, the C source split into translation
units compiled side by side (driver._num_units, codegen.module.generate_c_units,
codegen.build.build_library with a list of units)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.codegen.build import build_library
from ember.codegen.module import generate_c_units
from ember.errors import CodegenError
from ember.graph.lower import lower_binding
from ember.tir.text import structural_key


def _blocks_model(n_blocks: int = 4, c: int = 8) -> onnx.ModelProto:
    """``n_blocks`` identical conv(3x3)+relu blocks, then two different-size convs."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(n_blocks):
        w = numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2,
                                    f"w{i}")
        inits.append(w)
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    w = numpy_helper.from_array(rng.standard_normal((3, c, 1, 1)).astype(np.float32), "wl")
    inits.append(w)
    nodes.append(helper.make_node("Conv", [x, "wl"], ["y"]))
    g = helper.make_graph(nodes, "blocks",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 10, 10])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


@pytest.mark.parametrize("jobs", ["1", "3"])
def test_a_model_split_into_units_matches_onnxruntime(jobs, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_BUILD_JOBS", jobs)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))  # a fresh build, not a cached model
    model = _blocks_model(n_blocks=8)
    x = np.random.default_rng(1).standard_normal((1, 8, 10, 10)).astype(np.float32)
    m = ember.compile(model)
    np.testing.assert_allclose(m.run({"x": x})[0], _reference(model, {"x": x}),
                               rtol=1e-4, atol=1e-5)
    units = m.source.count("---- translation unit")
    # 9 kernels, 2 distinct programs: 3 jobs give 2 units (one per distinct program)
    assert units == (0 if jobs == "1" else 2)


def test_equal_programs_share_a_key_and_different_shapes_do_not():
    mod, _ = ember.frontend.from_onnx(_blocks_model())
    b = mod.main.bindings
    keys = [structural_key(lower_binding(x, f"k{i}", mod)) for i, x in enumerate(b)]
    convs = [k for x, k in zip(b, keys) if x.call.op.startswith("nn.conv")]
    assert len(convs) == 5
    assert len(set(convs[:4])) == 1      # the four equal 3x3 blocks
    assert convs[4] != convs[0]           # the 1x1 conv to 3 channels
    # the function's name is not part of the key
    k0 = lower_binding(b[0], "first", mod)
    k1 = lower_binding(b[0], "second", mod)
    assert structural_key(k0) == structural_key(k1)


def test_units_carry_what_their_kernels_call_and_the_first_declares_every_kernel():
    mod, _ = ember.frontend.from_onnx(_blocks_model())
    kernels = [lower_binding(x, f"k{i}", mod) for i, x in enumerate(mod.main.bindings)]
    units, symbols = generate_c_units(kernels, "llvm", 2)
    assert len(units) == 2
    assert "ember_parallel_for(int64_t n, int64_t chunk, ember_task_fn fn, void* ctx) {" \
        in units[0]
    assert "ember_parallel_for(int64_t n, int64_t chunk, ember_task_fn fn, void* ctx) {" \
        not in units[1]
    for s in set(symbols):  # each kernel defined in exactly one unit, declared in the first
        defined = [i for i, u in enumerate(units)
                   if any(line.startswith(f"int32_t {s}(") and line.endswith(") {")
                          for line in u.splitlines())]
        assert len(defined) == 1
        if defined[0] != 0:
            assert any(line.startswith(f"int32_t {s}(") and line.endswith(");")
                       for line in units[0].splitlines())


def test_a_unit_the_compiler_rejects_is_a_codegen_error_with_that_unit():
    good = "int ok(void) { return 1; }\n"
    bad = "int broken(void) { return undefined_name; }\n"
    with pytest.raises(CodegenError) as e:
        build_library([good, bad])
    assert "undefined_name" in str(e.value)
    assert e.value.source == bad


def test_a_flipped_weight_byte_in_a_saved_model_is_an_artifact_error(tmp_path, monkeypatch):
    """Weights are read from the artifact straight into the weight arena; the member's CRC-32
    is checked, so a damaged file is refused, not run with bad weights."""
    import zipfile
    from ember.errors import ArtifactError
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    model = _blocks_model(n_blocks=2)
    m = ember.compile(model)
    path = tmp_path / "m.ember"
    m.save(path)
    x = np.random.default_rng(2).standard_normal((1, 8, 10, 10)).astype(np.float32)
    np.testing.assert_array_equal(ember.load(path).run({"x": x})[0], m.run({"x": x})[0])
    import json
    from ember.runtime.artifact import WEIGHTS_MEMBER, _arena_start
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(WEIGHTS_MEMBER)  # format 3: the weight arena, one stored member
        w = json.loads(z.read("manifest.json"))["weights"]
    with open(path, "rb") as f:
        start = _arena_start(f, info) + w["pad"]
    off, dtype, shape = max(w["params"], key=lambda p: int(np.prod(p[2])))
    data = bytearray(path.read_bytes())
    pos = start + off + int(np.prod(shape)) * np.dtype(dtype).itemsize - 8
    data[pos] ^= 0xFF  # a byte of the largest weight itself, not of the padding
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="CRC"):
        ember.load(path)


# streamed builds: units compiled while the rest of the model is scheduled -------------------

def _chain_model(n: int = 20) -> onnx.ModelProto:
    """``n`` LeakyRelu layers of different slopes between Tanh layers: at opt_level 0, one
    kernel per operator and ``n + 1`` distinct programs."""
    nodes, x = [], "x"
    for i in range(n):
        nodes += [helper.make_node("LeakyRelu", [x], [f"l{i}"], alpha=0.01 * (i + 1)),
                  helper.make_node("Tanh", [f"l{i}"], [f"t{i}"])]
        x = f"t{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 33])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 33])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_streamed_build_matches_onnxruntime_and_reuses_its_objects(monkeypatch, tmp_path):
    import subprocess
    from ember.codegen import build as b
    monkeypatch.setenv("EMBER_BUILD_JOBS", "2")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_NO_MODEL_CACHE", "1")
    model = _chain_model()
    x = np.random.default_rng(4).standard_normal((4, 33)).astype(np.float32) * 3
    with ember.PassContext(opt_level=0):
        m = ember.compile(model)
    np.testing.assert_allclose(m.run({"x": x})[0], _reference(model, {"x": x}),
                               rtol=1e-5, atol=1e-6)
    units = m.source.count("---- translation unit")
    assert units >= 4  # streamed: 21 distinct kernels in units of 4, then the main unit
    objs = sorted(tmp_path.glob("obj-*.o"))
    assert len(objs) == units
    for lib in tmp_path.glob("*.so"):  # the library lost: linked again from cached objects
        lib.unlink()
    calls = []
    real = subprocess.Popen

    def spy(args, *a, **kw):
        calls.append(args)
        return real(args, *a, **kw)
    monkeypatch.setattr(b.subprocess, "Popen", spy)  # (subprocess.run starts a Popen too)
    with ember.PassContext(opt_level=0):
        m2 = ember.compile(model)
    assert not [c for c in calls if "-c" in c]  # no unit compiled again: only the link
    assert m2.source == m.source
    np.testing.assert_array_equal(m2.run({"x": x})[0], m.run({"x": x})[0])


def test_a_streamed_unit_the_compiler_rejects_is_a_codegen_error_and_stops_the_others(
        monkeypatch, tmp_path):
    import subprocess
    from ember.codegen import build as b
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    good = "int ok%d(void) { return %d; }\n"
    bad = "int broken(void) { return undefined_name; }\n"
    slow = "".join(f"double f{i}(double x) {{ return x * {i}.5 + f{i - 1}(x); }}\n"
                   for i in range(1, 4000))  # still compiling when the bad unit fails
    procs = []
    real = subprocess.Popen

    def spy(*a, **kw):
        procs.append(real(*a, **kw))
        return procs[-1]
    monkeypatch.setattr(b.subprocess, "Popen", spy)
    with pytest.raises(CodegenError) as e:
        with b.StreamedBuild(jobs=3) as sb:
            sb.add("double f0(double x) { return x; }\n" + slow)
            sb.add(bad)
            sb.add(good % (2, 2))
            sb.finish(good % (0, 0))
    assert "undefined_name" in str(e.value)
    assert e.value.source == bad
    assert procs and all(p.poll() is not None for p in procs)  # nothing left running
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # its temporary folder removed
    assert not list(tmp_path.glob("*.so"))
