"""The ``ember`` command line: compile, run (model and artifact), ops, demo, error reporting."""

import numpy as np
import onnx
import pytest
from onnx import helper, TensorProto

from ember.cli import main
from ember.zoo import light_model_path


@pytest.fixture
def tiny_model(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                           helper.make_node("Add", ["r", "x"], ["y"])], "g", [x], [y])
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_compile_then_run_artifact_and_saved_outputs(tiny_model, tmp_path, capsys):
    art = tmp_path / "tiny.ember"
    assert main(["compile", str(tiny_model), "-o", str(art)]) == 0
    assert art.exists()
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.save(tmp_path / "x.npy", x)
    out_dir = tmp_path / "outs"
    assert main(["run", str(art), "--input", f"x={tmp_path / 'x.npy'}", "--repeat", "2",
                 "--save-outputs", str(out_dir)]) == 0
    np.testing.assert_array_equal(np.load(out_dir / "output_0.npy"), np.maximum(x, 0) + x)
    text = capsys.readouterr().out
    assert "(2, 3)" in text and "latency" in text


def test_run_onnx_with_random_inputs(capsys):
    assert main(["run", light_model_path("squeezenet"), "--repeat", "1"]) == 0
    assert "(1, 1000, 1, 1)" in capsys.readouterr().out


