"""ToMixedPrecision: run compute-heavy operators in float16 (or bfloat16), keeping accumulation
and numerically sensitive operators in float32.

Each float32 operator is classed by three lists (override them with the factory's ``allow`` /
``deny`` arguments or config ``ToMixedPrecision.allow`` / ``.deny``):

- ``ALLOW`` (conv, gemm, matmul): inputs are stored in the low dtype (constant weights converted
  at compile time) and read back as float32 for the computation, so the products accumulate in
  float32; the result is stored in the low dtype. FuseOps fuses those read-side casts into the
  kernel, which then loads half-precision data and accumulates in single precision.
- ``DENY`` (softmax, normalizations, exp/log, reductions, pooling averages...): low-dtype inputs
  are cast back to float32 and the operator runs in float32.
- every other operator of pattern at most injective (relu, add, reshape, max pooling...)
  follows its inputs: in the low dtype when one of them is, with its other float inputs cast.

``main``'s outputs are cast back to their original dtype, so the model's interface does not
change.

With ``bfloat16`` the ALLOW operators that the ``vdpbf16ps`` micro-kernel takes compute on it
where the CPU has AVX512_BF16 (``ember.codegen.microkernel_bf16``; docs/quantization.md, "bf16").
With config ``ToMixedPrecision.bf16_gemm`` (``quantize="bf16"``) only those move to bfloat16 (``bf16_gemm_eligible``: a constant weight, a reduction of an
even length >= 4, no groups); the others (the attention products of two activations, a 3-channel
stem convolution, depthwise convolutions) stay float32. float16 stays storage-only. Opt-in: ``opt_level`` 4, run with ``PassContext(required_pass=["ToMixedPrecision"])``.
"""

from __future__ import annotations


from ...ops import OpPattern, get_op
from ...ops.registry import np_dtype
from ..ir import Constant, Function, IRModule
from ..mutator import Rewriter
from .pass_manager import module_pass, register_config

ALLOW = frozenset({"nn.conv", "nn.gemm", "matmul"})
DENY = frozenset({"nn.softmax", "nn.log_softmax", "nn.layer_norm", "nn.batch_norm", "nn.lrn",
                  "exp", "log", "power", "erf", "sqrt", "reciprocal", "divide", "sum", "mean",
                  "prod", "nn.avg_pool", "nn.global_avg_pool"})

DTYPE = register_config("ToMixedPrecision.dtype", str, "float16 or bfloat16")
ALLOW_KEY = register_config("ToMixedPrecision.allow", list, "operators run in the low dtype")
DENY_KEY = register_config("ToMixedPrecision.deny", list, "operators kept in float32")
BF16_GEMM_KEY = register_config(
    "ToMixedPrecision.bf16_gemm", bool,
    "bfloat16 on the CPU's vdpbf16ps kernel: move only the GEMMs it takes (quantize='bf16')")


def _cast(rw: Rewriter, v, dtype: str):
    if v.type.dtype == dtype:
        return v
    if isinstance(v, Constant):
        return Constant(v.data.astype(np_dtype(dtype)), v.name_hint)
    return rw.emit("cast", [v], {"dtype": dtype})


def mixed_precision_function(func: Function, low: str, allow, deny,
                             bf16_only: bool = False) -> Function:
    """``func`` with float32 operators moved to ``low`` as the lists say (see module doc);
    ``bf16_only``: only the ALLOW operators ``bf16_gemm_eligible`` accepts."""
    rw = Rewriter(func)
    hi = "float32"
    for b in func.bindings:
        args = [rw.lookup(a) for a in b.call.args]
        op = b.call.op
        floats = [a.type.dtype in (hi, low) for a in args]
        out_f32 = all(o.type.dtype == hi for o in b.outputs)
        if b.call.is_function_call or not any(floats) or not out_f32:
            res = None
        elif op in allow and (not bf16_only or bf16_gemm_eligible(op, args, b.call.attrs)):
            a16 = [_cast(rw, a, low) if f else a for a, f in zip(args, floats)]
            # a real cast even for constants: FoldConstant keeps widening casts of half-precision
            # constants, so weights stay stored in the low dtype
            a32 = [rw.emit("cast", [a], {"dtype": hi}) if f and a.type.dtype != hi else a
                   for a, f in zip(a16, floats)]
            y = rw.emit(op, a32, b.call.attrs)
            res = [_cast(rw, y, low)]
        elif op in deny or get_op(op).pattern > OpPattern.INJECTIVE and op != "nn.max_pool":
            a32 = [_cast(rw, a, hi) if f else a for a, f in zip(args, floats)]
            res = None if all(x is y for x, y in zip(a32, args)) else \
                list(_as_tuple(rw.emit(op, a32, b.call.attrs)))
        elif any(a.type.dtype == low for a in args) and op != "cast":
            a16 = [_cast(rw, a, low) if f else a for a, f in zip(args, floats)]
            res = list(_as_tuple(rw.emit(op, a16, b.call.attrs)))
        elif op == "cast" and args[0].type.dtype == low:
            res = [rw.emit("cast", args, b.call.attrs)]
        else:
            res = None
        if res is None:
            if any(x is not y for x, y in zip(args, b.call.args)):
                res = list(_as_tuple(rw.emit(op, args, b.call.attrs)))
            else:
                rw.emit_binding(b)
                continue
        for o, r in zip(b.outputs, res):
            rw.replace(o, r)
    outs = []
    for o in func.outputs:
        v = rw.lookup(o)
        outs.append(_cast(rw, v, o.type.dtype) if v.type.dtype != o.type.dtype else v)
    return Function(list(func.params), rw.bindings, outs, func.name, dict(func.attrs))


