"""Narrow element types (ember.dtypes) through the compiled path: every bit pattern of the 8-bit
floats decodes exactly (vs ml_dtypes), float32 values encode with round-to-nearest-even and ONNX
Cast's saturation rules, sub-byte integers wrap by the ONNX Cast rule (whatever ml_dtypes'
version does), and bfloat16 arithmetic rounds
once per operator."""

import math

import ml_dtypes
import numpy as np
import pytest

from ember.dtypes import np_dtype
from ember.testing import reference_op, run_op

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
          "float8_e8m0fnu"]


def _specials(rng, n=4000):
    x = np.concatenate([rng.standard_normal(n) * 10 ** rng.uniform(-8, 6, n),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 448, 464, 480, 57344, 61440,
                         65536, 240, 248, 1e-7, -1e-7, 0.5, 1.5, 2.5]]).astype(np.float32)
    return x


@pytest.mark.parametrize("dt", FLOAT8 + ["float4_e2m1fn", "bfloat16"])
def test_every_code_decodes_exactly(dt):
    t = np_dtype(dt)
    n = 16 if dt == "float4_e2m1fn" else (1 << 16 if dt == "bfloat16" else 256)
    codes = np.arange(n, dtype=np.uint16 if dt == "bfloat16" else np.uint8)
    x = codes.view(t) if dt != "float4_e2m1fn" else codes.astype(np.uint8).view(t)
    y, = run_op("cast", [x], {"dtype": "float32"})
    want = x.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(y[ok], want[ok])
    assert (np.signbit(y[ok]) == np.signbit(want[ok])).all()


@pytest.mark.parametrize("dt", FLOAT8 + ["float4_e2m1fn", "bfloat16"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_float32_encodes_like_the_reference(dt, saturate):
    x = _specials(np.random.default_rng(0))
    if dt == "float8_e8m0fnu":
        x = np.abs(x)
    op, attrs = ("cast", {"dtype": dt}) if saturate else \
        ("narrow_cast", {"dtype": dt, "saturate": 0})
    if dt in ("float4_e2m1fn", "bfloat16") and not saturate:
        pytest.skip(f"{dt} has no separate non-saturating conversion")
    y, = run_op(op, [x], attrs)
    want, = reference_op(op, [x], attrs)
    yb = y.view(np.uint16 if dt == "bfloat16" else np.uint8)
    wb = want.view(np.uint16 if dt == "bfloat16" else np.uint8)
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(y.astype(np.float32)), nan)
    np.testing.assert_array_equal(yb[~nan], wb[~nan])


def test_saturation_rules_of_onnx_cast():
    x = np.array([1e6, -1e6, np.inf, -np.inf, 464, 480], np.float32)
    sat, = run_op("cast", [x], {"dtype": "float8_e4m3fn"})
    np.testing.assert_array_equal(sat.astype(np.float32), [448, -448, 448, -448, 448, 448])
    nosat, = run_op("narrow_cast", [x], {"dtype": "float8_e5m2", "saturate": 0})
    np.testing.assert_array_equal(nosat.astype(np.float32)[:4], [np.inf, -np.inf, np.inf,
                                                                 -np.inf])


def _spec_sub_byte(values, dt) -> list[int]:
    """ONNX Cast to a sub-byte integer, element by element in Python integers: truncate a float
    toward zero, then keep the low bits (two's complement for the signed types), the spec's rule
    for out-of-range fixed-point values; NaN/inf -> 0. (The spec leaves out-of-range floats
    undefined; ember defines them this way, independent of ml_dtypes' version.)"""
    bits = 4 if dt.endswith("4") else 2
    out = []
    for v in values:
        v = float(v) if isinstance(v, (float, np.floating)) else int(v)
        if isinstance(v, float):
            v = 0 if (math.isnan(v) or math.isinf(v)) else math.trunc(v)
        low = v % (1 << bits)
        out.append(low - (1 << bits) if not dt.startswith("u") and low >= 1 << (bits - 1)
                   else low)
    return out


@pytest.mark.parametrize("dt", ["int4", "uint4", "int2", "uint2"])
def test_sub_byte_integers_wrap_like_the_onnx_rule(dt):
    x = np.array([-9, -8, -3, -1, 0, 1, 2, 7, 8, 15, 16, 100, 2.5, -2.5, 7.9, -0.5, np.nan,
                  np.inf, -np.inf, 1e30], np.float32)
    want = _spec_sub_byte(x, dt)
    y, = run_op("cast", [x], {"dtype": dt})
    assert y.dtype == np_dtype(dt)
    np.testing.assert_array_equal(y.astype(np.int64), want)
    ref, = reference_op("cast", [x], {"dtype": dt})  # constant folding uses the reference
    np.testing.assert_array_equal(ref.astype(np.int64), want)
    back, = run_op("cast", [y], {"dtype": "int32"})
    np.testing.assert_array_equal(back, want)
    ints = np.arange(-20, 20, dtype=np.int64)
    i, = run_op("cast", [ints], {"dtype": dt})
    np.testing.assert_array_equal(i.astype(np.int64), _spec_sub_byte(ints, dt))
    ref, = reference_op("cast", [ints], {"dtype": dt})
    np.testing.assert_array_equal(ref.astype(np.int64), _spec_sub_byte(ints, dt))


def test_bfloat16_add_rounds_once():
    rng = np.random.default_rng(3)
    a = rng.standard_normal(1000).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal(1000).astype(ml_dtypes.bfloat16)
    y, = run_op("add", [a, b])
    want = (a.astype(np.float32) + b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))
