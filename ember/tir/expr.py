"""Scalar expressions of the loop IR (shared by tensor expressions, see ``ember.te``).

An expression is an immutable tree whose leaves are constants, loop variables and loads from
tensors or buffers. Python operators build expressions: ``a + b``, ``a * 2``, ``-a``, ``a // b``
(floor division), ``a % b`` (floor modulo). Comparisons use functions (``lt``, ``eq``...) because
``==`` is kept for identity. Every node carries a ``dtype`` string (numpy names: ``"float32"``,
``"int64"``, ``"bool"``...).
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np

from ..dtypes import EXT_FLOAT, EXT_INT, np_dtype, to_sub_byte_int
from ..errors import LoweringError

FLOAT_DTYPES = ("float16", "float32", "float64") + EXT_FLOAT  # EXT_FLOAT: bfloat16, float8...
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64") + EXT_INT
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)
INDEX_DTYPE = "int64"


def is_float(dtype: str) -> bool:
    """True for floating-point dtypes."""
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    """True for signed or unsigned integer dtypes (not bool)."""
    return dtype in INT_DTYPES


def _rank(dtype: str) -> tuple[int, int]:
    if dtype == "bool":
        return (0, 1)
    if is_float(dtype):
        return (2, 2 if dtype in EXT_FLOAT else np.dtype(dtype).itemsize)
    return (1, 1 if dtype in EXT_INT else np.dtype(dtype).itemsize)


def promote(a: str, b: str) -> str:
    """Result dtype of a binary operation on ``a`` and ``b`` (float beats int, wider beats narrower)."""
    if a == b:
        return a
    return a if _rank(a) >= _rank(b) else b


class Expr:
    """Base class of scalar expressions. Subclasses set ``dtype``."""

    dtype: str

    # arithmetic -----------------------------------------------------------------------------
    def __add__(self, o): return binop("add", self, o)
    def __radd__(self, o): return binop("add", o, self)
    def __sub__(self, o): return binop("sub", self, o)
    def __rsub__(self, o): return binop("sub", o, self)
    def __mul__(self, o): return binop("mul", self, o)
    def __rmul__(self, o): return binop("mul", o, self)
    def __truediv__(self, o): return binop("div", self, o)
    def __rtruediv__(self, o): return binop("div", o, self)
    def __floordiv__(self, o): return binop("floordiv", self, o)
    def __rfloordiv__(self, o): return binop("floordiv", o, self)
    def __mod__(self, o): return binop("floormod", self, o)
    def __rmod__(self, o): return binop("floormod", o, self)
    def __neg__(self): return Unary("neg", self)
    def __and__(self, o): return binop("and", self, o)
    def __or__(self, o): return binop("or", self, o)
    def __invert__(self): return Unary("not", self)

    def astype(self, dtype: str) -> "Expr":
        """Cast to ``dtype`` (C conversion semantics; float to int truncates toward zero)."""
        return cast(dtype, self)

    def __bool__(self):
        raise TypeError("an ember expression has no truth value; use te.select / te.if_then_else")

    __hash__ = object.__hash__


class Const(Expr):
    """A constant scalar of ``dtype``."""

    def __init__(self, value: Any, dtype: str):
        self.dtype = dtype
        if dtype == "bool":
            value = bool(value)
        elif is_int(dtype):
            value = int(value)
        else:
            value = float(value)
        self.value = value

    def __repr__(self):
        return f"{self.value}:{self.dtype}"


class Var(Expr):
    """A scalar variable (loop variable or symbolic index); ``int64`` by default."""

    _ids = itertools.count()

    def __init__(self, name: str, dtype: str = INDEX_DTYPE):
        self.name = name
        self.dtype = dtype
        self.uid = next(Var._ids)

    def __repr__(self):
        return self.name


class BinOp(Expr):
    """``op(a, b)``. Arithmetic ops: add sub mul div (true division for floats, C division for
    ints) floordiv floormod mod (C remainder) min max pow; comparisons lt le gt ge eq ne (bool);
    logical and or (bool); bitwise bitand bitor bitxor shl shr."""

    COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
    LOGIC = ("and", "or")

    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b
        if op in self.COMPARE or op in self.LOGIC:
            self.dtype = "bool"
        else:
            self.dtype = promote(a.dtype, b.dtype)

    def __repr__(self):
        return f"{self.op}({self.a!r}, {self.b!r})"


class Unary(Expr):
    """``neg``, ``not`` (logical) or ``bitnot`` of ``a``."""

    def __init__(self, op: str, a: Expr):
        self.op, self.a = op, a
        self.dtype = "bool" if op == "not" else a.dtype


class Call(Expr):
    """A math intrinsic: exp log sqrt tanh erf sin cos tan asin acos atan sinh cosh asinh acosh
    atanh abs floor ceil round (half to even) trunc sign isnan isinf fmod pow atan2 exp2 log2
    sigmoid. Result dtype is ``dtype`` (the argument dtype unless given)."""

    def __init__(self, name: str, args: Sequence[Expr], dtype: str | None = None):
        self.name = name
        self.args = tuple(args)
        self.dtype = dtype or self.args[0].dtype


class Cast(Expr):
    """Convert ``value`` to ``dtype``."""

    def __init__(self, dtype: str, value: Expr):
        self.dtype, self.value = dtype, value


class Select(Expr):
    """``cond ? t : f`` evaluated lazily (only the taken side is read), so a guarded load is safe."""

    def __init__(self, cond: Expr, t: Expr, f: Expr):
        dt = promote(t.dtype, f.dtype)
        self.cond, self.t, self.f = cond, _coerce(t, dt), _coerce(f, dt)
        self.dtype = dt


class Load(Expr):
    """Read ``src[indices]``; ``src`` is a ``te.Tensor`` before lowering and a ``tir.Buffer`` after."""

    def __init__(self, src: Any, indices: Sequence[Expr]):
        self.src = src
        self.indices = tuple(as_expr(i, INDEX_DTYPE) for i in indices)
        self.dtype = src.dtype


class AddressOf(Expr):
    """The address of ``buffer[indices]`` (a pointer argument of a ``KernelCall``)."""

    def __init__(self, buffer: Any, indices: Sequence[Expr]):
        self.src = buffer
        self.indices = tuple(as_expr(i, INDEX_DTYPE) for i in indices)
        self.dtype = "handle"


def as_extent(n: Any):
    """A loop extent or buffer dimension: an ``int``, or an ``int64`` expression over symbols
    (a symbolic dimension, ``ember.tir.symbolic``) kept as is."""
    if isinstance(n, Expr) and not isinstance(n, Const):
        return n
    if isinstance(n, Const):
        return int(n.value)
    return int(n)


def is_static_extent(n: Any) -> bool:
    """True for an ``int`` extent (not a symbolic one)."""
    return not isinstance(n, Expr)


class IterVar(Expr):
    """A loop axis: ``var`` ranges over ``[0, extent)``; ``kind`` is ``"spatial"`` or ``"reduce"``.
    ``extent`` is an ``int`` or a symbolic ``int64`` expression."""

    def __init__(self, extent: int, name: str, kind: str = "spatial"):
        self.var = Var(name)
        self.extent = as_extent(extent)
        self.kind = kind
        self.dtype = self.var.dtype

    def __repr__(self):
        return f"IterVar({self.var.name}, {self.extent}, {self.kind})"


class Reduce(Expr):
    """Commutative reduction ``combiner`` (``sum``, ``prod``, ``max``, ``min``) of ``source`` over
    ``axis`` (reduce ``IterVar``s), counting only points where ``where`` holds."""

    def __init__(self, combiner: str, source: Expr, axis: Sequence[IterVar], where: Expr | None = None):
        self.combiner = combiner
        self.source = source
        self.axis = tuple(axis)
        self.where = where
        self.dtype = source.dtype

    def identity(self) -> Const:
        """The combiner's identity element (0, 1, -inf/lowest, +inf/highest)."""
        return reduce_identity(self.combiner, self.dtype)


