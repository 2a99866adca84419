"""Symbolic dimensions of the graph IR: a dimension is an ``int`` or an integer expression.

A symbolic dimension is an ``int64`` loop-IR expression (``ember.tir.expr``) over named
``Symbol``s (``batch``, ``seq``) built with ``+ - *``, floor division ``//``, floor modulo ``%``,
``min`` and ``max``, as TVM's shapes are ``PrimExpr``s: the same expression object can flow
into a kernel as a loop extent. ``Symbol("seq")`` is interned: every use of a name is one
object, so a symbol equals itself across tensors, functions and parsed text (and it compares
equal to its name as a ``str``, which keeps code written for the earlier string dims working).

Every dimension stored in a ``TensorType`` is in the normal form ``as_dim`` gives: constant
expressions become ``int``s; the rest is a polynomial over its atoms (symbols and the
``//``, ``%``, ``min``, ``max`` terms that do not fold) with sorted terms, so ``seq * batch``
and ``batch * seq`` are one dimension and ``(batch * seq * 768) // (batch * seq * 12)`` is
``64``. ``dim_key`` is the text of that form: equal keys mean equal values for every binding
of the symbols (the converse does not hold: the normal form is sound, not complete).

Text form (``dim_str``/``parse_dim``): ``batch``, ``(batch * seq)``, ``(seq + 1)``,
``(seq // 2)``, ``(seq % 8)``, ``min(seq, 512)``; parsed with Python's ``ast`` (only those
operators, integers and names are accepted).
"""

from __future__ import annotations

import ast
from typing import Iterable, Mapping, Union

import numpy as np

from ..errors import ShapeMismatchError
from .expr import BinOp, Const, Expr, Unary, Var

Dim = Union[int, Expr]


class Symbol(Var):
    """A named symbolic dimension (an ``int64`` ``tir`` ``Var``), interned by name.

    ``Symbol("seq") is Symbol("seq")``; a symbol equals (and hashes like) its name string.
    """

    _table: dict = {}

    def __new__(cls, name: str):
        s = cls._table.get(name)
        if s is None:
            s = super().__new__(cls)
            Var.__init__(s, name, "int64")
            cls._table[name] = s
        return s

    def __init__(self, name: str):  # initialised once, in __new__
        pass

    def __eq__(self, other):
        if isinstance(other, str):
            return other == self.name
        return self is other

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return self.name

    __str__ = __repr__

    def __reduce__(self):  # pickles (dask, multiprocessing) keep the interning
        return (Symbol, (self.name,))


def is_symbolic(d) -> bool:
    """True for a symbolic (non-``int``) dimension."""
    return isinstance(d, Expr)


# normal form ------------------------------------------------------------------------------------
# A polynomial is {monomial: coeff}; a monomial is a sorted tuple of atom keys (repeats for
# powers); atoms maps atom key -> normalized atom expression.

def _const(v: int) -> Const:
    return Const(int(v), "int64")


class _Poly:
    __slots__ = ("terms", "atoms")

    def __init__(self, terms=None, atoms=None):
        self.terms = {k: c for k, c in (terms or {}).items() if c}
        self.atoms = dict(atoms or {})

    @classmethod
    def const(cls, v: int) -> "_Poly":
        return cls({(): int(v)})

    @classmethod
    def atom(cls, e: Expr) -> "_Poly":
        k = _atom_key(e)
        return cls({(k,): 1}, {k: e})

    def constant(self):
        if not self.terms:
            return 0
        if set(self.terms) == {()}:
            return self.terms[()]
        return None

    def add(self, o: "_Poly", sign: int = 1) -> "_Poly":
        t = dict(self.terms)
        for m, c in o.terms.items():
            t[m] = t.get(m, 0) + sign * c
        return _Poly(t, {**self.atoms, **o.atoms})

    def mul(self, o: "_Poly") -> "_Poly":
        t: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in o.terms.items():
                m = tuple(sorted(m1 + m2))
                t[m] = t.get(m, 0) + c1 * c2
        return _Poly(t, {**self.atoms, **o.atoms})

    def exact_div(self, o: "_Poly"):
        """``self / o`` when ``o`` is one monomial dividing every term exactly, else ``None``."""
        if len(o.terms) != 1:
            return None
        (mo, co), = o.terms.items()
        if co == 0:
            return None
        out = {}
        for m, c in self.terms.items():
            rest = list(m)
            for a in mo:
                if a not in rest:
                    return None
                rest.remove(a)
            if c % co:
                return None
            out[tuple(rest)] = c // co
        return _Poly(out, self.atoms)

    def to_expr(self) -> Dim:
        c = self.constant()
        if c is not None:
            return int(c)
        out = None
        neg_terms = []
        for m in sorted(self.terms, key=lambda m: (-len(m), m)):
            c = self.terms[m]
            if not m:
                continue
            t = None
            for a in m:
                x = self.atoms[a]
                t = x if t is None else BinOp("mul", t, x)
            if abs(c) != 1:
                t = BinOp("mul", t, _const(abs(c)))
            if c < 0:
                neg_terms.append(t)
            else:
                out = t if out is None else BinOp("add", out, t)
        k = self.terms.get((), 0)
        if out is None:
            if not neg_terms:
                return int(k)
            out = _const(k) if k else Unary("neg", neg_terms.pop(0))
            k = 0
        elif k > 0:
            out = BinOp("add", out, _const(k))
        for t in neg_terms:
            out = BinOp("sub", out, t)
        if k < 0:
            out = BinOp("sub", out, _const(-k))
        return out


