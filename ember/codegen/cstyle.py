"""The C-style printer base every source printer of loop IR shares (C for the CPU, WGSL for
WebGPU, CUDA C next), with one ``Dialect`` table per language.

``CStylePrinter`` walks expressions and statements once: constants, variables, loads and
stores, infix operators, unary operators, selects, casts, loops, conditionals, sequences and
barriers are printed here through the dialect's table (operator spellings, the select and cast
forms, the loop header, type names, address-space qualifiers, the barrier, the GPU thread-index
names and the math-function names). A printer subclass overrides only what its language does
differently: the C printer outlines parallel loops and prints SIMD loops and micro-kernel
calls; the WGSL printer maps thread-bound loops to its builtins and module-scope workgroup
variables. Names are assigned in order of appearance (``_Namer``), so equal programs print
equal text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CodegenError, LoweringError
from ..tir.arith import flat_index, loop_range
from ..tir.expr import (AddressOf, BinOp, Call, Cast, Const, Expr, Load, Select, Unary, Var)
from ..tir.stmt import Allocate, Barrier, Buffer, For, IfThenElse, Seq, Stmt, Store

# IR binary ops printed as infix operators in every C-like language
INFIX_OPS = {"add": "+", "sub": "-", "mul": "*", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
             "eq": "==", "ne": "!=", "and": "&&", "or": "||", "bitand": "&", "bitor": "|",
             "bitxor": "^", "shl": "<<", "shr": ">>"}


@dataclass(frozen=True)
class Dialect:
    """What one C-like language spells differently.

    Attributes:
        name: ``"c"``, ``"wgsl"``, ``"cuda"``.
        kernel_prefix: text before a kernel's name (C ``int32_t``, WGSL ``fn``, CUDA
            ``extern "C" __global__ void``).
        types: IR dtype -> the language's type of a value in registers.
        address_spaces: buffer scope -> declaration qualifier (WGSL ``var<workgroup>``, CUDA
            ``__shared__``).
        barrier: the statement that synchronizes one block's threads.
        thread_index: GPU thread tag (``threadIdx.x``...) -> the language's expression of it.
        math: IR math intrinsic -> the language's function name (float32).
        infix: IR binary op -> infix operator.
        select: format of ``cond ? t : f`` with ``{c}``, ``{t}``, ``{f}``.
        cast: format of a conversion with ``{t}`` (type) and ``{v}`` (value).
        loop: format of a counting loop header with ``{v}`` (variable), ``{n}`` (extent),
            ``{t}`` (index type).
        index_dtype: the IR dtype loop variables and indices are printed in.
        thread_decl: format of the declaration of a thread-bound loop's variable from the
            built-in ``{src}`` (``{v}``: the variable).
    """

    name: str
    kernel_prefix: str
    types: dict
    address_spaces: dict = field(default_factory=dict)
    barrier: str = ""
    thread_index: dict = field(default_factory=dict)
    math: dict = field(default_factory=dict)
    infix: dict = field(default_factory=lambda: dict(INFIX_OPS))
    select: str = "({c} ? {t} : {f})"
    cast: str = "(({t})({v}))"
    loop: str = "for ({t} {v} = 0; {v} < {n}; ++{v}) {{"
    index_dtype: str = "int64"
    thread_decl: str = "const int64_t {v} = (int64_t){src};"


class _Namer:
    """Names objects ``<prefix><k>`` in order of first appearance, per prefix."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.counts: dict[str, int] = {}

    def get(self, obj, prefix: str) -> str:
        key = id(obj)
        if key not in self.names:
            n = self.counts.get(prefix, 0)
            self.counts[prefix] = n + 1
            self.names[key] = f"{prefix}{n}"
        return self.names[key]