def bf16_gemm_eligible(op: str, args: list, attrs: dict) -> bool:
    """True when ALLOW operator ``op`` with inputs ``args`` (graph values) fits the bf16 GEMM
    micro-kernel: its weight (second input) is a ``Constant`` (packed K-pair-interleaved at
    compile time), its reduction length ``K`` is even and at least 4 (one ``vdpbf16ps`` step
    takes a pair, adjacent in ``A``: no ``trans_a``), and a convolution has ``group == 1``."""
    if len(args) < 2 or not isinstance(args[1], Constant):
        return False
    a, w = args[0].type.shape, args[1].type.shape
    if op == "nn.conv":
        if int(attrs.get("group", 1)) != 1 or len(w) < 2:
            return False
        k = int(w[1])
    elif op == "nn.gemm":
        if attrs.get("trans_a"):
            return False  # A's reduction dim is not contiguous: no adjacent pairs
        k = int(a[-1])
    else:
        k = int(a[-1])
    return k % 2 == 0 and k >= 4


def _as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


@module_pass("ToMixedPrecision", opt_level=4)
def ToMixedPrecision(mod: IRModule, ctx, dtype: str | None = None, allow=None,
                     deny=None) -> IRModule:
    """Move ``main``'s float32 compute to ``dtype`` (default config or float16)."""
    low = dtype or ctx.get_config(DTYPE, "float16")
    if low not in ("float16", "bfloat16"):
        from ...errors import PassError
        raise PassError(f"ToMixedPrecision: dtype {low!r} is not float16 or bfloat16")
    allow = frozenset(allow if allow is not None else ctx.get_config(ALLOW_KEY, ALLOW))
    deny = frozenset(deny if deny is not None else ctx.get_config(DENY_KEY, DENY))
    out = IRModule(mod.functions)
    out["main"] = mixed_precision_function(mod.main, low, allow, deny,
                                           low == "bfloat16" and bf16_compute())
    return out


def active_dtype(target="llvm") -> str | None:
    """The low dtype ToMixedPrecision moves compute to when ``target``'s pipeline runs under the
    current ``PassContext`` (``None``: it does not run). After it, the float32 operands of the
    allowed operators hold values of that dtype, so a GPU rule may compute them in it (the
    driver records it in the kernels' ``attrs["mixed_precision"]``,
    ``rules/cuda_tensorcore.py``)."""
    from .pass_manager import PassContext
    from .pipeline import pipeline_names
    ctx = PassContext.current()
    if "ToMixedPrecision" not in pipeline_names(target) \
            or not ctx.pass_enabled(ToMixedPrecision.info):
        return None
    return ctx.get_config(DTYPE, "float16")


def bf16_compute() -> bool:
    """True when the current ``PassContext`` asks for bf16 *compute* on the CPU's
    ``vdpbf16ps`` micro-kernel (config ``ToMixedPrecision.bf16_gemm``, set by
    ``ember.compile(..., quantize="bf16")`` on a CPU target): ToMixedPrecision then moves only
    the GEMMs that kernel takes (``bf16_gemm_eligible``) and FuseOps keeps the bf16 casts that
    other operators read out of their loads."""
    from .pass_manager import PassContext
    return bool(PassContext.current().get_config(BF16_GEMM_KEY, False))


__all__ = ["ToMixedPrecision", "ALLOW", "DENY", "active_dtype", "bf16_gemm_eligible",
           "bf16_compute"]