def _atom_key(e: Expr) -> str:
    return dim_str(e)


_COMM = ("min", "max")


def _poly(e) -> _Poly:
    """The normal-form polynomial of an integer expression (ints, Symbols, tir Exprs)."""
    if isinstance(e, (int, np.integer)) and not isinstance(e, bool):
        return _Poly.const(int(e))
    if isinstance(e, str):
        return _poly(parse_dim(e))
    if isinstance(e, Const):
        return _Poly.const(int(e.value))
    if isinstance(e, Var):
        return _Poly.atom(e)
    if isinstance(e, Unary) and e.op == "neg":
        return _Poly.const(0).add(_poly(e.a), -1)
    if isinstance(e, BinOp):
        if e.op == "add":
            return _poly(e.a).add(_poly(e.b))
        if e.op == "sub":
            return _poly(e.a).add(_poly(e.b), -1)
        if e.op == "mul":
            return _poly(e.a).mul(_poly(e.b))
        a, b = _poly(e.a), _poly(e.b)
        ca, cb = a.constant(), b.constant()
        if e.op in ("floordiv", "div"):
            if cb == 0:
                raise ShapeMismatchError(f"dimension {dim_str(e)} divides by zero")
            if ca is not None and cb is not None:
                return _Poly.const(ca // cb)
            if cb == 1:
                return a
            q = a.exact_div(b)
            if q is not None:
                return q
        elif e.op in ("floormod", "mod"):
            if cb == 0:
                raise ShapeMismatchError(f"dimension {dim_str(e)} takes a remainder by zero")
            if ca is not None and cb is not None:
                return _Poly.const(ca % cb)
            if cb == 1 or a.exact_div(b) is not None:
                return _Poly.const(0)
        elif e.op in _COMM:
            if ca is not None and cb is not None:
                return _Poly.const(min(ca, cb) if e.op == "min" else max(ca, cb))
            ea, eb = a.to_expr(), b.to_expr()
            if dim_str(ea) == dim_str(eb):
                return a
            if dim_str(ea) > dim_str(eb):
                ea, eb = eb, ea
            return _Poly.atom(BinOp(e.op, _as_expr(ea), _as_expr(eb)))
        else:
            raise ShapeMismatchError(f"operator {e.op!r} cannot appear in a dimension "
                                     f"(allowed: + - * // % min max)")
        return _Poly.atom(BinOp("floordiv" if e.op in ("floordiv", "div") else "floormod",
                                _as_expr(a.to_expr()), _as_expr(b.to_expr())))
    raise ShapeMismatchError(f"{e!r} ({type(e).__name__}) is not a dimension: use an int, a "
                             f"symbol name or an expression over symbols")


def _as_expr(d) -> Expr:
    return _const(d) if isinstance(d, int) else d


def as_dim(d) -> Dim:
    """``d`` (an ``int``, a numpy integer, a symbol name, dimension text such as
    ``"batch * seq"`` or a ``tir`` expression) in normal form: an ``int`` when it is constant,
    else a normalized ``int64`` expression.

    Raises:
        ShapeMismatchError: ``d`` is not a dimension (a float, an operator outside
            ``+ - * // % min max``, a division by zero).
    """
    if isinstance(d, bool):
        raise ShapeMismatchError(f"{d!r} is not a dimension")
    if isinstance(d, (int, np.integer)):
        return int(d)
    if isinstance(d, Symbol):
        return d
    return _poly(d).to_expr()


def normal_index(e: Expr) -> Expr | None:
    """An integer index expression (over loop variables and symbols) in the symbolic normal
    form, with the quotient/remainder pairs of fused loops folded back (``(i // s) * (s * k) +
    (i % s) * k`` is ``i * k``, also through nested quotients: ``(i // (4 * s)) * (4 * s * s)
    + ((i // s) % 4) * (s * s) + (i % s) * s`` is ``i * s``); ``None`` when ``e`` is not such
    an expression (a load or select in it) or two of its variables share a name (the normal
    form keys atoms by name). The flat offsets of symbolic buffers go through it
    (``arith.flat_index``): a fused parallel loop over ``batch x seq`` rows otherwise divides
    by ``seq`` in every iteration."""
    from .arith import collect
    names: dict = {}
    for v in collect(e, lambda n: isinstance(n, Var)):
        if names.setdefault(v.name, v) is not v:
            return None
    try:
        p = _fold_divmod(_poly(e))
    except ShapeMismatchError:
        return None
    return _as_expr(p.to_expr())


def _fold_divmod(p: _Poly) -> _Poly:
    """``p`` with every pair ``k * R * (x // c) * c`` + ``k * R * (x % c)`` (``R`` a
    monomial, ``c`` one monomial) replaced by ``k * R * x``; ``x // c`` may also appear as
    ``y // (d * c)`` when ``x`` is ``y // d``."""
    changed = True
    while changed:
        changed = False
        for key, atom in list(p.atoms.items()):
            if not (isinstance(atom, BinOp) and atom.op == "floormod"):
                continue
            if not any(key in m for m in p.terms):
                continue
            x, c = atom.a, atom.b
            pc = _poly(c)
            if len(pc.terms) != 1:
                continue
            (mc, cc), = pc.terms.items()
            if cc <= 0:
                continue
            cands = [BinOp("floordiv", x, c)]
            if isinstance(x, BinOp) and x.op == "floordiv":
                cands.append(BinOp("floordiv", x.a, _as_expr(_poly(x.b).mul(pc).to_expr())))
            div_keys = [_atom_key(d) for d in cands]
            for m, k in list(p.terms.items()):
                if key not in m:
                    continue
                rest = list(m)
                rest.remove(key)
                for dk in div_keys:
                    target = tuple(sorted(rest + [dk] + list(mc)))
                    if p.terms.get(target) == k * cc:
                        t = dict(p.terms)
                        del t[m], t[target]
                        mono = _Poly({tuple(sorted(rest)): k}, p.atoms)
                        q = _Poly(t, p.atoms).add(_poly(x).mul(mono))
                        p, changed = q, True
                        break
                if changed:
                    break
            if changed:
                break
    return p


def as_expr(d) -> Expr:
    """A dimension as a ``tir`` ``int64`` expression (ints become ``Const``)."""
    d = as_dim(d)
    return _const(d) if isinstance(d, int) else d


def dim_key(d):
    """Hashable key equal for equal dimensions (``int`` for static ones, normal-form text for
    symbolic ones)."""
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
        return int(d)
    return dim_str(as_dim(d))


def dims_equal(a, b) -> bool:
    """True when dimensions ``a`` and ``b`` are provably equal (same normal form)."""
    return dim_key(a) == dim_key(b)


# text ---------------------------------------------------------------------------------------------

_INFIX = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%"}


def dim_str(d) -> str:
    """Text of a dimension: ``256``, ``seq``, ``(batch * seq)``, ``min(seq, 512)``."""
    if isinstance(d, (int, np.integer)):
        return str(int(d))
    if isinstance(d, Const):
        return str(int(d.value))
    if isinstance(d, Var):
        return d.name
    if isinstance(d, Unary) and d.op == "neg":
        return f"(-{dim_str(d.a)})"
    if isinstance(d, BinOp):
        if d.op in _INFIX:
            return f"({dim_str(d.a)} {_INFIX[d.op]} {dim_str(d.b)})"
        if d.op in _COMM:
            return f"{d.op}({dim_str(d.a)}, {dim_str(d.b)})"
    raise ShapeMismatchError(f"{d!r} cannot appear in a dimension")


_AST_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv",
            ast.Mod: "floormod"}


