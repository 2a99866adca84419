"""The graph IR: typed SSA dataflow functions.

A ``Function`` has parameters (``Var``), an ordered list of ``Binding``s ``%v = op(args, attrs)``
and outputs. Every value has a ``TensorType(shape, dtype)``; a dimension is an ``int`` or a
symbolic dimension: an ``int64`` expression over named symbols (``ember.tir.symbolic``; a
``str`` given for a dimension is parsed as one, ``"batch"``, ``"batch * seq"``). Arguments are ``Var``s or ``Constant``s (small tensors written inline).
An ``IRModule`` maps function names to functions; ``"main"`` is the entry.

A binding may also call another function of the module: its ``Call.op`` is then ``"@name"``
(``is_function_call``). Fused groups (``FuseOps``, ``attrs["primitive"] = 1``) and composite
functions (``partition``, ``attrs["composite"] = pattern name``) are such functions; each call of
one lowers to a single kernel.

The text form (``ember.graph.text``) prints and parses back to a structurally equal module.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from ..dtypes import dtype_name, itemsize
from ..errors import ShapeMismatchError
from ..tir import symbolic as _sym

Dim = _sym.Dim


@dataclass(frozen=True, eq=False)
class TensorType:
    """Type of a tensor value: ``shape`` and numpy ``dtype`` name.

    Each dimension is an ``int`` or a symbolic dimension (``ember.tir.symbolic``: an ``int64``
    expression over named ``Symbol``s, kept in normal form; strings are parsed). Two types are
    equal when their dtypes are equal and their dimensions have equal normal forms.
    """

    shape: tuple
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(
            int(d) if isinstance(d, (int, np.integer)) and not isinstance(d, bool)
            else _sym.as_dim(d) for d in self.shape))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))

    def _key(self):
        return (tuple(_sym.dim_key(d) for d in self.shape), self.dtype)

    def __eq__(self, other):
        return isinstance(other, TensorType) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    @property
    def symbols(self) -> list[str]:
        """Names of the symbols in the shape (sorted; empty for a static shape)."""
        return _sym.symbols_of(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dimension is a known integer."""
        return all(isinstance(d, int) for d in self.shape)

    @property
    def size(self) -> int:
        """Number of elements (static shapes only)."""
        if not self.is_static:
            raise ShapeMismatchError(f"size of dynamic shape {self.shape} is unknown")
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        """Bytes of a dense tensor of this type (static shapes only)."""
        return self.size * itemsize(self.dtype)

    def __str__(self):
        dims = ", ".join(_sym.dim_str(d) for d in self.shape)
        if len(self.shape) == 1:
            dims += ","
        return f"Tensor[({dims}), {self.dtype}]"


class Value:
    """A graph value: a ``Var`` or a ``Constant``."""

    type: TensorType


_var_ids = itertools.count()


class Var(Value):
    """A named SSA value (function parameter or binding result)."""

    def __init__(self, name: str, type: TensorType):
        self.name = name
        self.type = type
        self.uid = next(_var_ids)

    def __repr__(self):
        return f"%{self.name}: {self.type}"


class Constant(Value):
    """A constant tensor (numpy array) written inline in the IR.

    ``name_hint`` (optional) is the weight name it came from; the driver uses it when it lifts
    large constants back to named parameters. It takes no part in structural equality.
    """

    def __init__(self, data, name_hint: str | None = None):
        self.data = np.asarray(data)
        self.type = TensorType(self.data.shape, _dtype_name(self.data.dtype))
        self.name_hint = name_hint

    def __repr__(self):
        return f"Constant({self.type})"


def _dtype_name(dt) -> str:
    return dtype_name(dt)


@dataclass(eq=False)
class Call:
    """Applying graph operator ``op`` (a registry name, e.g. ``"nn.conv"``) to ``args``."""

    op: str
    args: tuple
    attrs: dict = field(default_factory=dict)

    @property
    def is_function_call(self) -> bool:
        """True when ``op`` names a function of the module (``"@fused_nn_conv_nn_relu_0"``)."""
        return self.op.startswith("@")

    @property
    def callee(self) -> str:
        """The called function's name (without ``@``); only for function calls."""
        return self.op[1:]


@dataclass(eq=False)
class Binding:
    """``outputs = call``; most ops have one output."""

    outputs: tuple
    call: Call

    @property
    def var(self) -> Var:
        """The single output (for one-output ops)."""
        return self.outputs[0]


@dataclass(eq=False)
class Function:
    """A typed SSA function: parameters, bindings in order, outputs.

    ``attrs`` holds function attributes: ``primitive`` (1 for a fused group, lowered to one
    kernel), ``composite`` (the pattern name of a ``partition``-ed subgraph), ``output_names``
    (the model's names of the outputs, set by the ONNX importer when they are not the output
    variables' names: an output that is an input, a constant or a repeated value).
    """

    params: list
    bindings: list
    outputs: list
    name: str = "main"
    attrs: dict = field(default_factory=dict)

    @property
    def output_types(self) -> list:
        """Types of the outputs, in order."""
        return [o.type for o in self.outputs]

    def uses(self) -> dict:
        """Map ``id(var) -> number of uses`` (binding arguments and function outputs)."""
        n: dict[int, int] = {}
        for b in self.bindings:
            for a in b.call.args:
                if isinstance(a, Var):
                    n[id(a)] = n.get(id(a), 0) + 1
        for o in self.outputs:
            if isinstance(o, Var):
                n[id(o)] = n.get(id(o), 0) + 1
        return n

    def __str__(self):
        from .text import print_function
        return print_function(self)


