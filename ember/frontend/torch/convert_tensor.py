"""ATen converters: views and layout (view/reshape/permute/expand/slice/select/cat/split),
copies and dtype conversions, tensor creation (folded to constants: shapes are static) and
indexing (index/index_select/gather/where).

View ops produce copies in the graph IR (values are immutable SSA); export's functionalization
has already turned in-place ops (``relu_``, ``add_``) and views of mutated tensors into
functional ops, so this is exact.
"""

from __future__ import annotations

import operator

import numpy as np

from ...dtypes import np_dtype
from ...errors import UnsupportedOpError
from ...tir.symbolic import (DEFAULT_MAX, as_dim, as_expr, bounds_of, dim_max, dim_min,
                             dims_equal, is_symbolic)
from .registry import aten
from .values import as_value, cast, is_value


def _reshape(ctx, x, shape):
    shape = [d if is_symbolic(d) else int(d) for d in shape]
    if tuple(x.type.shape) == tuple(shape):
        return x
    return ctx.call("reshape", [x], {"newshape": shape})


@aten("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
      "aten.unsqueeze.default", "aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default",
      "aten.flatten.using_ints", "aten.view_copy.default", "aten.unflatten.int")
def view(ctx, node, x, *args):
    """Any reshaping view: ``reshape`` to the shape torch recorded for the node."""
    return _reshape(ctx, x, node.shape)


@aten("aten.permute.default", "aten.permute_copy.default")
def permute(ctx, node, x, dims):
    """``transpose`` with ``perm = dims``."""
    nd = x.type.ndim
    return _transposed(ctx, x, [d % nd for d in dims])


def _transposed(ctx, x, perm):
    """``transpose(x, perm)``; a 2-D swap of a named weight is remembered
    (``ctx.transpose_of``) so a product can read the weight itself with ``trans_b``."""
    y = ctx.call("transpose", [x], {"perm": perm})
    if perm == [1, 0] and id(x) in ctx.const_names:
        if not hasattr(ctx, "transpose_of"):
            ctx.transpose_of = {}
        ctx.transpose_of[id(y)] = x
    return y


@aten("aten.t.default", "aten.transpose.int", "aten.numpy_T.default")
def transpose(ctx, node, x, d0=0, d1=1):
    """Swap two dims (``t``: the two of a 2-D tensor)."""
    nd = x.type.ndim
    if nd < 2:
        return x
    perm = list(range(nd))
    a, b = d0 % nd, d1 % nd
    perm[a], perm[b] = perm[b], perm[a]
    return _transposed(ctx, x, perm)


@aten("aten.expand.default", "aten.expand_copy.default")
def expand(ctx, node, x, size, implicit=False):
    """``broadcast_to`` the recorded shape."""
    if tuple(x.type.shape) == node.shape:
        return x
    return ctx.call("broadcast_to", [x], {"shape": list(node.shape)})


def _clamp(i, n, bounds):
    """Python-slice clamping of index ``i`` to ``[0, n]`` (``i`` or ``n`` may be symbolic:
    a negative int counts from the end; a symbolic index is taken as non-negative, as
    torch's guards on the exported program promise)."""
    if not is_symbolic(i) and not is_symbolic(n):
        return min(max(i + n if i < 0 else i, 0), n)
    if not is_symbolic(i) and i < 0:
        i = as_dim(as_expr(n) + i)
    return _lesser(dim_max(i, 0, bounds), n, bounds)


def _lesser(a, b, bounds):
    """``min(a, b)``, decided by the bounds of ``a - b`` where they prove it (``seq - 1`` is
    less than ``seq`` for every ``seq``, which the bounds of each alone do not show)."""
    lo, hi = bounds_of(as_dim(as_expr(a) - as_expr(b)), bounds)
    if hi is not None and hi <= 0:
        return a
    if lo is not None and lo >= 0:
        return b
    return dim_min(a, b, bounds)


def _slice(ctx, x, dim, start, end, step):
    n = x.type.shape[dim]
    start = 0 if start is None else (start if is_symbolic(start) else int(start))
    end = n if end is None else (end if is_symbolic(end) else int(end))
    if not is_symbolic(end) and end >= 2 ** 62:  # torch's "to the end" (INT64_MAX)
        end = n
    start, end = _clamp(start, n, ctx.symbol_bounds), _clamp(end, n, ctx.symbol_bounds)
    if step <= 0:
        raise UnsupportedOpError(f"slice step {step} must be positive (torch requires it)")
    if dims_equal(start, 0) and dims_equal(end, n) and step == 1:
        return x
    b = [0] * x.type.ndim
    e = list(x.type.shape)
    s = [1] * x.type.ndim
    b[dim], e[dim], s[dim] = start, end if dims_equal(_lesser(start, end, ctx.symbol_bounds),
                                                       start) else \
        dim_max(end, start, ctx.symbol_bounds), int(step)
    return ctx.call("strided_slice", [x], {"begin": b, "end": e, "strides": s})


