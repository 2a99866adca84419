"""Readable text of loop IR (``func_text(func)``), for golden tests and debugging: one line
per loop, store, allocation, barrier and call, indented by nesting; variables and buffers are
named in order of appearance (``v0``, ``v1``..., buffers keep their names with a ``#k`` suffix
when two differ), so equal programs print equal text and a schedule change shows as a diff."""

from __future__ import annotations

from .expr import (AddressOf, BinOp, Call, Cast, Const, Expr, IterVar, Load, Reduce, Select,
                   Unary, Var)
from .stmt import (Allocate, Barrier, Block, For, IfThenElse, KernelCall, PrimFunc, Seq,
                   Stmt, Store)


class _Printer:
    def __init__(self, anonymous: bool = False):
        self.anonymous = anonymous  # buffers named b0, b1... in order of appearance
        self.vars: dict[int, str] = {}
        self.bufs: dict[int, str] = {}
        self.buf_names: dict[str, int] = {}
        self.keep: list = []
        self.lines: list[str] = []

    def var(self, v: Var) -> str:
        if id(v) not in self.vars:
            self.keep.append(v)
            self.vars[id(v)] = f"v{len(self.vars)}"
        return self.vars[id(v)]

    def buf(self, b) -> str:
        if id(b) not in self.bufs:
            self.keep.append(b)
            if self.anonymous:
                self.bufs[id(b)] = f"b{len(self.bufs)}"
                return self.bufs[id(b)]
            name = getattr(b, "name", "?")
            k = self.buf_names.get(name, 0)
            self.buf_names[name] = k + 1
            self.bufs[id(b)] = name if k == 0 else f"{name}#{k}"
        return self.bufs[id(b)]

    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return repr(e.value) if e.dtype in ("int64", "float32", "bool") else \
                f"{e.value!r}:{e.dtype}"
        if isinstance(e, IterVar):
            return self.var(e.var)
        if isinstance(e, Var):
            return self.var(e)
        if isinstance(e, (Load, AddressOf)):
            idx = ", ".join(self.expr(i) for i in e.indices)
            return f"{'&' if isinstance(e, AddressOf) else ''}{self.buf(e.src)}[{idx}]"
        if isinstance(e, BinOp):
            ops = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//",
                   "floormod": "%", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==",
                   "ne": "!=", "and": "&&", "or": "||"}
            if e.op in ops:
                return f"({self.expr(e.a)} {ops[e.op]} {self.expr(e.b)})"
            return f"{e.op}({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, Unary):
            return f"{e.op}({self.expr(e.a)})"
        if isinstance(e, Cast):
            return f"{e.dtype}({self.expr(e.value)})"
        if isinstance(e, Select):
            return f"select({self.expr(e.cond)}, {self.expr(e.t)}, {self.expr(e.f)})"
        if isinstance(e, Call):
            return f"{e.name}({', '.join(self.expr(a) for a in e.args)})"
        if isinstance(e, Reduce):
            return f"reduce_{e.combiner}({self.expr(e.source)})"
        return f"<{type(e).__name__}>"

    def stmt(self, s: Stmt, ind: int) -> None:
        pad = "  " * ind
        out = self.lines.append
        if isinstance(s, For):
            kind = s.kind if s.kind != "thread_binding" else s.annotations["thread_tag"]
            extra = "" if kind == "serial" else f" {kind}"
            out(f"{pad}for {self.var(s.var)} in {s.extent}{extra}:")
            self.stmt(s.body, ind + 1)
        elif isinstance(s, Store):
            idx = ", ".join(self.expr(i) for i in s.indices)
            out(f"{pad}{self.buf(s.buffer)}[{idx}] = {self.expr(s.value)}")
        elif isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, ind)
        elif isinstance(s, Allocate):
            b = s.buffer
            out(f"{pad}alloc {self.buf(b)}: {b.scope} {b.dtype}{list(b.shape)}")
            self.stmt(s.body, ind)
        elif isinstance(s, IfThenElse):
            out(f"{pad}if {self.expr(s.cond)}:")
            self.stmt(s.then, ind + 1)
            if s.else_ is not None:
                out(f"{pad}else:")
                self.stmt(s.else_, ind + 1)
        elif isinstance(s, Block):
            ivs = ", ".join(f"{self.var(iv.var)}={self.expr(b)}"
                            + ("r" if iv.kind == "reduce" else "")
                            for iv, b in zip(s.iter_vars, s.bindings))
            pred = f" where {self.expr(s.predicate)}" if s.predicate is not None else ""
            out(f"{pad}block {s.name}({ivs}){pred}:")
            if s.init is not None:
                out(f"{pad}  init:")
                self.stmt(s.init, ind + 2)
            self.stmt(s.body, ind + 1)
        elif isinstance(s, Barrier):
            out(f"{pad}barrier")
        elif isinstance(s, KernelCall):
            out(f"{pad}call {s.name}({', '.join(self.expr(a) for a in s.args)})")
        else:
            out(f"{pad}<{type(s).__name__}>")


def func_text(func: PrimFunc) -> str:
    """The loop-IR text of ``func``: a header line with the parameters (``name: dtype[shape]``)
    and the indented body (see the module doc)."""
    p = _Printer()
    params = ", ".join(f"{p.buf(b)}: {b.dtype}{list(b.shape)}" for b in func.params)
    p.lines.append(f"func {func.name}({params}):")
    p.stmt(func.body, 1)
    return "\n".join(p.lines) + "\n"


def _fused_name(op):
    """``@fused_nn_conv2d_add_3`` -> ``@fused_nn_conv2d_add``: fused functions are numbered
    by the graph, which says nothing about the program."""
    if isinstance(op, str) and op.startswith("@"):
        head, _, tail = op.rpartition("_")
        return head if tail.isdigit() else op
    return op


def structural_key(func: PrimFunc) -> str:
    """A string equal for two kernels exactly when they are the same program up to names: the
    loop-IR text with buffers named by order of appearance and without the function's name,
    followed by its ``attrs`` (what schedule rules read: ``op`` without a fused function's
    number, ``constant_params``...).
    ``driver.schedule_kernels`` schedules one kernel per key and shares the result."""
    p = _Printer(anonymous=True)
    params = ", ".join(f"{p.buf(b)}: {b.dtype}{list(b.shape)}" for b in func.params)
    p.lines.append(f"func({params}):")
    p.stmt(func.body, 1)
    attrs = sorted((k, repr(_fused_name(v) if k == "op" else v)) for k, v in func.attrs.items())
    return "\n".join(p.lines) + "\n" + repr(attrs)


__all__ = ["func_text", "structural_key"]
