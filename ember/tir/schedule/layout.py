"""Layout primitives: ``IndexMap`` (a map from old to new buffer indices), transform_layout and
storage_align."""

from __future__ import annotations

import json
from typing import Callable, Sequence

import numpy as np

from ...errors import ScheduleError
from ..arith import interval, map_accesses, simplify, substitute
from ..expr import BinOp, Cast, Const, Expr, Unary, Var, as_expr
from ..stmt import Buffer
from .analysis import block_reads, block_writes


class IndexMap:
    """``(i0, ..., in) -> (e0, ..., em)``: where element ``i`` of a buffer lives in the new
    layout. Build with ``IndexMap.from_func(ndim, lambda n, c, h, w: (n, c // 16, h, w, c % 16))``.
    Index expressions use ``+ - *`` and ``//``/``%`` by constants."""

    def __init__(self, src: Sequence[Var], dst: Sequence[Expr]):
        self.src = tuple(src)
        self.dst = tuple(as_expr(d) for d in dst)

    @staticmethod
    def from_func(ndim: int, fn: Callable) -> "IndexMap":
        """An ``IndexMap`` of ``ndim`` source indices whose destination is ``fn(i0, ...,
        i{ndim-1})`` (a tuple of expressions, or one expression)."""
        src = [Var(f"i{k}") for k in range(ndim)]
        out = fn(*src)
        if not isinstance(out, (tuple, list)):
            out = (out,)
        return IndexMap(src, out)

    def apply(self, indices: Sequence[Expr]) -> tuple:
        """New indices for old ``indices``."""
        vmap = dict(zip(self.src, indices))
        return tuple(substitute(d, vmap) for d in self.dst)

    def new_shape(self, shape: Sequence[int]) -> tuple:
        """Extent of each new dimension over a buffer of ``shape``.

        Raises:
            ScheduleError: a new index can be negative or unbounded.
        """
        bounds = {v: (0, n - 1) for v, n in zip(self.src, shape)}
        out = []
        for d in self.dst:
            lo, hi = interval(d, bounds)
            if lo < 0 or hi == float("inf"):
                raise ScheduleError(f"index map {self}: new index {d!r} ranges over [{lo}, {hi}]"
                                    f", not a non-negative bounded range")
            out.append(int(hi) + 1)
        return tuple(out)

    def eval_numpy(self, grids: Sequence[np.ndarray]) -> list[np.ndarray]:
        """New indices for arrays of old indices (broadcasting)."""
        env = {id(v): g for v, g in zip(self.src, grids)}
        return [np.broadcast_to(_np_eval(d, env), np.broadcast(*grids).shape) for d in self.dst]

    def _split_plan(self, shape: Sequence[int]):
        """For a split/permute map -- every new index is a source index ``v``, ``v // c`` or
        ``v % c`` (``c`` a positive constant), each source index used alone or as one
        ``// c`` and one ``% c`` of the same ``c`` (an unused one has extent 1) -- the
        ``(reshape, transpose)`` that carries it out on a ``shape`` array padded to the
        split extents: ``(padded shape, reshaped shape, axis order)``; ``None`` for any other
        map. Such a map is injective (``divmod`` recovers ``v``)."""
        pos = {id(v): k for k, v in enumerate(self.src)}
        uses: dict[int, dict] = {}
        for j, d in enumerate(self.dst):
            if isinstance(d, Var) and id(d) in pos:
                kind, c, k = "id", None, pos[id(d)]
            elif isinstance(d, BinOp) and d.op in ("floordiv", "floormod") \
                    and isinstance(d.a, Var) and id(d.a) in pos and isinstance(d.b, Const) \
                    and isinstance(d.b.value, (int, np.integer)) and int(d.b.value) > 0:
                kind, c, k = d.op, int(d.b.value), pos[id(d.a)]
            else:
                return None
            u = uses.setdefault(k, {})
            if kind in u or ("id" in u) or (kind == "id" and u) or u.get("c", c) != c:
                return None
            u[kind], u["c"] = j, c
        try:
            new = self.new_shape(shape)
        except ScheduleError:
            return None
        padded, reshaped, axis_of = [], [], {}
        for k, n in enumerate(shape):
            u = uses.get(k)
            if u is None:
                if n != 1:
                    return None  # an index the map drops: not injective
                padded.append(1)
                continue
            if "id" in u:
                padded.append(n)
                axis_of[u["id"]] = len(reshaped)
                reshaped.append(n)
                continue
            if "floordiv" not in u or "floormod" not in u:
                return None
            dv, md = new[u["floordiv"]], new[u["floormod"]]
            if dv * md < n or not (md == u["c"] or dv == 1):
                return None
            padded.append(dv * md)
            axis_of[u["floordiv"]] = len(reshaped)
            axis_of[u["floormod"]] = len(reshaped) + 1
            reshaped += [dv, md]
        return padded, reshaped, [axis_of[j] for j in range(len(self.dst))]

    def apply_numpy(self, arr: np.ndarray, pad_value=0, out: np.ndarray | None = None) -> np.ndarray:
        """``arr`` re-laid out: ``out[map(i)] = arr[i]``; positions no index maps to hold
        ``pad_value``. ``out``: the array to write (shape ``new_shape(arr.shape)``, e.g. a view
        into a weight arena), else a new one.

        Raises:
            ValueError: ``out`` has another shape.
        """
        shape = self.new_shape(arr.shape)
        if out is None:
            out = np.full(shape, pad_value, dtype=arr.dtype)
        elif tuple(out.shape) != tuple(shape):
            raise ValueError(f"index map {self}: out has shape {tuple(out.shape)}, the re-laid "
                             f"out array needs {tuple(shape)}")
        else:
            out[...] = pad_value
        plan = self._split_plan(arr.shape)
        if plan is not None:  # a split/permute (weight packing): a reshape and a transpose
            padded, reshaped, order = plan
            src = arr
            if tuple(padded) != tuple(arr.shape):
                src = np.full(padded, pad_value, dtype=arr.dtype)
                src[tuple(slice(0, n) for n in arr.shape)] = arr
            out[...] = src.reshape(reshaped).transpose(order)
            return out
        grids = np.indices(arr.shape, sparse=True)
        new = self.eval_numpy(list(grids))
        out[tuple(new)] = arr
        return out

    def unapply_numpy(self, new: np.ndarray, shape: Sequence[int]) -> np.ndarray:
        """The ``shape`` array that ``apply_numpy`` turned into ``new`` (gathers
        ``new[map(i)]``)."""
        grids = np.indices(tuple(shape), sparse=True)
        return new[tuple(self.eval_numpy(list(grids)))]

    def is_injective(self, shape: Sequence[int], chunk: int = 1 << 18) -> bool:
        """True when no two indices of a ``shape`` buffer map to the same place. The buffer is
        mapped in blocks of about ``chunk`` elements (sparse index grids over a range of one
        axis, the axes after it whole): a 2.4M-element weight once took ~100 MB of index arrays
        at compile time. Each new place records which element took it, so a place taken twice
        is found without sorting."""
        shape = tuple(int(n) for n in shape)
        if len(shape) == 0:
            return True  # one element: one place
        if self._split_plan(shape) is not None:
            return True  # a split/permute: divmod recovers every index
        if 0 in shape:
            return True  # no element: nothing can collide (and the new shape may not exist)
        nshape = self.new_shape(shape)
        owner = np.full(int(np.prod(nshape, dtype=np.int64)), -1, dtype=np.int64)
        k = len(shape)  # the axes from k on are whole in every block
        while k > 0 and int(np.prod(shape[k - 1:], dtype=np.int64)) <= chunk:
            k -= 1
        axis = max(k - 1, 0)  # the axis blocks are ranges of
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
        step = max(1, chunk // max(inner, 1))
        strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
        for lead in np.ndindex(*shape[:axis]):
            for a in range(0, shape[axis], step):
                grids = []
                for d, n in enumerate(shape):
                    g = (np.array([lead[d]]) if d < axis else
                         np.arange(a, min(a + step, n)) if d == axis else np.arange(n))
                    grids.append(g.reshape([-1 if e == d else 1 for e in range(len(shape))]))
                new = self.eval_numpy(grids)
                flat = np.ravel_multi_index([np.asarray(x).ravel() for x in new], nshape)
                ids = sum(g * st for g, st in zip(grids, strides)).ravel()
                if (owner[flat] != -1).any():
                    return False  # taken by an element of an earlier block
                owner[flat] = ids
                if not np.array_equal(owner[flat], ids):
                    return False  # two elements of this block
        return True

    def to_json(self) -> str:
        """JSON text ``{"ndim": n, "dst": [...]}`` with source indices by position.

        Raises:
            ScheduleError: an expression uses a variable that is not a source index or an operator
                other than a binary op (``+ - * // %``) or cast."""
        pos = {id(v): k for k, v in enumerate(self.src)}
        return json.dumps({"ndim": len(self.src), "dst": [_enc(d, pos) for d in self.dst]})

    @staticmethod
    def from_json(text: str) -> "IndexMap":
        """Inverse of ``to_json`` (fresh source variables ``i0..``)."""
        d = json.loads(text)
        src = [Var(f"i{k}") for k in range(d["ndim"])]
        return IndexMap(src, [_dec(x, src) for x in d["dst"]])

    def __repr__(self):
        return f"IndexMap({self.to_json()})"


def _enc(e: Expr, pos) -> object:
    if isinstance(e, Var):
        if id(e) not in pos:
            raise ScheduleError(f"index map refers to unknown variable {e.name}")
        return {"v": pos[id(e)]}
    if isinstance(e, Const):
        return {"c": e.value}
    if isinstance(e, BinOp):
        return {"op": e.op, "a": _enc(e.a, pos), "b": _enc(e.b, pos)}
    if isinstance(e, Cast):
        return _enc(e.value, pos)
    raise ScheduleError(f"index map expression {e!r} is not supported (use + - * // %)")


def _dec(x, src) -> Expr:
    from ..expr import binop
    if "v" in x:
        return src[x["v"]]
    if "c" in x:
        return Const(x["c"], "int64")
    return binop(x["op"], _dec(x["a"], src), _dec(x["b"], src))


def _np_eval(e: Expr, env):
    if isinstance(e, Var):
        return env[id(e)]
    if isinstance(e, Const):
        return np.int64(e.value)
    if isinstance(e, Cast):
        return _np_eval(e.value, env)
    if isinstance(e, Unary) and e.op == "neg":
        return -_np_eval(e.a, env)
    if isinstance(e, BinOp):
        a, b = _np_eval(e.a, env), _np_eval(e.b, env)
        f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
             "floormod": np.mod, "min": np.minimum, "max": np.maximum}.get(e.op)
        if f is not None:
            return f(a, b)
    raise ScheduleError(f"index map expression {e!r} cannot be evaluated")


