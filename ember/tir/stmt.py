"""Statements, buffers and functions of the loop IR.

A ``PrimFunc`` is one kernel: its parameters are ``Buffer``s (dense row-major arrays) and its body
is a tree of loops (``For``), stores (``Store``), scoped allocations (``Allocate``) and
conditionals. Loops carry a ``kind`` that codegen honours: ``serial``, ``parallel`` (OpenMP
worksharing), ``vectorized`` (SIMD) or ``unrolled``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .expr import Expr, Var

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled")


class Buffer:
    """A dense row-major array ``name[shape]`` of ``dtype``.

    ``scope`` is ``"global"`` (a kernel argument or heap workspace) or ``"local"`` (a scalar or
    small array private to the enclosing loop iteration, e.g. a reduction accumulator).
    """

    _ids = itertools.count()

    def __init__(self, name: str, shape: Sequence[int], dtype: str, scope: str = "global"):
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.scope = scope
        self.uid = next(Buffer._ids)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape)) if self.shape else 1

    def __repr__(self):
        return f"Buffer({self.name}, {self.shape}, {self.dtype}, {self.scope})"


class Stmt:
    """Base class of loop-IR statements."""


@dataclass(eq=False)
class For(Stmt):
    """``for var in [0, extent): body`` with loop ``kind`` (see ``LOOP_KINDS``)."""

    var: Var
    extent: int
    body: Stmt
    kind: str = "serial"
    annotations: dict = field(default_factory=dict)


@dataclass(eq=False)
class Store(Stmt):
    """``buffer[indices] = value``."""

    buffer: Buffer
    indices: tuple
    value: Expr


@dataclass(eq=False)
class Seq(Stmt):
    """Statements run in order."""

    stmts: list


@dataclass(eq=False)
class Allocate(Stmt):
    """``buffer`` exists for the duration of ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(eq=False)
class IfThenElse(Stmt):
    """``if cond: then else: else_`` (``else_`` may be ``None``)."""

    cond: Expr
    then: Stmt
    else_: Stmt | None = None


@dataclass(eq=False)
class PrimFunc:
    """A kernel: ``params`` (inputs then outputs) and a loop-IR ``body``.

    ``attrs`` may hold ``"op"`` (the graph op it implements) and ``"flops"`` (FLOP count).
    """

    name: str
    params: list
    body: Stmt
    attrs: dict = field(default_factory=dict)


def seq(stmts: Sequence[Stmt]) -> Stmt:
    """A ``Seq`` of ``stmts``, flattened; a single statement is returned as is."""
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        elif s is not None:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(flat)
