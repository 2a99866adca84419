"""Kernels with symbolic extents (issue 18): one PrimFunc built once for a symbolic row count
``m``, scheduled by the default rules, run at several sizes against the operators' NumPy
references; the symbols are bound from the arrays' shapes and passed as int64 arguments."""

from __future__ import annotations

import numpy as np
import pytest

from ember import te
from ember.codegen.c import emit_c_function
from ember.errors import ShapeMismatchError
from ember.graph.builder import infer_call
from ember.graph.ir import TensorType, Var
from ember.ops import get_op
from ember.runtime.kernel import compile_prim_func
from ember.te.lower import create_prim_func
from ember.tir.schedule.rules import schedule_default
from ember.tir.symbolic import Symbol
from test_default_schedules import _packed

M = Symbol("m")


def _kernel(op, shapes, attrs, dtype="float32"):
    """The scheduled PrimFunc of ``op`` on placeholders of ``shapes`` (dims may be ``M``)."""
    ins = [te.placeholder(s, dtype, f"in{k}") for k, s in enumerate(shapes)]
    attrs_n, types = infer_call(op, [Var(f"a{k}", TensorType(s, dtype))
                                     for k, s in enumerate(shapes)], attrs)
    outs = get_op(op).compute(ins, attrs_n, types)
    func = create_prim_func(ins + list(outs), op.replace(".", "_"), num_outputs=len(outs))
    return schedule_default(func, "llvm"), attrs_n


CASES = [
    ("add", [(M, 48), (48,)], {}, "generic_rule"),
    ("nn.gelu", [(M, 40)], {}, "generic_rule"),
    ("nn.softmax", [(M, 37)], {"axis": -1}, "row_reduction_rule"),
    ("nn.layer_norm", [(M, 32), (32,), (32,)], {"axis": -1}, "row_reduction_rule"),
    ("mean", [(M, 12)], {"axes": [1], "keepdims": 1}, None),
    ("matmul", [(M, 64), (64, 40)], {}, "gemm_rule"),  # tiles + row tail: test_dynamic_gemm
    ("transpose", [(3, M, 8)], {"perm": [1, 0, 2]}, None),
]


@pytest.mark.parametrize("op,shapes,attrs,rule", CASES, ids=[c[0] for c in CASES])
def test_symbolic_kernel_matches_numpy_at_several_sizes(op, shapes, attrs, rule):
    func, attrs_n = _kernel(op, shapes, attrs)
    assert func.attrs["symbols"] == ["m"]
    if rule is not None:
        assert func.attrs.get("schedule_rule") == rule, func.attrs.get("schedule_notes")
    src = emit_c_function(func)
    assert "const int64_t s0" in src  # the symbol is an argument, not a constant
    k = compile_prim_func(func)  # one build for every size below
    rng = np.random.default_rng(0)
    for m in (1, 3, 17, 64, 129):
        xs = [rng.standard_normal([m if d is M else d for d in s]).astype(np.float32)
              for s in shapes]
        got = k.run(_packed(func, xs))[0]  # weights packed as the driver does
        want = get_op(op).reference(xs, attrs_n)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_symbolic_kernel_rejects_contradicting_shapes():
    func, _ = _kernel("add", [(M, 8), (M, 8)], {})
    k = compile_prim_func(func)
    with pytest.raises(ShapeMismatchError, match=r"symbol 'm'.*axis 0 gives 4.*axis 0 gives 5"):
        k.run([np.zeros((4, 8), np.float32), np.zeros((5, 8), np.float32)])
    with pytest.raises(ShapeMismatchError, match="axis 1 must be 8"):
        k.run([np.zeros((4, 9), np.float32), np.zeros((4, 9), np.float32)])


def test_static_kernels_print_as_before():
    """A static kernel has no symbol arguments and its loops print integer extents."""
    func, _ = _kernel("add", [(6, 48), (48,)], {})
    assert "symbols" not in func.attrs
    src = emit_c_function(func)
    assert "int64_t s0" not in src and "i0 < 6" in src.replace("i0 < 6LL", "i0 < 6")
