"""Running a plan with symbolic dimensions: one compiled model, any input sizes.

A plan built from a graph with symbolic dimensions (``ember.tir.symbolic``) records slot
shapes as dimension text (``"(batch * seq)"``), the symbols' declared bounds
(``plan["symbols"]``), each arena slot's lifetime (``plan["lifetimes"]``) and, per step, the
symbols its kernel takes as trailing ``int64`` arguments (``step["symbols"]``). At the first run
at a set of input shapes the ``SymbolicRunner`` binds the symbols (``bind_shapes``: inputs that
contradict a symbol or its bounds raise ``ShapeMismatchError`` naming them), evaluates every
slot's size and places the intermediates with the same liveness planner as a static plan
(``memory_plan.plan_memory``); the result (symbol values and slot offsets as C tables) is
cached per set of shapes. Every run then calls the plan's AOT entry ``ember_run_sym``
(``codegen.aot.generate_symbolic_aot_entry``) once with the arena, the slot pointer table and
those two tables, and returns the output arrays its kernels wrote in place. The arena is sized
once from the symbols' declared upper bounds when they all have one (``arena_bytes_max``),
else it grows to the largest run seen. Nothing is compiled at run time.
"""

from __future__ import annotations

import ctypes
from typing import Mapping

import numpy as np

from ..errors import InputError
from ..tir.symbolic import bind_shapes, evaluate, parse_dim
from .memory_plan import ALIGN, plan_memory


def is_symbolic_plan(plan: dict) -> bool:
    """True for a plan with symbolic dimensions (``plan["symbols"]``)."""
    return bool(plan.get("symbols"))


def _dims(shape) -> tuple:
    return tuple(parse_dim(d) if isinstance(d, str) else int(d) for d in shape)


class _Prepared:
    """What one set of input shapes needs at run time, computed on the first run at those
    shapes (``SymbolicRunner._prepare``): the symbol values, the slot offsets as C tables for
    ``ember_run_sym``, and the output shapes."""

    __slots__ = ("env", "sym", "off", "sym_addr", "off_addr", "offsets", "total", "out_shapes",
                 "sym_args")

    def __init__(self, env: dict, names: list, offsets: dict, total: int, nslots: int,
                 out_shapes: list, steps: list):
        self.env = env
        self.sym = (ctypes.c_int64 * max(len(names), 1))(*[env[n] for n in names])
        self.off = (ctypes.c_int64 * max(nslots, 1))()
        for s, o in offsets.items():
            self.off[s] = o
        self.sym_addr = ctypes.addressof(self.sym)
        self.off_addr = ctypes.addressof(self.off)
        self.offsets = offsets
        self.total = total
        self.out_shapes = out_shapes
        self.sym_args = [tuple(env[n] for n in st.get("symbols", ())) for st in steps]


