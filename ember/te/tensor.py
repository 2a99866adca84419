"""Tensor expressions: declare what each output element is, not how to loop.

``placeholder(shape, dtype)`` declares an input; ``compute(shape, fcompute)`` declares a tensor
whose element at index ``(i, j, ...)`` is ``fcompute(i, j, ...)``; ``reduce_axis(n)`` plus
``sum/max/min/prod`` declare reductions. ``ember.te.lower.create_prim_func`` turns the graph of
tensors into one loop-IR ``PrimFunc``. The API follows the tensor-expression language of Halide
and TVM.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

from ..errors import LoweringError
from ..tir.expr import (Call, Expr, IterVar, Load, Reduce, Select, as_expr, as_extent, binop,
                        cast, is_float)

_names = itertools.count()


class Operation:
    """What produces a tensor: ``PlaceholderOp`` or ``ComputeOp``."""


class PlaceholderOp(Operation):
    """An input tensor of the PrimFunc."""


class ComputeOp(Operation):
    """``tensor[axis...] = body``; ``body`` may be a top-level ``Reduce``."""

    def __init__(self, axis: Sequence[IterVar], body: Expr, materialize: bool = False):
        self.axis = tuple(axis)
        self.body = body
        self.materialize = materialize

    @property
    def inputs(self) -> list["Tensor"]:
        """Tensors read by the body, in first-use order."""
        from ..tir.arith import collect_unique
        seen: dict[int, Tensor] = {}
        for ld in collect_unique(self.body, lambda n: isinstance(n, Load)):
            seen.setdefault(id(ld.src), ld.src)
        return list(seen.values())


class IndexCheck:
    """A run-time range check on an index tensor that a compute reads indices from.

    ``bounds`` is one inclusive ``(lo, hi)`` per position along the index tensor's last axis,
    cycled (one pair for Gather-like indices; ``q`` pairs for GatherND's ``[..., q]`` tuples).
    When the index tensor is a parameter of the kernel, the kernel checks every element before
    computing and fails with "index out of range" (ONNX makes out-of-range indices an error);
    indices computed inside the kernel are only clamped.
    """

    def __init__(self, tensor: "Tensor", bounds: Sequence[tuple[int, int]], what: str):
        self.tensor = tensor
        self.bounds = [(int(lo), int(hi)) for lo, hi in bounds]
        self.what = what


def index_check_attrs(checks: Sequence[IndexCheck],
                      param_of: Callable[["Tensor"], "int | None"]) -> list[dict]:
    """The ``PrimFunc.attrs["index_checks"]`` records (``{"param", "bounds", "what"}``) of
    ``checks``: ``param_of(tensor)`` is the kernel parameter position of an index tensor, or
    ``None`` when it is not a parameter (indices computed inside the kernel are only clamped).
    Only int32/int64 index tensors are checked; a repeated ``(param, bounds)`` is recorded once.
    """
    out: list[dict] = []
    for c in checks:
        k = param_of(c.tensor)
        if k is not None and c.tensor.dtype in ("int32", "int64") and \
                not any(d["param"] == k and d["bounds"] == c.bounds for d in out):
            out.append({"param": k, "bounds": c.bounds, "what": c.what})
    return out


class Tensor:
    """A tensor of ``shape`` (tuple of ints) and ``dtype``; index it to read an element."""

    def __init__(self, shape: Sequence[int], dtype: str, name: str, op: Operation):
        self.shape = tuple(as_extent(s) for s in shape)  # ints, or symbolic int64 expressions
        self.dtype = dtype
        self.name = name
        self.op = op
        self.checks: list[IndexCheck] = []

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, idx) -> Expr:
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != len(self.shape):
            raise LoweringError(f"tensor {self.name} of rank {len(self.shape)} indexed with "
                                f"{len(idx)} indices")
        return Load(self, idx)

    def __repr__(self):
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "") -> Tensor:
    """An input tensor of ``shape`` and ``dtype``."""
    return Tensor(shape, dtype, name or f"p{next(_names)}", PlaceholderOp())


def compute(shape: Sequence[int], fcompute: Callable[..., Any], name: str = "",
            dtype: str | None = None, materialize: bool = False,
            checks: Sequence[IndexCheck] = ()) -> Tensor:
    """A tensor of ``shape`` whose element ``(i0, i1, ...)`` is ``fcompute(i0, i1, ...)``.

    ``fcompute`` gets one ``Var`` per dimension and returns an expression (or a Python scalar).
    ``dtype`` casts the result when given. ``materialize`` keeps an injective stage as its own
    loop nest and buffer instead of inlining it into its consumers (e.g. a padded copy that a
    tensorized consumer reads without bounds checks). ``checks``: run-time ``IndexCheck`` s on
    the index tensors the compute reads.
    """
    name = name or f"t{next(_names)}"
    axis = [IterVar(s, f"{name}_i{k}") for k, s in enumerate(shape)]
    body = fcompute(*[a.var for a in axis])
    body = as_expr(body, dtype)
    if dtype is not None and body.dtype != dtype:
        if isinstance(body, Reduce):
            raise LoweringError(f"compute {name}: reduction dtype {body.dtype} != {dtype}")
        body = cast(dtype, body)
    if isinstance(body, Reduce) and any(ax.extent == 0 for ax in body.axis):
        # an empty reduce domain: every element is the combiner's identity (sum 0, prod 1,
        # max -inf...), whatever loop form the reduction would later be lowered or scheduled to
        body = body.identity()
    out = Tensor(shape, body.dtype, name, ComputeOp(axis, body, materialize))
    out.checks = list(checks)
    return out


def reduce_axis(extent: int, name: str = "k") -> IterVar:
    """A reduction axis over ``[0, extent)``."""
    return IterVar(extent, f"{name}{next(_names)}", kind="reduce")


def _reducer(combiner: str):
    def f(expr: Any, axis, where: Expr | None = None) -> Reduce:
        axis = list(axis) if isinstance(axis, (list, tuple)) else [axis]
        return Reduce(combiner, as_expr(expr), axis, where)
    f.__name__ = combiner
    f.__doc__ = (f"{combiner.capitalize()}-reduce ``expr`` over reduce ``axis`` (one IterVar or a "
                 f"list), counting only points where ``where`` holds; top level of a compute body.")
    return f


sum = _reducer("sum")  # noqa: A001 - the field's name for it
max = _reducer("max")  # noqa: A001
min = _reducer("min")  # noqa: A001
prod = _reducer("prod")


def if_then_else(cond: Expr, t: Any, f: Any) -> Expr:
    """``t`` where ``cond`` holds else ``f``; only the chosen side is evaluated."""
    t = as_expr(t, f.dtype if isinstance(f, Expr) else None)
    f = as_expr(f, t.dtype)
    return Select(cond, t, f)


select = if_then_else


def all_of(*conds: Expr) -> Expr:
    """Logical and of conditions (``True`` when empty)."""
    out: Expr = as_expr(True)
    for c in conds:
        out = binop("and", out, c)
    return out


def _cmp(op):
    def f(a, b):
        return binop(op, a, b)
    f.__name__ = op
    f.__doc__ = f"Comparison ``{op}(a, b)`` (bool)."
    return f


lt, le, gt, ge, eq, ne = (_cmp(o) for o in ("lt", "le", "gt", "ge", "eq", "ne"))


def maximum(a, b) -> Expr:
    """Elementwise max (NaN-propagating for floats)."""
    return binop("max", a, b)


def minimum(a, b) -> Expr:
    """Elementwise min (NaN-propagating for floats)."""
    return binop("min", a, b)


def power(a, b) -> Expr:
    """``a ** b``."""
    return binop("pow", a, b)


def truncdiv(a, b) -> Expr:
    """C division (truncates toward zero for integers, true division for floats)."""
    return binop("div", a, b)


def truncmod(a, b) -> Expr:
    """C remainder (sign of the dividend); ``fmod`` for floats."""
    return binop("mod", a, b)


def _math(name: str, float_only: bool = True):
    def f(*args) -> Expr:
        args = [as_expr(a) for a in args]
        if float_only and not is_float(args[0].dtype):
            raise LoweringError(f"{name} needs a floating-point argument, got {args[0].dtype}")
        return Call(name, args)
    f.__name__ = name
    f.__doc__ = f"Math intrinsic ``{name}`` (C math library semantics)."
    return f


exp = _math("exp")
log = _math("log")
sqrt = _math("sqrt")
tanh = _math("tanh")
erf = _math("erf")
sin, cos, tan = _math("sin"), _math("cos"), _math("tan")
asin, acos, atan = _math("asin"), _math("acos"), _math("atan")
sinh, cosh = _math("sinh"), _math("cosh")
asinh, acosh, atanh = _math("asinh"), _math("acosh"), _math("atanh")
floor, ceil, trunc = _math("floor"), _math("ceil"), _math("trunc")
round = _math("round")  # noqa: A001 - round half to even, as ONNX Round
sigmoid = _math("sigmoid")
fabs = _math("abs", float_only=False)
abs = fabs  # noqa: A001
sign = _math("sign", float_only=False)


def isnan(x) -> Expr:
    """True where ``x`` is NaN (bool)."""
    return Call("isnan", [as_expr(x)], "bool")


def isinf(x) -> Expr:
    """True where ``x`` is +-inf (bool)."""
    return Call("isinf", [as_expr(x)], "bool")


atan2 = _math("atan2")
fmod = _math("fmod")
