"""A pattern language over the graph IR, to find subgraphs and rewrite or partition them.

Patterns::

    x, w = wildcard(), is_constant()
    conv = is_op("nn.conv")(x, w) | is_op("nn.conv")(x, w, is_constant())
    pat = is_op("nn.relu")(conv).has_attr(...)          # attribute constraints
    pat = optional(conv, lambda p: is_op("nn.relu")(p))  # conv, or relu(conv)
    pat = wildcard().has_shape((1, 64, 56, 56)).has_dtype("float32")
    pat = is_output(is_op("split")(x), 1)                # output 1 of a multi-output binding
    pat = dominates(is_op("nn.conv")(x, w), is_op("add")(wildcard(), wildcard()) |
                    is_op("nn.relu")(wildcard()), is_op("nn.relu")(wildcard()))

A pattern object always matches the same value within one match (``add(x, x)`` needs both
arguments equal). ``match(pattern, value, func)`` gives a ``Match`` or ``None``.

Rewriting: ``rewrite(callbacks, mod)`` applies ``PatternCallback`` objects, each defining
``pattern`` and ``callback(match) -> value | None`` (``None`` declines), to every function but
fused ones, until nothing changes. ``match.emit(op, args, attrs)`` adds bindings for the
replacement; ``match[p]`` is the (rewritten) value a sub-pattern matched.

Partitioning: ``partition(pattern, mod, name)`` moves every match whose inner values are used
only inside it into a new function ``@<name>_<k>`` with ``attrs={"composite": name}``, called
from ``main``; each call lowers to one kernel, or can be handed to another backend.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .ir import Constant, Function, IRModule, Value, Var
from .mutator import Rewriter, extract_function, producers, users


class Pattern:
    """Base class: combine with ``|``, constrain with ``has_attr``/``has_shape``/``has_dtype``."""

    def __or__(self, other: "Pattern") -> "Pattern":
        return AltPattern(self, other)

    def has_attr(self, **attrs) -> "Pattern":
        """Also require the matched call's attributes to include ``attrs``."""
        return AttrPattern(self, attrs)

    def has_shape(self, shape: Sequence) -> "Pattern":
        """Also require the value's shape."""
        return TypePattern(self, shape=tuple(shape))

    def has_dtype(self, dtype: str) -> "Pattern":
        """Also require the value's dtype."""
        return TypePattern(self, dtype=dtype)

    def where(self, pred: Callable[[Value], bool]) -> "Pattern":
        """Also require ``pred(value)``."""
        return PredPattern(self, pred)

    def _match(self, v, m: "Match") -> bool:  # pragma: no cover
        raise NotImplementedError

    def match(self, v, m: "Match") -> bool:
        """True when this pattern matches value ``v``, recording sub-pattern matches in ``m``. A
        pattern already matched in ``m`` matches only the same value again; on failure ``m`` is
        restored to its state before the call."""
        prev = m.node_map.get(self)
        if prev is not None:
            return prev is v
        saved = m.save()
        if self._match(v, m):
            m.node_map[self] = v
            return True
        m.restore(saved)
        return False


class WildcardPattern(Pattern):
    """Any value."""

    def _match(self, v, m):
        return True


class ConstantPattern(Pattern):
    """A ``Constant``."""

    def _match(self, v, m):
        return isinstance(v, Constant)


class VarPattern(Pattern):
    """A function parameter (optionally of a given name)."""

    def __init__(self, name: str | None = None):
        self.name = name

    def _match(self, v, m):
        return isinstance(v, Var) and m.producer(v) is None and \
            (self.name is None or v.name == self.name)


class OpPattern:
    """``is_op(name)``: call it with argument patterns to get a ``CallPattern``."""

    def __init__(self, op: str):
        self.op = op

    def __call__(self, *args: Pattern) -> "CallPattern":
        return CallPattern(self.op, args)


class CallPattern(Pattern):
    """The single output of a binding of ``op`` whose arguments match ``args`` (exactly that many
    arguments; give ``None`` as ``args`` to accept any)."""

    def __init__(self, op: str, args: Sequence[Pattern] | None):
        self.op = op
        self.args = None if args is None else tuple(args)

    def _match(self, v, m):
        b = m.producer(v)
        if b is None or b.call.op != self.op or len(b.outputs) != 1:
            return False
        if self.args is not None:
            if len(self.args) != len(b.call.args):
                return False
            if not all(p.match(a, m) for p, a in zip(self.args, b.call.args)):
                return False
        m.bindings.append(b)
        return True


class OutputPattern(Pattern):
    """Output ``index`` of a (multi-output) binding matching ``call`` (the IR's tuple access)."""

    def __init__(self, call: "CallPattern", index: int):
        self.call, self.index = call, index

    def _match(self, v, m):
        b = m.producer(v)
        if b is None or self.index >= len(b.outputs) or b.outputs[self.index] is not v:
            return False
        if b.call.op != self.call.op:
            return False
        if self.call.args is not None and (len(self.call.args) != len(b.call.args) or not all(
                p.match(a, m) for p, a in zip(self.call.args, b.call.args))):
            return False
        m.bindings.append(b)
        return True


