"""Imperative kernels: operators whose natural form is a loop program, not one expression per
output element (scatters, running sums, selections).

An operator's ``compute`` may return a ``PrimFunc`` built by ``imperative_kernel`` instead of te
tensors; lowering then uses it as the binding's kernel (``ember.graph.lower``). Such operators
must have the ``OPAQUE`` fusion pattern (they are never fused). The body is written with the
loop-IR statements of ``ember.tir`` through the small helpers here::

    def body(k):                        # k: KernelBuilder
        x, = k.inputs; y, = k.outputs
        return k.loop(y.shape, lambda *i: k.store(y, i, k.read(x, i) * 2))
    return imperative_kernel(inputs, out_types, body)
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

from .. import te
from ..errors import LoweringError
from ..tir.arith import substitute
from ..tir.expr import Expr, Load, Var, as_expr
from ..tir.stmt import Allocate, Buffer, For, IfThenElse, PrimFunc, Stmt, Store, seq
from ..te.tensor import ComputeOp, PlaceholderOp

_ids = itertools.count()


class KernelBuilder:
    """Buffers of an imperative kernel and helpers to write its body.

    Attributes:
        inputs: per operator input, a ``Buffer`` (a kernel parameter) or the te tensor of an
            immediate constant (read it with ``read``).
        outputs: one ``Buffer`` per output.
    """

    def __init__(self, inputs: Sequence[te.Tensor], out_types):
        self.inputs: list = []
        self.params: list[Buffer] = []
        for k, t in enumerate(inputs):
            if isinstance(t.op, PlaceholderOp):
                b = Buffer(f"in{k}", t.shape, t.dtype)
                self.inputs.append(b)
                self.params.append(b)
            elif isinstance(t.op, ComputeOp):
                self.inputs.append(t)  # an immediate constant: read() inlines its body
            else:
                raise LoweringError(f"imperative kernel input {k} is neither a placeholder nor "
                                    f"a constant")
        self.outputs = [Buffer(f"out{k}", t.shape, t.dtype) for k, t in enumerate(out_types)]

    @staticmethod
    def read(src, idx: Sequence) -> Expr:
        """``src[idx]`` for a Buffer, or the value of a constant te tensor."""
        idx = tuple(as_expr(i, "int64") for i in idx)
        if isinstance(src, Buffer):
            return Load(src, idx)
        op = src.op
        return substitute(op.body, {a.var: i for a, i in zip(op.axis, idx)})

    @staticmethod
    def store(buf: Buffer, idx: Sequence, value) -> Stmt:
        """``buf[idx] = value`` (cast to the buffer's dtype)."""
        return Store(buf, tuple(as_expr(i, "int64") for i in idx), te.cast(buf.dtype, value))

    @staticmethod
    def loop(extents: Sequence[int], body: Callable[..., Stmt], kind: str = "serial") -> Stmt:
        """A loop nest over ``extents``; ``body(*vars)`` gives the innermost statement."""
        vs = [Var(f"i{next(_ids)}") for _ in extents]
        s = body(*vs)
        for v, n in reversed(list(zip(vs, extents))):
            s = For(v, int(n), s, kind)
        return s

    @staticmethod
    def if_(cond: Expr, then: Stmt, else_: Stmt | None = None) -> Stmt:
        """``if cond: then else: else_``."""
        return IfThenElse(cond, then, else_)

    @staticmethod
    def local(shape: Sequence[int], dtype: str, body: Callable[[Buffer], Stmt],
              name: str = "tmp") -> Stmt:
        """A scratch buffer (a scalar when ``shape`` is ``()``) that lives during ``body``."""
        b = Buffer(f"{name}{next(_ids)}", tuple(shape), dtype,
                   scope="local" if not shape else "global")
        return Allocate(b, body(b))

    @staticmethod
    def seq(*stmts: Stmt) -> Stmt:
        """Statements in order."""
        return seq([s for s in stmts if s is not None])

    def copy(self, dst: Buffer, src) -> Stmt:
        """``dst[...] = src[...]`` elementwise (same shape)."""
        if not dst.shape:
            return self.store(dst, (), self.read(src, ()))
        return self.loop(dst.shape, lambda *i: self.store(dst, i, self.read(src, i)))


def imperative_kernel(inputs: Sequence[te.Tensor], out_types, body: Callable[[KernelBuilder], Stmt],
                      name: str = "kernel", checks: Sequence[te.IndexCheck] = ()) -> PrimFunc:
    """A ``PrimFunc`` whose parameters are the placeholder inputs then the outputs, and whose
    body is ``body(builder)``. ``checks``: ``te.IndexCheck`` s on index inputs; those that are
    kernel parameters are checked before the body runs (``attrs["index_checks"]``, as
    ``te.create_prim_func`` records them)."""
    k = KernelBuilder(inputs, out_types)
    stmt = body(k)
    attrs = {"num_inputs": len(k.params), "num_outputs": len(k.outputs)}

    def param_of(x):
        pos = next((j for j, t in enumerate(inputs) if t is x), None)
        buf = k.inputs[pos] if pos is not None else None
        return k.params.index(buf) if isinstance(buf, Buffer) else None
    recorded = te.index_check_attrs(checks, param_of)
    if recorded:
        attrs["index_checks"] = recorded
    return PrimFunc(name, k.params + k.outputs, stmt, attrs)