class CStylePrinter:
    """Shared walk of loop IR for C-like languages; subclasses set ``dialect`` and override the
    hooks ``literal``, ``binop_special``, ``call``, ``cast``, ``load``, ``store_value``,
    ``unary``, ``buf_name``, ``loop`` and ``stmt_special``."""

    dialect: Dialect

    def __init__(self):
        self.bounds: dict = {}  # ranges of the enclosing loop variables (index simplification)
        self.namer = _Namer()
        self.lines: list[str] = []
        self.keep: list = []  # keep objects alive so ids stay unique
        self.deps: dict[str, str] = {}  # support code (helpers, micro-kernels) by name

    # names ------------------------------------------------------------------------------------
    def type_name(self, dtype: str) -> str:
        """The dialect's type of ``dtype``.

        Raises:
            LoweringError: a dtype the dialect has no type for."""
        try:
            return self.dialect.types[dtype]
        except KeyError:
            raise LoweringError(f"dtype {dtype} has no {self.dialect.name} type") from None

    def extent_text(self, n) -> str:
        """The text of a loop extent or size: an int, or a symbolic expression (over the
        kernel's symbol arguments)."""
        return self.expr(n) if isinstance(n, Expr) else str(n)

    def var_name(self, v: Var) -> str:
        """The printed name of loop/index variable ``v`` (``i<k>``)."""
        self.keep.append(v)
        name = self.namer.get(v, "i")
        self._use(name)
        return name

    def _use(self, name: str) -> None:  # the C printer tracks names used by outlined bodies
        pass

    def buf_name(self, buf: Buffer) -> str:
        """The printed name of ``buf`` (``acc<n>`` for locals, ``ws<n>`` otherwise)."""
        self.keep.append(buf)
        prefix = "acc" if buf.scope == "local" else "ws"
        name = self.namer.get(buf, prefix)
        self._use(name)
        return name

    # expressions ------------------------------------------------------------------------------
    def expr(self, e: Expr) -> str:
        """The text of expression ``e`` in the dialect.

        Raises:
            LoweringError: an expression with no form in the dialect."""
        if isinstance(e, Const):
            return self.literal(e.value, e.dtype)
        if isinstance(e, Var):
            return self.var_name(e)
        if isinstance(e, Load):
            return self.load(e)
        if isinstance(e, AddressOf):
            return f"(&{self.access(e.src, e.indices)})"
        if isinstance(e, BinOp):
            return self.binop(e)
        if isinstance(e, Unary):
            return self.unary(e)
        if isinstance(e, Cast):
            return self.cast(e)
        if isinstance(e, Select):
            return self.dialect.select.format(c=self.expr(e.cond), t=self.expr(e.t),
                                              f=self.expr(e.f))
        if isinstance(e, Call):
            return self.call(e)
        raise LoweringError(f"cannot print expression {type(e).__name__} as "
                            f"{self.dialect.name}")

    def literal(self, value, dtype: str) -> str:  # pragma: no cover - every dialect overrides
        raise NotImplementedError

    def load(self, e: Load) -> str:
        """A load's text: the element access itself."""
        return self.access(e.src, e.indices)

    def unary(self, e: Unary) -> str:
        a = self.expr(e.a)
        return {"neg": f"(-{a})", "not": f"(!{a})", "bitnot": f"(~{a})"}[e.op]

    def cast(self, e: Cast) -> str:
        v = self.expr(e.value)
        if e.dtype == "bool":
            return f"({v} != 0)"
        return self.dialect.cast.format(t=self.type_name(e.dtype), v=v)

    def binop(self, e: BinOp) -> str:
        """Infix operators from the dialect's table; everything else goes to
        ``binop_special(e, a, b)``."""
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in self.dialect.infix and e.a.dtype != "bool":
            return f"({a} {self.dialect.infix[e.op]} {b})"
        return self.binop_special(e, a, b)

    def binop_special(self, e: BinOp, a: str, b: str) -> str:  # pragma: no cover
        raise LoweringError(f"binary op {e.op} has no {self.dialect.name} form")

    def call(self, e: Call) -> str:
        """A math intrinsic through the dialect's ``math`` table."""
        fn = self.dialect.math.get(e.name)
        if fn is None:
            raise LoweringError(f"math intrinsic {e.name} has no {self.dialect.name} form")
        return f"{fn}({', '.join(self.expr(a) for a in e.args)})"

    def access(self, buf: Buffer, indices) -> str:
        """The lvalue of element ``indices`` of ``buf`` (flat index, simplified with the
        enclosing loop bounds; a scalar local is its bare name).

        Raises:
            LoweringError: ``buf`` is not a lowered ``Buffer`` or ``indices`` does not match its
                rank."""
        if not isinstance(buf, Buffer):
            raise LoweringError(f"load from {buf!r} that was not lowered to a buffer")
        name = self.buf_name(buf)
        if buf.scope == "local" and not buf.shape:
            return name
        if len(indices) != len(buf.shape):
            raise LoweringError(f"buffer {buf.name} of rank {len(buf.shape)} accessed with "
                                f"{len(indices)} indices")
        return f"{name}[{self.expr(flat_index(buf, indices, self.bounds))}]"

    # statements -------------------------------------------------------------------------------
    def store_value(self, s: Store, value: str) -> str:
        """The stored text of ``value`` (narrow encodings in C, bool widening in WGSL)."""
        return value

    def stmt(self, s: Stmt, ind: int) -> None:
        """Append the lines of ``s`` at indentation ``ind`` (2 spaces each); statements the
        base does not know go to ``stmt_special``."""
        pad = "  " * ind
        if isinstance(s, For):
            self.loop(s, ind)
        elif isinstance(s, Store):
            v = self.store_value(s, self.expr(s.value))
            self.lines.append(f"{pad}{self.access(s.buffer, s.indices)} = {v};")
        elif isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, ind)
        elif isinstance(s, IfThenElse):
            self.lines.append(f"{pad}if ({self.expr(s.cond)}) {{")
            self.stmt(s.then, ind + 1)
            if s.else_ is not None:
                self.lines.append(f"{pad}}} else {{")
                self.stmt(s.else_, ind + 1)
            self.lines.append(f"{pad}}}")
        elif isinstance(s, Barrier):
            if not self.dialect.barrier:
                raise LoweringError(f"{self.dialect.name} has no block barrier")
            self.lines.append(f"{pad}{self.dialect.barrier}")
        else:
            self.stmt_special(s, ind)

    def serial_loop(self, s: For, ind: int) -> None:
        """A counting loop with the dialect's header; the body sees the variable's range."""
        pad = "  " * ind
        v = self.var_name(s.var)
        self.lines.append(pad + self.dialect.loop.format(
            v=v, n=self.extent_text(s.extent),
            t=self.type_name(self.dialect.index_dtype)))
        self.bounds[s.var] = loop_range(s.extent, self.bounds)
        self.stmt(s.body, ind + 1)
        del self.bounds[s.var]
        self.lines.append(f"{pad}}}")

    def loop(self, s: For, ind: int) -> None:
        self.serial_loop(s, ind)

    def launch_extent(self, tag: str) -> int:
        """Blocks (``blockIdx.*``) or threads (``threadIdx.*``) of the printed kernel's launch
        (``self.kernel``, a ``DeviceKernel``) along ``tag``'s dimension."""
        d = "xyz".index(tag[-1])
        return (self.kernel.grid if tag.startswith("blockIdx") else self.kernel.block)[d]

    def thread_loop(self, s: For, ind: int, src: str, launch: int) -> None:
        """A GPU thread-bound loop: its variable declared from the built-in ``src`` (the
        dialect's ``thread_decl``), the body masked with ``if (v < extent)`` where the loop is
        shorter than the ``launch`` extent of its dimension."""
        pad = "  " * ind
        v = self.var_name(s.var)
        self.lines.append(f"{pad}{{")
        self.lines.append(f"{pad}  " + self.dialect.thread_decl.format(v=v, src=src))
        self.bounds[s.var] = loop_range(s.extent, self.bounds)
        if s.extent < launch:
            self.lines.append(f"{pad}  if ({v} < {s.extent}) {{")
            self.stmt(s.body, ind + 2)
            self.lines.append(f"{pad}  }}")
        else:
            self.stmt(s.body, ind + 1)
        del self.bounds[s.var]
        self.lines.append(f"{pad}}}")

    def kernel_allocate(self, s: Allocate, ind: int) -> None:
        """A GPU kernel's own buffer (``shared``, or ``local`` scalar/array) declared by the
        dialect's ``shared_decl`` / ``local_scalar_decl`` / ``local_array_decl``, then its body.

        Raises:
            CodegenError: a ``global`` allocation inside a kernel (the host/device split hoists
            those, so this names a bug in a pass)."""
        b = s.buffer
        name, t, pad = self.buf_name(b), self.type_name(b.dtype), "  " * ind
        if b.scope == "shared":
            self.shared_decl(b, name, t, pad)
        elif b.scope == "local":
            self.lines.append(pad + (self.local_array_decl(b, name, t) if b.shape else
                                     self.local_scalar_decl(b, name, t)))
        else:  # pragma: no cover - split_host_device hoists global allocations
            raise CodegenError(f"{self.where}: global allocation {b.name} inside a kernel")
        self.stmt(s.body, ind)

    def stmt_special(self, s: Stmt, ind: int) -> None:  # pragma: no cover
        raise LoweringError(f"cannot print statement {type(s).__name__} as {self.dialect.name}")


__all__ = ["CStylePrinter", "Dialect", "INFIX_OPS"]