@aten("aten.slice.Tensor", "aten.slice_copy.Tensor")
def slice_(ctx, node, x, dim=0, start=None, end=None, step=1):
    """``x[..., start:end:step, ...]`` along ``dim`` (bounds clamped as Python slices)."""
    return _slice(ctx, x, dim % x.type.ndim, start, end, step)


@aten("aten.narrow.default")
def narrow(ctx, node, x, dim, start, length):
    """``x.narrow(dim, start, length)``."""
    dim = dim % x.type.ndim
    start = start % x.type.shape[dim] if start < 0 else start
    return _slice(ctx, x, dim, start, start + length, 1)


@aten("aten.select.int", "aten.select_copy.int")
def select(ctx, node, x, dim, index):
    """``x[..., index, ...]``: the slice at ``index`` along ``dim``, that dim removed."""
    dim = dim % x.type.ndim
    n = x.type.shape[dim]
    if is_symbolic(n) or is_symbolic(index):  # in range: torch's guards on the export
        i = as_dim(as_expr(n) + index) if not is_symbolic(index) and index < 0 else index
        return _reshape(ctx, _slice(ctx, x, dim, i, as_dim(as_expr(i) + 1), 1), node.shape)
    if not -n <= index < n:
        raise UnsupportedOpError(f"select index {index} is out of range for size {n}")
    i = index % n
    return _reshape(ctx, _slice(ctx, x, dim, i, i + 1, 1), node.shape)


@aten("aten.split_with_sizes.default", "aten.split.Tensor", "aten.split_with_sizes_copy.default",
      "aten.split_copy.Tensor")
def split(ctx, node, x, sizes, dim=0):
    """Consecutive slices along ``dim`` (``split.Tensor``: chunks of ``sizes`` elements)."""
    dim = dim % x.type.ndim
    n = x.type.shape[dim]
    if isinstance(sizes, int):
        sizes = [min(sizes, n - k) for k in range(0, n, sizes)]
    outs, at = [], 0
    for sz in sizes:
        outs.append(_slice(ctx, x, dim, at, at + sz, 1))
        at += sz
    return tuple(outs)


@aten("aten.unbind.int")
def unbind(ctx, node, x, dim=0):
    """Every index of ``dim`` as its own tensor."""
    dim = dim % x.type.ndim
    shape = [d for k, d in enumerate(x.type.shape) if k != dim]
    return tuple(_reshape(ctx, _slice(ctx, x, dim, i, i + 1, 1), shape)
                 for i in range(x.type.shape[dim]))


@aten("aten.cat.default", "aten.concat.default")
def cat(ctx, node, tensors, dim=0):
    """``concatenate`` along ``dim`` (empty 1-D tensors, which torch skips, are dropped)."""
    dt = node.dtype
    ts = [cast(ctx, t, dt) for t in tensors if not (t.type.ndim == 1 and t.type.shape[0] == 0)]
    if len(ts) == 1:
        return ts[0]
    return ctx.call("concatenate", ts, {"axis": dim % node.val.dim()})


@aten("aten.stack.default")
def stack(ctx, node, tensors, dim=0):
    """Tensors of one shape stacked along a new axis ``dim``."""
    nd = tensors[0].type.ndim + 1
    dim = dim % nd
    shape = list(tensors[0].type.shape)
    shape.insert(dim, 1)
    return ctx.call("concatenate", [_reshape(ctx, t, shape) for t in tensors], {"axis": dim})


@aten("aten.clone.default", "aten.alias.default", "aten.detach.default",
      "aten.lift_fresh_copy.default", "aten.contiguous.default", "aten.dropout.default",
      "aten.alias_copy.default", "aten.detach_copy.default")
def identity(ctx, node, x, *args, **kwargs):
    """Copies, aliases and (inference) dropout: the value itself."""
    return x


@aten("aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.type_as.default")
def to_copy(ctx, node, x, *args, **kwargs):
    """A copy in the recorded dtype (``cast`` when it changes)."""
    return cast(ctx, x, node.dtype)


