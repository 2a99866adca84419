"""The operator registry: every graph operator is defined once, here or through ``register_op``.

An ``OpDef`` gives an operator's attributes (with defaults), its type inference, its NumPy
reference implementation, its tensor-expression compute (for lowering to loop IR) and its fusion
pattern (TVM's ``OpPatternKind``). Converters, passes, the lowering and the reference executor all
look operators up here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import ShapeMismatchError, UnsupportedOpError


class OpPattern(enum.IntEnum):
    """Fusion kind of an operator (lower is easier to fuse), as in TVM's ``OpPatternKind``."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


REQUIRED = object()  # marks an attribute without a default


@dataclass
class OpDef:
    """Definition of one graph operator.

    Attributes:
        name: registry name, e.g. ``"nn.conv"``.
        infer_type: ``(input TensorTypes, attrs) -> [output TensorTypes]``; raises
            ``ShapeMismatchError`` on inputs the op cannot take.
        reference: ``(input ndarrays, attrs) -> [output ndarrays]``: the NumPy reference.
        compute: ``(input te.Tensors, attrs, output TensorTypes) -> [te.Tensors]``, or ``None``
            for host-only operators.
        pattern: the fusion kind.
        attrs: attribute names with their default (``REQUIRED`` for none).
        num_inputs: ``(min, max)`` number of inputs; ``max=None`` for variadic.
        doc: one-paragraph description with the spec followed.
    """

    name: str
    infer_type: Callable
    reference: Callable
    compute: Callable | None = None
    pattern: OpPattern = OpPattern.OPAQUE
    attrs: dict = field(default_factory=dict)
    num_inputs: tuple = (1, 1)
    doc: str = ""
    schedule: Callable | None = None
    shape_func: Callable | None = None

    def infer(self, types: list, attrs: dict) -> list:
        """Output types of the operator on ``types``: its shape function when an input has a
        symbolic dimension (or an attribute holds one), else ``infer_type``.

        Raises:
            ShapeFunctionMissingError: symbolic inputs and no shape function.
            ShapeMismatchError: inputs the operator cannot take."""
        from ..tir.symbolic import is_symbolic
        if any(t.symbols for t in types) or _attrs_symbolic(attrs, is_symbolic):
            if self.shape_func is None:
                from ..errors import ShapeFunctionMissingError
                raise ShapeFunctionMissingError({self.name: [""]})
            return self.shape_func(types, attrs)
        return self.infer_type(types, attrs)

    def normalize_attrs(self, attrs: dict, where: str = "") -> dict:
        """Fill defaults and reject unknown or missing attributes."""
        out = {}
        for k, v in attrs.items():
            if k not in self.attrs:
                raise UnsupportedOpError(f"{where}operator {self.name} has no attribute {k!r} "
                                         f"(known: {sorted(self.attrs)})", op=self.name)
            out[k] = v
        for k, d in self.attrs.items():
            if k not in out:
                if d is REQUIRED:
                    raise ShapeMismatchError(f"{where}operator {self.name} needs attribute {k!r}")
                out[k] = d
        return out

    def check_arity(self, n: int, where: str = ""):
        """Check that ``n`` inputs fit ``num_inputs`` (``(lo, hi)``, ``hi`` ``None`` = unbounded);
        ``where`` prefixes the message.

        Raises:
            ShapeMismatchError: too few or too many inputs."""
        lo, hi = self.num_inputs
        if n < lo or (hi is not None and n > hi):
            raise ShapeMismatchError(f"{where}operator {self.name} takes {lo}"
                                     f"{'' if hi == lo else f' to {hi}' if hi else ' or more'} "
                                     f"inputs, got {n}")


_REGISTRY: dict[str, OpDef] = {}


def register_op(name: str, *, type_rel: Callable | None = None, compute: Callable | None = None,
                schedule: Callable | None = None, reference: Callable | None = None,
                infer_type: Callable | None = None, pattern: OpPattern = OpPattern.OPAQUE,
                attrs: dict | None = None, num_inputs: tuple | None = None, doc: str = "",
                override: bool = False) -> OpDef:
    """Register a graph operator (ember's own or a user's, e.g. ``"custom.fused_conv_relu"``).

    Public form (``ember.register_op``)::

        ember.register_op("custom.fused_conv_relu",
                          type_rel=lambda types, attrs: TensorType(...),   # or a list of them
                          compute=lambda inputs, attrs, out_types: te_tensor,  # or a list
                          reference=lambda arrays, attrs: ndarray,         # optional, NumPy
                          schedule=None, attrs={"pads": None}, num_inputs=(2, 3))

    Args:
        type_rel: ``(input TensorTypes, attrs) -> TensorType | [TensorType]``, raising
            ``ShapeMismatchError`` on inputs it cannot take (``infer_type`` is the same).
        compute: ``(input te.Tensors, attrs, output TensorTypes) -> te.Tensor | [te.Tensor]``.
        schedule: per-target schedule hook, kept on the ``OpDef``.
        reference: ``(input ndarrays, attrs) -> ndarray | [ndarray]`` for the reference
            interpreter and constant folding; without it those raise ``UnsupportedOpError``.
        pattern: fusion kind (``OPAQUE`` by default: never fused with neighbours).
        attrs: attribute names with defaults (``REQUIRED`` for none).
        num_inputs: ``(min, max)``; ``max=None`` for any number. Default: any number for ops
            given by ``type_rel``, exactly one otherwise.
    Raises:
        ValueError: ``name`` is already registered and ``override`` is false.
        TypeError: neither ``type_rel`` nor ``infer_type`` is given.
    """
    if name in _REGISTRY and not override:
        raise ValueError(f"operator {name!r} is already registered (pass override=True to "
                         f"replace it)")
    rel = type_rel or infer_type
    if rel is None:
        raise TypeError(f"register_op({name!r}): give type_rel (the type relation)")
    if num_inputs is None:
        num_inputs = (0, None) if type_rel is not None else (1, 1)
    op = OpDef(name, _as_list_fn(rel), _as_list_fn(reference) if reference else
               _no_reference(name), _as_list_fn(compute) if compute else None, pattern,
               dict(attrs or {}), num_inputs, doc, schedule)
    _REGISTRY[name] = op
    return op