def reduce_identity(combiner: str, dtype: str) -> Const:
    """Identity of a reduction combiner for ``dtype``."""
    if combiner == "sum":
        return Const(0, dtype)
    if combiner == "prod":
        return Const(1, dtype)
    if combiner in ("max", "min"):
        if dtype == "bool":
            return Const(combiner == "min", dtype)
        if is_float(dtype):
            return Const(-np.inf if combiner == "max" else np.inf, dtype)
        info = np.iinfo(dtype)
        return Const(info.min if combiner == "max" else info.max, dtype)
    raise LoweringError(f"unknown reduction combiner {combiner!r}")


# construction helpers -----------------------------------------------------------------------

def as_expr(v: Any, dtype: str | None = None) -> Expr:
    """Turn a Python/numpy scalar into a ``Const`` (``dtype`` or inferred); pass expressions through."""
    if isinstance(v, IterVar):
        return v.var
    if isinstance(v, Expr):
        return v
    if isinstance(v, (bool, np.bool_)):
        return Const(bool(v), dtype or "bool")
    if isinstance(v, (int, np.integer)):
        return Const(int(v), dtype or INDEX_DTYPE)
    if isinstance(v, (float, np.floating)):
        return Const(float(v), dtype if dtype and is_float(dtype) else (dtype or "float32"))
    raise LoweringError(f"cannot use {type(v).__name__} value {v!r} in a tensor expression")


def _coerce(e: Expr, dtype: str) -> Expr:
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        return Const(e.value, dtype)
    return Cast(dtype, e)


def binop(op: str, a: Any, b: Any) -> Expr:
    """Build ``op(a, b)``; Python scalars take the other side's dtype, mixed dtypes are promoted."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise LoweringError("binop needs at least one expression operand")
    a = a.var if isinstance(a, IterVar) else a
    b = b.var if isinstance(b, IterVar) else b
    if not isinstance(a, Expr):
        a = as_expr(a, b.dtype if not (isinstance(a, float) and not is_float(b.dtype)) else None)
    if not isinstance(b, Expr):
        b = as_expr(b, a.dtype if not (isinstance(b, float) and not is_float(a.dtype)) else None)
    if op not in BinOp.LOGIC:
        dt = promote(a.dtype, b.dtype)
        a, b = _coerce(a, dt), _coerce(b, dt)
    return BinOp(op, a, b)


def cast(dtype: str, v: Any) -> Expr:
    """Cast ``v`` to ``dtype``; a no-op when it already has that dtype."""
    v = as_expr(v, dtype)
    if v.dtype == dtype:
        return v
    if isinstance(v, Const):
        if dtype in EXT_FLOAT:
            return Const(float(np.array(v.value).astype(np_dtype(dtype)).astype(np.float64)),
                         dtype)
        if dtype in EXT_INT:
            return Const(int(to_sub_byte_int(v.value, dtype).astype(np.int64)), dtype)
        return Const(np.array(v.value).astype(dtype).item(), dtype)
    return Cast(dtype, v)


def const(value: Any, dtype: str) -> Const:
    """A constant of ``dtype``."""
    return Const(value, dtype)