def parse_dim(text: str) -> Dim:
    """Parse dimension text (``"batch"``, ``"(batch * seq)"``, ``"min(seq, 512)"``) into its
    normal form.

    Raises:
        ShapeMismatchError: text that is not an integer expression over names with
            ``+ - * // % min max``.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ShapeMismatchError(f"dimension {text!r} is not an expression over symbols "
                                 f"(+ - * // % min max)") from None

    def go(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and \
                not isinstance(n.value, bool):
            return _const(n.value)
        if isinstance(n, ast.Name):
            return Symbol(n.id)
        if isinstance(n, ast.BinOp) and type(n.op) in _AST_OPS:
            return BinOp(_AST_OPS[type(n.op)], go(n.left), go(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return Unary("neg", go(n.operand))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                n.func.id in _COMM and len(n.args) >= 2 and not n.keywords:
            out = go(n.args[0])
            for a in n.args[1:]:
                out = BinOp(n.func.id, out, go(a))
            return out
        raise ShapeMismatchError(f"dimension {text!r}: {ast.unparse(n)!r} is not allowed "
                                 f"(integers, names, + - * // % min max)")
    return as_dim(go(tree))


# evaluation and queries ---------------------------------------------------------------------------

def symbols_of(dims: Iterable) -> list[str]:
    """Names of the symbols appearing in ``dims`` (sorted)."""
    out: set = set()

    def go(e):
        if isinstance(e, Var):
            out.add(e.name)
        elif isinstance(e, BinOp):
            go(e.a)
            go(e.b)
        elif isinstance(e, Unary):
            go(e.a)
    for d in dims:
        if is_symbolic(d):
            go(d)
    return sorted(out)


def evaluate(d, env: Mapping[str, int]) -> int:
    """The value of dimension ``d`` with symbols bound by ``env`` (``{name: int}``).

    Raises:
        ShapeMismatchError: a symbol of ``d`` is not in ``env``, or a division by zero.
    """
    if isinstance(d, (int, np.integer)):
        return int(d)
    if isinstance(d, Const):
        return int(d.value)
    if isinstance(d, Var):
        if d.name not in env:
            raise ShapeMismatchError(f"symbol {d.name!r} has no value (bound: {sorted(env)})")
        return int(env[d.name])
    if isinstance(d, Unary) and d.op == "neg":
        return -evaluate(d.a, env)
    if isinstance(d, BinOp):
        a, b = evaluate(d.a, env), evaluate(d.b, env)
        if d.op in ("floordiv", "floormod") and b == 0:
            raise ShapeMismatchError(f"dimension {dim_str(d)} divides by zero for {dict(env)}")
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                "floordiv": lambda: a // b, "floormod": lambda: a % b,
                "min": lambda: min(a, b), "max": lambda: max(a, b)}[d.op]()
    raise ShapeMismatchError(f"{d!r} is not a dimension")


def substitute(d, sizes: Mapping) -> Dim:
    """``d`` with the symbols named in ``sizes`` (``{name: int or dim}``) replaced, in normal
    form."""
    if not is_symbolic(d):
        return d

    def go(e):
        if isinstance(e, Var):
            return as_expr(sizes[e.name]) if e.name in sizes else e
        if isinstance(e, BinOp):
            return BinOp(e.op, go(e.a), go(e.b))
        if isinstance(e, Unary):
            return Unary(e.op, go(e.a))
        return e
    return as_dim(go(d))


def substitute_attrs(attrs: dict, sizes: Mapping) -> dict:
    """Operator attributes with the symbolic dimensions in them (a reshape's ``newshape``,
    at any list depth) substituted by ``sizes`` (``{name: int or dim}``)."""
    def go(v):
        if is_symbolic(v):
            return substitute(v, sizes)
        if isinstance(v, (list, tuple)):
            return type(v)(go(x) for x in v)
        return v
    return {k: go(v) for k, v in attrs.items()}


DEFAULT_MAX = 2 ** 31 - 1  # a symbol without declared bounds is assumed in [0, DEFAULT_MAX]


def bounds_of(d, symbol_bounds: Mapping[str, tuple] | None = None) -> tuple:
    """Inclusive ``(lo, hi)`` of dimension ``d`` given ``{symbol: (lo, hi)}`` (interval
    analysis, ``ember.tir.arith.interval``); a symbol without bounds counts as
    ``[0, DEFAULT_MAX]`` (the runtime checks both kinds of bound when it binds the symbol)."""
    from .arith import interval
    if not is_symbolic(d):
        return (int(d), int(d))
    symbol_bounds = symbol_bounds or {}
    b = {Symbol(n): (0, DEFAULT_MAX) for n in symbols_of([d])}
    for n, (lo, hi) in symbol_bounds.items():
        if Symbol(n) in b:
            b[Symbol(n)] = (lo, hi)
    return interval(d, b)


def dim_min(a, b, symbol_bounds: Mapping | None = None) -> Dim:
    """``min(a, b)`` in normal form, decided by the symbols' bounds where they prove it."""
    return _minmax("min", a, b, symbol_bounds)


