"""FoldConstant: evaluate bindings whose arguments are all constants (with the operators' NumPy
references) and use the values instead.

``add(const(...), const(...))`` becomes one ``const``. A ``cast`` that widens a low-precision
float constant (float16/bfloat16 -> float32, as ToMixedPrecision writes for weights) is kept: the
weight stays stored in half precision and the consuming kernel converts it as it loads. Results
larger than
``FoldConstant.max_elems`` elements (config; default 2**24) are left alone so a ``broadcast_to``
of a scalar does not turn into a huge weight. Calls of module functions are not folded.
"""

from __future__ import annotations

import numpy as np

from ...ops import get_op
from ..ir import Constant, IRModule
from ..mutator import rewrite_function
from .pass_manager import module_pass, register_config

MAX_ELEMS = register_config("FoldConstant.max_elems", int,
                            "largest result (elements) FoldConstant materializes")


def fold_function(func, max_elems: int = 1 << 24):
    """``func`` with every binding whose arguments are all constants replaced by its value (the
    op's NumPy reference). Skipped: function calls, widening casts of float16/bfloat16, bfloat16 or
    non-static results, and results over ``max_elems`` elements."""
    def visit(b, args, rw):
        if b.call.is_function_call or not args or not all(isinstance(a, Constant) for a in args):
            return None
        if b.call.op == "cast" and args[0].type.dtype in ("float16", "bfloat16") and \
                b.outputs[0].type.dtype in ("float32", "float64"):
            return None
        if any(o.type.dtype == "bfloat16" or not o.type.is_static or o.type.size > max_elems
               for o in b.outputs):
            return None
        outs = get_op(b.call.op).reference([a.data for a in args], b.call.attrs)
        res = []
        for o, v in zip(b.outputs, outs):
            v = np.asarray(v).astype(o.type.dtype).reshape(o.type.shape)
            hint = args[0].name_hint if len(args) == 1 else None
            res.append(Constant(np.ascontiguousarray(v), name_hint=hint))
        return res
    return rewrite_function(func, visit)


@module_pass("FoldConstant", opt_level=2)
def FoldConstant(mod: IRModule, ctx) -> IRModule:
    """Fold all-constant bindings of every non-primitive function."""
    out = IRModule(mod.functions)
    lim = ctx.get_config(MAX_ELEMS, 1 << 24)
    for n, f in mod.functions.items():
        if not f.attrs.get("primitive"):
            out[n] = fold_function(f, lim)
    return out