def _pick_buffer(sch, block: str, which, prim: str) -> Buffer:
    blk, _ = sch.find_block(block, prim)
    if not (isinstance(which, tuple) and len(which) == 2 and which[0] in ("read", "write")):
        raise ScheduleError(f"{prim}: buffer must be ('read', i) or ('write', i), got {which!r}")
    bufs = block_reads(blk) if which[0] == "read" else block_writes(blk)
    if not 0 <= which[1] < len(bufs):
        raise ScheduleError(f"{prim}: block {block!r} has {len(bufs)} {which[0]} buffers "
                            f"({[b.name for b in bufs]}); index {which[1]} is out of range")
    return bufs[which[1]]


def transform_layout(sch, block: str, which: tuple, index_map: IndexMap) -> None:
    """Implementation of ``Schedule.transform_layout`` on ``sch`` (rewrites ``sch.body`` in place;
    ``Schedule.transform_layout`` records it and restores the function if this raises).
    A parameter's new layout is recorded in ``sch.func.attrs["param_layouts"]``.

    Raises:
        ScheduleError: a bad ``which``, a rank mismatch, a buffer already aligned or compacted, new
            indices that are negative or unbounded, or a non-injective map."""
    prim = "transform_layout"
    buf = _pick_buffer(sch, block, which, prim)
    where = f"{prim} of {buf.name} (block {block!r})"
    if len(index_map.src) != len(buf.shape):
        raise ScheduleError(f"{where}: the index map takes {len(index_map.src)} indices, the "
                            f"buffer has rank {len(buf.shape)}")
    if buf.strides is not None or buf.origin is not None:
        raise ScheduleError(f"{where}: the buffer was already aligned or compacted; transform "
                            f"its layout first")
    try:
        shape = index_map.new_shape(buf.shape)
    except ScheduleError as e:
        raise ScheduleError(f"{where}: {e}") from None
    if int(np.prod(buf.shape)) <= (1 << 22) and not index_map.is_injective(buf.shape):
        raise ScheduleError(f"{where}: the index map sends two elements to the same place")
    nb = Buffer(buf.name, shape, buf.dtype, buf.scope)

    def fn(b, idx):
        if b is not buf:
            return b, idx
        if idx is None:
            return nb, None
        return nb, tuple(simplify(i) for i in index_map.apply(idx))
    sch.body = map_accesses(sch.body, fn)
    for k, p in enumerate(sch.func.params):
        if p is buf:
            sch.func.params[k] = nb
            layouts = dict(sch.func.attrs.get("param_layouts", {}))
            layouts[k] = {"index_map": index_map.to_json(), "shape": list(buf.shape)}
            sch.func.attrs["param_layouts"] = layouts


