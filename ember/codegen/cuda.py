"""CUDA C code generation: one ``__global__`` kernel per device kernel of a GPU ``PrimFunc``.

``emit_cuda(func, target)`` lowers a scheduled GPU ``PrimFunc`` through the ``cuda`` TIR pass
list (``ember.tir.pipeline``), splits it into device kernels (``ember.tir.gpu``) and prints each
with ``CUDAPrinter``. CUDA C is C++ with a few qualifiers, so the printer is the C printer
(``CFunctionPrinter``: its literals, integer-division guards, NaN-propagating min/max, casts
and math names, all with C's semantics) on the ``cuda`` ``Dialect`` table of the shared
``CStylePrinter`` base, overriding only what differs on the device:

- a kernel is ``extern "C" __global__ void __launch_bounds__(threads) name(T* __restrict__
  p0, ...)`` over the ``PrimFunc``'s parameters and then its workspace buffers;
- loops bound to ``blockIdx.*`` / ``threadIdx.*`` become ``const int64_t i = threadIdx.x;``
  (guarded by ``if (i < extent)`` where the loop is shorter than the launch);
- ``shared`` buffers are ``__shared__`` arrays, ``Barrier`` is ``__syncthreads();``;
- the last steps of a shared-memory reduction tree (``Schedule.cross_thread_reduce``: strides
  16, 8, 4, 2, 1, each a ``threadIdx.x`` step and a barrier) become warp shuffles
  (``__shfl_down_sync`` in the first warp, combined in the tree's order, so the result is
  bit-identical) and one barrier, where the block is whole warps and the dtype shuffles;
- vectorized and unrolled loops are ``#pragma unroll`` loops (the GPU rules bind the spatial
  loops to threads, so a vectorized loop left in a thread is short);
- ``float16`` tensors are ``__half`` (``cuda_fp16.h``, from the ``nvidia-cuda-runtime`` wheel's
  headers) loaded with ``__half2float`` and stored with ``__float2half_rn``: arithmetic is in
  float32 as on the CPU; the C helpers (``ember_div_int32``...) become ``__device__`` functions.

Parallel loops (a CPU schedule), micro-kernel calls and the narrow formats of
``ember.dtypes`` raise ``CodegenError`` naming the kernel. Gathers' index checks are separate
check kernels (``emit_index_checks``) that set a status word the runtime reads after the run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ..dtypes import EXT_DTYPES, itemsize
from ..errors import CodegenError, LoweringError
from ..tir.expr import BinOp, Call, Const, Load, Var, binop
from ..tir.stmt import Allocate, Barrier, Buffer, For, IfThenElse, KernelCall, PrimFunc, Seq, Store
from .c import C_PRELUDE, C_TYPES, CFunctionPrinter
from .cstyle import Dialect

CUDA_TYPES = {k: v for k, v in C_TYPES.items() if k not in EXT_DTYPES}
CUDA_TYPES["float16"] = "__half"
CUDA_TYPES["bfloat16"] = "__nv_bfloat16"

#: the half-precision storage types: dtype -> (CUDA type, to float, from float (round to nearest
#: even), the header that declares them)
HALF_TYPES = {
    "float16": ("__half", "__half2float", "__float2half_rn", "cuda_fp16"),
    "bfloat16": ("__nv_bfloat16", "__bfloat162float", "__float2bfloat16_rn", "cuda_bf16"),
}
#: support code that is a header (``module_source`` puts them first)
HEADERS = {"cuda_fp16": "#include <cuda_fp16.h>\n", "cuda_bf16": "#include <cuda_bf16.h>\n",
           "mma": "#include <mma.h>\n"}

CUDA_DIALECT = Dialect(
    name="cuda", kernel_prefix='extern "C" __global__ void', types=CUDA_TYPES,
    address_spaces={"global": "", "shared": "__shared__", "local": ""},
    barrier="__syncthreads();",
    thread_index={f"{b}.{d}": f"{b}.{d}" for b in ("blockIdx", "threadIdx") for d in "xyz"},
    math={}, loop="for ({t} {v} = 0; {v} < {n}; ++{v}) {{", index_dtype="int64")

# CUDA's gridDim.y/z limit (gridDim.x: 2^31 - 1), CUDA programming guide, Compute Capabilities
MAX_GRID_YZ = 65535
MAX_GRID_X = 2**31 - 1


def _device_prelude() -> str:
    """The C printer's helpers as device functions, plus what NVRTC has no header for
    (fixed-width integer types, ``NAN``/``INFINITY``)."""
    start = C_PRELUDE.index("static inline int8_t ember_div_int8")
    end = C_PRELUDE.index("static inline void* ember_alloc")
    helpers = (C_PRELUDE[start:end].replace("static inline", "static __device__ __forceinline__")
               .replace("copysign(0, b)", "copysign(0.0, b)"))  # C++ overloads: no int 0
    return ("#ifndef EMBER_HAVE_STDINT\n"  # NVRTC has no <stdint.h>; a host build defines it
            "typedef signed char int8_t; typedef short int16_t; typedef int int32_t; "
            "typedef long long int64_t;\ntypedef unsigned char uint8_t; typedef unsigned short "
            "uint16_t; typedef unsigned int uint32_t; typedef unsigned long long uint64_t;\n"
            "#endif\n"
            "#define NAN __int_as_float(0x7fffffff)\n#define INFINITY __int_as_float(0x7f800000)\n"
            + helpers)


CUDA_PRELUDE = _device_prelude()


@dataclass
class CUDAKernel:
    """One printed device kernel.

    Attributes:
        name: its ``extern "C"`` symbol (``k_<hash of its text>``: equal kernels share it).
        source: its CUDA C definition (without the module prelude).
        args: what each parameter is, in order: ``("param", i)`` (the ``PrimFunc``'s i-th
            parameter), ``("workspace", j)``, ``("status", 0)`` (a check kernel's status word).
        grid: blocks per dimension ``(x, y, z)``.
        block: threads per dimension ``(x, y, z)``.
        shared_bytes: static shared memory it declares (bytes).
        deps: support code it needs by name (``"cuda_fp16"``: the header).
    """

    name: str
    source: str
    args: list
    grid: tuple
    block: tuple
    shared_bytes: int = 0
    deps: dict = field(default_factory=dict)


class CUDAPrinter(CFunctionPrinter):
    """Prints one ``DeviceKernel`` as a CUDA ``__global__`` function. Use ``emit_cuda``."""

    dialect = CUDA_DIALECT

    def __init__(self, lowered: PrimFunc, workspace: list, kernel, target):
        # the C printer's state without its lowering (``lowered`` already went through the
        # cuda pass list)
        from .cstyle import CStylePrinter
        CStylePrinter.__init__(self)
        self.target, self.func, self.workspace, self.kernel = target, lowered, workspace, kernel
        self.scopes, self.decl, self.outlined, self.in_outlined = [], {}, [], 0
        self.fname = "KERNEL"
        self.where = f"kernel {lowered.name} ({lowered.attrs.get('op', '?')}, device kernel " \
                     f"{kernel.index})"
        self.shared_bytes = 0

    def type_name(self, dtype: str) -> str:
        t = CUDA_TYPES.get(dtype)
        if t is None:
            raise CodegenError(f"{self.where}: dtype {dtype} has no CUDA form yet (supported: "
                               f"{', '.join(CUDA_TYPES)})")
        if dtype in HALF_TYPES:
            hdr = HALF_TYPES[dtype][3]
            self.deps[hdr] = HEADERS[hdr]
        return t

    def _check(self, dtype: str) -> None:
        self.type_name(dtype)

    # expressions ------------------------------------------------------------------------------
    def literal(self, value, dtype: str) -> str:
        self._check(dtype)
        return super().literal(value, dtype)

    def load(self, e: Load) -> str:
        text = self.access(e.src, e.indices)
        if e.src.dtype in HALF_TYPES and not self._float_local(e.src):
            self._check(e.src.dtype)
            return f"{HALF_TYPES[e.src.dtype][1]}({text})"
        return text

    def store_value(self, s: Store, value: str) -> str:
        if s.buffer.dtype in HALF_TYPES:
            if self._float_local(s.buffer):  # a float register holding the rounded value
                return self._round_half(s.buffer.dtype, value)
            self._check(s.buffer.dtype)
            return f"{HALF_TYPES[s.buffer.dtype][2]}({value})"
        return value

    @staticmethod
    def _float_local(b) -> bool:
        """A half-precision local scalar, kept as a ``float`` (``local_scalar_decl``)."""
        return b.scope == "local" and not b.shape

    def _round_half(self, dtype: str, value: str) -> str:
        self._check(dtype)
        _, to_f, from_f, _ = HALF_TYPES[dtype]
        return f"{to_f}({from_f}((float)({value})))"

    def cast(self, e):
        if e.dtype in HALF_TYPES:  # the value rounded to half, kept as float in registers
            return self._round_half(e.dtype, self.expr(e.value))
        self._check(e.dtype)
        return super().cast(e)

    def call(self, e):
        if e.name == "round_dtype" and e.dtype in HALF_TYPES:
            return self._round_half(e.dtype, self.expr(e.args[0]))
        if e.name == "reinterpret":
            src, dst = e.args[0].dtype, e.dtype
            fn = f"ember_reinterpret_{src}_{dst}"
            if fn not in self.deps:
                ts, td = self.type_name(src), self.type_name(dst)
                self.deps[fn] = (f"static __device__ __forceinline__ {td} {fn}({ts} v) {{ "
                                 f"{td} r; memcpy(&r, &v, sizeof r); return r; }}\n")
            return f"{fn}({self.expr(e.args[0])})"
        if e.name == "shfl_down":  # (value, delta): lane + delta's value in the warp
            return f"__shfl_down_sync(0xffffffffu, {self.expr(e.args[0])}, " \
                   f"{int(e.args[1].value)})"
        if e.name == "cvt":
            raise CodegenError(f"{self.where}: conversion to {e.dtype} has no CUDA form yet")
        return super().call(e)

    # statements -------------------------------------------------------------------------------
    def stmt(self, s, ind: int) -> None:
        if isinstance(s, Seq):
            s = Seq(warp_reductions(list(s.stmts), self.kernel.block,
                                    self.target.thread_warp_size))
        super().stmt(s, ind)

    def loop(self, s: For, ind: int) -> None:
        pad = "  " * ind
        if s.kind == "parallel":
            raise CodegenError(f"{self.where}: loop {s.var.name} is a CPU parallel loop; bind it "
                               f"to blockIdx/threadIdx for the GPU")
        if s.kind != "thread_binding":
            if s.kind in ("vectorized", "unrolled"):
                self.lines.append(f"{pad}#pragma unroll")
            self.serial_loop(s, ind)
            return
        tag = s.annotations["thread_tag"]
        self.thread_loop(s, ind, self.dialect.thread_index[tag], self.launch_extent(tag))

    def shared_decl(self, b, name: str, t: str, pad: str) -> None:
        # tensor-core tiles (``rules/cuda_tensorcore``, names ending in ``_tc``): wmma's loads
        # and stores need 256-bit aligned addresses
        align = "__align__(32) " if b.name.endswith("_tc") else ""
        self.lines.append(f"{pad}__shared__ {align}{t} {name}[{b.alloc_size}];")
        self.shared_bytes += b.alloc_size * itemsize(b.dtype)

    def local_scalar_decl(self, b, name: str, t: str) -> str:
        return f"{'float' if b.dtype in HALF_TYPES else t} {name};"

    def local_array_decl(self, b, name: str, t: str) -> str:
        return f"{t} {name}[{b.alloc_size}];"

    def stmt_special(self, s, ind: int) -> None:
        if isinstance(s, Allocate):
            self.kernel_allocate(s, ind)
            return
        if isinstance(s, KernelCall) and s.key and s.key[0] == "wmma":
            from .cuda_wmma import wmma_source  # a tensor-core tile (rules/cuda_tensorcore.py)
            if s.name not in self.deps:
                self.deps["mma"] = HEADERS["mma"]
                for dt in s.key[1:4]:
                    self.type_name(dt)
                self.deps[s.name] = wmma_source(s.name, s.key)
            pad = "  " * ind
            self.lines.append(f"{pad}{s.name}({', '.join(self.expr(a) for a in s.args)});")
            return
        if isinstance(s, KernelCall):
            raise CodegenError(f"{self.where}: micro-kernel call {s.name} has no CUDA form (the "
                               f"operator's kernel is built of CPU micro-kernels, or a CPU "
                               f"schedule was applied to a cuda kernel)")
        raise CodegenError(f"{self.where}: statement {type(s).__name__} has no CUDA form")

    def access(self, buf, indices) -> str:
        if buf.scope == "local" and not buf.shape and buf.dtype in HALF_TYPES:
            return self.buf_name(buf)  # a float accumulator (see local_scalar_decl)
        return super().access(buf, indices)

    def kernel_source(self) -> CUDAKernel:
        """The kernel's definition and launch.

        Raises:
            CodegenError: a grid beyond CUDA's limits or a construct with no CUDA form."""
        k = self.kernel
        for dim, lim in zip(k.grid, (MAX_GRID_X, MAX_GRID_YZ, MAX_GRID_YZ)):
            if dim > lim:
                raise CodegenError(f"{self.where}: grid {k.grid} is beyond CUDA's limits "
                                   f"({MAX_GRID_X}, {MAX_GRID_YZ}, {MAX_GRID_YZ}); bind the "
                                   f"longest axis to blockIdx.x")
        f = self.func
        n_in = f.attrs.get("num_inputs", len(f.params) - 1)
        params, args = [], []
        bufs = [(b, ("param", i), i < n_in) for i, b in enumerate(f.params)]
        bufs += [(b, ("workspace", j), False) for j, b in enumerate(self.workspace)]
        for n, (b, arg, const) in enumerate(bufs):
            self.keep.append(b)
            self.namer.names[id(b)] = f"p{n}"
            params.append(f"{'const ' if const else ''}{self.type_name(b.dtype)}* __restrict__ "
                          f"p{n}")
            args.append(arg)
        self.stmt(k.body, 1)
        threads = k.block[0] * k.block[1] * k.block[2]
        body = (f"({', '.join(params)}) {{\n" + "\n".join(self.lines) + "\n}\n")
        name = "k_" + hashlib.sha256(body.encode()).hexdigest()[:16]
        src = f"{CUDA_DIALECT.kernel_prefix} __launch_bounds__({threads}) {name}{body}"
        return CUDAKernel(name, src, args, tuple(k.grid), tuple(k.block), self.shared_bytes,
                          dict(self.deps))


SHUFFLE_DTYPES = {"float32", "float64", "int32", "int64", "uint32", "uint64"}


def _tree_step(s):
    """``(shared buffer, op, stride, loop)`` of one step of a reduction tree
    ``for t bound to threadIdx.x: if (t < stride) sh[t] = op(sh[t], sh[t + stride])``."""
    if not (isinstance(s, For) and s.kind == "thread_binding"
            and s.annotations.get("thread_tag") == "threadIdx.x"
            and isinstance(s.body, IfThenElse) and s.body.else_ is None):
        return None
    c, st = s.body.cond, s.body.then
    if not (isinstance(c, BinOp) and c.op == "lt" and c.a is s.var and isinstance(c.b, Const)
            and isinstance(st, Store) and isinstance(st.buffer, Buffer)
            and st.buffer.scope == "shared" and len(st.indices) == 1 and st.indices[0] is s.var
            and isinstance(st.value, BinOp)):
        return None
    v, stride = st.value, int(c.b.value)
    a, b = v.a, v.b
    ok = (isinstance(a, Load) and a.src is st.buffer and a.indices[0] is s.var
          and isinstance(b, Load) and b.src is st.buffer and isinstance(b.indices[0], BinOp)
          and b.indices[0].op == "add" and b.indices[0].a is s.var
          and isinstance(b.indices[0].b, Const) and int(b.indices[0].b.value) == stride)
    return (st.buffer, v.op, stride, s) if ok else None


def warp_reductions(stmts: list, block: tuple, warp: int) -> list:
    """``stmts`` with each run of reduction-tree steps of strides ``warp/2 .. 1`` (each
    followed by a ``Barrier``) replaced by one warp-shuffle reduction in the first warp that
    leaves the same value in ``sh[0]``, and one ``Barrier``. Applies when the block is
    ``threadIdx.x`` only, a multiple of ``warp`` threads, and the dtype shuffles."""
    if warp < 2 or block[1] != 1 or block[2] != 1 or block[0] % warp:
        return stmts
    out, i = [], 0
    want = [warp >> k for k in range(1, warp.bit_length()) if warp >> k]
    while i < len(stmts):
        steps = []
        j = i
        for stride in want:
            st = _tree_step(stmts[j]) if j < len(stmts) else None
            if st is None or st[2] != stride or j + 1 >= len(stmts) \
                    or not isinstance(stmts[j + 1], Barrier) \
                    or (steps and (st[0] is not steps[0][0] or st[1] != steps[0][1])):
                break
            steps.append(st)
            j += 2
        if len(steps) == len(want) and steps[0][0].dtype in SHUFFLE_DTYPES:
            sh, op, _, loop0 = steps[0]
            t = Var(f"{loop0.var.name}_w", "int64")
            v = Buffer(f"{sh.name}_lane", (), sh.dtype, scope="local")
            body = [Store(v, (), Load(sh, (t,)))]
            for stride in want:
                body.append(Store(v, (), binop(op, Load(v, ()), Call(
                    "shfl_down", [Load(v, ()), Const(stride, "int32")], sh.dtype))))
            body.append(IfThenElse(binop("eq", t, Const(0, "int64")),
                                   Store(sh, (Const(0, "int64"),), Load(v, ()))))
            first_warp = IfThenElse(binop("lt", t, Const(warp, "int64")),
                                    Allocate(v, Seq(body)))
            out += [For(t, loop0.extent, first_warp, "thread_binding",
                        dict(loop0.annotations)), Barrier()]
            i = j
        else:
            out.append(stmts[i])
            i += 1
    return out


def emit_index_checks(func: PrimFunc) -> list[CUDAKernel]:
    """One check kernel per ``func.attrs["index_checks"]`` entry: it reads every element of the
    checked index parameter and sets its status word (an ``int32``) to 1 when one lies outside
    its inclusive bounds; the runtime launches it before the kernel and raises ``InputError``
    after the run (the CPU kernel returns ``STATUS_INDEX_OUT_OF_RANGE`` instead)."""
    out = []
    for chk in func.attrs.get("index_checks", ()):
        buf = func.params[chk["param"]]
        n = buf.size
        if n == 0:
            continue
        t = CUDA_TYPES.get(buf.dtype)
        if t is None or buf.dtype.startswith("float"):
            raise CodegenError(f"kernel {func.name}: index input {buf.name} of dtype "
                               f"{buf.dtype} has no CUDA form")
        b = chk["bounds"]
        lo = ", ".join(f"{int(x)}LL" for x, _ in b)
        hi = ", ".join(f"{int(y)}LL" for _, y in b)
        body = (f"(const {t}* __restrict__ p0, int32_t* __restrict__ status) {{\n"
                f"  const long long lo[{len(b)}] = {{{lo}}}, hi[{len(b)}] = {{{hi}}};\n"
                f"  for (int64_t i = threadIdx.x; i < {n}LL; i += 256) {{\n"
                f"    int64_t v = (int64_t)p0[i]; int k = (int)(i % {len(b)});\n"
                f"    if (v < lo[k] || v > hi[k]) status[0] = 1;\n  }}\n}}\n")
        name = "check_" + hashlib.sha256(body.encode()).hexdigest()[:16]
        out.append(CUDAKernel(name, f'extern "C" __global__ void __launch_bounds__(256) '
                                    f'{name}{body}',
                              [("param", chk["param"]), ("status", 0)], (1, 1, 1), (256, 1, 1)))
    return out


def emit_cuda(func: PrimFunc, target) -> tuple[list, list[CUDAKernel]]:
    """``(workspace buffers, [CUDAKernel per device kernel])`` of scheduled GPU ``func``.

    Raises:
        ScheduleError: the kernel exceeds the target's limits (``verify_gpu_kernel``).
        CodegenError: a dtype or construct CUDA C cannot express here (names the kernel)."""
    from ..target import Target
    from ..tir.gpu import split_host_device
    from ..tir.pipeline import lower_for_target
    target = Target(target)
    lowered = lower_for_target(func, target)
    workspace, kernels = split_host_device(lowered)
    out = []
    for k in kernels:
        try:
            out.append(CUDAPrinter(lowered, workspace, k, target).kernel_source())
        except LoweringError as e:
            raise CodegenError(f"kernel {func.name} ({func.attrs.get('op', '?')}): {e}") from None
    return workspace, out


def module_source(kernels: list[CUDAKernel]) -> str:
    """One CUDA translation unit holding ``kernels`` (each distinct name once) after the
    prelude and the headers they need."""
    deps: dict[str, str] = {}
    seen: dict[str, str] = {}
    for k in kernels:
        deps.update(k.deps)
        seen.setdefault(k.name, k.source)
    head = "".join(deps.pop(h) for h in HEADERS if h in deps)
    return head + CUDA_PRELUDE + "".join(deps.values()) + "\n" + "\n".join(seen.values())


__all__ = ["CUDAKernel", "CUDAPrinter", "CUDA_DIALECT", "CUDA_PRELUDE", "emit_cuda",
           "emit_index_checks", "module_source"]
