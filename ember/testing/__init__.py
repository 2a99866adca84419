"""Test helpers: run one operator through the whole compiler and compare with its reference.

``run_op("nn.conv", [x, w], {"strides": [2, 2]})`` builds a graph of one binding whose
parameters are the given arrays, compiles it (lowering -> C -> shared library, cached) and runs
it; ``reference_op`` evaluates the operator's NumPy reference on the same inputs;
``assert_matches_reference`` checks that the two agree. Seeded model builders (ResNet-18,
MobileNetV2, BERT-style encoders, the onnx package's light models) live in
``ember.testing.models``.

This module sits on top of the compiler (like the driver): it may import every layer.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..driver import build
from ..graph.builder import FunctionBuilder, infer_call
from ..graph.ir import Constant, IRModule, TensorType
from ..graph.passes import PassContext
from ..ops import get_op
from ..dtypes import dtype_name, is_ext_float, is_ext_int

__all__ = ["op_module", "run_op", "reference_op", "assert_matches_reference", "assert_close",
           "default_tolerance"]


def op_module(op_name: str, inputs: Sequence[np.ndarray], attrs: Mapping | None = None
              ) -> IRModule:
    """A module whose ``main`` applies ``op_name`` once to parameters ``x0, x1, ...`` with the
    shapes and dtypes of ``inputs`` and returns every output of the binding.

    Raises:
        UnsupportedOpError: unknown op or attribute. ShapeMismatchError: the inputs do not
        type-check.
    """
    fb = FunctionBuilder("main")
    params = [fb.param(f"x{k}", TensorType(np.shape(a), dtype_name(np.asarray(a).dtype)))
              for k, a in enumerate(inputs)]
    out = fb.call(op_name, params, dict(attrs or {}), where=f"{op_name}: ")
    outs = list(out) if isinstance(out, tuple) else [out]
    return IRModule.from_function(fb.finish(outs))


def run_op(op_name: str, inputs: Sequence[np.ndarray], attrs: Mapping | None = None,
           target: str = "llvm", opt_level: int = 0) -> list[np.ndarray]:
    """Compile ``op_name(*inputs, **attrs)`` as a one-binding graph for ``target`` and run it.

    Args:
        op_name: a registered graph operator, e.g. ``"nn.conv"``.
        inputs: numpy arrays (any dtype ember supports); they become run-time inputs.
        attrs: the operator's attributes (defaults filled in by the registry).
        opt_level: the ``PassContext`` level of the build; the default 0 runs no rewriting
            pass, so the operator's own compute is what gets compiled and checked.
    Returns:
        the binding's outputs as numpy arrays.
    Raises:
        the typed errors of ``op_module`` and ``ember.build`` (ToolchainError, CodegenError...).
    """
    inputs = [np.asarray(a) for a in inputs]
    mod = op_module(op_name, inputs, attrs)
    with PassContext(opt_level=opt_level):
        model = build(mod, target)
    return model.run({f"x{k}": a for k, a in enumerate(inputs)})


def reference_op(op_name: str, inputs: Sequence[np.ndarray], attrs: Mapping | None = None
                 ) -> list[np.ndarray]:
    """The operator's NumPy reference on ``inputs`` (attributes normalized and type-checked as
    for a graph binding)."""
    return _reference_and_types(op_name, inputs, attrs)[0]


def _reference_and_types(op_name, inputs, attrs):
    inputs = [np.asarray(a) for a in inputs]
    attrs_n, types = infer_call(op_name, [Constant(a) for a in inputs], dict(attrs or {}),
                                f"{op_name}: ")
    outs = get_op(op_name).reference(inputs, attrs_n)
    return [np.asarray(o) for o in outs], types


def default_tolerance(dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing a compiled result of ``dtype`` with a float64-accumulated
    reference: exact for integers and bool, a few ulps (scaled) for floats; one step of the
    format for the narrow floats (bfloat16, float8...)."""
    name = dtype_name(dtype)
    if is_ext_int(name):
        return 0.0, 0.0
    if is_ext_float(name):
        return (1e-2, 1e-2) if name == "bfloat16" else (0.25, 0.25)
    dt = np.dtype(name)
    if dt.kind in "iub":
        return 0.0, 0.0
    if dt == np.float16:
        return 2e-3, 2e-3
    if dt == np.float64:
        return 1e-10, 1e-12
    return 1e-5, 1e-6


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float,
                 what: str = "result") -> None:
    """Assert same shape, same dtype and values within ``atol + rtol * |expected|`` (NaN equal
    to NaN, infinities equal by sign); the message shows the worst element."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, \
        f"{what}: shape {actual.shape} != expected {expected.shape}"
    assert actual.dtype == expected.dtype, \
        f"{what}: dtype {actual.dtype} != expected {expected.dtype}"
    if actual.size == 0:
        return
    if actual.dtype.kind in "iub" or (rtol == 0 and atol == 0):
        bad = ~((actual == expected) | (_isnan(actual) & _isnan(expected)))
        if bad.any():
            k = tuple(np.argwhere(bad)[0])
            raise AssertionError(f"{what}: {int(bad.sum())} of {actual.size} elements differ; "
                                 f"first at {k}: got {actual[k]!r}, expected {expected[k]!r}")
        return
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    nan_ok = np.isnan(a) == np.isnan(e)
    inf_ok = np.where(np.isinf(e) | np.isinf(a), a == e, True)
    finite = np.isfinite(a) & np.isfinite(e)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite, np.abs(a - e), 0.0)
    lim = atol + rtol * np.abs(np.where(finite, e, 0.0))
    bad = ~nan_ok | ~inf_ok | (err > lim)
    if bad.any():
        k = tuple(np.argwhere(bad)[0])
        worst = tuple(np.unravel_index(np.argmax(np.where(finite, err - lim, 0)), a.shape))
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {a.size} elements differ beyond rtol={rtol}, "
            f"atol={atol}; first at {k}: got {actual[k]!r}, expected {expected[k]!r}; worst at "
            f"{worst}: got {actual[worst]!r}, expected {expected[worst]!r} "
            f"(max abs err {float(err.max()):.3g})")


def _isnan(a: np.ndarray) -> np.ndarray:
    return np.isnan(a) if a.dtype.kind in "fc" else np.zeros(a.shape, bool)


def assert_matches_reference(op_name: str, inputs: Sequence[np.ndarray],
                             attrs: Mapping | None = None, rtol: float | None = None,
                             atol: float | None = None, target: str = "llvm",
                             opt_level: int = 0) -> list[np.ndarray]:
    """Compile and run ``op_name`` on ``inputs`` and assert it matches the NumPy reference
    (shape, dtype and values; tolerance from ``default_tolerance`` of the output dtype unless
    given). Returns the compiled outputs."""
    expected, types = _reference_and_types(op_name, inputs, attrs)
    got = run_op(op_name, inputs, attrs, target, opt_level)
    assert len(got) == len(expected), f"{op_name}: {len(got)} outputs, reference gives " \
                                      f"{len(expected)}"
    for k, (g, e, t) in enumerate(zip(got, expected, types)):
        assert e.shape == tuple(t.shape) and str(e.dtype) == t.dtype, (
            f"{op_name}: the reference's output {k} is {e.shape} {e.dtype} but type inference "
            f"says {t}")
        r, a = default_tolerance(e.dtype)
        assert_close(g, e, r if rtol is None else rtol, a if atol is None else atol,
                     f"{op_name} output {k}")
    return got