class IRModule:
    """A set of named graph functions; ``mod["main"]`` is the entry point."""

    def __init__(self, functions: dict | None = None):
        self.functions: dict[str, Function] = dict(functions or {})

    @classmethod
    def from_function(cls, func: Function) -> "IRModule":
        """A module holding only ``func``, under ``func.name``."""
        return cls({func.name: func})

    def __getitem__(self, name: str) -> Function:
        return self.functions[name]

    def __setitem__(self, name: str, func: Function):
        self.functions[name] = func

    @property
    def main(self) -> Function:
        return self.functions["main"]

    def text(self) -> str:
        """The module's text form (see ``ember.graph.text``)."""
        from .text import print_module
        return print_module(self)

    __str__ = text

    @classmethod
    def from_text(cls, text: str) -> "IRModule":
        """Parse the text form; raises ``IRParseError`` on malformed text."""
        from .text import parse_module
        return parse_module(text)


# ------------------------------------------------------------------------------------------------

def structural_equal(a, b) -> bool:
    """True when two modules/functions have the same structure up to renaming of variables.

    Types, operators, attributes and constant values must be equal; names may differ.
    """
    if isinstance(a, IRModule):
        if not isinstance(b, IRModule) or set(a.functions) != set(b.functions):
            return False
        return all(structural_equal(a[k], b[k]) for k in a.functions)
    return _func_equal(a, b)


def _val_equal(x, y, vmap) -> bool:
    if isinstance(x, Var):
        return isinstance(y, Var) and vmap.get(id(x)) is y
    if isinstance(x, Constant):
        return (isinstance(y, Constant) and x.type == y.type
                and np.array_equal(x.data, y.data, equal_nan=x.data.dtype.kind == "f"))
    return False


def _attrs_equal(a: dict, b: dict) -> bool:
    # an attribute set to None means "not given": equal to leaving it out
    a = {k: v for k, v in a.items() if v is not None}
    b = {k: v for k, v in b.items() if v is not None}
    if set(a) != set(b):
        return False
    return all(_attr_value_equal(a[k], b[k]) for k in a)


def _attr_value_equal(x, y) -> bool:
    """Attribute values equal as data: lists and tuples alike, NaN equal to NaN at any depth."""
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(_attr_value_equal(u, v) for u, v in zip(x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return _attrs_equal(x, y)
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return bool(np.array_equal(np.asarray(x), np.asarray(y)))
    if isinstance(x, float) and isinstance(y, float) and np.isnan(x) and np.isnan(y):
        return True
    if _sym.is_symbolic(x) or _sym.is_symbolic(y):
        return (isinstance(x, (int, np.integer)) or _sym.is_symbolic(x)) and \
            (isinstance(y, (int, np.integer)) or _sym.is_symbolic(y)) and _sym.dims_equal(x, y)
    return bool(x == y)


def _func_equal(f: Function, g: Function) -> bool:
    if not _attrs_equal(f.attrs, g.attrs):
        return False
    if len(f.params) != len(g.params) or len(f.bindings) != len(g.bindings) \
            or len(f.outputs) != len(g.outputs):
        return False
    vmap: dict[int, Var] = {}
    for p, q in zip(f.params, g.params):
        if p.type != q.type:
            return False
        vmap[id(p)] = q
    for b1, b2 in zip(f.bindings, g.bindings):
        c1, c2 = b1.call, b2.call
        if c1.op != c2.op or len(c1.args) != len(c2.args) or len(b1.outputs) != len(b2.outputs):
            return False
        if not all(_val_equal(x, y, vmap) for x, y in zip(c1.args, c2.args)):
            return False
        if not _attrs_equal(c1.attrs, c2.attrs):
            return False
        for o1, o2 in zip(b1.outputs, b2.outputs):
            if o1.type != o2.type:
                return False
            vmap[id(o1)] = o2
    return all(_val_equal(x, y, vmap) for x, y in zip(f.outputs, g.outputs))


def free_vars(values: Iterable[Value]) -> list[Var]:
    """The ``Var``s among ``values`` (in order, without repeats)."""
    seen, out = set(), []
    for v in values:
        if isinstance(v, Var) and id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def normalize_attrs(attrs: dict) -> dict:
    """Attributes as immutable plain Python values: lists become tuples, numpy scalars become
    Python scalars; ``None`` values are kept (they mean "not given")."""
    def norm(v):
        if isinstance(v, (list, tuple)):
            return tuple(norm(x) for x in v)
        if isinstance(v, np.ndarray):
            return tuple(norm(x) for x in v.tolist()) if v.ndim else norm(v.item())
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, np.integer):
            return int(v)
        if isinstance(v, np.floating):
            return float(v)
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        return v
    return {k: norm(v) for k, v in attrs.items()}


def shape_str(shape: Sequence) -> str:
    """``(1, 3, 224, 224)`` style text of a shape."""
    dims = [_sym.dim_str(d) if isinstance(d, (int, np.integer)) or _sym.is_symbolic(d) else str(d)
            for d in shape]
    return "(" + ", ".join(dims) + ("," if len(shape) == 1 else "") + ")"