class AltPattern(Pattern):
    """Either pattern (the left one tried first)."""

    def __init__(self, left: Pattern, right: Pattern):
        self.left, self.right = left, right

    def _match(self, v, m):
        return self.left.match(v, m) or self.right.match(v, m)


class AttrPattern(Pattern):
    """``inner`` whose binding has these attribute values."""

    def __init__(self, inner: Pattern, attrs: dict):
        from .ir import normalize_attrs
        self.inner, self.attrs = inner, normalize_attrs(attrs)

    def _match(self, v, m):
        if not self.inner.match(v, m):
            return False
        b = m.producer(v)
        return b is not None and all(b.call.attrs.get(k) == x for k, x in self.attrs.items())


class TypePattern(Pattern):
    """``inner`` whose value has this shape and/or dtype."""

    def __init__(self, inner: Pattern, shape=None, dtype=None):
        self.inner, self.shape, self.dtype = inner, shape, dtype

    def _match(self, v, m):
        t = v.type
        if self.shape is not None and t.shape != self.shape:
            return False
        if self.dtype is not None and t.dtype != self.dtype:
            return False
        return self.inner.match(v, m)


class PredPattern(Pattern):
    """``inner`` and a user predicate on the value."""

    def __init__(self, inner: Pattern, pred):
        self.inner, self.pred = inner, pred

    def _match(self, v, m):
        return self.inner.match(v, m) and bool(self.pred(v))


class DominatorPattern(Pattern):
    """``child`` whose inputs lead back through values matching ``path`` to exactly one value
    matching ``parent``, where every path value is read only inside the matched region: so each
    use of the path goes to ``child`` (``parent`` dominates ``child``). Other inputs of the
    path are free inputs of the region."""

    def __init__(self, parent: Pattern, path: Pattern, child: Pattern):
        self.parent, self.path, self.child = parent, path, child

    def _match(self, v, m):
        if not self.child.match(v, m):
            return False
        found = []
        inner: list = []

        def back(value) -> bool:
            b = m.producer(value)
            if b is None:
                return False
            for a in b.call.args:
                if not isinstance(a, Var):
                    continue
                if found and a is found[0]:
                    continue
                probe = Match(m.func, m._prod, m._users)
                if self.parent.match(a, probe):
                    if found and found[0] is not a:
                        return False
                    if not found:
                        found.append(a)
                        self.parent.match(a, m)
                    continue
                if any(a is x for x in inner):
                    continue
                probe = Match(m.func, m._prod, m._users)
                if self.path.match(a, probe) and m.producer(a) is not None:
                    inner.append(a)
                    if not back(a):
                        return False
                    continue
                # any other value is a free input of the region
            return True
        if not back(v) or not found:
            return False
        region = {id(x) for x in inner} | {id(v)}
        for x in inner:
            for u in m._users.get(id(x), []):
                if u is None or not any(id(o) in region for o in u.outputs):
                    return False
            m.bindings.append(m.producer(x))
        return True


def wildcard() -> Pattern:
    """Matches any value."""
    return WildcardPattern()


def is_constant() -> Pattern:
    """Matches a ``Constant`` (bound weights included)."""
    return ConstantPattern()


def is_var(name: str | None = None) -> Pattern:
    """Matches a function parameter (named ``name`` when given)."""
    return VarPattern(name)


def is_op(op: str) -> OpPattern:
    """``is_op("nn.conv")(x, w)`` matches a binding of ``nn.conv`` with those arguments."""
    return OpPattern(op)


def is_output(call: CallPattern, index: int) -> Pattern:
    """Output ``index`` of a multi-output binding (the IR's form of TVM's ``is_tuple_get_item``);
    ``is_tuple`` is its alias for readers coming from TVM."""
    return OutputPattern(call, index)


is_tuple_get_item = is_output


def optional(pattern: Pattern, wrap: Callable[[Pattern], Pattern]) -> Pattern:
    """``wrap(pattern) | pattern``: e.g. ``optional(conv, lambda p: is_op("nn.relu")(p))``."""
    return AltPattern(wrap(pattern), pattern)


def dominates(parent: Pattern, path: Pattern, child: Pattern) -> Pattern:
    """See ``DominatorPattern``."""
    return DominatorPattern(parent, path, child)


# matching ---------------------------------------------------------------------------------------