def _as_list_fn(fn: Callable) -> Callable:
    """``fn`` returning a list even when it returns a single value."""
    def wrapped(*a):
        out = fn(*a)
        return list(out) if isinstance(out, (list, tuple)) else [out]
    wrapped.__wrapped__ = fn
    wrapped.__doc__ = fn.__doc__
    return wrapped


def _no_reference(name: str) -> Callable:
    def ref(xs, attrs):
        raise UnsupportedOpError(f"operator {name} was registered without a NumPy reference: "
                                 f"pass reference= to register_op to evaluate it on the host",
                                 op=name)
    return ref


def _attrs_symbolic(attrs: dict, is_symbolic) -> bool:
    def go(v):
        if isinstance(v, (list, tuple)):
            return any(go(x) for x in v)
        return is_symbolic(v)
    return any(go(v) for v in attrs.values())


def register_shape_func(name: str, fn: Callable | None = None):
    """Register the symbolic shape function of operator ``name`` (``ember.register_shape_func``).

    ``fn(input TensorTypes, attrs) -> TensorType | [TensorType]`` is the operator's type
    relation for inputs whose dimensions may be symbolic (``ember.tir.symbolic``: ints or
    ``int64`` expressions over named symbols; compare them with ``dims_equal``, combine them
    with ``+ - * //`` and normalize with ``as_dim``). It is used instead of ``infer_type``
    whenever an input has a symbolic dimension. Without one, a symbolic model reaching the
    operator raises ``ShapeFunctionMissingError``. Usable as a decorator when ``fn`` is omitted.

    Raises:
        UnsupportedOpError: ``name`` is not a registered operator.
    """
    def deco(f):
        get_op(name).shape_func = _as_list_fn(f)
        return f
    return deco if fn is None else deco(fn)


def has_shape_func(name: str) -> bool:
    """True when operator ``name`` has a symbolic shape function."""
    return get_op(name).shape_func is not None


def unregister_op(name: str) -> None:
    """Remove a registered operator (a user's; tests that register temporary ops).

    Raises:
        UnsupportedOpError: no such operator.
    """
    get_op(name)
    del _REGISTRY[name]


def get_op(name: str) -> OpDef:
    """The ``OpDef`` registered as ``name``.

    Raises:
        UnsupportedOpError: no such operator.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnsupportedOpError(f"graph operator {name!r} is not registered", op=name) from None


def list_ops() -> list[str]:
    """Names of all registered operators, sorted."""
    return sorted(_REGISTRY)


# shared type-inference helpers -----------------------------------------------------------------

def broadcast_shapes(*shapes: Sequence, where: str = "") -> tuple:
    """NumPy (multidirectional) broadcast of shapes; symbolic dims broadcast with 1 and with
    equal dims (same normal form); a symbol is assumed not to be 1 (as in TVM: a size-1 axis
    that broadcasts must be the literal 1). Raises ``ShapeMismatchError`` on incompatible dims."""
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(nd):
        dim = 1
        for s in shapes:
            j = k - (nd - len(s))
            if j < 0:
                continue
            d = s[j]
            if _is_one(d):
                continue
            if _is_one(dim):
                dim = d
            elif not same_dim(d, dim):
                raise ShapeMismatchError(f"{where}shapes {', '.join(str(tuple(x)) for x in shapes)} "
                                         f"cannot be broadcast together (axis {k}: {dim} vs {d})")
        out.append(dim)
    return tuple(out)


def _is_one(d) -> bool:
    return isinstance(d, (int, np.integer)) and d == 1


def same_dim(a, b) -> bool:
    """``a == b`` for static dims; equal normal forms for symbolic ones."""
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
        return a == b
    from ..tir.symbolic import dims_equal
    return dims_equal(a, b)


def normalize_axis(axis: int, ndim: int, where: str = "") -> int:
    """``axis`` in ``[-ndim, ndim)`` as a non-negative index; raises ``ShapeMismatchError``."""
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeMismatchError(f"{where}axis {axis} is out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


def np_dtype(dtype: str):
    """numpy dtype object for an ember dtype name (bfloat16 through ml_dtypes)."""
    from ..dtypes import np_dtype as _np_dtype
    return _np_dtype(dtype)
