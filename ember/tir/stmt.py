"""Statements, buffers and functions of the loop IR.

A ``PrimFunc`` is one kernel: its parameters are ``Buffer``s (dense row-major arrays) and its body
is a tree of loops (``For``), stores (``Store``), scoped allocations (``Allocate``) and
conditionals. Loops carry a ``kind`` that codegen honours: ``serial``, ``parallel`` (OpenMP
worksharing), ``vectorized`` (SIMD), ``unrolled`` or ``thread_binding`` (a GPU loop whose
iterations are the blocks or threads of a launch: ``annotations["thread_tag"]`` is one of
``THREAD_TAGS``, set by ``Schedule.bind``). ``Barrier`` synchronizes the threads of one GPU
block (workgroup).

A ``Block`` is a named unit of computation (one stage of a tensor expression): its body is written
over its own iteration variables (spatial or reduce ``IterVar``s), which ``bindings`` map to the
enclosing loop variables. Schedule primitives (``ember.tir.schedule``) rewrite the loops around
blocks and the bindings, never a block's body, so what a block computes stays checkable. A
reduction block has an ``init`` statement, run when all its reduce iteration variables are 0.
``ember.tir.transform.lower_blocks`` removes blocks before code generation.

``KernelCall`` calls a native micro-kernel (see ``ember.codegen.microkernel``) with pointer
(``AddressOf``) and integer arguments; ``tensorize`` produces it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .expr import Expr, IterVar, Var, as_extent, is_static_extent

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")
THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z")
BUFFER_SCOPES = ("global", "shared", "local")


class Buffer:
    """A dense row-major array ``name[shape]`` of ``dtype``.

    ``scope`` is ``"global"`` (a kernel argument or heap workspace), ``"shared"`` (GPU: one
    copy per block, seen by all its threads: WGSL ``var<workgroup>``, CUDA ``__shared__``) or
    ``"local"`` (a scalar or small array private to the enclosing loop iteration, e.g. a
    reduction accumulator; on a GPU, private to one thread).
    ``strides`` (elements per dimension, set by ``storage_align``) override row-major order.
    ``origin`` (one index expression per dimension, set when ``compute_at`` shrinks a buffer to
    the region one loop iteration uses) is subtracted from every index: accesses keep the
    coordinates of the full tensor.
    """

    _ids = itertools.count()

    def __init__(self, name: str, shape: Sequence[int], dtype: str, scope: str = "global",
                 strides: Sequence[int] | None = None, origin: Sequence | None = None):
        self.name = name
        self.shape = tuple(as_extent(s) for s in shape)  # ints, or symbolic int64 expressions
        self.dtype = dtype
        self.scope = scope
        self.strides = tuple(as_extent(s) for s in strides) if strides is not None else None
        self.origin = tuple(origin) if origin is not None else None
        self.uid = next(Buffer._ids)

    def elem_strides(self) -> tuple:
        """Element stride of each dimension (row-major unless ``strides`` was set by
        ``storage_align``)."""
        if self.strides is not None:
            return self.strides
        out, acc = [], 1
        for n in reversed(self.shape):
            out.append(acc)
            acc *= n
        return tuple(reversed(out))

    @property
    def alloc_size(self) -> int:
        """Elements to allocate (covers padding added by ``strides``)."""
        if not self.shape:
            return 1
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.elem_strides()))

    @property
    def size(self) -> int:
        """Number of elements (an expression when the shape is symbolic)."""
        if any(not is_static_extent(d) for d in self.shape):
            out = 1
            for d in self.shape:
                out = out * d
            return out
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
class Block(Stmt):
    """A named computation over its own iteration variables.

    Attributes:
        name: unique within the PrimFunc (schedule primitives address blocks by name).
        iter_vars: ``IterVar``s (``kind`` ``"spatial"`` or ``"reduce"``) the body is written in.
        bindings: one expression per iter var, over the enclosing loop variables.
        body: the statement(s) run at each point (``Store``s, or a ``KernelCall``).
        init: for reductions, run before the first update (all reduce iter vars equal 0).
        predicate: when set, the body runs only where it holds (non-divisible splits).
    """

    name: str
    iter_vars: list
    bindings: list
    body: Stmt
    init: Stmt | None = None
    predicate: Expr | None = None
    annotations: dict = field(default_factory=dict)


@dataclass(eq=False)
class Barrier(Stmt):
    """GPU: every thread of the block waits here until all have arrived, and their writes to
    ``shared`` buffers before it are visible to all after it (WGSL ``workgroupBarrier()``,
    CUDA ``__syncthreads()``). It must not sit under control flow that differs between the
    threads of a block (``ember.tir.gpu.verify_gpu_kernel`` checks)."""


@dataclass(eq=False)
class KernelCall(Stmt):
    """A call of native micro-kernel ``name`` with ``args`` (``AddressOf`` pointers and integer
    expressions). ``key`` identifies the micro-kernel in the codegen registry
    (``ember.codegen.microkernel``), which emits its C definition once per module; ``reads`` and
    ``writes`` list the buffers it touches."""

    name: str
    args: list
    key: tuple = ()
    reads: list = field(default_factory=list)
    writes: list = field(default_factory=list)


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
