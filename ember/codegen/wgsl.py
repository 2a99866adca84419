"""WGSL code generation for WebGPU: one compute shader per device kernel.

``emit_wgsl(func, target)`` lowers a scheduled GPU ``PrimFunc`` through the target's TIR pass
list (``ember.tir.pipeline``), splits it into device kernels (``ember.tir.gpu``) and prints each
with ``WGSLPrinter``, the ``CStylePrinter`` walk with the WGSL ``Dialect`` table. The WGSL
legalization:

- every buffer a kernel touches is a ``var<storage, read_write>`` binding (read-only inputs too:
  WebGPU refuses one buffer bound read-only and writable in one dispatch, and all tensors live in
  a few device buffers); ``shared`` buffers are module-scope ``var<workgroup>`` arrays, ``local``
  ones function-scope ``var``s; a uniform block ``Launch`` carries the launch's scalars (the
  folded grid width);
- no 64-bit integers: indices and ``int64`` values are ``i32``, checked here (every buffer and
  loop extent below 2^31, every constant in range, the int64 extremes used as reduction
  identities map to int32's; else ``CodegenError``); ``int64`` tensors are
  stored as ``i32`` and the runtime narrows them on upload with a range check and widens them on
  download. An ``int64`` value computed in i32 that may leave the int32 range (add, sub, mul,
  neg, abs, div/floordiv, shl, pow; casts from float32/uint32) prints as a checked helper that
  sets the kernel's status word (``STATUS_INT64_OVERFLOW``; the runtime raises ``InputError``
  naming the node); operations the loop bounds prove in range are printed plain.
  ``int8``/``int16``/``uint8``/``uint16``/``bool`` tensors are stored widened to 32 bits
  (wrapped to their width on every store, as C's narrow stores do);
- the grid is folded under ``max_num_blocks`` (65,535) workgroups per dimension: a longer
  ``blockIdx.x`` runs as a 2-D grid and each workgroup computes its linear index;
- ``float32`` is the only float type (``float16`` would need the ``shader-f16`` feature,
  ``float64`` has none in WebGPU): other dtypes raise ``CodegenError`` naming the kernel and
  the dtype.

Integer division and remainder follow the C printer's conventions (x / 0 = 0), float min/max
propagate NaN, ``pow`` of a negative base with an integral exponent is defined, and ``erf``
(no WGSL built-in) is the Chebyshev fit of ``erfc`` of Press et al., Numerical Recipes 6.2
(fractional error below 1.2e-7), with its Taylor series below |x| = 0.5.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import CodegenError, LoweringError
from ..tir.arith import interval, walk_stmt
from ..tir.expr import BinOp, Call, Cast, Const, Load, is_float, is_int
from ..tir.stmt import Allocate, Buffer, For, KernelCall, PrimFunc, Store
from .cstyle import CStylePrinter, Dialect

# dtype -> (type in registers, type in storage)
WGSL_TYPES = {"float32": ("f32", "f32"), "int32": ("i32", "i32"), "uint32": ("u32", "u32"),
              "int64": ("i32", "i32"), "int16": ("i32", "i32"), "int8": ("i32", "i32"),
              "uint16": ("u32", "u32"), "uint8": ("u32", "u32"), "bool": ("bool", "u32")}
I32_MIN, I32_MAX = -2**31, 2**31 - 1

WGSL_MATH = {n: n for n in ("exp", "log", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan",
                            "sinh", "cosh", "asinh", "acosh", "atanh", "floor", "ceil", "round",
                            "trunc", "exp2", "log2", "abs", "sign", "atan2")}

WGSL_DIALECT = Dialect(
    name="wgsl", kernel_prefix="@compute fn",
    types={k: v[0] for k, v in WGSL_TYPES.items()},
    address_spaces={"global": "var<storage, read_write>", "shared": "var<workgroup>",
                    "local": "var"},
    barrier="workgroupBarrier();",
    thread_index={"blockIdx.x": "wid.x", "blockIdx.y": "wid.y", "blockIdx.z": "wid.z",
                  "threadIdx.x": "lid.x", "threadIdx.y": "lid.y", "threadIdx.z": "lid.z"},
    math=WGSL_MATH, select="select({f}, {t}, {c})", cast="{t}({v})",
    loop="for (var {v}: {t} = 0; {v} < {n}; {v}++) {{", index_dtype="int64",
    thread_decl="let {v}: i32 = i32({src});")

_HELPERS = {
    "ember_div_i32": "fn ember_div_i32(a: i32, b: i32) -> i32 { if (b == 0) { return 0; } "
                     "if (b == -1) { return -a; } return a / b; }",
    "ember_mod_i32": "fn ember_mod_i32(a: i32, b: i32) -> i32 { if (b == 0 || b == -1) "
                     "{ return 0; } return a % b; }",
    "ember_floordiv_i32": "fn ember_floordiv_i32(a: i32, b: i32) -> i32 { if (b == 0) "
                          "{ return 0; } if (b == -1) { return -a; } let q = a / b; "
                          "if (q * b != a && ((a < 0) != (b < 0))) { return q - 1; } return q; }",
    "ember_floormod_i32": "fn ember_floormod_i32(a: i32, b: i32) -> i32 { if (b == 0 || b == -1) "
                          "{ return 0; } let r = a % b; if (r != 0 && ((r < 0) != (b < 0))) "
                          "{ return r + b; } return r; }",
    "ember_div_u32": "fn ember_div_u32(a: u32, b: u32) -> u32 { if (b == 0u) { return 0u; } "
                     "return a / b; }",
    "ember_mod_u32": "fn ember_mod_u32(a: u32, b: u32) -> u32 { if (b == 0u) { return 0u; } "
                     "return a % b; }",
    "ember_pow_i32": "fn ember_pow_i32(a0: i32, b0: i32) -> i32 { var a = a0; var b = b0; "
                     "var r = 1; if (b < 0) { if (a == 1) { return 1; } if (a == -1) { "
                     "return select(1, -1, (b & 1) != 0); } return 0; } "
                     "loop { if (b == 0) { break; } if ((b & 1) != 0) { r = r * a; } a = a * a; "
                     "b = b >> 1u; } return r; }",
    "ember_max_f32": "fn ember_max_f32(a: f32, b: f32) -> f32 { if (ember_isnan_f32(a) || "
                     "ember_isnan_f32(b)) { return bitcast<f32>(0x7fc00000u); } "
                     "return max(a, b); }",
    "ember_min_f32": "fn ember_min_f32(a: f32, b: f32) -> f32 { if (ember_isnan_f32(a) || "
                     "ember_isnan_f32(b)) { return bitcast<f32>(0x7fc00000u); } "
                     "return min(a, b); }",
    # numpy's / C's fmod: the sign of the dividend, zeros included; a finite dividend over an
    # infinite divisor is the dividend (WGSL's a - b * trunc(a / b) gives NaN there)
    "ember_copysign_f32": "fn ember_copysign_f32(a: f32, b: f32) -> f32 { return bitcast<f32>("
                          "(bitcast<u32>(a) & 0x7fffffffu) | (bitcast<u32>(b) & 0x80000000u)); }",
    "ember_fmod_f32": "fn ember_fmod_f32(a: f32, b: f32) -> f32 { var r = a % b; "
                      "if (ember_isinf_f32(b) && !ember_isinf_f32(a) && !ember_isnan_f32(a)) "
                      "{ r = a; } if (r == 0.0) { r = ember_copysign_f32(0.0, a); } return r; }",
    # numpy's mod (ONNX Mod fmod=0): fmod moved to the divisor's sign; a zero takes its sign
    "ember_floormod_f32": "fn ember_floormod_f32(a: f32, b: f32) -> f32 { var r = "
                          "ember_fmod_f32(a, b); if (r == 0.0) { return ember_copysign_f32(0.0, b);"
                          " } if ((r < 0.0) != (b < 0.0)) { r = r + b; } return r; }",
    "ember_pow_f32": "fn ember_pow_f32(a: f32, b: f32) -> f32 { if (b == 0.0) { return 1.0; } "
                     "if (a > 0.0) { return pow(a, b); } if (a == 0.0) { "
                     "if (b > 0.0) { return 0.0; } return bitcast<f32>(0x7f800000u); } "
                     "if (b != trunc(b)) { return bitcast<f32>(0x7fc00000u); } "
                     "let r = pow(-a, b); if (trunc(b * 0.5) == b * 0.5) { return r; } "
                     "return -r; }",
    "ember_isnan_f32": "fn ember_isnan_f32(a: f32) -> bool { return (bitcast<u32>(a) & "
                       "0x7fffffffu) > 0x7f800000u; }",
    "ember_isinf_f32": "fn ember_isinf_f32(a: f32) -> bool { return (bitcast<u32>(a) & "
                       "0x7fffffffu) == 0x7f800000u; }",
    "ember_erf_f32": "fn ember_erf_f32(x: f32) -> f32 { let z = abs(x); let t = 1.0 / "
                     "(1.0 + 0.5 * z); let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + "
                     "t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + "
                     "t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * "
                     "0.17087277))))))))); if (z < 0.5) { let z2 = x * x; return x * "
                     "(1.1283791670955126 + z2 * (-0.37612638903183754 + z2 * "
                     "(0.11283791670955126 + z2 * (-0.026866170645131252 + z2 * "
                     "(0.005223977625442188 + z2 * -0.0008548327023450852))))); } "
                     "return sign(x) * (1.0 - r); }",
    "ember_sigmoid_f32": "fn ember_sigmoid_f32(a: f32) -> f32 { if (a >= 0.0) { return 1.0 / "
                         "(1.0 + exp(-a)); } let e = exp(a); return e / (1.0 + e); }",
    "ember_asin_f32": "fn ember_asin_f32(a: f32) -> f32 { return atan2(a, sqrt(max(0.0, "
                      "(1.0 - a) * (1.0 + a)))); }",
    "ember_acos_f32": "fn ember_acos_f32(a: f32) -> f32 { return atan2(sqrt(max(0.0, "
                      "(1.0 - a) * (1.0 + a))), a); }",
    "ember_opaque_f32": "fn ember_opaque_f32(a: f32) -> f32 { return a; }",
    # lavapipe's tanh is (e^2x - 1) / (e^2x + 1): 1.7e-4 relative error at |x| = 1e-4 (Mish of
    # x < -7 is x * tanh(~e^x)); below 0.125 the odd Taylor series to x^9 (next term 8e-12
    # relative), above it (1 - e^-2|x|) / (1 + e^-2|x|), which cannot overflow
    "ember_tanh_f32": "fn ember_tanh_f32(a: f32) -> f32 { if (ember_isnan_f32(a)) { return a; } "
                      "let ax = abs(a); if (ax < 0.125) { "
                      "let x2 = a * a; return a * (1.0 + x2 * (-0.33333334 + x2 * (0.13333334 "
                      "+ x2 * (-0.053968254 + x2 * 0.021869488)))); } "
                      "let e = exp(-2.0 * min(ax, 15.0)); return sign(a) * ((1.0 - e) / (1.0 + e)); }",
}
# int64 arithmetic computed in i32 (WGSL has no 64-bit integers): each checked helper computes
# the 32-bit result and sets the kernel's status word to STATUS_INT64_OVERFLOW when the true
# result leaves the int32 range (the runtime then raises InputError naming the node)
STATUS_INT64_OVERFLOW = 2
_OVF = "ember_status[0] = 2u;"
_HELPERS.update({
    "ember_add_i64": "fn ember_add_i64(a: i32, b: i32) -> i32 { let r = a + b; "
                     f"if (((a ^ r) & (b ^ r)) < 0) {{ {_OVF} }} return r; }}",
    "ember_sub_i64": "fn ember_sub_i64(a: i32, b: i32) -> i32 { let r = a - b; "
                     f"if (((a ^ b) & (a ^ r)) < 0) {{ {_OVF} }} return r; }}",
    "ember_mul_i64": "fn ember_mul_i64(a: i32, b: i32) -> i32 { let r = a * b; "
                     "if ((a != 0 && r / a != b) || (a == -1 && b == (-2147483647i - 1i)) || "
                     f"(b == -1 && a == (-2147483647i - 1i))) {{ {_OVF} }} return r; }}",
    "ember_neg_i64": "fn ember_neg_i64(a: i32) -> i32 { if (a == (-2147483647i - 1i)) "
                     f"{{ {_OVF} }} return -a; }}",
    "ember_abs_i64": "fn ember_abs_i64(a: i32) -> i32 { if (a == (-2147483647i - 1i)) "
                     f"{{ {_OVF} }} return abs(a); }}",
    "ember_div_i64": "fn ember_div_i64(a: i32, b: i32) -> i32 { if (a == (-2147483647i - 1i) "
                     f"&& b == -1) {{ {_OVF} }} return ember_div_i32(a, b); }}",
    "ember_floordiv_i64": "fn ember_floordiv_i64(a: i32, b: i32) -> i32 { if (a == "
                          f"(-2147483647i - 1i) && b == -1) {{ {_OVF} }} "
                          "return ember_floordiv_i32(a, b); }",
    "ember_shl_i64": "fn ember_shl_i64(a: i32, b: u32) -> i32 { if (b >= 32u) { if (a != 0) "
                     f"{{ {_OVF} }} return 0; }} let r = a << b; if ((r >> b) != a) {{ {_OVF} }} "
                     "return r; }",
    "ember_pow_i64": "fn ember_pow_i64(a0: i32, b0: i32) -> i32 { var a = a0; var b = b0; "
                     "var r = 1; if (b < 0) { return ember_pow_i32(a0, b0); } "
                     "loop { if (b == 0) { break; } if ((b & 1) != 0) { r = ember_mul_i64(r, a); } "
                     "b = b >> 1u; if (b == 0) { break; } a = ember_mul_i64(a, a); } return r; }",
    "ember_f32_to_i64": "fn ember_f32_to_i64(x: f32) -> i32 { if (!(x >= -2147483648.0 && "
                        f"x < 2147483648.0)) {{ {_OVF} return 0; }} return i32(x); }}",
    "ember_u32_to_i64": "fn ember_u32_to_i64(x: u32) -> i32 { if (x > 2147483647u) "
                        f"{{ {_OVF} }} return bitcast<i32>(x); }}",
})
_HELPER_DEPS = {"ember_max_f32": ["ember_isnan_f32"], "ember_min_f32": ["ember_isnan_f32"],
                "ember_fmod_f32": ["ember_isnan_f32", "ember_isinf_f32", "ember_copysign_f32"],
                "ember_floormod_f32": ["ember_isnan_f32", "ember_isinf_f32", "ember_copysign_f32",
                                       "ember_fmod_f32"],
                "ember_tanh_f32": ["ember_isnan_f32"],
                "ember_div_i64": ["ember_div_i32"], "ember_floordiv_i64": ["ember_floordiv_i32"],
                "ember_pow_i64": ["ember_pow_i32", "ember_mul_i64"]}


@dataclass
class WGSLKernel:
    """One printed device kernel.

    Attributes:
        source: the WGSL module text (entry point ``main``).
        bindings: what each ``@binding(k)`` is, in order: ``("param", i)`` for the
            ``PrimFunc``'s i-th parameter, ``("workspace", j)`` for its j-th workspace buffer,
            ``("status", 0)`` for the step's status word (int64 overflow checks; last).
        dispatch: workgroups to dispatch ``(x, y, z)`` (after grid folding).
        workgroup_size: threads per workgroup ``(x, y, z)``.
        uniform: the values of the ``Launch`` uniform block (u32).
        shared_bytes: workgroup memory it declares.
    """

    source: str
    bindings: list
    dispatch: tuple
    workgroup_size: tuple
    uniform: list = field(default_factory=list)
    shared_bytes: int = 0


def _wgsl_check_dtype(dtype: str, where: str) -> None:
    if dtype not in WGSL_TYPES:
        hint = (" (float16 needs the shader-f16 feature, not supported yet)"
                if dtype == "float16" else " (WebGPU has no 64-bit floats)"
                if dtype == "float64" else "")
        raise CodegenError(f"{where}: dtype {dtype} has no WGSL form{hint}; the webgpu target "
                           f"supports {', '.join(WGSL_TYPES)}")


def legalize_wgsl(func: PrimFunc, target) -> PrimFunc:
    """The WGSL legalization checks (a TIR pass of the ``webgpu`` list): every dtype has a WGSL
    form, every buffer and loop extent fits 32-bit indices, no micro-kernel call.

    Raises:
        CodegenError: naming the kernel, and the dtype, buffer or loop."""
    where = f"kernel {func.name} ({func.attrs.get('op', '?')})"
    for b in func.params:
        _wgsl_check_dtype(b.dtype, f"{where}, buffer {b.name}")
        if b.alloc_size > I32_MAX:
            raise CodegenError(f"{where}: buffer {b.name} has {b.alloc_size} elements; WGSL "
                               f"indices are 32-bit (at most {I32_MAX})")
    for s in walk_stmt(func.body):
        if isinstance(s, Allocate):
            _wgsl_check_dtype(s.buffer.dtype, f"{where}, buffer {s.buffer.name}")
            if s.buffer.alloc_size > I32_MAX:
                raise CodegenError(f"{where}: buffer {s.buffer.name} is too large for 32-bit "
                                   f"indices")
        elif isinstance(s, For) and s.extent > I32_MAX:
            raise CodegenError(f"{where}: loop {s.var.name} has extent {s.extent}, above the "
                               f"32-bit index range")
        elif isinstance(s, KernelCall):
            raise CodegenError(f"{where}: micro-kernel call {s.name} has no WGSL form (the "
                               f"operator's kernel, or a CPU schedule applied to it, is built "
                               f"of CPU micro-kernels; the webgpu target has no GPU kernel for "
                               f"it yet)")
    return func


def _register_pass():
    from ..tir.pipeline import register_pass
    register_pass("webgpu", "legalize_wgsl", legalize_wgsl)


_register_pass()


def _literal(value, dtype: str) -> str:
    if dtype == "bool":
        return "true" if value else "false"
    if dtype == "float32":
        v = np.float32(value)
        bits = int(v.view(np.uint32))
        if not np.isfinite(v):
            return f"bitcast<f32>({bits:#010x}u)"
        s = str(v)
        if "e" not in s and "." not in s:
            s += ".0"
        return f"{s}f" if v >= 0 else f"({s}f)"
    v = int(value)
    if dtype == "int64" and v in (2**63 - 1, -2**63):
        v = I32_MAX if v > 0 else I32_MIN  # the int64 extremes (reduction identities,
        # sentinels) become int32's: int64 tensors hold int32-range values on the device
    reg = WGSL_TYPES[dtype][0]
    if reg == "u32":
        if not 0 <= v < 2**32:
            raise CodegenError(f"constant {v} of {dtype} does not fit WGSL u32")
        return f"{v}u"
    if not I32_MIN <= v <= I32_MAX:
        raise CodegenError(f"constant {v} of {dtype} does not fit WGSL i32 (WebGPU has no 64-bit "
                           f"integers)")
    if v == I32_MIN:
        return "(-2147483647i - 1i)"
    return f"{v}i" if v >= 0 else f"({v}i)"


class WGSLPrinter(CStylePrinter):
    """Prints one ``DeviceKernel`` as a WGSL compute shader. Use ``emit_wgsl``."""

    dialect = WGSL_DIALECT

    def __init__(self, func: PrimFunc, workspace: list, kernel, target):
        super().__init__()
        self.func, self.workspace, self.kernel, self.target = func, workspace, kernel, target
        self.where = f"kernel {func.name} ({func.attrs.get('op', '?')})"
        self.slots: dict[int, tuple] = {id(b): ("param", i) for i, b in enumerate(func.params)}
        self.slots.update({id(b): ("workspace", j) for j, b in enumerate(workspace)})
        self.bindings: list = []
        self.binding_names: dict[int, str] = {}
        self.shared_decls: list[str] = []
        self.shared_bytes = 0
        self.fold = None  # (grid width) when blockIdx.x is folded into a 2-D grid
        self.checks_int64 = False  # a checked int64 helper is used: the kernel binds a status word

    # names ------------------------------------------------------------------------------------
    def buf_name(self, buf: Buffer) -> str:
        if id(buf) in self.slots:
            if id(buf) not in self.binding_names:
                self.keep.append(buf)
                self.binding_names[id(buf)] = f"b{len(self.bindings)}"
                self.bindings.append((self.slots[id(buf)], buf))
            return self.binding_names[id(buf)]
        self.keep.append(buf)
        prefix = {"local": "acc", "shared": "sh"}.get(buf.scope, "ws")
        return self.namer.get(buf, prefix)

    def type_name(self, dtype: str) -> str:
        _wgsl_check_dtype(dtype, self.where)
        return WGSL_TYPES[dtype][0]

    def _stored_in_memory(self, buf) -> bool:
        return not (buf.scope == "local" and not buf.shape)

    # expressions ------------------------------------------------------------------------------
    def literal(self, value, dtype: str) -> str:
        _wgsl_check_dtype(dtype, self.where)
        try:
            return _literal(value, dtype)
        except CodegenError as e:
            raise CodegenError(f"{self.where}: {e}") from None

    def helper(self, name: str) -> str:
        for d in _HELPER_DEPS.get(name, []):
            self.deps.setdefault(d, _HELPERS[d])
        self.deps.setdefault(name, _HELPERS[name])
        if name.endswith("_i64"):
            self.checks_int64 = True
        return name

    def _fits_i32(self, e) -> bool:
        """Whether integer ``e`` provably lies in the int32 range (loop-variable bounds): then an
        int64 operation needs no overflow check (index arithmetic)."""
        lo, hi = interval(e, self.bounds)
        return I32_MIN <= lo and hi <= I32_MAX

    def load(self, e: Load) -> str:
        text = self.access(e.src, e.indices)
        if e.src.dtype == "bool" and self._stored_in_memory(e.src):
            return f"({text} != 0u)"
        return text

    def stmt(self, s, ind: int) -> None:
        """As the base, except that a store of a select is printed as ``if``/``else`` stores:
        WGSL's ``select`` evaluates both sides, which a chain of selects over positions
        (Winograd transforms, per-tap code) turns into every side at every point."""
        from ..tir.expr import Select
        from ..tir.stmt import IfThenElse
        if isinstance(s, Store) and isinstance(s.value, Select):
            v = s.value
            super().stmt(IfThenElse(v.cond, Store(s.buffer, s.indices, v.t),
                                    Store(s.buffer, s.indices, v.f)), ind)
            return
        super().stmt(s, ind)

    def store_value(self, s: Store, value: str) -> str:
        dt = s.buffer.dtype
        if not self._stored_in_memory(s.buffer):
            return value
        if dt == "bool":
            return f"select(0u, 1u, {value})"
        return self.wrap(dt, value)

    @staticmethod
    def wrap(dtype: str, v: str) -> str:
        """``v`` (in 32 bits) wrapped to the width of narrow integer ``dtype``."""
        if dtype == "int8":
            return f"(({v} << 24u) >> 24u)"
        if dtype == "int16":
            return f"(({v} << 16u) >> 16u)"
        if dtype == "uint8":
            return f"({v} & 0xffu)"
        if dtype == "uint16":
            return f"({v} & 0xffffu)"
        return v

    def cast(self, e: Cast) -> str:
        src = e.value.dtype
        v = self.expr(e.value)
        if e.dtype == "bool":
            zero = "0.0" if is_float(src) else ("0u" if WGSL_TYPES.get(src, ("",))[0] == "u32"
                                                else "0")
            return v if src == "bool" else f"({v} != {zero})"
        t = self.type_name(e.dtype)
        self.type_name(src)
        if e.dtype == "int64" and WGSL_TYPES[src][0] in ("f32", "u32"):
            # float32 / uint32 -> int64: the value may leave the int32 range int64 is computed in
            return f"{self.helper('ember_' + WGSL_TYPES[src][0] + '_to_i64')}({v})"
        if WGSL_TYPES[src][0] == t:
            return self.wrap(e.dtype, v)
        return self.wrap(e.dtype, f"{t}({v})")

    def unary(self, e) -> str:
        a = self.expr(e.a)
        if e.op == "neg" and e.dtype == "int64" and not self._fits_i32(e.a):
            return f"{self.helper('ember_neg_i64')}({a})"
        return {"neg": f"(-{a})", "not": f"(!{a})", "bitnot": f"(~{a})"}[e.op]

    def binop(self, e: BinOp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        op, dt = e.op, e.a.dtype
        reg = WGSL_TYPES[dt][0] if dt in WGSL_TYPES else None
        if reg is None:
            _wgsl_check_dtype(dt, self.where)
        if dt == "bool":
            m = {"add": "||", "sub": "!=", "mul": "&&", "and": "&&", "or": "||", "bitand": "&",
                 "bitor": "|", "bitxor": "!=", "eq": "==", "ne": "!=", "max": "||", "min": "&&"}
            if op in m:
                return f"({a} {m[op]} {b})"
            if op in ("lt", "le", "gt", "ge"):
                return f"(select(0, 1, {a}) {self.dialect.infix[op]} select(0, 1, {b}))"
            raise LoweringError(f"{self.where}: bool op {op} has no WGSL form")
        if dt == "int64" and op in ("add", "sub", "mul", "shl", "div", "floordiv", "pow") \
                and not (op in ("add", "sub", "mul") and self._fits_i32(e)) \
                and not (op in ("div", "floordiv") and isinstance(e.b, Const)
                         and e.b.value not in (0, -1)):
            # int64 computed in i32: checked (sets the status word when it leaves the range)
            if op == "shl":
                return f"{self.helper('ember_shl_i64')}({a}, u32({b}))"
            return f"{self.helper('ember_' + op + '_i64')}({a}, {b})"
        if op in ("shl", "shr"):
            return f"({a} {self.dialect.infix[op]} u32({b}))"
        if op in self.dialect.infix:
            return f"({a} {self.dialect.infix[op]} {b})"
        if op == "div":
            if reg == "f32" and isinstance(e.b, Const) and e.b.value == 0:
                # x / 0.0 of constants is a shader-creation error in WGSL (const evaluation)
                return f"({a} / {self.helper('ember_opaque_f32')}({b}))"
            if reg == "f32" or (isinstance(e.b, Const) and e.b.value not in (0, -1)):
                return f"({a} / {b})"
            return f"{self.helper('ember_div_' + reg)}({a}, {b})"
        if op == "mod":
            if reg == "f32":
                return f"{self.helper('ember_fmod_f32')}({a}, {b})"
            if isinstance(e.b, Const) and e.b.value not in (0, -1):
                return f"({a} % {b})"
            return f"{self.helper('ember_mod_' + reg)}({a}, {b})"
        if op in ("floordiv", "floormod"):
            if reg == "f32":
                if op == "floordiv":
                    return f"floor({a} / {b})"
                return f"{self.helper('ember_floormod_f32')}({a}, {b})"
            if reg == "u32":
                return f"{self.helper('ember_' + ('div' if op == 'floordiv' else 'mod') + '_u32')}({a}, {b})"
            if isinstance(e.b, Const) and e.b.value > 0 and interval(e.a, self.bounds)[0] >= 0:
                return f"({a} {'/' if op == 'floordiv' else '%'} {b})"
            return f"{self.helper('ember_' + op + '_i32')}({a}, {b})"
        if op in ("min", "max"):
            if reg == "f32":
                return f"{self.helper('ember_' + op + '_f32')}({a}, {b})"
            return f"{op}({a}, {b})"
        if op == "pow":
            if reg == "f32":
                return f"{self.helper('ember_pow_f32')}({a}, {b})"
            if reg == "i32":
                return f"{self.helper('ember_pow_i32')}({a}, {b})"
        raise LoweringError(f"{self.where}: binary op {op} on {dt} has no WGSL form")

    def call(self, e: Call) -> str:
        dt = e.args[0].dtype if e.args else e.dtype
        args = [self.expr(a) for a in e.args]
        name = e.name
        if name in ("isnan", "isinf"):
            if not is_float(dt):
                return "false"
            return f"{self.helper('ember_' + name + '_f32')}({args[0]})"
        if name in ("erf", "sigmoid", "tanh", "asin", "acos"):
            # no built-in (erf, sigmoid), or one whose range (tanh) or accuracy (asin/acos:
            # 1.5e-4 off on lavapipe) differs
            return f"{self.helper('ember_' + name + '_f32')}({args[0]})"
        if name == "reinterpret":  # the bits of the argument as e.dtype (same width)
            src, dst = dt, e.dtype
            if "int64" in (src, dst) or "bool" in (src, dst) or src not in WGSL_TYPES \
                    or dst not in WGSL_TYPES:
                raise CodegenError(f"{self.where}: bitcast {src} -> {dst} has no WGSL form "
                                   f"(int64 tensors are narrowed to 32 bits on the device)")
            rs, rd = WGSL_TYPES[src][0], WGSL_TYPES[dst][0]
            if rs == rd:
                return self.wrap(dst, args[0])
            if "f32" in (rs, rd):
                return f"bitcast<{rd}>({args[0]})"
            return self.wrap(dst, f"{rd}({args[0]})")  # 8/16-bit: wrap to the width
        if name == "fmod":
            return f"{self.helper('ember_fmod_f32')}({args[0]}, {args[1]})"
        if name == "pow":
            return f"{self.helper('ember_pow_f32')}({args[0]}, {args[1]})"
        if name == "abs" and dt == "int64":
            return f"{self.helper('ember_abs_i64')}({args[0]})"
        if name in ("abs", "sign") and is_int(dt) and WGSL_TYPES.get(dt, ("",))[0] == "u32":
            return args[0] if name == "abs" else f"select(0u, 1u, {args[0]} > 0u)"
        fn = self.dialect.math.get(name)
        if fn is None or (not is_float(dt) and name not in ("abs", "sign")):
            raise CodegenError(f"{self.where}: intrinsic {name} on {dt} has no WGSL form")
        return f"{fn}({', '.join(args)})"

    # statements -------------------------------------------------------------------------------
    def loop(self, s: For, ind: int) -> None:
        if s.kind != "thread_binding":
            if s.kind == "parallel":
                raise CodegenError(f"{self.where}: loop {s.var.name} is a CPU parallel loop; "
                                   f"bind it to blockIdx/threadIdx for the GPU")
            self.serial_loop(s, ind)
            return
        tag = s.annotations["thread_tag"]
        if tag == "blockIdx.x" and self.fold is not None:
            src = "(wid.x + wid.y * launch.grid_x)"
            launch = self.fold * self.kernel_dispatch[1]
        else:
            src = self.dialect.thread_index[tag]
            launch = self.launch_extent(tag)
        self.thread_loop(s, ind, src, launch)

    def shared_decl(self, b, name: str, t: str, pad: str) -> None:
        st = WGSL_TYPES[b.dtype][1]  # module scope: WGSL has no function-scope workgroup vars
        self.shared_decls.append(f"var<workgroup> {name}: array<{st}, {b.alloc_size}>;")
        self.shared_bytes += 4 * b.alloc_size

    def local_scalar_decl(self, b, name: str, t: str) -> str:
        return f"var {name}: {t};"

    def local_array_decl(self, b, name: str, t: str) -> str:
        return f"var {name}: array<{WGSL_TYPES[b.dtype][1]}, {b.alloc_size}>;"

    def stmt_special(self, s, ind: int) -> None:
        if isinstance(s, Allocate):
            self.kernel_allocate(s, ind)
            return
        raise CodegenError(f"{self.where}: statement {type(s).__name__} has no WGSL form")

    def module(self) -> WGSLKernel:
        """The WGSL module of the kernel and its launch."""
        k = self.kernel
        grid = list(k.grid)
        maxb = self.target.max_num_blocks
        uniform = []
        if grid[0] > maxb:
            if grid[1] != 1 or grid[2] != 1:
                raise CodegenError(f"{self.where}: blockIdx.x spans {grid[0]} workgroups (above "
                                   f"{maxb}) and blockIdx.y/z are bound too; cannot fold the grid")
            gy = -(-grid[0] // maxb)
            gx = -(-grid[0] // gy)
            self.fold = gx
            self.kernel_dispatch = (gx, gy, 1)
            uniform = [gx]
        for d in (1, 2):
            if grid[d] > maxb:
                raise CodegenError(f"{self.where}: blockIdx.{'xyz'[d]} spans {grid[d]} "
                                   f"workgroups, above {maxb}; bind the longer axis to "
                                   f"blockIdx.x (it is folded)")
        self.stmt(k.body, 1)
        dispatch = self.kernel_dispatch if self.fold else tuple(grid)
        decls = []
        for n, ((kind, i), buf) in enumerate(self.bindings):
            st = WGSL_TYPES[buf.dtype][1]
            decls.append(f"@group(0) @binding({n}) var<storage, read_write> b{n}: array<{st}>;")
        bindings = [kind_i for kind_i, _ in self.bindings]
        if self.checks_int64:
            decls.append(f"@group(0) @binding({len(bindings)}) var<storage, read_write> "
                         f"ember_status: array<u32>;")
            bindings.append(("status", 0))
        if uniform:
            decls.append("struct Launch { grid_x: u32 }")
            decls.append(f"@group(0) @binding({len(bindings)}) var<uniform> launch: Launch;")
        head = "\n".join(decls + self.shared_decls + list(self.deps.values()))
        wg = ", ".join(str(x) for x in k.block)
        src = (f"{head}\n\n@compute @workgroup_size({wg})\n"
               f"fn main(@builtin(workgroup_id) wid: vec3<u32>, "
               f"@builtin(local_invocation_id) lid: vec3<u32>) {{\n"
               + "\n".join(self.lines) + "\n}\n")
        return WGSLKernel(src, bindings, tuple(dispatch),
                          tuple(k.block), uniform, self.shared_bytes)


def emit_index_checks(func: PrimFunc) -> list[tuple[int, WGSLKernel]]:
    """``[(parameter index, WGSLKernel)]``: one check shader per ``func.attrs["index_checks"]``
    entry. It reads every element of the checked index parameter (binding 0) and sets
    ``status[0]`` (binding 1, a ``u32``) to 1 when one lies outside its inclusive bounds; the
    runtime runs it before the kernel and raises ``InputError`` after the run (the CPU kernel
    returns ``STATUS_INDEX_OUT_OF_RANGE`` instead)."""
    out = []
    for chk in func.attrs.get("index_checks", ()):
        buf = func.params[chk["param"]]
        n = buf.size
        if n == 0:
            continue
        st = WGSL_TYPES[buf.dtype][1] if buf.dtype in WGSL_TYPES else None
        if st not in ("i32", "u32"):
            raise CodegenError(f"kernel {func.name}: index input {buf.name} of dtype {buf.dtype}"
                               f" has no WGSL form")
        b = [(max(int(lo), I32_MIN), min(int(hi), I32_MAX)) for lo, hi in chk["bounds"]]
        lo = ", ".join(f"{_literal(x, 'int32')}" for x, _ in b)
        hi = ", ".join(f"{_literal(y, 'int32')}" for _, y in b)
        val = "i32(b0[i])" if st == "i32" else "i32(min(b0[i], 2147483647u))"
        src = (f"@group(0) @binding(0) var<storage, read_write> b0: array<{st}>;\n"
               f"@group(0) @binding(1) var<storage, read_write> status: array<u32>;\n"
               f"const lo = array<i32, {len(b)}>({lo});\nconst hi = array<i32, {len(b)}>({hi});\n"
               f"\n@compute @workgroup_size(64, 1, 1)\n"
               f"fn main(@builtin(local_invocation_id) lid: vec3<u32>) {{\n"
               f"  for (var i: i32 = i32(lid.x); i < {n}; i += 64) {{\n"
               f"    let v = {val};\n"
               f"    let k = i % {len(b)};\n"
               f"    if (v < lo[k] || v > hi[k]) {{ status[0] = 1u; }}\n"
               f"  }}\n}}\n")
        out.append((chk["param"], WGSLKernel(src, [("param", chk["param"]), ("status", 0)],
                                              (1, 1, 1), (64, 1, 1))))
    return out


def emit_wgsl(func: PrimFunc, target) -> tuple[list, list[WGSLKernel]]:
    """``(workspace buffers, [WGSLKernel per device kernel])`` of scheduled GPU ``func``.

    Raises:
        ScheduleError: the kernel exceeds the target's limits (``verify_gpu_kernel``).
        CodegenError: a dtype, constant or construct WGSL cannot express (names the kernel)."""
    from ..target import Target
    from ..tir.gpu import split_host_device
    from ..tir.pipeline import lower_for_target
    target = Target(target)
    lowered = lower_for_target(func, target)
    workspace, kernels = split_host_device(lowered)
    out = [WGSLPrinter(lowered, workspace, k, target).module() for k in kernels]
    return workspace, out


__all__ = ["STATUS_INT64_OVERFLOW", "WGSLKernel", "WGSL_DIALECT", "emit_index_checks", "emit_wgsl",
           "legalize_wgsl"]
