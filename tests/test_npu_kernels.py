"""ember.npu kernel generation: bit-exact against the integer NumPy reference on random
shapes (padding, strides, tails), static allocation, ResNet-18 layer cycle bounds."""

import json

import numpy as np
import pytest

from ember import npu
from ember.errors import InputError, NPUError, TargetError
from ember.npu import reference
from ember.npu.config import NPUConfig, load_config

RNG_CASES = [
    # C, H, W, O, KH, KW, strides, pads (t, l, b, r)
    (3, 9, 7, 5, 3, 3, (1, 1), (1, 1, 1, 1)),
    (17, 11, 13, 18, 3, 3, (2, 2), (1, 1, 0, 1)),
    (40, 8, 8, 70, 1, 1, (1, 1), (0, 0, 0, 0)),
    (16, 15, 9, 33, 5, 3, (3, 2), (2, 1, 2, 0)),
    (1, 5, 5, 1, 5, 5, (1, 1), (2, 2, 2, 2)),     # single channel, kernel as large as input
    (33, 7, 7, 16, 2, 2, (2, 1), (0, 1, 1, 0)),   # even kernel, asymmetric pads
    (8, 1, 31, 20, 1, 3, (1, 2), (0, 1, 0, 1)),   # one row
]


def _case(rng, c, h, w, o, kh, kw):
    x = rng.integers(-128, 128, (1, c, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (o, c, kh, kw), dtype=np.int8)
    b = rng.integers(-2**16, 2**16, o).astype(np.int32)
    return x, wt, b


@pytest.mark.parametrize("case", RNG_CASES)
@pytest.mark.parametrize("vt", [1, 2])
def test_conv2d_bit_exact(case, vt):
    c, h, w, o, kh, kw, st, pd = case
    rng = np.random.default_rng(hash((case, vt)) % 2**32)
    x, wt, b = _case(rng, c, h, w, o, kh, kw)
    for mult, shift, relu, bias in ((7, 10, True, b), (-3, 0, False, None), (1, 9, False, b)):
        k = npu.lower_conv2d(wt, bias, input_shape=x.shape, strides=st, pads=pd,
                             multiplier=mult, shift=shift, relu=relu, virtual_threads=vt)
        want = reference.conv2d_int8(x, wt, bias, st, pd, mult, shift, relu)
        y, _ = k.run(x)
        assert y.shape == want.shape and np.array_equal(y, want), (k.intrinsic, k.tiling)
        # both intrinsics where both apply (multiplier 1: GEMM_RS is chosen)
        assert k.intrinsic == ("gemm_rs" if mult == 1 else "gemm")


@pytest.mark.parametrize("tiling", [(2, 4, 5, 2), (1, 5, 7, 1), (3, 9, 13, 3), (2, 3, 5, 2)])
def test_forced_tilings_with_tails_and_shifted_tiles(tiling):
    """Reduction tails (ICB=3 in chunks of 2), shifted-back last tiles in every axis."""
    rng = np.random.default_rng(7)
    x, wt, b = _case(rng, 40, 9, 13, 45, 3, 3)
    want = reference.conv2d_int8(x, wt, b, (1, 1), (1, 1, 1, 1), 5, 12, True)
    for vt in (1, 2):
        for intr in ("gemm", "gemm_rs"):
            m = 5 if intr == "gemm" else 1
            want = reference.conv2d_int8(x, wt, b, (1, 1), (1, 1, 1, 1), m, 12, True)
            t = npu.Tiling.make(npu.ConvShape(40, 9, 13, 45, 3, 3, (1, 1), (1, 1, 1, 1)),
                                *tiling, vthreads=vt)
            k = npu.lower_conv2d(wt, b, input_shape=x.shape, pads=(1, 1, 1, 1), multiplier=m,
                                 shift=12, relu=True, virtual_threads=vt, tiling=t,
                                 intrinsic=intr)
            y1, _ = k.run(x, mode="functional")
            y2, st = k.run(x, mode="cycle")
            assert np.array_equal(y1, want) and np.array_equal(y2, want)
            assert max(st.compute_bound, st.memory_bound) <= st.cycles <= \
                st.compute_bound + st.memory_bound


def test_dense_bit_exact():
    rng = np.random.default_rng(8)
    for n, kdim, m in ((1, 512, 1000), (5, 37, 19), (3, 16, 16)):
        x = rng.integers(-128, 128, (n, kdim), dtype=np.int8)
        w = rng.integers(-128, 128, (m, kdim), dtype=np.int8)
        b = rng.integers(-2**20, 2**20, m).astype(np.int32)
        k = npu.lower_dense(w, b, batch=n, multiplier=11, shift=15)
        y, _ = k.run(x)
        assert np.array_equal(y, reference.dense_int8(x, w, b, 11, 15))


def test_static_allocation_fits_every_scratchpad():
    cfg = load_config()
    rng = np.random.default_rng(9)
    for c, h, w, o, kh, kw, st, pd in RNG_CASES + [(256, 14, 14, 256, 3, 3, (1, 1), (1,) * 4)]:
        x, wt, b = _case(rng, c, h, w, o, kh, kw)
        for vt in (1, 2):
            k = npu.lower_conv2d(wt, b, input_shape=x.shape, strides=st, pads=pd,
                                 multiplier=3, shift=8, virtual_threads=vt)
            t = k.tiling
            assert t.t_icb * t.IHt * t.IWt <= cfg.depth("inp") // vt
            assert t.t_ocb * t.t_icb * kh * kw <= cfg.depth("wgt") // vt
            assert t.t_ocb * (t.P + 1) <= cfg.depth("acc") // vt
            assert len(k.program.uops) <= cfg.depth("uop")


def test_layer_that_cannot_hold_one_tile_names_the_scratchpad(tmp_path):
    d = {k.upper(): v for k, v in load_config().__dict__.items()}
    d["INP_BUFF_BYTES"] = 16 * 40   # 40 entries: a 7x7 window does not fit
    cfg = NPUConfig.from_dict(d)
    wt = np.ones((16, 16, 7, 7), np.int8)
    with pytest.raises(TargetError, match="the inp scratchpad"):
        npu.lower_conv2d(wt, input_shape=(1, 16, 20, 20), config=cfg, virtual_threads=1)
    with pytest.raises(TargetError, match="does not fit the inp scratchpad"):
        npu.lower_conv2d(wt, input_shape=(1, 16, 64, 64),
                         tiling=npu.Tiling(1, 58, 58, 1, 2, 64, 64))


def test_bad_requests_are_typed_errors():
    wt = np.ones((4, 3, 3, 3), np.int8)
    with pytest.raises(NPUError, match="weight must be int8"):
        npu.lower_conv2d(wt.astype(np.float32), input_shape=(1, 3, 8, 8))
    with pytest.raises(NPUError, match="batch 1, groups 1"):
        npu.lower_conv2d(wt, input_shape=(2, 3, 8, 8))
    with pytest.raises(NPUError, match="pads"):
        npu.lower_conv2d(wt, input_shape=(1, 3, 8, 8), pads=(16, 0, 0, 0))
    with pytest.raises(NPUError, match="16-bit immediate"):
        npu.lower_conv2d(wt, input_shape=(1, 3, 8, 8), multiplier=1 << 16)
    with pytest.raises(NPUError, match="shift of 1"):
        npu.lower_conv2d(wt, input_shape=(1, 3, 8, 8), multiplier=3, shift=1)
    with pytest.raises(NPUError, match="bias must be int32"):
        npu.lower_conv2d(wt, np.zeros(4, np.int64), input_shape=(1, 3, 8, 8))
    # a zero stride was a ZeroDivisionError from the output-size arithmetic
    with pytest.raises(NPUError, match="strides"):
        npu.lower_conv2d(wt, input_shape=(1, 3, 8, 8), strides=(0, 1))
    with pytest.raises(NPUError, match="strides"):
        npu.lower_conv2d(wt, input_shape=(1, 3, 8, 8), strides=(1,))
    with pytest.raises(NPUError, match="four integers"):
        npu.lower_conv2d(wt, input_shape=(1, 3, 8, 8), pads=(1, 1))
    k = npu.lower_conv2d(wt, input_shape=(1, 3, 8, 8), multiplier=3, shift=4)
    with pytest.raises(InputError, match="int8 of shape"):
        k.run(np.zeros((1, 3, 8, 8), np.float32))


# ResNet-18 (224x224): name, C, H=W, O, K, stride, pad
RESNET18 = [
    ("conv1 7x7/2", 3, 224, 64, 7, 2, 3),
    ("layer1 3x3", 64, 56, 64, 3, 1, 1),
    ("layer2.0 3x3/2", 64, 56, 128, 3, 2, 1),
    ("layer2 3x3", 128, 28, 128, 3, 1, 1),
    ("layer2 downsample 1x1/2", 64, 56, 128, 1, 2, 0),
    ("layer3.0 3x3/2", 128, 28, 256, 3, 2, 1),
    ("layer3 3x3", 256, 14, 256, 3, 1, 1),
    ("layer3 downsample 1x1/2", 128, 28, 256, 1, 2, 0),
    ("layer4.0 3x3/2", 256, 14, 512, 3, 2, 1),
    ("layer4 3x3", 512, 7, 512, 3, 1, 1),
    ("layer4 downsample 1x1/2", 256, 14, 512, 1, 2, 0),
    ("fc", 512, 1, 1000, 1, 1, 0),
]


@pytest.mark.slow(reason="simulates every ResNet-18 layer shape at full size (~1 min)")
@pytest.mark.parametrize("layer", RESNET18, ids=[r[0] for r in RESNET18])
def test_resnet18_layer_cycles_between_bounds(layer):
    name, c, h, o, k, s, p = layer
    rng = np.random.default_rng(10)
    cycles = {}
    for vt in (1, 2):
        x, wt, b = _case(rng, c, h, h, o, k, k)
        kern = npu.lower_conv2d(wt, b, input_shape=x.shape, strides=(s, s), pads=(p,) * 4,
                                multiplier=5, shift=14, relu=True, virtual_threads=vt)
        y, st = kern.run(x, mode="cycle", check=vt == 2)
        assert max(st.compute_bound, st.memory_bound) <= st.cycles <= \
            st.compute_bound + st.memory_bound
        assert st.gemm_uops * 256 >= kern.macs
        cycles[vt] = st.cycles
        if vt == 2:
            assert np.array_equal(y, reference.conv2d_int8(x, wt, b, (s, s), (p,) * 4, 5, 14,
                                                           True))
    assert cycles[2] <= cycles[1]


def test_resnet18_layer_shapes_scaled_between_bounds():
    """Every ResNet-18 layer's channels, kernel and stride on a smaller image (fast)."""
    rng = np.random.default_rng(11)
    for name, c, h, o, k, s, p in RESNET18:
        hh = max(1, min(h, 9 if k < 7 else 23))
        x, wt, b = _case(rng, c, hh, hh, o, k, k)
        got = {}
        for vt in (1, 2):
            kern = npu.lower_conv2d(wt, b, input_shape=x.shape, strides=(s, s),
                                    pads=(p,) * 4, multiplier=5, shift=14, relu=True,
                                    virtual_threads=vt)
            y, st = kern.run(x, mode="cycle")
            assert max(st.compute_bound, st.memory_bound) <= st.cycles <= \
                st.compute_bound + st.memory_bound, name
            got[vt] = y
        assert np.array_equal(got[1], got[2])
        assert np.array_equal(got[2], reference.conv2d_int8(x, wt, b, (s, s), (p,) * 4, 5, 14,
                                                            True)), name


def test_two_virtual_threads_overlap_memory_and_compute():
    rng = np.random.default_rng(12)
    x, wt, b = _case(rng, 128, 14, 14, 128, 3, 3)
    cyc = {}
    for vt in (1, 2):
        k = npu.lower_conv2d(wt, b, input_shape=x.shape, pads=(1,) * 4, multiplier=5,
                             shift=14, virtual_threads=vt)
        _, st = k.run(x, mode="cycle")
        cyc[vt] = st.cycles
        # vt=1 serializes each tile's load, compute and store; vt=2 overlaps them
        if vt == 1:
            assert st.cycles >= 0.9 * (st.compute_bound + st.memory_bound)
    assert cyc[2] < 0.9 * cyc[1]


def test_program_text_and_binary_round_trip():
    rng = np.random.default_rng(13)
    x, wt, b = _case(rng, 20, 6, 6, 20, 3, 3)
    k = npu.lower_conv2d(wt, b, input_shape=x.shape, pads=(1,) * 4, multiplier=3, shift=7)
    instrs, uops = npu.assemble(k.program.text())
    assert instrs == k.program.instrs and uops == k.program.uops
    assert npu.isa.decode_program(k.program.binary()) == k.program.instrs
    json.dumps(k.program.regions)  # plain data


def test_random_shapes_bit_exact():
    """Random convolutions: channels 1-40, sizes 1-12, kernels 1-5 (rectangular), strides
    1-3, pads 0-kernel-1 per side, both thread counts, random requantize."""
    rng = np.random.default_rng(14)
    for _ in range(12):
        kh, kw = (int(v) for v in rng.integers(1, 6, 2))
        pads = tuple(int(rng.integers(0, k)) if k > 1 else 0 for k in (kh, kw, kh, kw))
        h = int(rng.integers(max(1, kh - pads[0] - pads[2]), 13))
        w = int(rng.integers(max(1, kw - pads[1] - pads[3]), 13))
        c, o = (int(v) for v in rng.integers(1, 41, 2))
        st = tuple(int(v) for v in rng.integers(1, 4, 2))
        mult = int(rng.choice([1, int(rng.integers(-300, 300))]))
        shift = int(rng.choice([0, int(rng.integers(2, 20))]))
        relu, vt = bool(rng.integers(2)), int(rng.integers(1, 3))
        x, wt, b = _case(rng, c, h, w, o, kh, kw)
        k = npu.lower_conv2d(wt, b, input_shape=x.shape, strides=st, pads=pads,
                             multiplier=mult, shift=shift, relu=relu, virtual_threads=vt)
        y, _ = k.run(x, mode="cycle")
        want = reference.conv2d_int8(x, wt, b, st, pads, mult, shift, relu)
        assert np.array_equal(y, want), (c, h, w, o, kh, kw, st, pads, mult, shift, relu, vt)