@aten("aten.copy.default")
def copy(ctx, node, dst, src, non_blocking=False):
    """``dst.copy_(src)`` made functional: ``src`` broadcast to ``dst``'s shape and dtype."""
    y = cast(ctx, src, node.dtype)
    if tuple(y.type.shape) != node.shape:
        y = ctx.call("broadcast_to", [y], {"shape": list(node.shape)})
    return y


# creation (static shapes: compile-time constants) -----------------------------------------------

def _filled(node, value):
    return np.full(node.shape, value, dtype=np_dtype(node.dtype))


@aten("aten.full.default", "aten.scalar_tensor.default", "aten.zeros.default",
      "aten.ones.default", "aten.full_like.default", "aten.zeros_like.default",
      "aten.ones_like.default", "aten.empty.memory_format", "aten.empty_like.default",
      "aten.new_full.default", "aten.new_zeros.default", "aten.new_ones.default",
      "aten.empty_strided.default", "aten.new_empty.default")
def full(ctx, node, *args, **kwargs):
    """A constant filled with the fill value (``empty``: zeros)."""
    kind = node.op_type.split(".")[1]
    if kind in ("zeros", "zeros_like", "new_zeros") or kind.startswith(("empty", "new_empty")):
        value = 0
    elif kind in ("ones", "ones_like", "new_ones"):
        value = 1
    elif kind == "scalar_tensor":
        value = args[0]
    else:  # full(size, fill), full_like(x, fill), new_full(x, size, fill)
        value = args[2] if kind == "new_full" else args[1]
    if is_value(value):
        raise UnsupportedOpError("a fill value computed at run time is not supported")
    if any(is_symbolic(d) for d in node.shape):  # a scalar broadcast to the symbolic shape
        c = ctx.const(np.asarray(value, dtype=np_dtype(node.dtype)))
        return ctx.call("broadcast_to", [c], {"shape": list(node.shape)})
    return ctx.const(_filled(node, value))