def dim_max(a, b, symbol_bounds: Mapping | None = None) -> Dim:
    """``max(a, b)`` in normal form, decided by the symbols' bounds where they prove it."""
    return _minmax("max", a, b, symbol_bounds)


def _minmax(op, a, b, symbol_bounds):
    a, b = as_dim(a), as_dim(b)
    (alo, ahi), (blo, bhi) = bounds_of(a, symbol_bounds), bounds_of(b, symbol_bounds)
    if ahi <= blo:
        return a if op == "min" else b
    if bhi <= alo:
        return b if op == "min" else a
    return as_dim(BinOp(op, _as_expr(a), _as_expr(b)))


def prod(dims: Iterable) -> Dim:
    """Product of dimensions (1 for none), in normal form."""
    out: Dim = 1
    for d in dims:
        out = as_dim(_as_expr(out) * _as_expr(as_dim(d))) if (is_symbolic(out) or
                                                                is_symbolic(d)) else out * int(d)
    return out


def bind_shapes(params: Iterable, shapes: Mapping[str, tuple],
                symbol_bounds: Mapping[str, tuple] | None = None) -> dict:
    """Bind the symbols of a function's parameter types from the shapes of one run's inputs.

    Args:
        params: ``(name, shape)`` pairs: the declared shapes (ints and symbolic dims).
        shapes: ``{name: concrete shape}`` of the inputs given to this run.
        symbol_bounds: ``{symbol: (lo, hi)}`` inclusive (``hi`` ``None``: ``DEFAULT_MAX``).
    Returns:
        ``{symbol: int}``.
    Raises:
        ShapeMismatchError: a rank or static dimension that differs; two inputs that give one
            symbol different sizes (naming both inputs, their axes and the symbol); a size
            outside the symbol's bounds; a derived dimension (``seq + 1``) that does not
            evaluate to the given size.
    """
    env: dict = {}
    source: dict = {}
    derived = []
    params = list(params)
    for name, decl in params:
        if name not in shapes:
            continue
        got = tuple(int(d) for d in shapes[name])
        if len(got) != len(decl):
            raise ShapeMismatchError(f"input {name!r} has shape {got} (rank {len(got)}), the "
                                     f"model takes rank {len(decl)}: {_shape_text(decl)}")
        for ax, (d, g) in enumerate(zip(decl, got)):
            if isinstance(d, Var):
                if d.name in env and env[d.name] != g:
                    n0, a0 = source[d.name]
                    raise ShapeMismatchError(
                        f"symbol {d.name!r}: input {n0!r} axis {a0} gives {env[d.name]} but "
                        f"input {name!r} axis {ax} gives {g}; both must have the same size")
                env.setdefault(d.name, g)
                source.setdefault(d.name, (name, ax))
            elif is_symbolic(d):
                derived.append((name, ax, d, g))
            elif d != g:
                raise ShapeMismatchError(f"input {name!r} has shape {got}, the model takes "
                                         f"{_shape_text(decl)} (axis {ax} must be {d})")
    bounds = dict(symbol_bounds or {})
    for s, v in env.items():
        lo, hi = bounds.get(s, (0, None))
        hi = DEFAULT_MAX if hi is None else hi
        if not lo <= v <= hi:
            n0, a0 = source[s]
            raise ShapeMismatchError(f"symbol {s!r} = {v} (input {n0!r} axis {a0}) is outside "
                                     f"its declared bounds [{lo}, {hi}]")
    for name, ax, d, g in derived:
        missing = [s for s in symbols_of([d]) if s not in env]
        if missing:
            raise ShapeMismatchError(f"input {name!r} axis {ax} is {dim_str(d)}, but symbols "
                                     f"{missing} are not given by any input's plain axis")
        if evaluate(d, env) != g:
            raise ShapeMismatchError(f"input {name!r} axis {ax} must be {dim_str(d)} = "
                                     f"{evaluate(d, env)} for {dict(env)}, got {g}")
    return env


def _shape_text(shape) -> str:
    return "(" + ", ".join(dim_str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