class SymbolicRunner:
    """The per-run part of ``GraphExecutor`` for a symbolic plan (see the module doc).

    One run: the inputs' shapes are looked up in a cache of prepared runs (at most
    ``MAX_PREPARED``, oldest dropped first); on a miss the symbols are bound (``bind_shapes``,
    which raises ``ShapeMismatchError`` for contradicting inputs) and the intermediates placed.
    Then ``ember_run_sym`` (the plan's AOT entry, ``codegen.aot.generate_symbolic_aot_entry``)
    runs every kernel in one native call, or, with ``executor.use_aot`` off or an artifact
    without the entry, the kernels are called one by one (``executor._steps``). Outputs are
    allocated per run and written by their kernels in place.

    Attributes:
        layouts_planned: how many memory layouts were planned (one per new set of shapes).
        arena_bytes_max: the arena size that holds every run within the symbols' declared
            bounds (the arena is then allocated once, at construction), or ``None`` when a
            symbol has no upper bound or that size exceeds ``PREALLOC_MAX_BYTES`` (the arena
            then grows to the largest run seen).
        arena_allocations: how many times the arena was allocated.

    Args:
        executor: the ``GraphExecutor`` (its library, weights, thread count and input specs).
    """

    MAX_PREPARED = 64
    PREALLOC_MAX_BYTES = 1 << 30

    def __init__(self, executor):
        from .executor import _address
        self.ex = executor
        plan = executor.plan
        slots = plan["slots"]
        self.bounds = {k: (int(v[0]), None if v[1] is None else int(v[1]))
                       for k, v in plan["symbols"].items()}
        self.names = list(plan.get("aot_symbols") or sorted(self.bounds))
        self.shapes = [_dims(s["shape"]) for s in slots]
        self.itemsize = [np.dtype(_np(s["dtype"])).itemsize for s in slots]
        outs = [int(o["slot"]) for o in executor.output_specs]
        out_set = {s for s in outs if slots[s]["kind"] == "arena"}
        # intermediates: placed per run; graph outputs are the arrays a run returns instead
        self.lifetimes = [tuple(int(x) for x in t) for t in plan["lifetimes"]
                          if int(t[0]) not in out_set]
        self._in_specs = [(d["name"], np.dtype(_np(d["dtype"])), int(d["slot"]))
                          for d in executor.input_specs]
        self._in_decl = [(d["name"], self.shapes[d["slot"]]) for d in executor.input_specs]
        # how each output is made: written in place by its kernel (a new array per run), or a
        # copy of a weight, an input, or an output listed before it
        self._outs: list[tuple] = []
        new_slots: list[int] = []
        for s in outs:
            kind = slots[s]["kind"]
            if kind == "arena" and s not in new_slots:
                self._outs.append(("new", len(new_slots), s))
                new_slots.append(s)
            elif kind == "arena":
                self._outs.append(("copy_out", new_slots.index(s), s))
            elif kind == "param":
                self._outs.append(("param", slots[s]["param"], s))
            else:
                k = next(i for i, d in enumerate(executor.input_specs) if d["slot"] == s)
                self._outs.append(("input", k, s))
        self._new_slots = new_slots
        self._new_dtypes = [np.dtype(_np(slots[s]["dtype"])) for s in new_slots]
        self._prepared: dict = {}
        self.layouts_planned = 0
        self.arena = None
        self.arena_allocations = 0
        self._arena_ptr = 0
        self._address = _address
        self._aot = None
        self._ext = None
        entry = plan.get("aot")
        if entry and hasattr(executor.lib, entry):
            self._aot = getattr(executor.lib, entry)
            self._aot.restype = ctypes.c_int32
            self._aot.argtypes = [ctypes.c_void_p] * 4
            self._ext = (ctypes.c_void_p * max(len(slots), 1))(*[p or 0 for p in executor._ptr])
            self._ext_addr = ctypes.addressof(self._ext)
        self.arena_bytes_max, self._max_offsets = self._upper_bound_layout()
        if self.arena_bytes_max is not None:
            self._grow(self.arena_bytes_max)

    @property
    def has_aot(self) -> bool:
        """Whether the library has the plan's ``ember_run_sym`` entry."""
        return self._aot is not None

    def _upper_bound_layout(self) -> tuple:
        """``(arena bytes, {slot: offset})`` of a layout that holds every run within the
        symbols' bounds (each slot at its largest size: interval analysis of its dims), or
        ``(None, None)`` (see ``arena_bytes_max``)."""
        from ..tir.symbolic import bounds_of
        if any(hi is None for _, hi in self.bounds.values()):
            return None, None
        sizes = []
        for s, _, _ in self.lifetimes:
            n = self.itemsize[s]
            for d in self.shapes[s]:
                n *= max(int(bounds_of(d, self.bounds)[1]), 0)
            if n > self.PREALLOC_MAX_BYTES:
                return None, None
            sizes.append(n)
        offs, total = plan_memory([(n, f, la) for n, (_, f, la) in zip(sizes, self.lifetimes)])
        if total > self.PREALLOC_MAX_BYTES:
            return None, None
        return total, {s: o for (s, _, _), o in zip(self.lifetimes, offs)}

    def _grow(self, nbytes: int) -> None:
        from .executor import hugepage_empty
        self.arena = hugepage_empty(max(nbytes, ALIGN))
        self._arena_ptr = self.arena.ctypes.data
        self.arena_allocations += 1

    def bind(self, inputs) -> list[np.ndarray]:
        """The input arrays of one run in input order (``bind_symbolic_inputs``, with a fast
        path for a dict of C-contiguous arrays of the right dtypes)."""
        if type(inputs) is dict and len(inputs) == len(self._in_specs):
            out = []
            for name, dt, _ in self._in_specs:
                a = inputs.get(name)
                if type(a) is not np.ndarray or a.dtype != dt or not a.flags.c_contiguous:
                    break
                out.append(a)
            else:
                return out
        return bind_symbolic_inputs(self.ex.input_specs, inputs)

    def _prepare(self, arrays: list, key) -> _Prepared:
        """Bind the symbols from ``arrays``' shapes, place the intermediates and cache the
        result under ``key`` (the shapes).

        Raises:
            ShapeMismatchError: shapes that contradict a symbol, its bounds or a static dim."""
        env = bind_shapes(self._in_decl, {n: a.shape for (n, _, _), a in
                                          zip(self._in_specs, arrays)}, self.bounds)
        sizes = []
        for s, _, _ in self.lifetimes:
            n = self.itemsize[s]
            for d in self.shapes[s]:
                n *= d if type(d) is int else evaluate(d, env)
            sizes.append(n)
        offs, total = plan_memory([(n, f, la) for n, (_, f, la) in zip(sizes, self.lifetimes)])
        self.layouts_planned += 1
        offsets = {s: o for (s, _, _), o in zip(self.lifetimes, offs)}
        if self.arena is None or total > self.arena.nbytes:
            if self._max_offsets is not None:  # the bounds' layout holds every run
                offsets, total = self._max_offsets, self.arena_bytes_max
            else:
                self._grow(total)
        out_shapes = [tuple(d if type(d) is int else evaluate(d, env) for d in self.shapes[s])
                      for s in self._new_slots]
        p = _Prepared(env, self.names, offsets, total, len(self.shapes), out_shapes,
                      self.ex.plan["steps"])
        if len(self._prepared) >= self.MAX_PREPARED:
            del self._prepared[next(iter(self._prepared))]
        self._prepared[key] = p
        return p

    def _bind_run(self, arrays: list) -> tuple:
        """``(prepared, new output arrays)`` with the ``ext`` table (when there is an AOT
        entry) pointing at this run's inputs and outputs."""
        key = tuple([a.shape for a in arrays])
        p = self._prepared.get(key)
        if p is None:
            p = self._prepare(arrays, key)
        new = [np.empty(sh, dt) for sh, dt in zip(p.out_shapes, self._new_dtypes)]
        ext = self._ext
        if ext is not None:
            address, base = self._address, self._arena_ptr
            for (_, _, s), a in zip(self._in_specs, arrays):
                ext[s] = address(a) if a.nbytes else base
            for s, a in zip(self._new_slots, new):
                ext[s] = address(a) if a.nbytes else base
        return p, new

    def step_pointers(self, p: _Prepared, arrays: list, new: list) -> list:
        """Every slot's address for a kernel-by-kernel run of ``p`` on input ``arrays`` with
        outputs ``new``."""
        address, base = self._address, self._arena_ptr
        ptr = list(self.ex._ptr)
        for s, off in p.offsets.items():
            ptr[s] = base + off
        for (_, _, s), a in zip(self._in_specs, arrays):
            ptr[s] = address(a) if a.nbytes else base
        for s, a in zip(self._new_slots, new):
            ptr[s] = address(a) if a.nbytes else base
        return ptr

    def step_calls(self, arrays: list) -> tuple[list, list]:
        """``([(fn, args)], keep)``: each kernel with its arguments for a run on ``arrays``
        (profiling calls them one by one); ``keep`` holds the output arrays they write and
        must outlive the calls."""
        p, new = self._bind_run(arrays)
        ptr = self.step_pointers(p, arrays, new)
        calls = [(fn, [ptr[a] for a in args] + list(sa))
                 for (fn, args, _), sa in zip(self.ex._steps, p.sym_args)]
        return calls, new

    def run(self, arrays: list) -> list[np.ndarray]:
        """Run on bound input ``arrays`` (in input order; dtypes checked by ``bind``).

        Raises:
            ShapeMismatchError: input shapes that contradict a symbol, its bounds or a static
                dimension.
            EmberError: a kernel failed (names the node)."""
        ex = self.ex
        p, new = self._bind_run(arrays)
        ex.apply_num_threads()
        if ex.use_aot and self._aot is not None:
            rc = self._aot(self._arena_ptr, self._ext_addr, p.off_addr, p.sym_addr)
            if rc != 0:
                from ..codegen.aot import decode_status
                from .executor import kernel_failure
                step, status = decode_status(rc)
                raise kernel_failure(ex.plan["steps"][step], status)
        else:
            from .executor import kernel_failure
            ptr = self.step_pointers(p, arrays, new)
            for (fn, args, st), sa in zip(ex._steps, p.sym_args):
                rc = fn(*[ptr[a] for a in args], *sa)
                if rc != 0:
                    raise kernel_failure(st, rc)
        outs = []
        for kind, k, _ in self._outs:
            if kind == "new":
                outs.append(new[k])
            elif kind == "copy_out":
                outs.append(new[k].copy())
            elif kind == "param":
                outs.append(ex._params[k].copy())
            else:
                outs.append(arrays[k].copy())
        return outs


def bind_symbolic_inputs(specs: list, inputs) -> list[np.ndarray]:
    """The input arrays of one run in input order, C-contiguous, dtypes checked (shapes are
    checked against the symbols by ``SymbolicRunner.run``).

    Raises:
        InputError: unknown, missing or extra inputs, or a wrong dtype."""
    names = [d["name"] for d in specs]
    if isinstance(inputs, Mapping):
        unknown = [k for k in inputs if k not in names]
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise InputError(f"inputs {sorted(inputs)} do not match the model's inputs {names}"
                             f" (unknown: {unknown}, missing: {missing})")
        values = [inputs[n] for n in names]
    else:
        values = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if len(values) != len(specs):
            raise InputError(f"expected {len(specs)} input(s) {names}, got {len(values)}")
    out = []
    for d, v in zip(specs, values):
        a = np.asarray(v)
        want = np.dtype(_np(d["dtype"]))
        if a.dtype != want:
            raise InputError(f"input {d['name']!r}: expected dtype {want}, got {a.dtype} "
                             f"(convert with .astype(np.{want}))")
        out.append(a if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(a.shape))
    return out


def _np(dtype: str):
    from ..dtypes import np_dtype
    return np_dtype(dtype)