def storage_align(sch, block: str, index: int, axis: int, factor: int, offset: int) -> None:
    """Implementation of ``Schedule.storage_align`` on ``sch`` (rewrites ``sch.body`` in place;
    ``Schedule.storage_align`` records it and restores the function if this raises).
    Strides are in elements.

    Raises:
        ScheduleError: the buffer is a function parameter, ``axis`` is not in ``[0, ndim - 1)``, or
            not ``factor >= 1 and 0 <= offset < factor``."""
    prim = "storage_align"
    buf = _pick_buffer(sch, block, ("write", index), prim)
    where = f"{prim} of {buf.name} (block {block!r}) axis {axis}"
    if any(p is buf for p in sch.func.params):
        raise ScheduleError(f"{where}: {buf.name} is a function parameter; its layout belongs "
                            f"to the caller")
    nd = len(buf.shape)
    if not 0 <= axis < nd - 1:
        raise ScheduleError(f"{where}: axis must be in [0, {nd - 1}) (the last axis has "
                            f"stride 1)")
    if factor < 1 or not 0 <= offset < factor:
        raise ScheduleError(f"{where}: need factor >= 1 and 0 <= offset < factor, got "
                            f"factor={factor}, offset={offset}")
    strides = list(buf.elem_strides())
    for d in range(nd - 2, -1, -1):
        s = strides[d + 1] * buf.shape[d + 1]
        if d == axis:
            while s % factor != offset:
                s += 1
        strides[d] = s
    nb = Buffer(buf.name, buf.shape, buf.dtype, buf.scope, strides, buf.origin)
    sch.body = map_accesses(sch.body, lambda b, i: (nb, i) if b is buf else (b, i))