@aten("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def arange(ctx, node, *args, **kwargs):
    """``arange`` as a constant (``start, end, step`` from the arguments)."""
    nums = [a for a in args if isinstance(a, (int, float)) or is_symbolic(a)]
    if len(nums) == 1:
        start, end, step = 0, nums[0], 1
    else:
        start, end = nums[0], nums[1]
        step = nums[2] if len(nums) > 2 else kwargs.get("step", 1)
    if any(is_symbolic(a) for a in (start, end, step)):
        return _symbolic_arange(ctx, node, start, end, step)
    vals = np.arange(start, end, step)
    return ctx.const(vals.astype(np_dtype(node.dtype)))


def _symbolic_arange(ctx, node, start, end, step):
    """``arange`` with a symbolic length: ``start + step * arange(hi)`` for the largest
    length the bounds allow, sliced to the recorded symbolic length (a weight and one
    ``strided_slice``).

    Raises:
        UnsupportedOpError: a symbolic start or step, or a length without an upper bound."""
    if is_symbolic(start) or is_symbolic(step):
        raise UnsupportedOpError("arange with a symbolic start or step is not supported; "
                                 "use arange(0, n) * step + start")
    (length,) = node.shape
    hi = bounds_of(length, ctx.symbol_bounds)[1]
    if hi is None or hi >= DEFAULT_MAX:
        raise UnsupportedOpError(
            f"arange of symbolic length {length} needs an upper bound on its symbols: give "
            f"the Dim a max= (torch.export.Dim(name, max=...))")
    table = ctx.const((start + step * np.arange(hi)).astype(np_dtype(node.dtype)))
    return ctx.call("strided_slice", [table], {"begin": [0], "end": [length], "strides": [1]})


# indexing ---------------------------------------------------------------------------------------

def _advanced(ctx, x, indices, what: str):
    """Torch's advanced indexing geometry: ``(x with the indexed dims moved to the front,
    the int64 index tuples (B..., k) for gather_nd / scatter_nd, where the B dims go in the
    result (0, or the first indexed dim when the indexed dims are adjacent), k)``.

    Raises:
        UnsupportedOpError: a boolean mask among several indices (data-dependent shape)."""
    given = [(d, i) for d, i in enumerate(indices) if i is not None]
    if any(i.type.dtype == "bool" for _, i in given):
        raise UnsupportedOpError(f"{what} with a boolean mask among {len(given)} indices has a "
                                 f"data-dependent shape; use torch.where instead")
    dims = [d for d, _ in given]
    nd = x.type.ndim
    perm = dims + [d for d in range(nd) if d not in dims]
    xf = x if perm == list(range(nd)) else ctx.call("transpose", [x], {"perm": perm})
    shape = np.broadcast_shapes(*[tuple(i.type.shape) for _, i in given])
    cols = []
    for _, i in given:
        i = cast(ctx, i, "int64")
        if tuple(i.type.shape) != shape:
            i = ctx.call("broadcast_to", [i], {"shape": list(shape)})
        cols.append(_reshape(ctx, i, list(shape) + [1]))
    idx = cols[0] if len(cols) == 1 else ctx.call("concatenate", cols, {"axis": len(shape)})
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    return xf, idx, (dims[0] if adjacent else 0), len(shape), perm


@aten("aten.index.Tensor")
def index(ctx, node, x, indices):
    """Advanced indexing ``x[i0, :, i2, ...]`` with integer index tensors (broadcast
    together): one index tensor is ``take`` along its axis; several are ``gather_nd`` over the
    indexed dims moved to the front, the index dims placed where torch puts them (in place of
    adjacent indexed dims, else first).

    Raises:
        UnsupportedOpError: boolean masks (a data-dependent shape)."""
    given = [(k, i) for k, i in enumerate(indices) if i is not None]
    if any(i.type.dtype == "bool" for _, i in given):
        raise UnsupportedOpError("boolean-mask indexing has a data-dependent shape; use "
                                 "torch.where / masked_fill instead, or "
                                 "torch.compile(backend='ember'), which runs it in PyTorch")
    if len(given) == 1:
        k, idx = given[0]
        return ctx.call("take", [x, idx], {"axis": k})
    xf, idx, at, nb, _ = _advanced(ctx, x, indices, "indexing")
    y = ctx.call("gather_nd", [xf, idx])
    if at:  # the index dims go where the (adjacent) indexed dims were
        nd = y.type.ndim
        rest = list(range(nb, nd))
        y = ctx.call("transpose", [y], {"perm": rest[:at] + list(range(nb)) + rest[at:]})
    return y


@aten("aten.index_put.default", "aten.index_put_.default", "aten._unsafe_index_put.default")
def index_put(ctx, node, x, indices, values, accumulate=False):
    """``x[indices] = values`` (``+=`` with ``accumulate``), functional: a boolean mask over
    leading dims with one value is ``where``; integer index tensors are ``scatter_nd`` (reduction
    add for ``accumulate``) over the indexed dims moved to the front, then moved back.

    Raises:
        UnsupportedOpError: a boolean mask with several values (their count depends on the
            data), or with ``accumulate``."""
    dt = node.dtype
    values = as_value(ctx, values, dt)
    given = [(k, i) for k, i in enumerate(indices) if i is not None]
    if len(given) == 1 and given[0][1].type.dtype == "bool":
        k, mask = given[0]
        if accumulate or int(np.prod(values.type.shape)) != 1:
            raise UnsupportedOpError("x[mask] = values with more than one value (or +=) has a "
                                     "data-dependent count; use torch.where(mask, values, x)")
        m = _reshape(ctx, mask, [1] * k + list(mask.type.shape) +
                     [1] * (x.type.ndim - k - mask.type.ndim))
        return ctx.call("where", [m, _reshape(ctx, values, []), x])
    xf, idx, at, nb, perm = _advanced(ctx, x, indices, "index_put")
    bshape, rest = list(idx.type.shape[:-1]), list(xf.type.shape[len(given):])
    torch_shape = rest[:at] + bshape + rest[at:]  # values come in the indexing result's layout
    upd = values
    if tuple(upd.type.shape) != tuple(torch_shape):
        upd = ctx.call("broadcast_to", [upd], {"shape": torch_shape})
    if at:  # to scatter_nd's (B..., rest...)
        nd = len(torch_shape)
        upd = ctx.call("transpose", [upd], {"perm": list(range(at, at + nb)) + list(range(at)) +
                                                    list(range(at + nb, nd))})
    y = ctx.call("scatter_nd", [xf, idx, upd], {"reduction": "add" if accumulate else "none"})
    if perm != list(range(len(perm))):
        y = ctx.call("transpose", [y], {"perm": [perm.index(d) for d in range(len(perm))]})
    return y


@aten("aten.index_select.default")
def index_select(ctx, node, x, dim, idx):
    """``take`` along ``dim`` with a 1-D index."""
    return ctx.call("take", [x, idx], {"axis": dim % x.type.ndim})


@aten("aten.gather.default")
def gather(ctx, node, x, dim, idx, sparse_grad=False):
    """``gather_elements`` along ``dim``."""
    return ctx.call("gather_elements", [x, idx], {"axis": dim % x.type.ndim})


@aten("aten.repeat.default")
def repeat(ctx, node, x, repeats):
    """``tile`` (leading dims of size 1 added when ``repeats`` is longer than the rank)."""
    repeats = list(repeats)
    extra = len(repeats) - x.type.ndim
    if extra > 0:
        x = _reshape(ctx, x, [1] * extra + list(x.type.shape))
    return ctx.call("tile", [x], {"repeats": repeats})


@aten("aten.flip.default")
def flip(ctx, node, x, dims):
    """Reverse ``dims`` (``strided_slice`` with step -1)."""
    nd = x.type.ndim
    dims = {d % nd for d in dims}
    b = [x.type.shape[k] - 1 if k in dims else 0 for k in range(nd)]
    e = [-1 if k in dims else x.type.shape[k] for k in range(nd)]
    s = [-1 if k in dims else 1 for k in range(nd)]
    return ctx.call("strided_slice", [x], {"begin": b, "end": e, "strides": s})


@aten("aten.constant_pad_nd.default")
def constant_pad(ctx, node, x, pad, value=0):
    """``nn.pad`` constant mode; torch's ``pad`` runs from the last dim
    (``[last_begin, last_end, prev_begin, ...]``), negative pads crop."""
    nd = x.type.ndim
    begins, ends = [0] * nd, [0] * nd
    for k in range(len(pad) // 2):
        begins[nd - 1 - k], ends[nd - 1 - k] = int(pad[2 * k]), int(pad[2 * k + 1])
    return ctx.call("nn.pad", [x], {"pads": begins + ends, "mode": "constant",
                                    "value": float(value)})


@aten("aten.tril.default", "aten.triu.default")
def trilu(ctx, node, x, diagonal=0):
    """Lower / upper triangle of the last two dims (``trilu``)."""
    return ctx.call("trilu", [x], {"k": int(diagonal), "upper": int("triu" in node.op_type)})


@aten("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def masked_fill(ctx, node, x, mask, value):
    """``where(mask, value, x)``."""
    return ctx.call("where", [cast(ctx, mask, "bool"), as_value(ctx, value, node.dtype), x])


@aten("_operator.getitem", "operator.getitem")
def getitem(ctx, node, seq, k):
    """Element ``k`` of a multi-output node.

    Raises:
        UnsupportedOpError: an output the converter does not produce (pooling indices, the
            training statistics of batch/layer norm)."""
    v = operator.getitem(seq, k)
    if v is None:
        raise UnsupportedOpError(f"output {k} of the producing operator (pooling indices or "
                                 f"normalization statistics) is not supported")
    return v


@aten("aten.sym_size.int")
def sym_size(ctx, node, x, dim):
    """A dimension (an int, or a symbolic dimension)."""
    return x.type.shape[dim]


@aten("aten.scatter.src", "aten.scatter.value", "aten.scatter_add.default",
      "aten.scatter.reduce", "aten.scatter.value_reduce")
def scatter(ctx, node, x, dim, index, src, reduce=None):
    """``x.scatter(dim, index, src)`` (``scatter_add``, ``reduce="add"/"multiply"``):
    ``scatter_elements`` with ``src`` cut to ``index``'s shape (torch reads only that corner)
    or a scalar broadcast to it."""
    dim = dim % x.type.ndim
    shape = list(index.type.shape)
    if is_value(src):
        src = cast(ctx, src, node.dtype)
        if tuple(src.type.shape) != tuple(shape):
            if src.type.ndim == 0:
                src = ctx.call("broadcast_to", [src], {"shape": shape})
            else:
                src = ctx.call("strided_slice", [src], {"begin": [0] * len(shape), "end": shape,
                                                        "strides": [1] * len(shape)})
    else:
        src = ctx.const(np.full(shape, src, dtype=np_dtype(node.dtype)))
    kind = "add" if "scatter_add" in node.op_type else \
        {None: "none", "add": "add", "multiply": "mul"}.get(reduce)
    if kind is None:
        raise UnsupportedOpError(f"scatter reduce={reduce!r} is not supported (add, multiply)")
    return ctx.call("scatter_elements", [x, cast(ctx, index, "int64"), src],
                    {"axis": dim, "reduction": kind})
