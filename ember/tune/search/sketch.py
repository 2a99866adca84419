"""Sketches and programs of the template-free search.

From a PrimFunc alone, ``generate_sketches(func)`` applies derivation rules:

- ``multi_level_tiling`` (a single reduction stage): spatial loops split into outer and inner
  tiles, the reduction between them over an accumulator block written back once (cache-write),
  reduction loops reordered, inner block unrolled and vectorized, outer tiles parallel, and a
  padded input materialized once instead of guarded loads (when the kernel pads);
- ``spatial_tiling`` (a single reduction stage): the same tiles with the reduction kept
  innermost on a scalar accumulator, the innermost reduction loop optionally split and unrolled;
- ``annotate`` (any kernel; stages were inlined into their consumers at lowering): the
  outermost loops of each stage parallel (fused by collapse), the innermost spatial loop of
  each stage vectorized.

A sketch leaves its parameters open; ``sample(sketch, rng)`` fills them at random, giving a
``Trace``: a tuple of frozen ``Step`` records ``(kind, target, value)`` that ``apply_trace``
replays on the PrimFunc and that records store as JSON. ``mutate`` and ``crossover`` derive new
traces of the same sketch for the evolutionary search.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from ...errors import ScheduleError, TuningError
from ...tir.stmt import Allocate, For, PrimFunc, Seq, Store
from ..tiling import TileSpec, as_reduction_nest, tile_reduction_nest

MAX_INNER = 64
MAX_BLOCK = 1024


@dataclass(frozen=True)
class Step:
    """One schedule decision: ``kind`` (``sketch``, ``tile``, ``inner_last``, ``outer_order``,
    ``reduce_order``, ``reduce_split``, ``parallel``, ``vectorize``, ``unroll``), the loop or
    stage it targets (index, or -1), and the chosen ``value`` (JSON-able, hashable)."""

    kind: str
    target: int
    value: Any


class Trace(tuple):
    """A concrete program: a tuple of ``Step``s, the first naming its sketch."""

    @property
    def sketch(self) -> str:
        return self[0].value

    def get(self, kind: str, target: int = -1, default=None):
        """The ``value`` of the first step of ``kind`` on ``target``, else ``default``."""
        for s in self:
            if s.kind == kind and s.target == target:
                return s.value
        return default

    def to_json(self) -> list:
        """``[[kind, target, value], ...]`` (tuple values as lists)."""
        return [[s.kind, s.target, list(s.value) if isinstance(s.value, tuple) else s.value]
                for s in self]

    @classmethod
    def from_json(cls, data) -> "Trace":
        """Rebuild from ``to_json`` output. Raises ``TuningError`` on malformed data."""
        if not isinstance(data, list) or not data:
            raise TuningError(f"malformed search trace {data!r}: a trace is a non-empty list "
                              f"of [kind, target, value] steps, the first one the sketch")
        try:
            return cls(Step(str(k), int(t), tuple(v) if isinstance(v, list) else v)
                       for k, t, v in data)
        except (TypeError, ValueError) as e:
            raise TuningError(f"malformed search trace {data!r}: {e}") from None

    def key(self) -> str:
        """Compact JSON of ``to_json()``: a hashable identity of the program."""
        import json
        return json.dumps(self.to_json(), separators=(",", ":"))


def _factors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


@dataclass
class Sketch:
    """A derivation rule applied to one kernel: ``choices`` maps each open ``(kind, target)``
    to its candidate values."""

    name: str
    func: PrimFunc
    choices: dict

    def __repr__(self):
        return f"Sketch({self.name}, {len(self.choices)} open decisions)"


def _stages(func: PrimFunc) -> list[list[For]]:
    """Loop chains of each top-level stage (a maximal For chain under Seq/Allocate)."""
    out = []

    def visit(s):
        if isinstance(s, For):
            chain = []
            while isinstance(s, For):
                chain.append(s)
                s = s.body
            out.append(chain)
        elif isinstance(s, Seq):
            for x in s.stmts:
                visit(x)
        elif isinstance(s, Allocate):
            visit(s.body)
    visit(func.body)
    return out


def generate_sketches(func: PrimFunc) -> list[Sketch]:
    """The sketches the rules derive for ``func`` (at least ``annotate`` for any kernel with
    loops; an empty list for a loop-free kernel)."""
    from ...tir.transform import lower_blocks
    func = lower_blocks(func)
    sketches = []
    try:
        nest = as_reduction_nest(func)
    except ScheduleError:
        nest = None
    if nest is not None:
        common = {}
        for k, lp in enumerate(nest.spatial):
            common[("tile", k)] = _factors(lp.extent, MAX_INNER)
        nr, ns = len(nest.reduce), len(nest.spatial)
        if nr > 1:
            common[("reduce_order", -1)] = _perms(nr)
        if ns > 1:
            common[("outer_order", -1)] = _perms(ns)
        common[("parallel", -1)] = [1, 2, 0] if ns > 1 else [1, 0]
        from ..padding import hoist_padding
        if hoist_padding(nest.update, nest.acc, list(nest.spatial) + list(nest.reduce)):
            common[("hoist_pad", -1)] = [True, False]
        mlt = dict(common)
        mlt[("inner_last", -1)] = list(range(ns))
        mlt[("vectorize", -1)] = [True, False]
        mlt[("unroll", -1)] = [True, False]
        sketches.append(Sketch("multi_level_tiling", func, mlt))
        st = dict(common)
        st[("reduce_split", -1)] = _factors(nest.reduce[-1].extent, 16)
        sketches.append(Sketch("spatial_tiling", func, st))
    stages = _stages(func)
    if stages:
        ch = {}
        for k, chain in enumerate(stages):
            ch[("parallel", k)] = [0, 1] + ([2] if len(chain) > 1 else [])
            inner = chain[-1]
            if isinstance(inner.body, Store) and inner.body.buffer.scope == "global":
                ch[("vectorize", k)] = [True, False]
        sketches.append(Sketch("annotate", func, ch))
    return sketches


def _perms(n: int) -> list[tuple]:
    import itertools
    if n <= 4:
        return [tuple(p) for p in itertools.permutations(range(n))]
    base = tuple(range(n))
    return [base, base[::-1]] + [base[:k] + base[k + 1:] + (k,) for k in range(n - 1)]


def sample(sketch: Sketch, rng: random.Random) -> Trace:
    """A random concrete program of ``sketch`` (tile sizes biased toward blocks that fit
    ``MAX_BLOCK``)."""
    steps = [Step("sketch", -1, sketch.name)]
    for (kind, target), vals in sketch.choices.items():
        steps.append(Step(kind, target, rng.choice(vals)))
    return _fix_block(Trace(steps), sketch, rng)


def _fix_block(trace: Trace, sketch: Sketch, rng: random.Random) -> Trace:
    """Shrink random tile sizes until the accumulator block has at most ``MAX_BLOCK`` elements."""
    tiles = {s.target: s.value for s in trace if s.kind == "tile"}
    if math.prod(tiles.values() or [1]) <= MAX_BLOCK:
        return trace
    tiles = dict(tiles)
    while math.prod(tiles.values()) > MAX_BLOCK:
        k = rng.choice([t for t, v in tiles.items() if v > 1])
        smaller = [f for f in sketch.choices[("tile", k)] if f < tiles[k]]
        tiles[k] = smaller[-1] if smaller else 1
    return Trace(Step(s.kind, s.target, tiles[s.target]) if s.kind == "tile" else s
                 for s in trace)


def mutate(trace: Trace, sketch: Sketch, rng: random.Random) -> Trace:
    """A copy of ``trace`` with one decision changed (a tile size moves to another factor, an
    order or annotation changes)."""
    open_steps = [s for s in trace if s.kind != "sketch" and len(sketch.choices[(s.kind,
                                                                                 s.target)]) > 1]
    if not open_steps:
        return trace
    pick = rng.choice(open_steps)
    vals = [v for v in sketch.choices[(pick.kind, pick.target)] if v != pick.value]
    if pick.kind == "tile":  # prefer a neighbouring factor: a smooth walk in tile space
        all_vals = sketch.choices[(pick.kind, pick.target)]
        i = all_vals.index(pick.value)
        near = [all_vals[j] for j in (i - 1, i + 1) if 0 <= j < len(all_vals)]
        new = rng.choice(near if near and rng.random() < 0.7 else vals)
    else:
        new = rng.choice(vals)
    out = Trace(Step(s.kind, s.target, new) if s is pick else s for s in trace)
    return _fix_block(out, sketch, rng)


def crossover(a: Trace, b: Trace, sketch: Sketch, rng: random.Random) -> Trace:
    """Each decision from one of two parents of the same sketch."""
    if a.sketch != b.sketch:
        return a
    out = Trace(x if rng.random() < 0.5 else y for x, y in zip(a, b))
    return _fix_block(out, sketch, rng)


def apply_trace(func: PrimFunc, trace: Trace) -> PrimFunc:
    """Replay ``trace`` on ``func`` (the untuned kernel it was sampled for).

    Raises:
        ScheduleError: the trace does not fit the kernel. TuningError: unknown sketch.
    """
    from ...tir.transform import lower_blocks
    func = lower_blocks(func)
    name = trace.sketch
    if name in ("multi_level_tiling", "spatial_tiling"):
        nest = as_reduction_nest(func)
        ns = len(nest.spatial)
        inner = [trace.get("tile", k, 1) for k in range(ns)]
        if math.prod(inner) > MAX_BLOCK:
            raise ScheduleError(f"accumulator block {inner} exceeds {MAX_BLOCK} elements")
        last = trace.get("inner_last", -1, ns - 1)
        spec = TileSpec(inner=inner, reduce_inside=name == "spatial_tiling",
                        inner_order=[k for k in range(ns) if k != last] + [last],
                        outer_order=trace.get("outer_order", -1),
                        reduce_order=trace.get("reduce_order", -1),
                        reduce_split=trace.get("reduce_split", -1, 1),
                        parallel=trace.get("parallel", -1, 1),
                        vectorize=bool(trace.get("vectorize", -1, True)),
                        unroll=bool(trace.get("unroll", -1, True)),
                        hoist_pad=bool(trace.get("hoist_pad", -1, False)))
        return tile_reduction_nest(nest, spec)
    if name == "annotate":
        return _annotate(func, trace)
    raise TuningError(f"unknown sketch {name!r} in a search trace")


def _annotate(func: PrimFunc, trace: Trace) -> PrimFunc:
    counter = [0]

    def rebuild(s):
        if isinstance(s, For):
            k = counter[0]
            counter[0] += 1
            chain = []
            while isinstance(s, For):
                chain.append(s)
                s = s.body
            body = s
            par = trace.get("parallel", k, 0)
            vec = trace.get("vectorize", k, False)
            for depth, lp in reversed(list(enumerate(chain))):
                kind, ann = "serial", {}
                if depth == len(chain) - 1 and vec and depth > 0:
                    kind = "vectorized"
                if depth == 0 and par:
                    kind = "parallel"
                    if par > 1 and len(chain) > 1 and not (vec and len(chain) == 2):
                        ann = {"collapse": 2}
                body = For(lp.var, lp.extent, body, kind, ann)
            return body
        if isinstance(s, Seq):
            return Seq([rebuild(x) for x in s.stmts])
        if isinstance(s, Allocate):
            return Allocate(s.buffer, rebuild(s.body))
        return s

    return PrimFunc(func.name, list(func.params), rebuild(func.body), dict(func.attrs))