class Match:
    """The state and result of matching one pattern at one value.

    Attributes:
        node_map: ``{pattern: value}`` of every sub-pattern matched (values of the graph that was
            matched; ``match[p]`` gives them as rewritten so far).
        bindings: the bindings matched by call patterns (the region), root last.
    """

    def __init__(self, func: Function, prod=None, use=None, rw: Rewriter | None = None):
        self.func = func
        self._prod = prod if prod is not None else producers(func)
        self._users = use if use is not None else users(func)
        self.node_map: dict = {}
        self.bindings: list = []
        self.rw = rw
        self.root = None

    def producer(self, v):
        """The binding that produces ``v`` in the matched function, or ``None`` (a parameter, a
        constant, or not a ``Var``)."""
        return self._prod.get(id(v)) if isinstance(v, Var) else None

    def uses(self, v) -> int:
        """How many bindings (and function outputs) of the matched function read ``v``."""
        return len(self._users.get(id(v), ()))

    def save(self):
        """A snapshot of ``node_map`` and the matched bindings, for ``restore``."""
        return dict(self.node_map), len(self.bindings)

    def restore(self, saved):
        """Return to the state of a ``save()`` snapshot (for backtracking)."""
        self.node_map, n = dict(saved[0]), saved[1]
        del self.bindings[n:]

    def __getitem__(self, p: Pattern):
        v = self.node_map[p]
        return self.rw.lookup(v) if self.rw is not None else v

    def attrs(self, p: Pattern) -> dict:
        """Attributes of the binding ``p`` matched."""
        return dict(self.producer(self.node_map[p]).call.attrs)

    def emit(self, op: str, args: Sequence[Value], attrs: dict | None = None):
        """Add a binding to the rewritten function (types inferred); returns its value."""
        return self.rw.emit(op, args, attrs)


def match(pattern: Pattern, value: Value, func: Function) -> Match | None:
    """Match ``pattern`` at ``value`` of ``func``; the ``Match`` or ``None``."""
    m = Match(func)
    m.root = value
    return m if pattern.match(value, m) else None


# rewriting ---------------------------------------------------------------------------------------

class PatternCallback:
    """Subclass with ``self.pattern`` set and ``callback(match) -> value | None``."""

    pattern: Pattern

    def callback(self, match: Match):  # pragma: no cover
        """Rewrite one match: return the replacement value of ``match.root`` (built with
        ``match.emit``), or ``None`` to leave it unchanged."""
        raise NotImplementedError


def rewrite_function(callbacks: Sequence[PatternCallback], func: Function,
                     max_iterations: int = 16) -> Function:
    """Apply ``callbacks`` to ``func`` until no callback rewrites anything."""
    from .passes.eliminate_dead_code import dce_function
    for _ in range(max_iterations):
        prod, use = producers(func), users(func)
        changed = False
        rw = Rewriter(func)

        def visit(b, args, rw_):
            nonlocal changed
            if len(b.outputs) != 1:
                return None
            for cb in callbacks:
                m = Match(func, prod, use, rw_)
                m.root = b.outputs[0]
                if not cb.pattern.match(b.outputs[0], m):
                    continue
                new = cb.callback(m)
                if new is None:
                    continue
                changed = True
                return [new]
            return None
        func = dce_function(rw.run(visit))
        if not changed:
            break
    return func


def rewrite(callbacks, mod: IRModule) -> IRModule:
    """``mod`` with ``callbacks`` (one ``PatternCallback`` or a list) applied to every function
    except fused (primitive) ones."""
    if isinstance(callbacks, PatternCallback):
        callbacks = [callbacks]
    out = IRModule(mod.functions)
    for n, f in mod.functions.items():
        if not f.attrs.get("primitive"):
            out[n] = rewrite_function(callbacks, f)
    return out


# partitioning ------------------------------------------------------------------------------------

def partition(pattern: Pattern, mod: IRModule, name: str,
              check: Callable[[Match], bool] | None = None) -> IRModule:
    """Move each match of ``pattern`` in ``main`` into a composite function (see module doc).

    A match is taken when its region's inner values are read only inside the region, it does
    not overlap an earlier match, and ``check(match)`` (when given) is true.
    """
    func = mod.main
    prod, use = producers(func), users(func)
    taken: set[int] = set()
    regions: dict[int, Match] = {}
    for b in func.bindings:
        if len(b.outputs) != 1:
            continue
        m = Match(func, prod, use)
        m.root = b.outputs[0]
        if not pattern.match(b.outputs[0], m):
            continue
        region = {id(x) for x in m.bindings}
        if region & taken or (check is not None and not check(m)):
            continue
        inner_ok = all(u is not None and id(u) in region
                       for x in m.bindings if x is not b
                       for o in x.outputs for u in use.get(id(o), []))
        if not inner_ok:
            continue
        taken |= region
        regions[id(b)] = m
    out = IRModule(mod.functions)
    k = 0
    rw = Rewriter(func)

    def visit(b, args, rw_):
        nonlocal k
        if id(b) in taken and id(b) not in regions:
            return []  # emitted inside its region's function
        m = regions.get(id(b))
        if m is None:
            return None
        fname = f"{name}_{k}"
        while fname in out.functions:
            k += 1
            fname = f"{name}_{k}"
        k += 1
        callee, call_args = _region_function(m, fname, name)
        out[fname] = callee
        return [rw_.emit_call(callee, [rw_.lookup(a) for a in call_args], b.outputs[0].name)]
    out["main"] = rw.run(visit)
    return out


def _region_function(m: Match, fname: str, composite: str) -> tuple[Function, list]:
    """The function computing a match's region, and the values to call it with."""
    order = [b for b in m.func.bindings if any(b is x for x in m.bindings)]
    return extract_function(order, fname, {"composite": composite})
