"""The broad benchmark set (``ember.testing.broad``, ``bench/compare.py --set broad``): exported
models agree with torch eager, are cached on disk, and the summary line reports the geometric
mean and the worst ember / best-peer ratio."""

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow(reason="imports torch and exports a 2-layer GRU with torch.onnx (10-50 s)")
def test_exported_model_matches_torch_eager_and_is_cached(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    from ember.testing import broad
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    model, inputs = broad.broad_model("gru")
    files = sorted(os.listdir(broad.cache_dir()))
    assert [f.rsplit(".", 1)[1] for f in files] == ["npz", "onnx"]
    module, args = broad.BROAD_MODELS["gru"](0)
    with torch.no_grad():
        want = module(*args).numpy()
    np.testing.assert_array_equal(next(iter(inputs.values())), args[0].numpy())
    got = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    stamp = os.path.getmtime(os.path.join(broad.cache_dir(), files[1]))
    monkeypatch.setitem(sys.modules, "torch", None)  # a cached model needs no torch
    model2, inputs2 = broad.broad_model("gru")
    assert model2.SerializeToString() == model.SerializeToString()
    assert os.path.getmtime(os.path.join(broad.cache_dir(), files[1])) == stamp
    with pytest.raises(KeyError, match="choose one of"):
        broad.broad_model("no_such_model")


def test_broad_set_lists_light_and_torch_models_and_summary_reports_geomean_and_worst():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import compare
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    from ember import zoo
    from ember.testing.broad import BROAD_MODELS
    names = compare.model_set("broad")
    assert set(zoo.LIGHT_MODELS) <= set(names) and set(BROAD_MODELS) <= set(names)
    assert len(BROAD_MODELS) >= 8 and compare.model_set("five") == compare.MODELS
    rows = [{"model": "a", "runtimes": {"ember": 1.0, "onnxruntime": 2.0},
             "ratio_vs_best_peer": 0.5},
            {"model": "b", "runtimes": {"ember": 4.0, "onnxruntime": 2.0},
             "ratio_vs_best_peer": 2.0},
            {"model": "c", "error": "CompileError: boom"}]
    text = compare.format_rows(rows, threads=2, repeat=3)
    assert "geometric mean 1.00, worst 2.00 (b)" in text
    assert "c" in text and "failed: CompileError: boom" in text


def test_outputs_agree_scales_the_absolute_tolerance_with_the_tensor_rms():
    """GPT-2-like logits (RMS ~20): float32 sums in another order differ by ~eps * RMS even where
    the logit is near zero, which element-wise rtol rejects; a real error of the same relative
    size everywhere, a NaN or a wrong integer is still caught."""
    from ember.benchmark import outputs_agree
    rng = np.random.default_rng(0)
    want = (rng.standard_normal((3, 257)) * 20).astype(np.float32)
    want[0, :5] = [1e-3, -2e-3, 0.0, 5e-4, -1e-4]       # near-zero results of cancellation
    noise = rng.standard_normal(want.shape) * 3e-4       # ~1.2e-5 of the RMS: rounding
    got = (want + noise).astype(np.float32)
    assert not np.allclose(got, want, rtol=1e-4, atol=1e-5)   # the old check failed this
    assert outputs_agree(got, want)
    assert not outputs_agree(want * (1 + 1e-3), want)          # 10x rtol everywhere: wrong
    bad = got.copy()
    bad[1, 7] += 0.05                                          # one element off by 2.5e-3 RMS
    assert not outputs_agree(bad, want)
    bad = got.copy()
    bad[2, 3] = np.nan
    assert not outputs_agree(bad, want)
    inf = want.copy()
    inf[0, 0] = np.inf
    assert outputs_agree(inf, inf) and not outputs_agree(want, inf)
    assert outputs_agree(np.array([3, 4]), np.array([3, 4]))
    assert not outputs_agree(np.array([30000, 4]), np.array([30001, 4]))
    assert outputs_agree(np.zeros((0, 4)), np.zeros((0, 4)))
    with pytest.raises(ValueError, match="shapes differ"):
        outputs_agree(np.zeros(3), np.zeros(4))
