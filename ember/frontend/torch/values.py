"""Helpers the ATen converters share: dtypes of graph values, Python scalars as constants of a
tensor's dtype, casts, and torch's type promotion of an operator's arguments."""

from __future__ import annotations

import numpy as np

from ...dtypes import np_dtype


def is_value(x) -> bool:
    """True for a graph value (``Var``/``Constant``), false for Python scalars/lists/None."""
    return hasattr(x, "type")


def cast(ctx, v, dtype: str):
    """``v`` converted to ``dtype`` (itself when it has that dtype already)."""
    if v.type.dtype == dtype:
        return v
    return ctx.call("cast", [v], {"dtype": dtype})


def as_value(ctx, x, dtype: str):
    """A graph value of ``dtype`` from a graph value (cast) or a Python scalar (constant)."""
    if is_value(x):
        return cast(ctx, x, dtype)
    return ctx.const(np.asarray(x, dtype=np_dtype(dtype)))


def promoted(node, *positions) -> str:
    """ember dtype name of torch's result type of the node's arguments at ``positions``
    (``torch.result_type`` on the recorded values; Python scalars take part as scalars)."""
    import torch
    from .importer import torch_dtype_name
    vals = []
    for p in positions:
        a = node.fx.args[p] if p < len(node.fx.args) else None
        if isinstance(a, torch.fx.Node):
            a = a.meta["val"]
        if a is not None:
            vals.append(a)
    if len(vals) == 1:
        v = vals[0]
        return torch_dtype_name(v.dtype if isinstance(v, torch.Tensor) else
                                torch.tensor(v).dtype)
    return torch_dtype_name(torch.result_type(*vals[:2]) if len(vals) == 2 else
                            torch.result_type(vals[0], vals[1]))


def axes_of(dims, ndim: int) -> list[int] | None:
    """Normalized reduction axes from torch's ``dim`` (``None``/``[]`` -> every axis)."""
    if dims is None:
        return None
    if isinstance(dims, int):
        dims = [dims]
    dims = list(dims)
    if not dims:
        return None
    return [d % ndim if ndim else 0 for d in dims]


def ints(x, n: int) -> list[int]:
    """A torch int-or-list argument as ``n`` ints (``2`` -> ``[2, 2]``, ``[3]`` -> ``[3, 3]``)."""
    if isinstance(x, int):
        return [x] * n
    x = list(x)
    return x * n if len(x) == 1 else x
