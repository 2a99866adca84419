"""The depthwise-convolution rule and the ``dwconv`` micro-kernel, against ``nn.conv``'s NumPy
reference: strides, dilations, symmetric and asymmetric zero padding, odd image sizes, channel
counts that are not a multiple of the vector width, with and without a fused epilogue, on every
instruction set; plus reads that must stay inside the input (guarded padding)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.codegen.c import emit_c_function
from ember.errors import ScheduleError
from ember.runtime.kernel import compile_prim_func
from ember.tir.schedule import Schedule
from ember.tir.schedule.rules import schedule_default
from ember.tir.schedule.rules.depthwise import choose_dw_tile, depthwise_rule
from test_default_schedules import _guarded, _op_kernel, _packed  # noqa: F401 (_guarded: child)

CLIP6 = lambda v: te.minimum(te.maximum(v, te.const(0.0, "float32")),  # noqa: E731
                             te.const(6.0, "float32"))


def _dw_kernel(hw, c, k=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), dil=(1, 1), bias=True,
               epilogue=None, seed=0, batch=1):
    """A channels-last depthwise ``nn.conv`` PrimFunc, its inputs and the reference output."""
    shapes = [(batch, hw[0], hw[1], c), (c, 1) + tuple(k)] + ([(c,)] if bias else [])
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil), "group": c,
             "data_layout": "NHWC"}
    return _op_kernel("nn.conv", shapes, attrs, epilogue, np.random.default_rng(seed))


def _target(isa):
    target = ember.Target(f"llvm -isa={isa}")
    if target.isa != isa:
        pytest.skip(f"this machine / compiler cannot run {isa} code")
    return target


CASES = [
    # (hw, c, kernel, strides, pads, dilations, bias)
    ((8, 8), 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),      # c not a multiple of 16
    ((9, 11), 40, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),     # stride 2, odd sizes
    ((12, 12), 32, (3, 3), (2, 2), (0, 0, 1, 1), (1, 1), True),    # asymmetric (SAME) padding
    ((7, 7), 48, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), False),     # no padding, no bias
    ((10, 9), 5, (5, 5), (1, 2), (2, 2, 2, 2), (1, 1), True),      # 5x5, tiny c, mixed stride
    ((11, 13), 19, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), True),    # dilation 2
    ((6, 17), 16, (1, 3), (1, 1), (0, 1, 0, 1), (1, 1), True),     # 1x3 taps, pad w only
    ((3, 3), 3, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),       # every block on a border
]


@pytest.mark.parametrize("isa", ["avx512", "avx2", "scalar"])
@pytest.mark.parametrize("hw, c, k, strides, pads, dil, bias", CASES)
def test_depthwise_rule_matches_reference(hw, c, k, strides, pads, dil, bias, isa):
    target = _target(isa)
    f, xs, ref = _dw_kernel(hw, c, k, strides, pads, dil, bias, epilogue=CLIP6)
    g = schedule_default(f, target)
    assert g.attrs["schedule_rule"] == "depthwise_rule"
    src = emit_c_function(g, target=target)
    assert f"ember_ukr_dwconv_{isa}" in src
    assert "ws_pad" not in src  # the padding is read through a guard, never copied
    out = compile_prim_func(g, target).run(_packed(g, xs))[0]
    np.testing.assert_allclose(out, np.clip(ref, 0, 6), rtol=1e-4, atol=1e-5)


def test_depthwise_rule_without_epilogue_writes_the_output_through_a_tile():
    f, xs, ref = _dw_kernel((10, 10), 32, bias=False)
    g = schedule_default(f, "llvm")
    assert g.attrs["schedule_rule"] == "depthwise_rule"
    out = compile_prim_func(g).run(_packed(g, xs))[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(1, 12), w=st.integers(1, 20), c=st.integers(1, 70),
       k=st.sampled_from([(1, 1), (3, 3), (2, 3), (5, 5)]), s=st.integers(1, 3),
       p=st.tuples(*[st.integers(0, 2)] * 4), d=st.integers(1, 2), seed=st.integers(0, 9),
       batch=st.integers(1, 2))
def test_depthwise_rule_random_shapes(h, w, c, k, s, p, d, seed, batch):
    if (h + p[0] + p[2] - d * (k[0] - 1) - 1) < 0 or (w + p[1] + p[3] - d * (k[1] - 1) - 1) < 0:
        return  # no output
    f, xs, ref = _dw_kernel((h, w), c, k, (s, s), p, (d, d), True, seed=seed, batch=batch)
    g = schedule_default(f, "llvm")
    if c > 1 and k != (1, 1):  # (a 1x1 depthwise "convolution" is a per-channel scale)
        assert g.attrs["schedule_rule"] == "depthwise_rule"
    out = compile_prim_func(g).run(_packed(g, xs))[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_depthwise_trace_replays():
    f, xs, ref = _dw_kernel((9, 9), 24, strides=(2, 2))
    sch = depthwise_rule(f, ember.Target("llvm"))
    from ember.tir.schedule.trace import Trace
    g = Trace.from_json(sch.trace.to_json()).apply_to(f).func
    out = compile_prim_func(g).run(_packed(sch.func, xs))[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_choose_dw_tile_fits_the_register_file():
    for ow in (1, 7, 14, 28, 56, 112, 13):
        for c in (1, 3, 24, 32, 96, 144, 960):
            for lanes, regs in ((16, 32), (8, 16)):
                wr, nr = choose_dw_tile(ow, c, lanes, 28 if lanes == 16 else 12)
                nv = -(-nr // lanes)
                assert ow % wr == 0 and c % nr == 0
                assert wr * nv + nv + 2 <= regs


def test_dwconv_tensorize_rejects_a_guard_that_is_not_the_image_bounds():
    """A select that zeroes taps for another reason must not become a padded-tap skip."""
    x = te.placeholder((1, 6, 6, 16), "float32", "x")
    wt = te.placeholder((1, 3, 3, 16), "float32", "w")
    rh, rw = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")

    def fc(n, i, j, c):
        hi, wi = i + rh.var, j + rw.var
        cond = te.all_of(te.ge(hi, 0), te.lt(hi, 5))  # 5, not the image's 6 rows
        return te.sum(te.select(cond, x[n, hi, wi, c], te.const(0, "float32")) *
                      wt[0, rh.var, rw.var, c], axis=[rh, rw])
    y = te.compute((1, 4, 4, 16), fc, name="conv")
    f = te.create_prim_func([x, wt, y], "f")
    sch = Schedule(f)
    loops = sch.get_loops("conv")
    sch.reorder(*(loops[:2] + loops[4:] + loops[2:4]))
    with pytest.raises(ScheduleError, match="guard"):
        sch.tensorize(sch.get_loops("conv")[2], "dwconv.avx512.f32")


@pytest.mark.parametrize("before", [True, False])
def test_depthwise_padding_never_reads_outside_the_input(before):
    """Taps in the padding are skipped, not loaded: an input that ends (or starts) at an
    inaccessible page must not fault (checked in a child process)."""
    import os
    import subprocess
    import sys
    import textwrap
    here = os.path.dirname(__file__)
    code = textwrap.dedent(f"""
        import sys, numpy as np
        sys.path.insert(0, {here!r})
        import test_depthwise_rule as T
        for hw, c, s in (((9, 9), 24, 1), ((10, 7), 40, 2)):
            f, xs, ref = T._dw_kernel(hw, c, strides=(s, s))
            g = T.schedule_default(f, "llvm")
            p = T._packed(g, xs)
            x, keep = T._guarded(xs[0].shape, {before})
            x[...] = xs[0]
            out = np.zeros(ref.shape, np.float32)
            T.compile_prim_func(g)(x, *[np.ascontiguousarray(a) for a in p[1:]], out)
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(ember.__file__))}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
