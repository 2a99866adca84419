"""qnn.conv2d (the int8 convolution / dense kernel, ember.ops.qnn_conv) against its integer
NumPy reference, bit-exact, on the scalar and the AVX-512 VNNI micro-kernels: per-channel and
per-tensor scales, zero points, uint8 and int8 activations, odd shapes (K not a multiple of 4,
pixel and channel tails), strides, padding, dilation, a fused ReLU clamp, the dense (rows)
layout. The reference itself is checked against a float64 direct convolution."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.graph.builder import FunctionBuilder
from ember.graph.ir import IRModule, TensorType
from ember.ops.qnn_conv import pack_weight, qconv_reference
from op_cases_qnn import qconv_case
from ember.tir.schedule.rules.qnn import qconv_isa

HAS_VNNI = qconv_isa(ember.Target("llvm")) == "avx512vnni"
ISAS = ["scalar"] + (["native"] if HAS_VNNI else [])


_case = qconv_case


def _run(x, wq, bias, mult, attrs, target):
    fb = FunctionBuilder()
    xv = fb.param("x", TensorType(x.shape, str(x.dtype)))
    ps = [fb.param(nm, TensorType(a.shape, str(a.dtype)))
          for nm, a in (("w", wq), ("b", bias), ("m", mult))]
    y = fb.call("qnn.conv2d", [xv] + ps, attrs)
    mod = IRModule({"main": fb.finish([y])})
    tgt = "llvm -isa=scalar" if target == "scalar" else "llvm"
    cm = ember.build(mod, tgt, {"w": wq, "b": bias, "m": mult})
    return cm.run({"x": x})[0]


CASES = [
    dict(n=1, c=3, h=9, w=7, cout=5, k=3, pad=1),                       # K=27, tails
    dict(n=2, c=16, h=8, w=8, cout=19, k=1),                            # 1x1, channel tail
    dict(n=1, c=7, h=11, w=13, cout=40, k=3, stride=2, pad=1, in_dtype="int8"),
    dict(n=1, c=5, h=10, w=10, cout=9, k=3, dil=2, per_channel=False, out_dtype="int8"),
    dict(n=1, c=33, h=6, w=6, cout=70, k=3, pad=1, relu=True),
    dict(n=1, c=21, h=37, w=1, cout=23, k=1, layout="rows", in_dtype="int8"),
    dict(n=1, c=64, h=130, w=1, cout=35, k=1, layout="rows", relu=True),
]


@pytest.mark.parametrize("target", ISAS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_qconv_kernel_is_bit_exact(case, target):
    rng = np.random.default_rng(case)
    x, wq, bias, mult, attrs = _case(rng, **CASES[case])
    want = qconv_reference(x, wq, bias, mult, attrs)
    got = _run(x, wq, bias, mult, attrs, target)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 8  # the case exercises the output range, not one value


def test_reference_matches_float_convolution():
    """qconv_reference's integer sums equal a float64 direct convolution of the dequantized
    operands (before rounding)."""
    rng = np.random.default_rng(7)
    x, wq, bias, mult, attrs = _case(rng, 1, 4, 7, 6, 6, 3, stride=2, pad=1, in_dtype="int8")
    xf = np.pad(x.astype(np.float64) - attrs["x_zp"], ((0, 0), (0, 0), (1, 1), (1, 1)))
    wf = wq.reshape(6, 3, 3, 4).transpose(0, 3, 1, 2).astype(np.float64)  # pack_weight undone
    oh, ow = 4, 3
    acc = np.zeros((1, 6, oh, ow))
    for i in range(oh):
        for j in range(ow):
            acc[0, :, i, j] = np.tensordot(wf, xf[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3], 3)
    # bias here holds no zero-point correction: remove the reference's own shift term
    xzu = attrs["x_zp"] + 128
    corr = -xzu * wq.astype(np.int64).sum(1)
    f = ((acc + bias[None, :, None, None] + 0).astype(np.float32))
    want = np.clip(np.rint(f * mult[None, :, None, None]) + attrs["y_zp"], 0, 255)
    got = qconv_reference(x, wq, (bias + corr).astype(np.int32), mult, attrs)
    np.testing.assert_array_equal(got, want.astype(np.uint8))
