"""Pass infrastructure: PassContext stack, opt_level / disabled / required, instruments,
config checking, and ember.build honouring the context."""

import numpy as np
import pytest

import ember
from ember.errors import PassError
from ember.graph import IRModule
from ember.graph.passes import (DumpIR, PassContext, PassTimingInstrument, Sequential,
                                get_pass, module_pass)

MOD = """
def @main(%x: Tensor[(2,), float32]) {
  %0 = add(const(float32, [2], [1.0, 2.0]), const(float32, [2], [3.0, 4.0])) : Tensor[(2,), float32]
  %1 = copy(%x) : Tensor[(2,), float32]
  %2 = add(%1, %0) : Tensor[(2,), float32]
  %3 = exp(%2) : Tensor[(2,), float32]
  return %3
}"""


def _ops(mod):
    return [b.call.op for b in mod.main.bindings]


def test_sequential_respects_opt_level_disabled_and_required():
    seq = Sequential(["SimplifyInference", "FoldConstant", "EliminateDeadCode"])
    mod = IRModule.from_text(MOD)
    with PassContext(opt_level=0):
        assert _ops(seq(mod)) == _ops(mod)
    with PassContext(opt_level=1):
        assert _ops(seq(mod)) == ["add", "add", "exp"]           # copy gone, fold not run
    with PassContext(opt_level=2):
        assert _ops(seq(mod)) == ["add", "exp"]
    with PassContext(opt_level=2, disabled_pass=["FoldConstant"]):
        assert _ops(seq(mod)) == ["add", "add", "exp"]
    with PassContext(opt_level=0, required_pass=["FoldConstant"]):
        assert _ops(seq(mod)) == ["copy", "add", "exp"]   # folded, copy kept (level 1)


def test_context_stack_nests_and_unwinds():
    assert PassContext.current().opt_level == 2
    with PassContext(opt_level=3) as outer:
        with PassContext(opt_level=0) as inner:
            assert PassContext.current() is inner
        assert PassContext.current() is outer
    assert PassContext.current().opt_level == 2


def test_unknown_config_key_and_wrong_type_are_rejected():
    with pytest.raises(PassError, match="FuseOps.max_depth"):
        PassContext(config={"FuseOps.maxdepth": 3})
    with pytest.raises(PassError, match="int"):
        PassContext(config={"FuseOps.max_depth": "3"})


def test_unknown_pass_name_lists_the_known_ones():
    with pytest.raises(PassError, match="FoldConstant"):
        get_pass("FoldConstants")


def test_timing_and_dump_instruments(tmp_path):
    timing = PassTimingInstrument()
    dump = DumpIR(tmp_path / "ir")
    with PassContext(opt_level=3, instruments=[timing, dump]):
        Sequential(["FoldConstant", "EliminateDeadCode"])(IRModule.from_text(MOD))
    assert [n for n, _ in timing.timings] == ["FoldConstant", "EliminateDeadCode"]
    assert all(t >= 0 for _, t in timing.timings)
    assert "FoldConstant" in timing.report()
    names = sorted(p.name for p in (tmp_path / "ir").iterdir())
    assert names == ["000_FoldConstant.after.txt", "000_FoldConstant.before.txt",
                     "001_EliminateDeadCode.after.txt", "001_EliminateDeadCode.before.txt"]
    after = IRModule.from_text((tmp_path / "ir" / "001_EliminateDeadCode.after.txt").read_text())
    assert [b.call.op for b in after.main.bindings] == ["copy", "add", "exp"]


def test_required_passes_run_first():
    seen = []

    @module_pass("RecordA", opt_level=5)
    def record_a(mod, ctx):
        seen.append("A")
        return mod

    @module_pass("RecordB", opt_level=0, required=["RecordA"])
    def record_b(mod, ctx):
        seen.append("B")
        return mod
    record_b()(IRModule.from_text(MOD))
    assert seen == ["A", "B"]


def test_pass_returning_garbage_is_a_pass_error():
    @module_pass("Broken", opt_level=0)
    def broken(mod, ctx):
        return None
    with pytest.raises(PassError, match="Broken"):
        broken()(IRModule.from_text(MOD))


def test_build_honours_the_context():
    mod = IRModule.from_text(MOD)
    x = {"x": np.array([0.5, -1.0], np.float32)}
    with PassContext(opt_level=0):
        m0 = ember.build(mod)
    with PassContext(opt_level=3):
        m3 = ember.build(mod)
    assert m0.info["num_kernels"] == 4 and m3.info["num_kernels"] == 1
    assert m0.info["opt_level"] == 0 and m3.info["opt_level"] == 3
    np.testing.assert_allclose(m0.run(x)[0], m3.run(x)[0], rtol=1e-6)
    np.testing.assert_allclose(m3.run(x)[0], np.exp(x["x"] + [4.0, 6.0]), rtol=1e-6)


def test_a_crashing_pass_is_named_with_the_way_around_it():
    @module_pass("Crashes", opt_level=0)
    def crashes(mod, ctx):
        return {}["missing"]
    with pytest.raises(PassError, match=r"pass Crashes failed: KeyError.*disabled_pass"):
        crashes()(IRModule.from_text(MOD))


def test_a_misspelt_pass_name_is_a_pass_error():
    # disabled_pass=["FuseInvertedResiduals"] disabled nothing, silently
    for kw in ({"disabled_pass": ["FuseInvertedResiduals"]}, {"required_pass": ["FoldConstants"]}):
        with pytest.raises(PassError, match="unknown pass name.*known passes:.*FoldConstant"):
            PassContext(**kw)
    assert "FuseInvertedResidual" in PassContext(
        disabled_pass=["FuseInvertedResidual"]).disabled_pass
