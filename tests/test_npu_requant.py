"""The integer requantization shared by the CPU's int8 kernels and the NPU (``qnn.conv2d``
``requant="fixed"``): the CPU kernel (scalar and AVX-512 VNNI) against an integer NumPy
reference written here from the formula (int64, floor division) and against the NPU simulator
running the same layer (``ember.npu.lower_conv2d``), bit-exact, on random shapes with padding,
strides, channel tails and ReLU; ``fixed_point_multiplier``'s (M, shift) against the ratio and
the no-wrap bound; ``Target("npu")``."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ember
from ember.errors import TargetError
from ember.graph.builder import FunctionBuilder
from ember.graph.ir import IRModule, TensorType
from ember.ops.qnn_conv import fixed_point_multiplier, pack_weight, qconv_reference
from ember.tir.schedule.rules.qnn import qconv_isa

HAS_VNNI = qconv_isa(ember.Target("llvm")) == "avx512vnni"
ISAS = ["scalar"] + (["native"] if HAS_VNNI else [])


def _int_reference(x, w, bias, m, s, stride, pad, relu):
    """y = clip(floor((wrap32(wrap32(conv(x, w) + bias) * m) + 2**(s-1)) / 2**s), lo, 127),
    direct loops over int64 (symmetric int8, zero points 0)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    acc = np.zeros((o, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            win = xp[0, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            acc[:, i, j] = np.tensordot(w.astype(np.int64), win, 3)
    acc += bias.astype(np.int64)[:, None, None]
    wrap = lambda v: (v + 2**31) % 2**32 - 2**31  # noqa: E731
    p = wrap(wrap(acc) * m)
    v = p if s == 0 else np.floor_divide(p + 2**(s - 1), 2**s)
    return np.clip(v, 0 if relu else -128, 127).astype(np.int8)[None]


def _cpu(x, w, bias_npu, m, s, stride, pad, relu, isa):
    """The layer as ``qnn.conv2d`` ``requant="fixed"`` built for the CPU."""
    wq = pack_weight(w)
    # the CPU kernel reads int8 activations in the unsigned domain: fold 128 * sum(w)
    bias = (bias_npu.astype(np.int64) - 128 * w.astype(np.int64).reshape(len(w), -1).sum(1))
    bias = bias.astype(np.int32)
    mult = np.zeros(len(w), np.float32)
    attrs = {"layout": "nchw", "kernel": w.shape[2:], "strides": (stride, stride),
             "pads": (pad,) * 4, "dilations": (1, 1), "x_zp": 0, "y_zp": 0,
             "lo": 0 if relu else -128, "hi": 127, "out_dtype": "int8", "requant": "fixed",
             "rq_mult": m, "rq_shift": s}
    fb = FunctionBuilder()
    xv = fb.param("x", TensorType(x.shape, "int8"))
    ps = [fb.param(nm, TensorType(a.shape, str(a.dtype)))
          for nm, a in (("w", wq), ("b", bias), ("m", mult))]
    y = fb.call("qnn.conv2d", [xv] + ps, attrs)
    cm = ember.build(IRModule({"main": fb.finish([y])}),
                     "llvm -isa=scalar" if isa == "scalar" else "llvm",
                     {"w": wq, "b": bias, "m": mult})
    return cm.run({"x": x})[0], qconv_reference(x, wq, bias, mult, attrs)


CASES = [  # c, h, w, o, k, stride, pad, relu
    (3, 9, 7, 5, 3, 1, 1, False),
    (16, 8, 8, 19, 1, 1, 0, True),
    (20, 11, 10, 33, 3, 2, 1, False),
    (7, 6, 9, 16, 5, 1, 2, True),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_fixed_requant_cpu_npu_reference_bit_exact(case, isa):
    from ember import npu
    c, h, wd, o, k, stride, pad, relu = CASES[case]
    rng = np.random.default_rng(10 + case)
    w = rng.integers(-127, 128, (o, c, k, k)).astype(np.int8)
    x = rng.integers(-128, 128, (1, c, h, wd)).astype(np.int8)
    bias = rng.integers(-3000, 3000, o).astype(np.int32)
    ratio = 40.0 / (np.sqrt(c * k * k) * 127 * 74)
    bound = int(np.abs(w.astype(np.int64)).reshape(o, -1).sum(1).max() * 128 +
                np.abs(bias).max())
    m, s = fixed_point_multiplier(ratio, bound)
    want = _int_reference(x, w, bias, m, s, stride, pad, relu)
    got, ref = _cpu(x, w, bias, m, s, stride, pad, relu, isa)
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)
    kern = npu.lower_conv2d(w, bias, input_shape=x.shape, strides=(stride, stride),
                            pads=(pad,) * 4, multiplier=m, shift=s, relu=relu)
    y_npu, _ = kern.run(x, mode="functional")
    np.testing.assert_array_equal(y_npu, want)
    assert len(np.unique(want)) > 8  # the case exercises the output range


def test_fixed_requant_wraps_like_the_npu():
    """A multiplier beyond the no-wrap bound: the int32 product wraps on the CPU exactly as on
    the NPU's ALU (and as the reference)."""
    from ember import npu
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (16, 16, 3, 3)).astype(np.int8)
    x = rng.integers(-128, 128, (1, 16, 6, 6)).astype(np.int8)
    bias = np.zeros(16, np.int32)
    m, s = 20000, 14  # |acc| up to ~1e5 * 2e4 > 2**31
    want = _int_reference(x, w, bias, m, s, 1, 1, False)
    got, _ = _cpu(x, w, bias, m, s, 1, 1, False, ISAS[-1])
    np.testing.assert_array_equal(got, want)
    y_npu, _ = npu.lower_conv2d(w, bias, input_shape=x.shape, pads=(1,) * 4, multiplier=m,
                                shift=s).run(x, mode="functional")
    np.testing.assert_array_equal(y_npu, want)


@pytest.mark.parametrize("ratio,bound", [(0.00123, 10**6), (0.37, 4000), (3e-7, 2**20),
                                         (5.0, 1000), (2.0**-20, 100)])
def test_fixed_point_multiplier(ratio, bound):
    m, s = fixed_point_multiplier(ratio, bound)
    assert 1 <= m < 2**15 and (s == 0 or 2 <= s <= 31) and m * bound < 2**31
    assert abs(m / 2.0**s - ratio) <= 0.5 / 2.0**s + 1e-18  # the nearest at that shift
    # no larger shift satisfies the limits
    if s < 31:
        m2 = round(ratio * 2.0**(s + 1))
        assert not (1 <= m2 < 2**15 and m2 * bound < 2**31)


def test_fixed_point_multiplier_refuses_impossible():
    with pytest.raises(ValueError):
        fixed_point_multiplier(1e6, 10)  # needs M >= 2**15 even at shift 0
    with pytest.raises(ValueError):
        fixed_point_multiplier(1e-3, 2**31)  # any M >= 1 wraps


def test_target_npu(tmp_path):
    from ember.npu import load_config
    t = ember.Target("npu")
    assert t.kind == "npu" and t.is_npu and not t.is_gpu
    assert t.npu_config == load_config()
    assert t.host().kind == "llvm"
    cfg = json.loads(load_config.__globals__["DEFAULT_CONFIG"].read_text())
    cfg["WGT_BUFF_BYTES"] = 512 * 1024 // 4
    p = tmp_path / "small.json"
    p.write_text(json.dumps(cfg))
    t2 = ember.Target(f"npu -config={p}")
    assert t2.npu_config.wgt_buff_bytes == 128 * 1024 and ember.Target(str(t2)) == t2
    cfg["INP_BUFF_BYTES"] = 8  # less than one 16-byte entry
    p.write_text(json.dumps(cfg))
    with pytest.raises(TargetError, match="inp scratchpad"):
        ember.Target(f"npu -config={p}")
    with pytest.raises(TargetError, match="does not exist"):
        ember.Target(f"npu -config={tmp_path / 'none.json'}")
    with pytest.raises(TargetError, match="-config"):
        ember.Target("llvm -config=x.json")
    with pytest.raises(TargetError, match="npu"):
        ember.Target("tpu")
