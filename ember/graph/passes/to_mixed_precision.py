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
even length >= 4, no groups; an odd channel count >= 3, the RGB stem, is padded with a zero
channel); the others (the attention products of two activations, depthwise convolutions) stay
float32, and the elementwise epilogues of the moved GEMMs run in float32 with one rounding to
bfloat16 where the value is stored (``bf16_compute_function``). float16 stays storage-only. Opt-in: ``opt_level`` 4, run with ``PassContext(required_pass=["ToMixedPrecision"])``.
"""

from __future__ import annotations


from ...ops import OpPattern, get_op
from ...ops.registry import np_dtype
from ..ir import Constant, Function, IRModule, Var
from ..mutator import Rewriter, users
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


def mixed_precision_function(func: Function, low: str, allow, deny) -> Function:
    """``func`` with float32 operators moved to ``low`` as the lists say (see module doc);
    bf16 compute (``quantize="bf16"``) is ``bf16_compute_function``."""
    rw = Rewriter(func)
    hi = "float32"
    for b in func.bindings:
        args = [rw.lookup(a) for a in b.call.args]
        op = b.call.op
        floats = [a.type.dtype in (hi, low) for a in args]
        out_f32 = all(o.type.dtype == hi for o in b.outputs)
        if b.call.is_function_call or not any(floats) or not out_f32:
            res = None
        elif op in allow:
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
        _emit_rewritten(rw, b, op, args, res)
    return _finish(rw, func)


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


def _chain_op(b) -> bool:
    """True for a one-output elementwise or broadcast operator (bias add, residual add, ReLU,
    clip, scale, GELU's pieces) other than a cast: under bf16 compute it runs in float32 on
    the unrounded values of a GEMM epilogue (``bf16_compute_function``)."""
    if b.call.is_function_call or len(b.outputs) != 1 or b.call.op == "cast" \
            or b.outputs[0].type.dtype != "float32":
        return False
    return get_op(b.call.op).pattern <= OpPattern.BROADCAST


def _pad_odd_channels(rw: Rewriter, op: str, args: list, attrs: dict) -> tuple[list, dict]:
    """``(args, attrs)`` of a group-1 convolution with an odd number ``C >= 3`` of input
    channels and a constant weight, with its input and weight padded with one zero input
    channel (the RGB stem's 3 -> 4: the ``vdpbf16ps`` kernel reduces over adjacent channel
    pairs; the zero channel adds exact zeros). The padded input is channels-last: a stem
    that reads a channels-first image and writes channels-last (ConvertLayout's
    ``data_layout="NCHW", out_layout="NHWC"``) gets a transpose first; the convolution's own
    zero padding joins the channel pad. Anything else comes back unchanged."""
    if op != "nn.conv" or int(attrs.get("group", 1)) != 1 or len(args) < 2 \
            or not isinstance(args[1], Constant):
        return args, attrs
    from ...ops.nn import channels_last, out_channels_last
    x, w = args[0], args[1].data
    nd = len(x.type.shape)
    c = int(w.shape[1]) if w.ndim == nd else 0
    if c < 3 or c % 2 == 0 or x.type.dtype not in ("float32", "bfloat16") \
            or not out_channels_last(attrs, nd, op):
        return args, attrs
    if not channels_last(attrs, nd, op):
        if int(x.type.shape[1]) != c:
            return args, attrs
        x = rw.emit("transpose", [x], {"perm": [0] + list(range(2, nd)) + [1]})
        attrs = {**attrs, "data_layout": attrs["out_layout"], "out_layout": None}
    if int(x.type.shape[-1]) != c:
        return args, attrs
    import numpy as np
    # the convolution's zero padding moves into the same pad (one pass over the small
    # input instead of a padded copy inside the convolution kernel)
    sp = [int(v) for v in (attrs.get("pads") or [0] * (2 * (nd - 2)))]
    nsp = nd - 2
    pads = [0] + sp[:nsp] + [0] + [0] + sp[nsp:] + [1]
    attrs = {**attrs, "pads": [0] * (2 * nsp)}
    xp = rw.emit("nn.pad", [x], {"pads": pads, "mode": "constant", "value": 0.0})
    wp = np.concatenate([w, np.zeros((w.shape[0], 1) + w.shape[2:], w.dtype)], axis=1)
    return [xp, Constant(wp, args[1].name_hint)] + list(args[2:]), attrs


def bf16_compute_function(func: Function, allow, deny) -> Function:
    """``func`` for bf16 compute on the ``vdpbf16ps`` kernel (``quantize="bf16"``): the ALLOW
    operators ``bf16_gemm_eligible`` accepts (after ``_pad_odd_channels``) read bfloat16
    operands and accumulate in float32 (a bias input stays float32); their epilogue chains (``_chain_op``: bias, residual
    add, ReLU...) run in float32 on the unrounded accumulators, and a value is rounded to
    bfloat16 once, where it is stored: when it has several users or its user is not a chain
    operator (the next GEMM, a pooling, a reshape, a normalization), or it is the second
    GEMM result read by one chain operator (a downsampling conv's, stored for the residual
    add that the block's last conv fuses with). A bf16 value a chain
    operator reads (a residual stored as bf16) is widened exactly. ``main``'s outputs are the
    unrounded float32 values (also through one-input injective operators: the layout
    transform back to NCHW). Other operators follow ``mixed_precision_function``'s lists."""
    rw = Rewriter(func)
    use = users(func)
    hi, low = "float32", "bfloat16"
    pending: dict[int, object] = {}   # float32 values rounded where they are stored
    rounded: dict[int, tuple] = {}    # float32 value -> (its one bf16 cast, the value)

    def rnd(v):
        if id(v) not in pending:
            return v
        return to_low(v)

    def to_low(v):  # one bf16 cast per value, whatever its number of users
        if v.type.dtype == low:
            return v
        if isinstance(v, Constant):
            return _cast(rw, v, low)
        r = rounded.get(id(v))
        if r is None:
            r = rounded[id(v)] = (rw.emit("cast", [v], {"dtype": low}), v)
        return r[0]

    def to_output(v) -> bool:
        """``v`` only reaches a function output, through one-input injective operators
        (the layout transform back to NCHW, a reshape): not rounded on its way out."""
        while True:
            us = use.get(id(v), [])
            if us == [None]:
                return True
            if len(us) != 1 or us[0] is None or us[0].call.is_function_call \
                    or len(us[0].outputs) != 1 \
                    or sum(isinstance(a, Var) for a in us[0].call.args) != 1 \
                    or get_op(us[0].call.op).pattern > OpPattern.INJECTIVE:
                return False
            v = us[0].outputs[0]

    gemm_out: dict[int, int] = {}  # a moved GEMM's result -> its order of definition

    for b in func.bindings:
        op = b.call.op
        chain = _chain_op(b)
        # two GEMM results meeting in one elementwise op (a residual block's last conv and its
        # downsampling conv): one fuses with the op (FuseOps takes the first defined), the
        # other is stored, so it is rounded to bf16 as any stored value is
        mine = [rw.lookup(a0) for a0 in b.call.args]
        fused_gemm = min((gemm_out[id(a)] for a in mine if id(a) in gemm_out), default=None)
        args = []
        for a0 in b.call.args:
            a = rw.lookup(a0)
            stored = id(a) in gemm_out and gemm_out[id(a)] != fused_gemm
            if id(a) in pending and (stored or not (chain and len(use.get(id(a0), [])) == 1)) \
                    and not to_output(a0):
                a = rnd(a)
            args.append(a)
        floats = [a.type.dtype in (hi, low) for a in args]
        out_f32 = all(o.type.dtype == hi for o in b.outputs)
        res = None
        if not b.call.is_function_call and any(floats) and out_f32:
            attrs = b.call.attrs
            if op in allow:
                args, attrs = _pad_odd_channels(rw, op, args, attrs)
                floats = [a.type.dtype in (hi, low) for a in args]
            if op in allow and bf16_gemm_eligible(op, args, attrs):
                # the GEMM operands (the first two inputs) in bf16; a bias stays float32
                low_in = [f and k < 2 for k, f in enumerate(floats)]
                a16 = [to_low(a) if f else a for a, f in zip(args, low_in)]
                a32 = [rw.emit("cast", [a], {"dtype": hi}) if f else _cast(rw, a, hi)
                       for a, f in zip(a16, low_in)]
                y = rw.emit(op, a32, attrs)
                pending[id(y)] = y
                gemm_out[id(y)] = len(gemm_out)
                res = [y]
            elif chain and any(id(a) in pending or a.type.dtype == low for a in args):
                a32 = [_cast(rw, a, hi) if f else a for a, f in zip(args, floats)]
                y = rw.emit(op, a32, b.call.attrs)
                pending[id(y)] = y
                res = [y]
            elif op in deny or get_op(op).pattern > OpPattern.INJECTIVE and op != "nn.max_pool":
                a32 = [_cast(rw, a, hi) if f else a for a, f in zip(args, floats)]
                if any(x is not y for x, y in zip(a32, args)):
                    res = list(_as_tuple(rw.emit(op, a32, b.call.attrs)))
            elif any(a.type.dtype == low for a in args) and op != "cast":
                a16 = [to_low(a) if f else a for a, f in zip(args, floats)]
                res = list(_as_tuple(rw.emit(op, a16, b.call.attrs)))
            elif op == "cast" and args[0].type.dtype == low:
                res = [rw.emit("cast", args, b.call.attrs)]
        _emit_rewritten(rw, b, op, args, res)
    return _finish(rw, func)


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
    if low == "bfloat16" and bf16_compute():
        out["main"] = bf16_compute_function(mod.main, allow, deny)
    else:
        out["main"] = mixed_precision_function(mod.main, low, allow, deny)
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
           "bf16_compute", "bf16_compute_function"]


def _emit_rewritten(rw, b, op: str, args: list, res) -> None:
    """Bind binding ``b``'s outputs to ``res`` (the rewritten values), or, with ``res`` None, to
    ``op`` re-emitted over the rewritten ``args`` (the binding itself when no argument
    changed)."""
    if res is None:
        if any(x is not y for x, y in zip(args, b.call.args)):
            res = list(_as_tuple(rw.emit(op, args, b.call.attrs)))
        else:
            rw.emit_binding(b)
            return
    for o, r in zip(b.outputs, res):
        rw.replace(o, r)


def _finish(rw, func: Function) -> Function:
    """The rewritten function, its outputs cast back to the original output dtypes (the model's
    outputs keep their dtypes)."""
    outs = []
    for o in func.outputs:
        v = rw.lookup(o)
        outs.append(_cast(rw, v, o.type.dtype) if v.type.dtype != o.type.dtype else v)
    return Function(list(func.params), rw.bindings, outs, func.name, dict(func.attrs))
