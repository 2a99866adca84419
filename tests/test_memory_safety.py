"""Memory safety of generated kernels: ``KernelFunction.run`` refuses a kernel that writes
outside its arguments (canary bytes), ``$EMBER_CFLAGS`` reaches the compiler and the cache key,
and an AddressSanitizer build (docs/performance.md) reports a real overflow and passes the gemm
rule's tuning space on tail shapes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ember import te
from ember.codegen import build
from ember.errors import CodegenError, EmberError
from ember.runtime.kernel import CANARY, check_guard, compile_prim_func, guarded_copy

ROOT = Path(__file__).resolve().parents[1]


def _copy_kernel(n: int):
    x = te.placeholder((n,), "float32", "x")
    y = te.compute((n,), lambda i: x[i] + te.const(1.0, "float32"), name="y")
    return te.create_prim_func([x, y], "copy")


def test_guarded_copy_is_aligned_and_detects_a_smashed_canary():
    a = np.arange(7, dtype=np.float32)
    raw, view, off = guarded_copy(a)
    assert view.ctypes.data % 64 == 0 and np.array_equal(view, a)
    assert check_guard(raw, off, view.nbytes) == 0
    raw[off + view.nbytes] = CANARY ^ 1      # one byte right past the end
    raw[off - 1] = CANARY ^ 1                # and one right before the start
    assert check_guard(raw, off, view.nbytes) == 2


def test_run_refuses_a_kernel_that_writes_past_its_output():
    kf = compile_prim_func(_copy_kernel(9))
    np.testing.assert_allclose(kf.run([np.zeros(9, np.float32)])[0], np.ones(9))
    # the same library told its output has 8 elements: it writes one float past the end
    kf.func = _copy_kernel(8)
    kf.func.params[0] = _copy_kernel(9).params[0]
    with pytest.raises(EmberError, match="outside argument 1"):
        kf.run([np.zeros(9, np.float32)])


def test_ember_cflags_reach_the_compiler_and_the_cache_key(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    src = "int ember_flag_value(void) { return EMBER_TEST_FLAG; }\n"
    monkeypatch.setenv("EMBER_CFLAGS", "-DEMBER_TEST_FLAG=7")
    assert build.compile_flags(build.find_compiler())[-1] == "-DEMBER_TEST_FLAG=7"
    lib7 = build.build_library(src)
    assert build.load_library(lib7).ember_flag_value() == 7
    monkeypatch.setenv("EMBER_CFLAGS", "-DEMBER_TEST_FLAG=9")
    lib9 = build.build_library(src)
    assert lib9 != lib7 and build.load_library(lib9).ember_flag_value() == 9
    monkeypatch.delenv("EMBER_CFLAGS")
    with pytest.raises(CodegenError):       # not served from the flagged builds' cache
        build.build_library(src)
    monkeypatch.setenv("EMBER_CFLAGS", "-DX='unbalanced")
    with pytest.raises(EmberError, match="EMBER_CFLAGS"):
        build.compile_flags(build.find_compiler())


def _libasan() -> str | None:
    try:
        p = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                           text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return p if os.path.isabs(p) and os.path.exists(p) else None


def _asan_run(code: str, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"),
               EMBER_CFLAGS="-fsanitize=address -fno-omit-frame-pointer",
               LD_PRELOAD=_libasan(), ASAN_OPTIONS="detect_leaks=0",
               PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(_libasan() is None, reason="gcc's libasan.so is not installed")
def test_asan_build_reports_an_overflow_of_a_kernel_workspace(tmp_path):
    # negative control: the sanitized build does catch a heap overflow in generated code
    r = _asan_run("""
        import ctypes
        from ember.codegen.build import build_library, load_library
        src = '''#include <stdlib.h>
        int over(int n) { float* p = (float*)malloc(8 * sizeof(float));
          for (int i = 0; i < n; ++i) p[i] = 1.0f; int r = (int)p[3]; free(p); return r; }'''
        print(load_library(build_library(src)).over(9))
    """, tmp_path)
    assert r.returncode != 0 and "heap-buffer-overflow" in r.stderr


def _has_vnni() -> bool:
    from ember.tir.schedule.rules.qnn import qgemm_isa
    import ember
    return qgemm_isa(ember.Target("llvm")) == "avx512vnni"


@pytest.mark.slow
@pytest.mark.skipif(_libasan() is None, reason="gcc's libasan.so is not installed")
@pytest.mark.skipif(not _has_vnni(), reason="the int8 knobs are AVX-512 VNNI's")
def test_int8_tuning_space_is_clean_under_asan(tmp_path):
    # every register block / pixel tile of the channels-last int8 kernel (stack panels, the
    # dense stem's input strip, pixel and channel tails), built with AddressSanitizer: no
    # out-of-bounds access and bit-exact against the integer reference
    r = _asan_run("""
        import sys
        sys.path.insert(0, "tests")
        import numpy as np
        from ember.graph.ir import Binding, Call, TensorType, Var
        from ember.graph.lower import lower_binding
        from ember.ops.qnn_conv import qconv_reference
        from ember.runtime.kernel import compile_prim_func
        from ember.tir.schedule.rules import rule_knobs, schedule_config
        from test_qnn_channels_last import channels_last_case
        T = "llvm -num-threads=2"
        n = 0
        for k, case in enumerate([
                dict(n=1, c=3, h=21, w=17, cout=40, k=7, stride=2, pad=3, layout="nchw_nhwc",
                     dense=True, in_dtype="int8"),
                dict(n=1, c=20, h=9, w=11, cout=37, k=3, pad=1, relu=True),
                dict(n=1, c=32, h=7, w=5, cout=48, k=1, skip="uint8", float_out=True)]):
            ins, attrs, _, _ = channels_last_case(np.random.default_rng(k), **case)
            args = tuple(Var(f"x{i}", TensorType(a.shape, str(a.dtype))) for i, a in enumerate(ins))
            want = qconv_reference(*ins, attrs)
            out = Var("y", TensorType(want.shape, str(want.dtype)))
            f = lower_binding(Binding((out,), Call("qnn.conv2d", args, attrs)), "q")
            found = rule_knobs(f, T)
            if found is None:
                continue
            name, knobs = found
            for tile in knobs["tile"]:
                for px in knobs["pixels"]:
                    g = schedule_config(f, T, name, {"tile": tile, "pixels": px})
                    got = compile_prim_func(g, T).run(list(ins))[0]
                    assert np.array_equal(got, want), (k, tile, px)
                    n += 1
        print("configs", n)
    """, tmp_path)
    assert r.returncode == 0 and "AddressSanitizer" not in r.stderr, r.stderr[-3000:]
    assert int(r.stdout.split()[-1]) >= 10


@pytest.mark.slow
@pytest.mark.skipif(_libasan() is None, reason="gcc's libasan.so is not installed")
def test_gemm_rule_tuning_space_is_clean_under_asan(tmp_path):
    # every configuration of the gemm rule (tile, order, k-blocking, parallel fusion) on tail
    # shapes, 2 threads, built with AddressSanitizer and run through the canary check
    r = _asan_run("""
        import itertools
        import numpy as np
        import ember.tir.schedule.rules.gemm as gemm
        from ember import te
        from ember.graph.ir import TensorType
        from ember.ops import get_op
        from ember.runtime.kernel import compile_prim_func
        from ember.tir.schedule import IndexMap
        from ember.tir.schedule.rules import rule_knobs, schedule_config
        gemm.TUNE_PARALLEL_FUSION = True
        T = "llvm -num-threads=2"
        rng = np.random.default_rng(0)
        n = 0
        for op, shapes, attrs in [
                ("nn.conv", [(1, 6, 6, 128), (40, 128, 3, 3)],
                 {"pads": [1, 1, 1, 1], "data_layout": "NHWC"}),       # K-blocked, N tail
                ("nn.gemm", [(13, 100), (100, 37)], {}),               # odd M and N
                ("matmul", [(3, 11, 33), (3, 33, 21)], {})]:           # batched
            od = get_op(op)
            a = od.normalize_attrs(attrs)
            ot = od.infer_type([TensorType(s, "float32") for s in shapes], a)
            ins = [te.placeholder(s, "float32", f"x{k}") for k, s in enumerate(shapes)]
            y = od.compute(ins, a, ot)[0]
            y = te.compute(y.shape, lambda *i: te.maximum(y[i], te.const(0.0, "float32")),
                           name="relu")
            f = te.create_prim_func(ins + [y], "f")
            f.attrs["constant_params"] = list(range(1, len(shapes)))
            xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
            ref = np.maximum(od.reference(xs, a)[0], 0)
            name, knobs = rule_knobs(f, T)
            for vals in itertools.product(*knobs.values()):
                g = schedule_config(f, T, name, dict(zip(knobs, vals)))
                lay = {int(k): v for k, v in g.attrs.get("param_layouts", {}).items()}
                args = [IndexMap.from_json(lay[k]["index_map"]).apply_numpy(x) if k in lay
                        else x for k, x in enumerate(xs)]
                out = compile_prim_func(g, T).run(args)[0]
                assert np.allclose(out, ref, rtol=1e-3, atol=1e-3), (op, vals)
                n += 1
        print("configs", n)
    """, tmp_path)
    assert r.returncode == 0 and "AddressSanitizer" not in r.stderr, r.stderr[-3000:]
    assert int(r.stdout.split()[-1]) >= 10


def test_exact_buffers_plugin_keeps_results(tmp_path):
    # one allocation per arena slot, step by step: same outputs as the arena (in a child: the
    # plugin patches the process)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import numpy as np
        import ember
        from ember.testing import models as M
        model = M.mobilenet_v2(seed=2, image_size=32)
        x = {"input": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
        want = ember.compile(model).run(x)
        import ember.testing.exact_buffers
        cm = ember.compile(model)
        ex = cm._executor
        assert not ex.use_aot and len(ex._slot_bufs) > 3
        assert all(b.ctypes.data % 64 == 0 for b in ex._slot_bufs.values())
        for a, b in zip(cm.run(x), want):
            np.testing.assert_array_equal(a, b)
        print("ok")
    """)], env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, capture_output=True,
        text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.split()[-1] == "ok", r.stderr[-3000:]
