"""C source generation from loop IR.

``emit_c_function(func)`` prints one ``PrimFunc`` as a C99 function ``void name(T* restrict ...)``
over flat row-major buffers; ``C_PRELUDE`` holds the headers and the small inline helpers
(floor division, NaN-propagating min/max, ...) that the functions use. Loops marked ``parallel``
are outlined into a function that ``ember_parallel_for`` runs on the thread pool
(``ember.codegen.threadpool``), ``vectorized`` ones get ``#pragma omp simd``. Names of variables
and buffers are assigned in order of appearance, so equal PrimFuncs print equal text (which is
what the build cache and kernel de-duplication key on).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import LoweringError
from ..tir.expr import BinOp, Call, Cast, Const, Expr, Load, Var, is_float, is_int
from ..tir.stmt import Allocate, Buffer, For, IfThenElse, KernelCall, PrimFunc, Stmt, Store
from .threadpool import THREADPOOL_C, THREADPOOL_DECL
from ..dtypes import EXT_DTYPES, EXT_FLOAT, itemsize
from .dtype_support import compute_dtype, storage_ctype, support_source
from .cstyle import CStylePrinter, Dialect
from ..tir.arith import collect, loop_range
from ..tir.symbolic import DEFAULT_MAX

C_TYPES = {
    "float32": "float", "float64": "double", "float16": "_Float16",
    "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
    "bool": "bool",
}
C_TYPES.update({t: storage_ctype(t) for t in EXT_DTYPES})  # narrow types: stored bits

# Integer division and remainder never trap: x / 0 and x % 0 give 0 (NumPy's convention) and
# MIN / -1 wraps to MIN, where C leaves both undefined (a SIGFPE/SIGILL that kills the process).
# With a constant divisor the guards fold away.
_INT_HELPERS = "".join(
    f"static inline {t} ember_div_{n}({t} a, {t} b) {{ return b == 0 ? 0 : (b == -1 ? "
    f"({t})(({u})0 - ({u})a) : a / b); }}\n"
    f"static inline {t} ember_mod_{n}({t} a, {t} b) {{ return (b == 0 || b == -1) ? 0 : a % b; }}\n"
    f"static inline {t} ember_floordiv_{n}({t} a, {t} b) {{ if (b == 0) return 0; "
    f"if (b == -1) return ({t})(({u})0 - ({u})a); {t} q = a / b; "
    f"return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }}\n"
    f"static inline {t} ember_floormod_{n}({t} a, {t} b) {{ if (b == 0 || b == -1) return 0; "
    f"{t} r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }}\n"
    f"static inline {t} ember_max_{n}({t} a, {t} b) {{ return a > b ? a : b; }}\n"
    f"static inline {t} ember_min_{n}({t} a, {t} b) {{ return a < b ? a : b; }}\n"
    f"static inline {t} ember_abs_{n}({t} a) {{ return a < 0 ? -a : a; }}\n"
    f"static inline {t} ember_sign_{n}({t} a) {{ return (a > 0) - (a < 0); }}\n"
    f"static inline {t} ember_pow_{n}({t} a, {t} b) {{ {t} r = 1; if (b < 0) return a == 1 ? 1 "
    f": (a == -1 ? ((b & 1) ? -1 : 1) : 0); while (b) {{ if (b & 1) r *= a; a *= a; b >>= 1; }} "
    f"return r; }}\n"
    for n, t, u in [("int8", "int8_t", "uint8_t"), ("int16", "int16_t", "uint16_t"),
                    ("int32", "int32_t", "uint32_t"), ("int64", "int64_t", "uint64_t")])
_UINT_HELPERS = "".join(
    f"static inline {t} ember_div_{n}({t} a, {t} b) {{ return b == 0 ? 0 : a / b; }}\n"
    f"static inline {t} ember_mod_{n}({t} a, {t} b) {{ return b == 0 ? 0 : a % b; }}\n"
    f"static inline {t} ember_floordiv_{n}({t} a, {t} b) {{ return b == 0 ? 0 : a / b; }}\n"
    f"static inline {t} ember_floormod_{n}({t} a, {t} b) {{ return b == 0 ? 0 : a % b; }}\n"
    f"static inline {t} ember_max_{n}({t} a, {t} b) {{ return a > b ? a : b; }}\n"
    f"static inline {t} ember_min_{n}({t} a, {t} b) {{ return a < b ? a : b; }}\n"
    f"static inline {t} ember_abs_{n}({t} a) {{ return a; }}\n"
    f"static inline {t} ember_sign_{n}({t} a) {{ return a > 0; }}\n"
    f"static inline {t} ember_pow_{n}({t} a, {t} b) {{ {t} r = 1; while (b) {{ if (b & 1) r *= a; "
    f"a *= a; b >>= 1; }} return r; }}\n"
    for n, t in [("uint8", "uint8_t"), ("uint16", "uint16_t"), ("uint32", "uint32_t"),
                 ("uint64", "uint64_t"), ("bool", "bool")])
_FLOAT_HELPERS = "".join(
    f"static inline {t} ember_max_{n}({t} a, {t} b) {{ return (a > b || a != a) ? a : b; }}\n"
    f"static inline {t} ember_min_{n}({t} a, {t} b) {{ return (a < b || a != a) ? a : b; }}\n"
    f"static inline {t} ember_floordiv_{n}({t} a, {t} b) {{ return floor{s}(a / b); }}\n"
    f"static inline {t} ember_floormod_{n}({t} a, {t} b) {{ {t} r = fmod{s}(a, b); "
    f"return r != 0 ? (((r < 0) != (b < 0)) ? r + b : r) : copysign{s}(0, b); }}\n"
    f"static inline {t} ember_sign_{n}({t} a) {{ return a != a ? a : (a > 0) - (a < 0); }}\n"
    f"static inline {t} ember_sigmoid_{n}({t} a) {{ return a >= 0 ? 1 / (1 + exp{s}(-a)) "
    f": exp{s}(a) / (1 + exp{s}(a)); }}\n"
    for n, t, s in [("float32", "float", "f"), ("float64", "double", "")])

_PRELUDE_HELPERS = (
    "#include <math.h>\n#include <stdint.h>\n#include <stdbool.h>\n#include <stdlib.h>\n"
    "#include <string.h>\n#ifdef _OPENMP\n#include <omp.h>\n#endif\n"
    + _INT_HELPERS + _UINT_HELPERS + _FLOAT_HELPERS +
    "static inline void* ember_alloc(size_t n) { void* p = NULL; "
    "if (posix_memalign(&p, 64, n ? n : 64)) return NULL; return p; }\n"
)
C_PRELUDE = _PRELUDE_HELPERS + THREADPOOL_C
# the prelude of a library's further translation units: the pool is defined once, in the first
C_UNIT_PRELUDE = _PRELUDE_HELPERS + THREADPOOL_DECL

_FLOAT_FUNCS = {"exp", "log", "sqrt", "tanh", "erf", "sin", "cos", "tan", "asin", "acos", "atan",
                "sinh", "cosh", "asinh", "acosh", "atanh", "floor", "ceil", "trunc", "fmod",
                "pow", "atan2", "exp2", "log2", "fabs"}


def _safe_divisor(b: Expr) -> bool:
    """A constant integer divisor other than 0 and -1: plain C ``/`` and ``%`` cannot trap."""
    return isinstance(b, Const) and b.value not in (0, -1)


def c_type(dtype: str) -> str:
    """The C type that stores ``dtype``."""
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise LoweringError(f"dtype {dtype} has no C code generation yet") from None


def _compute_dtype(dtype: str) -> str:
    """float16 and the narrow types of ember.dtypes compute in float32 / 8-bit integers."""
    if dtype in EXT_DTYPES:
        return compute_dtype(dtype)
    return "float32" if dtype == "float16" else dtype


def _narrow_memory(buf) -> bool:
    """A narrow-typed buffer held as its stored bits (a scalar local of a narrow float type,
    such as a reduction accumulator, is a plain float instead)."""
    return isinstance(buf, Buffer) and buf.dtype in EXT_DTYPES and not (
        buf.scope == "local" and not buf.shape and buf.dtype in EXT_FLOAT)


def c_literal(value, dtype: str) -> str:
    """A C literal of ``dtype`` with the exact value (hex floats for floating point)."""
    if dtype == "bool":
        return "1" if value else "0"
    if dtype in EXT_DTYPES:
        dtype = compute_dtype(dtype)
    if is_int(dtype):
        v = int(value)
        if dtype == "int64":
            return "(-9223372036854775807LL - 1)" if v == -2**63 else f"{v}LL"
        if dtype == "uint64":
            return f"{v}ULL"
        if dtype == "uint32":
            return f"{v}U"
        return f"(({c_type(dtype)}){v})" if v < 0 or dtype != "int32" else str(v)
    v = float(value)
    ct = "float" if dtype in ("float32", "float16") else "double"
    if math.isnan(v):
        return f"(({ct})NAN)"
    if math.isinf(v):
        return f"(({ct})INFINITY)" if v > 0 else f"(-({ct})INFINITY)"
    if ct == "float":
        v = float(np.float32(v))
        return f"{v.hex()}f"
    return v.hex()


C_DIALECT = Dialect(name="c", kernel_prefix="int32_t", types=C_TYPES,
                    loop="for ({t} {v} = 0; {v} < {n}; ++{v}) {{", index_dtype="int64")


def _hoist_workspaces(s: Stmt, var: Var, out: list, ok) -> Stmt:
    """``s`` (the body of a parallel loop over ``var``) without its heap workspaces that are
    allocated outside any inner loop with a size free of ``var`` (``ok(buffer)`` also holds);
    their buffers are appended to ``out``, for the caller to allocate once per task."""
    from ..tir.stmt import Seq
    if isinstance(s, Allocate):
        size = s.buffer.alloc_size
        if s.buffer.scope != "local" and ok(s.buffer) and not (isinstance(size, Expr) and any(
                x is var for x in collect(size, lambda n: isinstance(n, Var)))):
            out.append(s.buffer)
            return _hoist_workspaces(s.body, var, out, ok)
        return Allocate(s.buffer, _hoist_workspaces(s.body, var, out, ok))
    if isinstance(s, Seq):
        return Seq([_hoist_workspaces(x, var, out, ok) for x in s.stmts])
    return s


def _conj(terms: list) -> Expr:
    out = terms[0]
    for t in terms[1:]:
        out = BinOp("and", out, t)
    return out


def _lane_guard_terms(cond: Expr, lane: Var) -> tuple:
    """``(fixed, moving, monotone)`` of a vectorized loop's guard ``cond`` (a conjunction):
    the terms free of the lane variable, those that move with it, and whether every moving
    one is a comparison ``e < b`` (``<=``, ``>``, ``>=``) affine in the lane on
    the left and free of it on the right (monotone in the lane: the first and last lanes
    decide it for all)."""
    from ..tir.arith import linear_terms
    terms, fixed, moving = [cond], [], []
    ok = True
    while terms:
        e = terms.pop()
        if isinstance(e, BinOp) and e.op == "and":
            terms += [e.b, e.a]
            continue
        used = any(x is lane for x in collect(e, lambda n: isinstance(n, Var)))
        if not used:
            fixed.append(e)
            continue
        moving.append(e)
        if not (isinstance(e, BinOp) and e.op in ("lt", "le", "gt", "ge")) or any(
                x is lane for x in collect(e.b, lambda n: isinstance(n, Var))):
            ok = False
            continue
        lt = linear_terms(e.a)
        if lt is None or any(atom is not lane and any(
                x is lane for x in collect(atom, lambda n: isinstance(n, Var)))
                for atom, _ in lt[0].values()):
            ok = False
    return fixed, moving, ok


class CFunctionPrinter(CStylePrinter):
    """Prints one PrimFunc as C (the ``CStylePrinter`` walk with the C dialect, plus parallel
    outlining, SIMD loops, narrow dtypes and micro-kernel calls). Use ``emit_c_function``."""

    dialect = C_DIALECT

    def __init__(self, func: PrimFunc, target=None):
        from ..target import Target
        from ..tir.pipeline import lower_for_target
        super().__init__()
        self.target = Target(target or "llvm")
        self.func = lower_for_target(func, self.target)
        self.scopes: list = []  # (used names, declared names) of the parallel bodies being printed
        self.decl: dict[str, str] = {}  # C type of each declared name
        self.outlined: list[str] = []  # outlined parallel-loop functions
        self.in_outlined = 0
        self.fname = "KERNEL"
        self._divmod: dict = {}  # id(parallel loop var) -> fused divisors (_fused_divisors)
        self._divmod_names: list = []

    # expressions (the walk is CStylePrinter's) ----------------------------------------------
    def literal(self, value, dtype: str) -> str:
        return c_literal(value, dtype)

    def load(self, e: Load) -> str:
        """A load; narrow dtypes decode their stored bits through ``ember.dtypes`` helpers."""
        if _narrow_memory(e.src):
            return self.narrow_load(e.src.dtype, self.access(e.src, e.indices))
        return self.access(e.src, e.indices)

    def cast(self, e: Cast) -> str:
        if e.dtype in EXT_DTYPES:
            return self.narrow_cast(e.dtype, self.expr(e.value), e.value.dtype)
        return super().cast(e)

    def type_name(self, dtype: str) -> str:
        return c_type(dtype)

    def binop(self, e: BinOp) -> str:
        """The C text of binary op ``e``: C operators where they agree with the IR's semantics
        (the dialect's infix table; bool ``+ - *`` are ``|| != &&``), else
        ``ember_<op>_<dtype>`` helpers (integer division, floor division/modulo, min/max, pow).

        Raises:
            LoweringError: an op with no C form."""
        if e.op in ("add", "sub", "mul") and _compute_dtype(e.a.dtype) == "bool":
            a, b = self.expr(e.a), self.expr(e.b)
            return f"({a} {({'add': '||', 'sub': '!=', 'mul': '&&'})[e.op]} {b})"
        if e.op in self.dialect.infix:
            a, b = self.expr(e.a), self.expr(e.b)
            return f"({a} {self.dialect.infix[e.op]} {b})"
        return self.binop_special(e, self.expr(e.a), self.expr(e.b))

    def _fused_divisors(self, s: For, body: Stmt) -> dict:
        """The symbolic divisors ``D`` of ``floordiv(v, D)`` / ``floormod(v, D)`` in the
        ``body`` of parallel loop ``s`` over ``v`` whose extent is a multiple of ``D`` (the
        loops ``fuse`` joined: ``batch x ceil(seq / 8)`` row blocks): ``{key: [q, r, D,
        used]}``, registered so that ``binop_special`` prints the names ``q``/``r`` of a
        quotient and remainder the task keeps incrementally (``parallel_for``) instead of a
        division per iteration (tens of cycles for a divisor that is not a constant)."""
        from ..tir.arith import stmt_exprs, walk_stmt
        from ..tir.symbolic import Symbol, _poly, dim_key
        out: dict = {}
        if isinstance(s.extent, int):
            return out
        v = s.var
        nodes = []
        for st in walk_stmt(body):
            for e in stmt_exprs(st) + ([st.extent] if isinstance(st, For) and isinstance(
                    st.extent, Expr) else []):
                nodes += collect(e, lambda n: isinstance(n, BinOp) and n.a is v
                                 and n.op in ("floordiv", "floormod")
                                 and not isinstance(n.b, Const))
        for n in nodes:
            if any(not isinstance(x, Symbol) for x in collect(n.b, lambda z: isinstance(z, Var))):
                continue
            try:
                key = dim_key(n.b)
                if key in out or _poly(s.extent).exact_div(_poly(n.b)) is None:
                    continue
            except Exception:  # noqa: BLE001 - not a dimension expression: left as it is
                continue
            k = len(self._divmod_names)
            self._divmod_names.append(key)
            out[key] = [f"q{k}_", f"r{k}_", n.b, False]
        if out:
            self._divmod[id(v)] = out
        return out

    def binop_special(self, e: BinOp, a: str, b: str) -> str:
        op = e.op
        divmod_ = getattr(self, "_divmod", None)  # printers of other dialects (CUDA) have none
        if op in ("floordiv", "floormod") and divmod_ and isinstance(e.a, Var) \
                and id(e.a) in divmod_ and not isinstance(e.b, Const):
            from ..tir.symbolic import dim_key
            try:
                hit = self._divmod[id(e.a)].get(dim_key(e.b))
            except Exception:  # noqa: BLE001
                hit = None
            if hit is not None:
                hit[3] = True
                return hit[0] if op == "floordiv" else hit[1]
        dt = _compute_dtype(e.a.dtype)
        if op == "div":
            if is_float(dt) or _safe_divisor(e.b):
                return f"({a} / {b})"
            return f"ember_div_{dt}({a}, {b})"
        if op == "mod":
            if is_float(dt):
                return f"fmod{'f' if dt == 'float32' else ''}({a}, {b})"
            if _safe_divisor(e.b):
                return f"({a} % {b})"
            return f"ember_mod_{dt}({a}, {b})"
        if op in ("floordiv", "floormod") and is_int(dt) and isinstance(e.b, Const) \
                and e.b.value > 0:
            from ..tir.arith import interval
            if interval(e.a, self.bounds)[0] >= 0:
                # non-negative dividend, positive divisor: C's / and % are floor division
                return f"({a} {'/' if op == 'floordiv' else '%'} {b})"
        if op in ("floordiv", "floormod", "min", "max"):
            return f"ember_{op}_{dt}({a}, {b})"
        if op == "pow":
            if is_float(dt):
                return f"pow{'f' if dt == 'float32' else ''}({a}, {b})"
            return f"ember_pow_{dt}({a}, {b})"
        raise LoweringError(f"binary op {op} has no C form")

    # narrow types (ember.dtypes) ------------------------------------------------------------
    def _support(self, dtype: str):
        key = f"dtype_{dtype}"
        if key not in self.deps:
            self.deps[key] = support_source(dtype)

    def narrow_load(self, dtype: str, bits: str) -> str:
        """C decoding the stored ``bits`` of narrow ``dtype`` (an ``EXT_DTYPES`` name) into its
        compute type (float for narrow floats, an 8-bit int for sub-byte ints)."""
        self._support(dtype)
        return f"ember_{'dec' if dtype in EXT_FLOAT else 'ld'}_{dtype}({bits})"

    def narrow_store(self, dtype: str, value: str) -> str:
        """C encoding compute value ``value`` into the stored bits of narrow ``dtype`` (round to
        nearest even; float8_e8m0fnu rounds to nearest)."""
        self._support(dtype)
        if dtype == "float8_e8m0fnu":  # nearest: exact for every decoded value (2^-127 too)
            return f"ember_enc_{dtype}({value}, 1, 2)"
        if dtype in EXT_FLOAT:
            return f"ember_enc_{dtype}({value}, 0)"
        return f"ember_st_{dtype}((int64_t)({value}))"

    def narrow_cast(self, dtype: str, value: str, src_dtype: str, sat: int = 1,
                    mode: int = 0) -> str:
        """C rounding ``value`` (of ``src_dtype``) to narrow ``dtype``, in its compute type (ONNX
        Cast semantics): narrow floats with saturation ``sat`` (0/1) and, for float8_e8m0fnu,
        rounding ``mode`` (0 up, 1 down, 2 nearest); floats to sub-byte ints truncate toward zero
        and wrap, ints wrap."""
        self._support(dtype)
        if dtype in EXT_FLOAT:
            return f"ember_cvt_{dtype}((float)({value}), {sat}, {mode})"
        if is_float(src_dtype):
            return f"ember_cvt_{dtype}((double)({value}))"
        return f"ember_wrap_{dtype}((int64_t)({value}))"

    def call(self, e: Call) -> str:
        """The C text of intrinsic call ``e`` (``cvt``, ``round_dtype``, ``reinterpret``,
        isnan/isinf, abs/sign/sigmoid helpers, or a libm function with an ``f`` suffix for
        float32).

        Raises:
            LoweringError: a math intrinsic with no C form."""
        if e.name == "cvt":  # cvt(x, saturate, round mode) to a narrow type
            sat, mode = e.args[1].value, e.args[2].value
            return self.narrow_cast(e.dtype, self.expr(e.args[0]), e.args[0].dtype, int(sat),
                                    int(mode))
        if e.name == "round_dtype":  # a value rounded to e.dtype, as storing it would
            v = self.expr(e.args[0])
            if e.dtype == "float16":
                return f"((float)(_Float16)({v}))"
            if e.dtype in EXT_FLOAT:
                return self.narrow_cast(e.dtype, v, e.args[0].dtype, 0)
            return f"(({c_type(e.dtype)})({v}))"
        if e.name == "reinterpret":  # the bits of the argument as e.dtype (same width)
            src, dst = e.args[0].dtype, e.dtype
            fn = f"ember_reinterpret_{src}_{dst}"
            if fn not in self.deps:
                self.deps[fn] = (f"static inline {c_type(dst)} {fn}({c_type(src)} v) {{ "
                                 f"{c_type(dst)} r; memcpy(&r, &v, sizeof r); return r; }}\n")
            return f"{fn}({self.expr(e.args[0])})"
        args = [self.expr(a) for a in e.args]
        dt = _compute_dtype(e.args[0].dtype)
        name = e.name
        if name in ("isnan", "isinf"):
            return f"({name}({args[0]}) != 0)"
        if name in ("abs", "sign") and not is_float(dt):
            return f"ember_{name}_{dt}({args[0]})"
        if name == "abs":
            name = "fabs"
        if name in ("sign", "sigmoid"):
            return f"ember_{name}_{dt}({', '.join(args)})"
        if name == "round":
            name = "nearbyint"
        elif name not in _FLOAT_FUNCS:
            raise LoweringError(f"math intrinsic {name} has no C form")
        suffix = "f" if dt == "float32" else ""
        return f"{name}{suffix}({', '.join(args)})"

    def _use(self, name: str) -> None:
        for scope in self.scopes:
            scope[0].add(name)

    def _declare(self, name: str, ctype: str) -> None:
        self.decl[name] = ctype
        for scope in self.scopes:
            scope[1].add(name)

    def parallel_for(self, s: For, pad: str) -> None:
        """A parallel loop as an outlined function run by ``ember_parallel_for`` (the thread
        pool of ``threadpool.py``); variables and buffers it uses from outside travel in a
        context struct."""
        k = len(self.outlined)
        fname = f"{self.fname}_par{k}"
        v = self.expr(s.var)
        saved = self.lines
        self.lines = []
        self.scopes.append((set(), set()))
        self._declare(v, "int64_t")
        self.bounds[s.var] = loop_range(s.extent, self.bounds)
        self.in_outlined += 1
        # workspaces allocated at the top of every iteration whose size does not depend on
        # the iteration (a compute_at row buffer of a symbolic row length): once per task
        hoisted = []
        inner = _hoist_workspaces(s.body, s.var, hoisted,
                                  lambda b: self.buf_name(b) not in self.decl)
        pre, post = [], []
        for b in hoisted:
            name = self.buf_name(b)
            ct = c_type(b.dtype)
            self._declare(name, f"{ct}* restrict")
            size = b.alloc_size
            nbytes = size * itemsize(b.dtype) if isinstance(size, int) else \
                f"(size_t)({self.extent_text(size)}) * {itemsize(b.dtype)}"
            pre += [f"  {ct}* restrict {name} = ({ct}*)ember_alloc({nbytes});",
                    f"  if (!{name}) abort();"]
            post.insert(0, f"  free({name});")
        fused = self._fused_divisors(s, inner)
        self.stmt(inner, 2)
        for q, r, d, use in fused.values():
            if use:  # quotient and remainder kept per task instead of divided per iteration
                dt = self.expr(d)
                self._declare(q, "int64_t")
                self._declare(r, "int64_t")
                pre += [f"  int64_t {q} = 0, {r} = 0;",
                        f"  if (lo_ < hi_) {{ {q} = lo_ / ({dt}); {r} = lo_ % ({dt}); }}"]
                self.lines.append(f"    if (++{r} == ({dt})) {{ {r} = 0; ++{q}; }}")
        self._divmod.pop(id(s.var), None)
        self.in_outlined -= 1
        del self.bounds[s.var]
        used, declared = self.scopes.pop()
        body = self.lines
        self.lines = saved
        captured = sorted(used - declared, key=lambda n: (n[0], int(n.lstrip("piwsac") or 0)))
        fields, params = [], []
        for n in captured:
            ct = self.decl.get(n)
            if ct is None or ct.endswith("[]"):
                raise LoweringError(f"parallel loop {v}: cannot pass {n} to the thread pool")
            fields.append(f"{ct.replace(' restrict', '')} {n};")
            params.append(f"{ct} {n}")
        ctx_t = f"struct {fname}_ctx"
        # the loop lives in an always-inlined function whose pointers are restrict
        # *parameters*: gcc ignores restrict on block-scope pointers copied from the context,
        # and without it cannot keep loads in registers across the loop's stores
        args = "".join(f", c_->{n}" for n in captured)
        text = [f"{ctx_t} {{ {' '.join(fields) if fields else 'char unused_;'} }};",
                f"static inline __attribute__((always_inline)) void {fname}_body("
                f"int64_t lo_, int64_t hi_{''.join(', ' + x for x in params)}) {{",
                *pre, f"  for (int64_t {v} = lo_; {v} < hi_; ++{v}) {{", *body, "  }", *post,
                "}",
                f"static void {fname}(int64_t lo_, int64_t hi_, void* ctx_) {{",
                f"  const {ctx_t}* c_ = (const {ctx_t}*)ctx_;",
                "  (void)c_;",
                f"  {fname}_body(lo_, hi_{args});", "}"]
        self.outlined.append("\n".join(text) + "\n")
        init = ", ".join(captured) if captured else "0"
        if isinstance(s.extent, int):
            n, chunk = str(s.extent), str(max(1, -(-s.extent // 32)))
        else:  # a symbolic extent: the same 32 chunks, computed at run time
            n = self.extent_text(s.extent)
            chunk = f"(({n}) + 31) / 32 > 0 ? (({n}) + 31) / 32 : 1"
        self.lines.append(f"{pad}{{ {ctx_t} c_ = {{{init}}}; "
                          f"ember_parallel_for({n}, {chunk}, {fname}, &c_); }}")

    # statements (the walk is CStylePrinter.stmt's) -------------------------------------------
    def store_value(self, s: Store, value: str) -> str:
        return self.narrow_store(s.buffer.dtype, value) if _narrow_memory(s.buffer) else value

    def loop(self, s: For, ind: int) -> None:
        """A C loop: parallel loops are outlined (``parallel_for``), vectorized loops and scalar
        reductions go through ``ember.codegen.vector`` when they fit.

        Raises:
            LoweringError: a GPU thread-bound loop, or a parallel loop capturing an array."""
        pad = "  " * ind
        if True:
            if s.kind == "thread_binding":
                raise LoweringError(f"loop {s.var.name} is bound to "
                                    f"{s.annotations.get('thread_tag')}: a GPU kernel cannot be "
                                    f"printed as C for the CPU")
            if s.kind == "parallel" and not self.in_outlined:
                self.parallel_for(s, pad)
                return
            if s.kind == "vectorized" and isinstance(s.body, IfThenElse) \
                    and s.body.else_ is None:
                fixed, moving, monotone = _lane_guard_terms(s.body.cond, s.var)
                if fixed:
                    # a guard that does not move with the lanes (a GEMM epilogue's row tail on
                    # a symbolic row count): test it once, vectorize the loop inside
                    self.lines.append(f"{pad}if ({self.expr(_conj(fixed))}) {{")
                    body = s.body.then if not moving else IfThenElse(_conj(moving), s.body.then)
                    self.loop(For(s.var, s.extent, body, s.kind, dict(s.annotations)), ind + 1)
                    self.lines.append(f"{pad}}}")
                    return
                if moving and monotone and isinstance(s.extent, int) and s.extent > 1:
                    # a guard monotone in the lane (a column tail on a symbolic column count):
                    # when the first and last lanes pass, all do: the whole loop as vector code
                    from ..tir.arith import substitute
                    ends = [substitute(_conj(moving), {s.var: Const(x, "int64")})
                            for x in (0, s.extent - 1)]
                    self.lines.append(f"{pad}if ({self.expr(BinOp('and', *ends))}) {{")
                    self.loop(For(s.var, s.extent, s.body.then, s.kind, dict(s.annotations)),
                              ind + 1)
                    self.lines.append(f"{pad}}} else {{")
                    self._declare(self.expr(s.var), "int64_t")
                    self.lines.append(f"{pad}  #pragma omp simd")  # as without the split
                    self.serial_loop(For(s.var, s.extent, s.body, "serial",
                                         dict(s.annotations)), ind + 1)
                    self.lines.append(f"{pad}}}")
                    return
            v = self.expr(s.var)
            self._declare(v, "int64_t")
            if s.kind == "vectorized":
                from .vector import VectorLoop
                self.bounds[s.var] = loop_range(s.extent, self.bounds)
                done = VectorLoop(self, s, self.target.vector_lanes).emit(pad)
                del self.bounds[s.var]
                if done:
                    return
                self.lines.append(f"{pad}#pragma omp simd")
            elif s.kind == "serial" and isinstance(s.body, Store) and not s.body.indices:
                from .vector import VectorReduction
                self.bounds[s.var] = loop_range(s.extent, self.bounds)
                done = VectorReduction(self, s, self.target.vector_lanes).emit(pad)
                del self.bounds[s.var]
                if done:
                    return
            if s.kind == "unrolled" and isinstance(s.extent, int):
                self.lines.append(f"{pad}#pragma GCC unroll {min(s.extent, 64)}")
            self.serial_loop(s, ind)

    def stmt_special(self, s: Stmt, ind: int) -> None:
        """Allocations (global ones through ``ember_alloc``, bytes; the kernel returns -1 when
        it fails) and micro-kernel calls.

        Raises:
            LoweringError: a statement with no C form."""
        pad = "  " * ind
        if isinstance(s, Allocate) and self.buf_name(s.buffer) in self.decl:
            # a second declaration of the same buffer in this function: a loop body that loop
            # partitioning or unrolled-loop expansion copied (one part per range of a
            # concatenation's or pad's inputs, emitted without its loop when the range is one
            # iteration). Each copy gets its own C block, so the copies cannot clash
            # ("redeclaration of acc0") whatever statement copied them
            self.lines.append(f"{pad}{{")
            self.decl.pop(self.buf_name(s.buffer))
            self.stmt_special(s, ind + 1)
            self.lines.append(f"{pad}}}")
        elif isinstance(s, Allocate):
            b = s.buffer
            name = self.buf_name(b)
            # scalar locals of narrow floats (reduction accumulators) are plain floats: sums
            # accumulate in float32 and round once, as numpy's float16 reductions do
            ct = "float" if (b.scope == "local" and not b.shape and
                             (b.dtype == "float16" or b.dtype in EXT_FLOAT)) else c_type(b.dtype)
            if b.scope == "local" and not b.shape:
                self._declare(name, ct + "[]")
                self.lines.append(f"{pad}{ct} {name};")
                self.stmt(s.body, ind)
            elif b.scope == "local":
                self._declare(name, f"{ct}* restrict")
                self.lines.append(f"{pad}{ct} {name}[{b.alloc_size}] __attribute__((aligned(64)));")
                self.stmt(s.body, ind)
            else:
                self._declare(name, f"{ct}* restrict")
                size = b.alloc_size
                nbytes = size * itemsize(b.dtype) if isinstance(size, int) else \
                    f"(size_t)({self.extent_text(size)}) * {itemsize(b.dtype)}"
                self.lines.append(f"{pad}{ct}* restrict {name} = ({ct}*)ember_alloc("
                                  f"{nbytes});")
                fail = "abort();" if self.in_outlined else "return -1;"
                self.lines.append(f"{pad}if (!{name}) {fail}")
                self.stmt(s.body, ind)
                self.lines.append(f"{pad}free({name});")
        elif isinstance(s, KernelCall):
            from .microkernel import microkernel_source
            if s.name not in self.deps:
                self.deps[s.name] = microkernel_source(s.name, s.key)
            self.lines.append(f"{pad}{s.name}({', '.join(self.expr(a) for a in s.args)});")
        else:
            raise LoweringError(f"cannot print statement {type(s).__name__} as C")

    def function(self, name: str) -> str:
        """The C definition ``int32_t name(p0, ..., pN)`` of the function (inputs ``const``, every
        pointer ``restrict``), preceded by its outlined parallel-loop functions; it returns 0, or a
        negative status (``STATUS_INDEX_OUT_OF_RANGE``, -1 on a failed allocation).

        Raises:
            LoweringError: part of the body has no C form."""
        f = self.func
        n_in = f.attrs.get("num_inputs", len(f.params) - 1)
        params = []
        for k, b in enumerate(f.params):
            self.keep.append(b)
            self.namer.names[id(b)] = f"p{k}"
            const = "const " if k < n_in else ""
            params.append(f"{const}{c_type(b.dtype)}* restrict p{k}")
            self.decl[f"p{k}"] = f"{const}{c_type(b.dtype)}* restrict"
        for k, s in enumerate(kernel_symbols(f)):  # symbolic dimensions: int64 arguments
            self.keep.append(s)
            self.namer.names[id(s)] = f"s{k}"
            params.append(f"const int64_t s{k}")
            self.decl[f"s{k}"] = "int64_t"
            self.bounds[s] = (0, DEFAULT_MAX)
        self.fname = name
        self.lines += index_check_lines(f)
        self.stmt(f.body, 1)
        sig = f"int32_t {name}({', '.join(params)})"
        return "".join(self.outlined) + sig + " {\n" + "\n".join(self.lines) + \
            "\n  return 0;\n}\n"


STATUS_INDEX_OUT_OF_RANGE = -2  # a kernel's return value when an index check fails


def index_check_lines(func: PrimFunc) -> list[str]:
    """C lines that check ``func.attrs["index_checks"]`` before the body runs: every element of
    each checked index parameter must lie in its inclusive bounds, else the kernel returns
    ``STATUS_INDEX_OUT_OF_RANGE`` without writing anything."""
    out = []
    for chk in func.attrs.get("index_checks", ()):
        buf = func.params[chk["param"]]
        n = buf.size
        if isinstance(n, int) and n == 0:
            continue
        if not isinstance(n, int):  # symbolic: printed over the symbol arguments (s<k>)
            names = {id(s): f"s{k}" for k, s in enumerate(kernel_symbols(func))}
            n = f"({_plain_c(n, names)})"
        b = chk["bounds"]
        p = f"p{chk['param']}"
        if len(b) == 1:
            lo, hi = b[0]
            cond = f"v < {lo}LL || v > {hi}LL"
            pre = ""
        else:
            pre = (f"static const int64_t lo[{len(b)}] = {{{', '.join(f'{x}LL' for x, _ in b)}}}, "
                   f"hi[{len(b)}] = {{{', '.join(f'{y}LL' for _, y in b)}}}; ")
            cond = f"v < lo[i % {len(b)}] || v > hi[i % {len(b)}]"
        lim = f"{n}LL" if isinstance(n, int) else n
        out.append(f"  {{ {pre}for (int64_t i = 0; i < {lim}; ++i) {{ int64_t v = (int64_t){p}[i]; "
                   f"if ({cond}) return {STATUS_INDEX_OUT_OF_RANGE}; }} }}  /* {chk['what']} */")
    return out


def kernel_symbols(func: PrimFunc) -> list:
    """The symbols of a kernel with symbolic dimensions, in argument order: after the buffer
    pointers, one ``const int64_t s<k>`` per name in ``func.attrs["symbols"]``."""
    from ..tir.symbolic import Symbol
    return [Symbol(n) for n in func.attrs.get("symbols", ())]


def _plain_c(e, names: dict) -> str:
    """C text of an integer dimension expression over named symbols (outside a printer)."""
    from ..tir.symbolic import dim_str
    if isinstance(e, Var):
        return names[id(e)]
    if isinstance(e, Const):
        return f"{int(e.value)}LL"
    if isinstance(e, BinOp) and e.op in ("add", "sub", "mul"):
        op = {"add": "+", "sub": "-", "mul": "*"}[e.op]
        return f"({_plain_c(e.a, names)} {op} {_plain_c(e.b, names)})"
    raise LoweringError(f"index check over a tensor of size {dim_str(e)}: only + - * of "
                        f"symbols are supported")


def _np_dtype(dtype: str) -> str:
    return "uint16" if dtype == "bfloat16" else dtype


def emit_c_function(func: PrimFunc, name: str | None = None, target=None,
                    with_deps: bool = False):
    """C source of ``func`` as ``int32_t name(const T* restrict p0, ..., T* restrict pN)``;
    returns 0, or -1 when a workspace allocation fails. With ``with_deps``, returns
    ``(source, {name: support source})`` (micro-kernels and helpers it calls)."""
    p = CFunctionPrinter(func, target)
    text = p.function(name or func.name)
    return (text, p.deps) if with_deps else text
