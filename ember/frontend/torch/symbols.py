"""torch.export's symbolic sizes (``SymInt``s over ``s0, s1...``) as ember symbolic dimensions.

A program exported with ``dynamic_shapes={"x": {0: Dim("batch", min=1, max=8)}}`` records its
input sizes as sympy symbols (``s77``) with inclusive ranges in ``ep.range_constraints``, and
every derived size (a ``view`` to ``s77*s27``, a slice to ``s27 - 1``) as a sympy expression
over them. ``TorchSymbols`` renames each input symbol after the ``torch.export.Dim`` that
made it (recovered from the ``dynamic_shapes`` spec: the Dim's ``__name__``; an input axis
without a named Dim becomes ``<input>_d<axis>``, as ``from_onnx`` names an unnamed
``dim_param``), converts the expressions to ``int64`` loop-IR dimensions
(``ember.tir.symbolic``: ``+ * // % min max``) and keeps their bounds (``main.attrs
["symbol_bounds"]``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ...errors import UnsupportedOpError
from ...tir import symbolic as sym


class TorchSymbols:
    """The symbols of one exported program.

    Attributes:
        names: ``{torch symbol name ("s77"): ember symbol name ("batch")}``.
        bounds: ``{ember symbol name: (lo, hi)}`` (inclusive; ``hi`` ``None`` when unbounded),
            from ``ep.range_constraints``.
    """

    def __init__(self, names: Mapping[str, str], bounds: Mapping[str, tuple]):
        self.names = dict(names)
        self.bounds = dict(bounds)
        self.used: set[str] = set()

    def dim(self, d):
        """An ember dimension (``int`` or ``tir`` expression) of a torch size: an ``int``,
        a ``torch.SymInt`` or a sympy expression.

        Raises:
            UnsupportedOpError: a sympy function ember's dimensions have no form for
                (``sqrt``, ``ceiling``, floats...)."""
        if isinstance(d, bool):
            return int(d)
        if isinstance(d, int):
            return d
        node = getattr(d, "node", None)
        expr = node.expr if node is not None else d
        return sym.as_dim(self._expr(expr))

    def _expr(self, e):
        import sympy
        if isinstance(e, (int, sympy.Integer)):
            return int(e)
        if isinstance(e, sympy.Symbol):
            name = self.names.get(e.name, e.name)
            self.used.add(name)
            return sym.Symbol(name)
        args = [self._expr(a) for a in e.args]
        fname = type(e).__name__
        if isinstance(e, sympy.Add):
            out = args[0]
            for a in args[1:]:
                out = sym.as_expr(out) + sym.as_expr(a)
            return out
        if isinstance(e, sympy.Mul):
            out = args[0]
            for a in args[1:]:
                out = sym.as_expr(out) * sym.as_expr(a)
            return out
        if fname == "FloorDiv":
            return sym.as_expr(args[0]) // sym.as_expr(args[1])
        if fname in ("PythonMod", "Mod"):
            return sym.as_expr(args[0]) % sym.as_expr(args[1])
        if fname in ("Min", "Max"):
            out = args[0]
            for a in args[1:]:
                out = (sym.dim_min if fname == "Min" else sym.dim_max)(out, a, self.bounds)
            return sym.as_expr(out)
        raise UnsupportedOpError(
            f"the exported size expression {e} uses {fname}, which ember's symbolic "
            f"dimensions (+ - * // % min max over symbols) cannot express; keep sizes integer "
            f"(no float math on shapes) or export with static shapes", op=fname)

    def symbol_bounds(self) -> dict:
        """``{name: [lo, hi]}`` of the symbols the import used (``main.attrs
        ["symbol_bounds"]``)."""
        return {n: list(self.bounds.get(n, (0, None))) for n in sorted(self.used)}


def _finite(v):
    """An ``int`` of a sympy range bound, ``None`` for torch's ``int_oo`` / sympy's ``oo``
    (``int_oo.is_finite`` is true, so it is compared by identity)."""
    import sympy
    from torch.utils._sympy.numbers import int_oo
    if v is None or v in (int_oo, -int_oo, sympy.oo, -sympy.oo):
        return None
    return int(v)


def _spec_of(dynamic_shapes, k: int, name: str):
    if dynamic_shapes is None:
        return None
    if isinstance(dynamic_shapes, Mapping):
        return dynamic_shapes.get(name)
    if isinstance(dynamic_shapes, (list, tuple)) and k < len(dynamic_shapes):
        return dynamic_shapes[k]
    return None


def _axis_dims(spec) -> dict:
    if isinstance(spec, Mapping):
        return dict(spec)
    if isinstance(spec, (list, tuple)):
        return {a: d for a, d in enumerate(spec) if d is not None}
    return {}


def program_symbols(ep, inputs: Sequence[tuple], dynamic_shapes=None) -> TorchSymbols:
    """The ``TorchSymbols`` of ``ep``.

    Args:
        ep: the (decomposed) ``ExportedProgram``.
        inputs: ``(ember input name, export argument name, fake value)`` of each tensor user
            input, in order.
        dynamic_shapes: the spec given to ``torch.export.export`` (a dict keyed by
            ``forward``'s argument names, or a tuple in argument order; per input a dict
            ``{axis: Dim}`` or a tuple of ``Dim``/``None``), or ``None``.
    Returns:
        names from the Dims (``Dim("seq")`` -> ``seq``), ``<input>_d<axis>`` for other input
        axes, and bounds from ``ep.range_constraints`` (torch's ``int_oo`` -> ``None``)."""
    import sympy
    names: dict[str, str] = {}
    for k, (name, arg_name, val) in enumerate(inputs):
        dims = _axis_dims(_spec_of(dynamic_shapes, k, arg_name))
        for axis, d in enumerate(val.shape):
            node = getattr(d, "node", None)
            if node is None or not isinstance(node.expr, sympy.Symbol):
                continue
            key = node.expr.name
            dim = dims.get(axis)
            label = getattr(dim, "__name__", None)
            if isinstance(label, str) and label.isidentifier() and key not in names:
                names[key] = label
            names.setdefault(key, f"{name}_d{axis}")
    bounds: dict[str, tuple] = {}
    for s, vr in getattr(ep, "range_constraints", {}).items():
        n = names.get(str(s), str(s))
        lo, hi = _finite(vr.lower), _finite(vr.upper)
        bounds[n] = (max(lo or 0, 0), hi)
    return TorchSymbols(names, bounds)
