"""Rebuild a graph function binding by binding: the machinery graph passes are written with.

``Rewriter(func).run(visit)`` walks ``func``'s bindings in order. ``visit(binding, args, rw)``
gets the binding, its arguments with earlier replacements applied, and the rewriter; it returns

- ``None``: keep the binding (with the new arguments), or
- a sequence of values, one per output of the binding: uses of the outputs are replaced by them.
  Values may come from ``rw.emit(op, args, attrs)`` (new bindings, types inferred) or be
  existing values and constants.

Output names of the function are carried over by the driver, not by the variables, so a pass
may replace a function output freely.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .builder import infer_call
from .ir import Binding, Call, Constant, Function, Value, Var


class Rewriter:
    """Accumulates the rewritten bindings of one function (see the module doc)."""

    def __init__(self, func: Function):
        self.func = func
        self.map: dict[int, Value] = {}
        self.bindings: list[Binding] = []
        self._names = {p.name for p in func.params} | {o.name for b in func.bindings
                                                        for o in b.outputs}
        self._counter = 0
        self._prod: dict[int, Binding] = {}
        self._hint: str | None = None  # name of the binding being visited (for new values)

    def _append(self, b: Binding) -> None:
        self.bindings.append(b)
        for o in b.outputs:
            self._prod[id(o)] = b

    def producer(self, v: Value) -> Binding | None:
        """The binding of the rewritten function that defines ``v`` so far (``None`` for
        parameters, constants and values not emitted yet)."""
        return self._prod.get(id(v)) if isinstance(v, Var) else None

    def fresh_name(self, hint: str | None = None) -> str:
        """A variable name unused in the function."""
        if hint and hint not in self._names:
            name = hint
        else:
            base = hint or ""
            while True:
                name = f"{base}_{self._counter}" if base else f"r{self._counter}"
                self._counter += 1
                if name not in self._names:
                    break
        self._names.add(name)
        return name

    def lookup(self, v: Value) -> Value:
        """The current replacement of ``v`` (itself when none)."""
        return self.map.get(id(v), v) if isinstance(v, Var) else v

    def emit(self, op: str, args: Sequence[Value], attrs: dict | None = None,
             name: str | None = None):
        """Append ``op(args, attrs)`` with inferred types; returns its output ``Var`` (a tuple
        for several outputs), named after ``name`` or else the binding being visited (``conv1``
        gives ``conv1_0``). Raises ``ShapeMismatchError``/``UnsupportedOpError``."""
        attrs_n, types = infer_call(op, list(args), dict(attrs or {}), f"{op}: ")
        outs = tuple(Var(self.fresh_name(name or self._hint), t) for t in types)
        self._append(Binding(outs, Call(op, tuple(args), attrs_n)))
        return outs[0] if len(outs) == 1 else outs

    def emit_call(self, callee: Function, args: Sequence[Value], name: str | None = None):
        """Append a call of module function ``callee``; returns its output(s)."""
        outs = tuple(Var(self.fresh_name(name or self._hint), t) for t in callee.output_types)
        self._append(Binding(outs, Call("@" + callee.name, tuple(args), {})))
        return outs[0] if len(outs) == 1 else outs

    def emit_binding(self, binding: Binding) -> None:
        """Append an existing binding as it is."""
        self._append(binding)

    def remove(self, binding: Binding) -> None:
        """Take an already emitted binding out again (its producer is being replaced)."""
        self.bindings = [b for b in self.bindings if b is not binding]
        for o in binding.outputs:
            self._prod.pop(id(o), None)

    def replace(self, old: Var, new: Value) -> None:
        """Uses of ``old`` (later bindings, outputs) read ``new`` instead."""
        self.map[id(old)] = new

    def run(self, visit: Callable) -> Function:
        """The rewritten function (see the module doc)."""
        for b in self.func.bindings:
            args = tuple(self.lookup(a) for a in b.call.args)
            self._hint = b.outputs[0].name if b.outputs and not b.outputs[0].name.isdigit() \
                else None
            res = visit(b, args, self)
            if res is None:
                if any(x is not y for x, y in zip(args, b.call.args)):
                    b = Binding(b.outputs, Call(b.call.op, args, b.call.attrs))
                self._append(b)
            else:
                res = list(res) if isinstance(res, (list, tuple)) else [res]
                for o, r in zip(b.outputs, res):
                    if r is not o:
                        self.map[id(o)] = r
        return self.finish()

    def finish(self) -> Function:
        """The function of the accumulated bindings, outputs mapped."""
        f = self.func
        return Function(list(f.params), self.bindings, [self.lookup(o) for o in f.outputs],
                        f.name, dict(f.attrs))


def rewrite_function(func: Function, visit: Callable) -> Function:
    """``Rewriter(func).run(visit)``."""
    return Rewriter(func).run(visit)


def users(func: Function) -> dict[int, list]:
    """``id(var) -> [binding, ...]`` that read it; a function output adds ``None``."""
    out: dict[int, list] = {}
    for b in func.bindings:
        for a in b.call.args:
            if isinstance(a, Var):
                out.setdefault(id(a), []).append(b)
    for o in func.outputs:
        if isinstance(o, Var):
            out.setdefault(id(o), []).append(None)
    return out


def producers(func: Function) -> dict[int, Binding]:
    """``id(var) -> binding`` that defines it."""
    return {id(o): b for b in func.bindings for o in b.outputs}


def const_value(v) -> "object | None":
    """The numpy value of a ``Constant`` (``None`` for other values)."""
    return v.data if isinstance(v, Constant) else None


def extract_function(bindings: Sequence[Binding], name: str, attrs: dict
                     ) -> tuple[Function, list]:
    """A function computing ``bindings`` (in order; the last one's value is the result): every
    value read from outside them becomes a parameter ``%p0, %p1, ...`` (one per distinct value;
    one-element constants stay inline as immediates).

    Returns:
        ``(function, call arguments)``: the outside values, in parameter order.
    """
    from .lower import is_immediate
    inside = {id(o) for b in bindings for o in b.outputs}
    params, call_args, pmap, body = [], [], {}, []
    for b in bindings:
        new_args = []
        for a in b.call.args:
            if (isinstance(a, Var) and id(a) in inside) or is_immediate(a):
                new_args.append(a)
                continue
            if id(a) not in pmap:
                p = Var(f"p{len(params)}", a.type)
                pmap[id(a)] = p
                params.append(p)
                call_args.append(a)
            new_args.append(pmap[id(a)])
        body.append(Binding(b.outputs, Call(b.call.op, tuple(new_args), b.call.attrs)))
    return Function(params, body, [bindings[-1].outputs[0]], name, dict(attrs)), call_args