def test_errors_are_one_line_with_status_2(tiny_model, tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.onnx")]) == 2
    err = capsys.readouterr().err
    assert "ModelLoadError" in err and "does not exist" in err and "Traceback" not in err
    np.save(tmp_path / "bad.npy", np.zeros((3, 3), np.float32))
    assert main(["run", str(tiny_model), "--input", f"x={tmp_path / 'bad.npy'}"]) == 2
    err = capsys.readouterr().err
    assert "'x'" in err and "(2, 3)" in err and "(3, 3)" in err


def test_ops_lists_converters(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert "Conv" in out and "MatMul" in out
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines() if ln.strip()}
    # opset ranges start where onnx introduced the op, not at 1
    assert rows["Gelu"][0] == "20-" and rows["LayerNormalization"][0] == "17-"
    # host kernels are listed and say where they run
    assert rows["NonZero"][1] == "host" and rows["If"][1] == "host"
    assert rows["Conv"][1] == "compiled"


def test_supported_onnx_ops_never_precede_the_onnx_schema():
    # checked against onnx.defs directly (not ember's onnx_first_opsets, which
    # supported_onnx_ops itself clamps with): onnx has a schema for the op at each range's start
    import onnx.defs
    from ember.frontend.converters import supported_onnx_ops
    for (domain, op), ranges in supported_onnx_ops().items():
        if onnx.defs.has(op, domain):
            assert all(onnx.defs.has(op, s, domain) for s, _ in ranges), (domain, op, ranges)


@pytest.mark.slow(reason="a whole model: ResNet-50")
def test_demo_checks_against_a_reference(capsys):
    assert main(["demo", "--repeat", "1"]) == 0
    assert "OK" in capsys.readouterr().out


def test_compile_dump_ir_and_pass_times(tiny_model, tmp_path, capsys):
    dump = tmp_path / "ir"
    assert main(["compile", str(tiny_model), "-o", str(tmp_path / "t.ember"), "--opt-level", "3",
                 "--dump-ir", str(dump), "--pass-times"]) == 0
    out = capsys.readouterr().out
    assert "FuseOps" in out and "total" in out
    files = sorted(p.name for p in dump.iterdir())
    assert any(f.endswith("FuseOps.after.txt") for f in files)
    # the dump after fusion parses back as IR text
    from ember.graph.ir import IRModule
    after = next(p for p in dump.iterdir() if p.name.endswith("FuseOps.after.txt"))
    assert "def @main" in IRModule.from_text(after.read_text()).text()


def test_graph_text_and_dot(tiny_model, tmp_path, capsys):
    assert main(["graph", str(tiny_model), "--before"]) == 0
    before = capsys.readouterr().out
    assert "nn.relu" in before and "add" in before
    assert main(["graph", str(tiny_model), "--format", "dot", "-o", str(tmp_path / "g.dot")]) == 0
    assert (tmp_path / "g.dot").read_text().startswith("digraph")


def test_profile_table_and_chrome_trace(tiny_model, tmp_path, capsys):
    trace = tmp_path / "trace.json"
    assert main(["profile", str(tiny_model), "--repeat", "2", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "GFLOP/s" in out and "end-to-end" in out
    import json
    assert json.loads(trace.read_text())
    assert "hot ms" not in out
    assert main(["profile", str(tiny_model), "--repeat", "2", "--hot"]) == 0
    out = capsys.readouterr().out
    assert "hot ms" in out and "stall %" in out and "evicted" in out


def test_tune_and_conformance_are_wired():
    parser = __import__("ember.cli", fromlist=["build_parser"]).build_parser()
    args = parser.parse_args(["tune", "m.onnx", "--trials", "4", "--tuner", "random"])
    assert args.trials == 4 and args.tuner == "random" and args.check_top == 12
    args = parser.parse_args(["tune", "m.onnx", "--check-top", "2"])
    assert args.check_top == 2
    args = parser.parse_args(["compile", "m.onnx", "--records", "r.jsonl"])
    assert args.records == "r.jsonl"


def test_help_of_every_subcommand_prints(capsys):
    # "% of peak" in a help string made `ember --help` raise TypeError (argparse %-formats help)
    from ember.cli import build_parser
    import argparse
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for argv in [["--help"]] + [[name, "--help"] for name in subs.choices]:
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0, argv
        assert "usage:" in capsys.readouterr().out


def test_non_integer_shape_is_a_typed_error(tiny_model, capsys):
    for cmd in ("compile", "tune"):
        assert main([cmd, str(tiny_model), "--shape", "x=a,3"]) == 2
        err = capsys.readouterr().err
        assert "InputError" in err and "must be integers" in err


def test_interrupted_tune_says_how_to_resume(tiny_model, tmp_path, monkeypatch, capsys):
    import ember.tune.model

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(ember.tune.model, "tune_model", interrupted)
    rec = tmp_path / "r.jsonl"
    assert main(["tune", str(tiny_model), "--records", str(rec)]) == 130
    err = capsys.readouterr().err
    assert str(rec) in err and "resume" in err


def test_profile_of_a_staged_model_is_a_typed_error(tiny_model):
    import ember
    from ember.runtime.profiler import profile
    m = ember.compile(str(tiny_model), executor="staged")
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(m.run({"x": x})[0], 2 * x)
    with pytest.raises(ember.errors.InputError, match="executor='static'"):
        profile(m, {"x": x}, hot=True)


def test_profile_without_repeats_is_a_typed_error(tiny_model):
    # (was: a table of NaN times)
    import ember
    from ember.runtime.profiler import profile
    m = ember.compile(str(tiny_model))
    with pytest.raises(ember.errors.InputError, match="repeat >= 1"):
        profile(m, m.random_inputs(seed=0), repeat=0, hot=True)
    for bad in (dict(repeat=2.5), dict(repeat="3"), dict(warmup=None)):
        with pytest.raises(ember.errors.InputError, match="repeat >= 1"):  # was: TypeError
            profile(m, m.random_inputs(seed=0), hot=True, **bad)
    rep = profile(m, m.random_inputs(seed=0), repeat=1, hot=True)
    assert all(k.ms >= 0 and k.hot_ms >= 0 for k in rep.kernels)


def test_compile_records_says_what_it_applied(tiny_model, tmp_path, capsys):
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w])
    mm = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), mm)
    rec = tmp_path / "mm.jsonl"
    assert main(["tune", str(mm), "--trials", "2", "--tuner", "grid", "--records", str(rec),
                 "--model-check", "0", "--confirm", "0", "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "o.ember"
    # records of another model: said, not silently ignored
    assert main(["compile", str(tiny_model), "--records", str(rec), "-o", str(out)]) == 0
    assert "none of its records is for a kernel of this model" in capsys.readouterr().out
    # records of another target
    assert main(["compile", str(mm), "--records", str(rec), "-o", str(out),
                 "--target", "llvm -num-threads=1"]) == 0
    assert "its records are for" in capsys.readouterr().out
    assert main(["compile", str(mm), "--records", str(rec), "-o", str(out)]) == 0
    assert "tuning records" in capsys.readouterr().out
    # a mistyped records path is an error, not an untuned build
    assert main(["compile", str(mm), "--records", str(tmp_path / "typo.jsonl"),
                 "-o", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_profile_of_an_artifact_refuses_another_shape(tiny_model, tmp_path, capsys):
    art = tmp_path / "tiny.ember"
    assert main(["compile", str(tiny_model), "-o", str(art)]) == 0
    capsys.readouterr()
    # was: the --shape was silently ignored and the compiled (2, 3) model profiled
    assert main(["profile", str(art), "--shape", "x=4,3", "--repeat", "1"]) == 2
    err = capsys.readouterr().err
    assert "InputError" in err and "(2, 3)" in err and "compile the .onnx" in err
    assert main(["profile", str(art), "--shape", "nope=2,3", "--repeat", "1"]) == 2
    assert "no input 'nope'" in capsys.readouterr().err
    assert main(["profile", str(art), "--shape", "x=2,3", "--repeat", "1", "--hot"]) == 0


def test_profile_of_a_model_that_needs_the_staged_executor_says_so(tmp_path, capsys):
    # was: "operator NonZero is not supported", though `ember run` runs the model (staged)
    g = helper.make_graph([helper.make_node("NonZero", ["x"], ["nz"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("nz", TensorProto.INT64, None)])
    path = tmp_path / "nz.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert main(["profile", str(path), "--hot"]) == 2
    err = capsys.readouterr().err
    assert "InputError" in err and "staged executor" in err and "NonZero" in err
    assert "ember run" in err
    assert main(["run", str(path), "--repeat", "1"]) == 0
