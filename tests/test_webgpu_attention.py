"""``nn.attention`` on webgpu: the GPU pipelines' DecomposeAttention pass (matmul / max / exp /
sum graph operators instead of the CPU's micro-kernel composite) against the operator's NumPy
reference (ONNX Attention-23/24 semantics): grouped-query heads, causal with a past offset,
softcap, masks shorter than the keys, valid-key counts (nonpad_kv_seqlen) with a sliding
window, every qk_matmul_output mode, and a fully masked row (zero, ONNX's errata)."""

import numpy as np
import pytest

from ember.testing import assert_matches_reference
from webgpu_util import needs_adapter


def _rand(r, *shape):
    return r.standard_normal(shape).astype(np.float32)


CASES = {
    "gqa_causal_past": dict(h=4, hkv=2, s=3, t=7, attrs={"causal": 1, "past": 4}),
    "softcap_qk_mode1": dict(h=2, hkv=2, s=4, t=5, attrs={"softcap": 2.0, "qk_mode": 1,
                                                          "scale": 0.3}),
    "short_mask_mode2": dict(h=2, hkv=1, s=3, t=6, mask=(1, 2, 3, 4), attrs={"qk_mode": 2}),
    "nonpad_window_mode3": dict(h=2, hkv=2, s=3, t=6, nonpad=[4, 6],
                                attrs={"causal": 1, "window": (2, 0), "qk_mode": 3}),
    "fully_masked_row": dict(h=1, hkv=1, s=2, t=3, mask=(1, 1, 2, 3), masked_row=True,
                             attrs={}),
}


@needs_adapter
@pytest.mark.parametrize("name", sorted(CASES))
def test_attention_matches_reference_on_webgpu(name):
    c = CASES[name]
    r = np.random.default_rng(7)
    b, d = 2, 8
    ins = [_rand(r, b, c["h"], c["s"], d), _rand(r, b, c["hkv"], c["t"], d),
           _rand(r, b, c["hkv"], c["t"], d)]
    attrs = dict(c["attrs"])
    if "mask" in c:
        m = _rand(r, *c["mask"])
        if c.get("masked_row"):
            m[..., 0, :] = -np.inf
        ins.append(m)
        attrs["has_mask"] = 1
    if "nonpad" in c:
        ins.append(np.array(c["nonpad"], np.int64))
        attrs["has_nonpad"] = 1
    out = assert_matches_reference("nn.attention", ins, attrs, rtol=1e-4, atol=1e-5,
                                   target="webgpu")
    if c.get("masked_row"):
        assert np.all(out[0][:, :, 0] == 0)
