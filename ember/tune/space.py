"""Configuration spaces of tunable templates (AutoTVM-style).

A template declares its knobs on a ``ConfigSpace``::

    cfg.define_split("tile_i", 64, num_outputs=2)            # 64 = i0 * i1
    cfg.define_knob("auto_unroll_max_step", [0, 512, 1500])
    cfg.define_reorder("order", ["i", "j", "k"], policy="all")
    cfg.define_annotate("ann", ["i1", "j1"], policy="try_unroll_vec")

The space is the Cartesian product of its knobs in definition order; a point is an integer
``index`` in ``[0, len(space))`` (the first knob varies slowest). ``space.get(index)`` returns a
``ConfigEntity``; ``entity.to_json()`` / ``ConfigEntity.from_json(d, space)`` round-trip it
through JSON, and ``entity.index`` round-trips through ``space.get``. Knobs are addressed by
name: ``cfg["tile_i"].size``, ``cfg["auto_unroll_max_step"].val``, ``cfg["order"].perm``,
``cfg["ann"].anns``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Iterator, Sequence

from ..errors import TuningError

ANNOTATIONS = ("none", "unroll", "vec", "parallel")


def _extent(axis: Any) -> int:
    """Extent of an axis given as an int or an object with ``.extent`` (IterVar, For...)."""
    ext = getattr(axis, "extent", axis)
    try:
        ext = int(ext)
    except (TypeError, ValueError):
        raise TuningError(f"axis {axis!r} has no static integer extent") from None
    if ext < 1:
        raise TuningError(f"axis extent must be >= 1, got {ext}")
    return ext


def _axis_name(axis: Any, k: int) -> str:
    if isinstance(axis, str):
        return axis
    v = getattr(axis, "var", None)
    return getattr(v, "name", None) or getattr(axis, "name", None) or f"axis{k}"


def _factors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


# knobs ------------------------------------------------------------------------------------------

class Knob:
    """One dimension of a space: a finite list of ``entities`` (JSON-able values)."""

    kind = "knob"

    def __init__(self, name: str, entities: Sequence[Any]):
        if not entities:
            raise TuningError(f"knob {name!r} has no candidate values")
        self.name = name
        self.entities = list(entities)
        self._pos = {_key(e): i for i, e in enumerate(self.entities)}

    def __len__(self) -> int:
        return len(self.entities)

    def index_of(self, value: Any) -> int:
        """Position of ``value`` among the knob's entities; raises ``TuningError`` if absent."""
        try:
            return self._pos[_key(value)]
        except KeyError:
            raise TuningError(f"value {value!r} is not a candidate of knob {self.name!r} "
                              f"(a record from another version of the template?)") from None

    def entity(self, i: int) -> "KnobEntity":
        """The ``KnobEntity`` of the knob's ``i``-th candidate value."""
        return KnobEntity(self.kind, self.entities[i])


def _key(v: Any):
    return json_key(v)


def json_key(v: Any) -> str:
    """Canonical text of a JSON-able value (tuples and lists compare equal)."""
    import json
    return json.dumps(v, sort_keys=True, default=list)


class SplitKnob(Knob):
    """Ways to split an axis of ``extent`` into ``num_outputs`` factors (outer to inner).

    ``policy``: ``"factors"`` (every exact factorization, the default), ``"power2"`` (inner
    factors are powers of two, the outermost takes the ceiling; allows non-divisible splits),
    ``"verbose"`` (both), ``"candidate"`` (the given ``candidate`` lists). ``max_factor``
    bounds the inner factors; ``filter`` is ``f(sizes) -> bool``.
    """

    kind = "split"

    def __init__(self, name: str, extent: int, num_outputs: int = 2, policy: str = "factors",
                 max_factor: int | None = None, filter: Callable | None = None,
                 candidate: Sequence[Sequence[int]] | None = None):
        if num_outputs < 1:
            raise TuningError(f"define_split({name!r}): num_outputs must be >= 1")
        self.extent = extent
        self.num_outputs = num_outputs
        self.policy = policy
        max_factor = max_factor or extent
        if policy == "candidate":
            if not candidate:
                raise TuningError(f"define_split({name!r}, policy='candidate') needs candidate=")
            sizes = [list(c) for c in candidate]
            for c in sizes:
                if len(c) != num_outputs:
                    raise TuningError(f"define_split({name!r}): candidate {c} does not have "
                                      f"{num_outputs} factors")
        elif policy in ("factors", "power2", "verbose"):
            sizes = []
            if policy in ("factors", "verbose"):
                sizes += self._exact(extent, num_outputs, max_factor)
            if policy in ("power2", "verbose"):
                sizes += self._power2(extent, num_outputs, max_factor)
        else:
            raise TuningError(f"define_split({name!r}): unknown policy {policy!r} (known: "
                              f"factors, power2, verbose, candidate)")
        seen, uniq = set(), []
        for s in sizes:
            t = tuple(s)
            if t not in seen and (filter is None or filter(list(t))):
                seen.add(t)
                uniq.append(list(t))
        super().__init__(name, uniq)

    @staticmethod
    def _exact(n: int, parts: int, max_factor: int) -> list[list[int]]:
        if parts == 1:
            return [[n]]
        out = []
        for f in _factors(n):
            if f > max_factor:
                continue
            for rest in SplitKnob._exact(n // f, parts - 1, max_factor):
                out.append(rest + [f])
        # the outermost factor is unconstrained by max_factor; reorder so outer comes first
        return out

    @staticmethod
    def _power2(n: int, parts: int, max_factor: int) -> list[list[int]]:
        if parts == 1:
            return [[n]]
        out = []
        f = 1
        while f <= min(n, max_factor):
            for rest in SplitKnob._power2(-(-n // f), parts - 1, max_factor):
                out.append(rest + [f])
            f *= 2
        return out

    def entity(self, i: int) -> "SplitEntity":
        """The ``SplitEntity`` of the ``i``-th factorization (outer to inner)."""
        return SplitEntity(list(self.entities[i]))


class ReorderKnob(Knob):
    """Orders of ``axes``. ``policy``: ``"all"`` (every permutation), ``"identity"``,
    ``"candidate"`` (given permutations as lists of positions)."""

    kind = "reorder"

    def __init__(self, name: str, axes: Sequence[Any], policy: str = "all",
                 candidate: Sequence[Sequence[int]] | None = None):
        n = len(axes)
        self.axis_names = [_axis_name(a, k) for k, a in enumerate(axes)]
        if policy == "all":
            if n > 7:
                raise TuningError(f"define_reorder({name!r}): {n} axes give {math.factorial(n)} "
                                  f"orders; use policy='candidate'")
            perms = [list(p) for p in itertools.permutations(range(n))]
        elif policy == "identity":
            perms = [list(range(n))]
        elif policy == "candidate":
            perms = [list(p) for p in candidate or []]
            for p in perms:
                if sorted(p) != list(range(n)):
                    raise TuningError(f"define_reorder({name!r}): {p} is not a permutation of "
                                      f"0..{n - 1}")
        else:
            raise TuningError(f"define_reorder({name!r}): unknown policy {policy!r} (known: all, "
                              f"identity, candidate)")
        super().__init__(name, perms)

    def entity(self, i: int) -> "ReorderEntity":
        """The ``ReorderEntity`` of the ``i``-th permutation of the axes."""
        return ReorderEntity(list(self.entities[i]))


class AnnotateKnob(Knob):
    """Per-axis annotations of ``axes`` (each one of ``none``, ``unroll``, ``vec``,
    ``parallel``). ``policy``: ``"try_unroll"``, ``"try_vec"`` (last axis only),
    ``"try_unroll_vec"``, ``"try_parallel"`` (first axis only), ``"candidate"``."""

    kind = "annotate"

    def __init__(self, name: str, axes: Sequence[Any], policy: str = "try_unroll",
                 candidate: Sequence[Sequence[str]] | None = None):
        n = len(axes)
        self.axis_names = [_axis_name(a, k) for k, a in enumerate(axes)]
        last = ["none"] * (n - 1)
        if policy == "try_unroll":
            anns = [list(p) for p in itertools.product(("none", "unroll"), repeat=n)]
        elif policy == "try_vec":
            anns = [last + ["none"], last + ["vec"]]
        elif policy == "try_unroll_vec":
            anns = [list(p) + [v] for p in itertools.product(("none", "unroll"), repeat=n - 1)
                    for v in ("none", "vec")]
        elif policy == "try_parallel":
            anns = [["none"] * n, ["parallel"] + ["none"] * (n - 1)]
        elif policy == "candidate":
            anns = [list(c) for c in candidate or []]
            for c in anns:
                if len(c) != n or any(a not in ANNOTATIONS for a in c):
                    raise TuningError(f"define_annotate({name!r}): bad candidate {c} (one of "
                                      f"{ANNOTATIONS} per axis)")
        else:
            raise TuningError(f"define_annotate({name!r}): unknown policy {policy!r}")
        super().__init__(name, anns)

    def entity(self, i: int) -> "AnnotateEntity":
        """The ``AnnotateEntity`` of the ``i``-th per-axis annotation list."""
        return AnnotateEntity(list(self.entities[i]))


# entities ---------------------------------------------------------------------------------------

class KnobEntity:
    """The chosen value of a plain knob: ``.val``."""

    def __init__(self, kind: str, val: Any):
        self.kind = kind
        self.val = val

    def __repr__(self):
        return f"{self.val!r}"


class SplitEntity(KnobEntity):
    """A chosen split: ``.size`` lists the factors, outermost first (-1 never appears)."""

    def __init__(self, size: list[int]):
        super().__init__("split", size)
        self.size = size


class ReorderEntity(KnobEntity):
    """A chosen order: ``.perm`` lists axis positions, outermost first."""

    def __init__(self, perm: list[int]):
        super().__init__("reorder", perm)
        self.perm = perm

    def apply(self, axes: Sequence[Any]) -> list:
        """``axes`` in this order."""
        return [axes[p] for p in self.perm]


class AnnotateEntity(KnobEntity):
    """Chosen annotations: ``.anns`` has one of ``ANNOTATIONS`` per axis."""

    def __init__(self, anns: list[str]):
        super().__init__("annotate", anns)
        self.anns = anns


# spaces -----------------------------------------------------------------------------------------

class ConfigSpace:
    """The knobs of a template, in definition order. Iterating a template with a
    ``ConfigSpace`` as its ``cfg`` collects the knobs; ``__getitem__`` then answers the first
    candidate of each knob so the template body can run through once.
    """

    def __init__(self):
        self.knobs: dict[str, Knob] = {}
        self.flop = 0.0

    # definition -----------------------------------------------------------------------------
    def _add(self, knob: Knob) -> None:
        old = self.knobs.get(knob.name)
        if old is not None:
            if old.entities != knob.entities:
                raise TuningError(f"knob {knob.name!r} defined twice with different candidates")
            return
        self.knobs[knob.name] = knob

    def define_split(self, name: str, axis: Any, num_outputs: int = 2, policy: str = "factors",
                     max_factor: int | None = None, filter: Callable | None = None,
                     candidate=None) -> None:
        """Declare a split of ``axis`` (an int extent, or anything with ``.extent``) into
        ``num_outputs`` factors; see ``SplitKnob`` for the policies."""
        self._add(SplitKnob(name, _extent(axis), num_outputs, policy, max_factor, filter,
                            candidate))

    def define_knob(self, name: str, values: Sequence[Any]) -> None:
        """Declare a knob taking one of ``values`` (JSON-able), e.g.
        ``define_knob("unroll_explicit", [0, 1])``."""
        self._add(Knob(name, list(values)))

    def define_reorder(self, name: str, axes: Sequence[Any], policy: str = "all",
                       candidate=None) -> None:
        """Declare the order of ``axes`` as a knob; see ``ReorderKnob``."""
        self._add(ReorderKnob(name, axes, policy, candidate))

    def define_annotate(self, name: str, axes: Sequence[Any], policy: str = "try_unroll",
                        candidate=None) -> None:
        """Declare per-axis annotations as a knob; see ``AnnotateKnob``."""
        self._add(AnnotateKnob(name, axes, policy, candidate))

    def add_flop(self, n: float) -> None:
        """Add ``n`` floating-point operations to the workload's FLOP count."""
        self.flop += float(n)

    def raise_error(self, msg: str) -> None:
        """Mark the current configuration invalid (``TuningError``)."""
        raise TuningError(msg)

    # querying -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return math.prod(len(k) for k in self.knobs.values())

    @property
    def dims(self) -> list[int]:
        """Number of candidates of each knob, in definition order."""
        return [len(k) for k in self.knobs.values()]

    def __getitem__(self, name: str) -> KnobEntity:
        try:
            return self.knobs[name].entity(0)
        except KeyError:
            raise TuningError(f"no knob {name!r} in this space (known: {list(self.knobs)})") \
                from None

    def point2knob(self, index: int) -> list[int]:
        """Per-knob positions of point ``index``."""
        if not 0 <= index < len(self):
            raise TuningError(f"config index {index} out of range [0, {len(self)})")
        out = []
        for d in reversed(self.dims):
            out.append(index % d)
            index //= d
        return out[::-1]

    def knob2point(self, knob: Sequence[int]) -> int:
        """Index of the point with per-knob positions ``knob``."""
        idx = 0
        for p, d in zip(knob, self.dims):
            if not 0 <= p < d:
                raise TuningError(f"knob position {p} out of range [0, {d})")
            idx = idx * d + int(p)
        return idx

    def get(self, index: int) -> "ConfigEntity":
        """The configuration at ``index``."""
        return ConfigEntity(self, int(index))

    def __iter__(self) -> Iterator["ConfigEntity"]:
        return (self.get(i) for i in range(len(self)))

    def to_json(self) -> dict:
        """A JSON-able description of the knobs (for records and reports)."""
        return {name: {"kind": k.kind, "len": len(k)} for name, k in self.knobs.items()}

    def __repr__(self):
        body = ", ".join(f"{n}:{k.kind}[{len(k)}]" for n, k in self.knobs.items())
        return f"ConfigSpace(len={len(self)}, {body})"


class ConfigEntity:
    """One point of a ``ConfigSpace``: ``cfg[name]`` gives the chosen entity of each knob."""

    def __init__(self, space: ConfigSpace, index: int):
        self.space = space
        self.index = index
        self.knob_pos = space.point2knob(index)
        self._entities = {name: k.entity(p)
                          for (name, k), p in zip(space.knobs.items(), self.knob_pos)}

    @property
    def flop(self) -> float:
        return self.space.flop

    def __getitem__(self, name: str) -> KnobEntity:
        try:
            return self._entities[name]
        except KeyError:
            raise TuningError(f"no knob {name!r} in this configuration (known: "
                              f"{list(self._entities)})") from None

    # template code also calls define_* on the entity: those are no-ops at instantiation
    def define_split(self, *a, **k):
        """No-op: the knob was defined when the space was built (``ConfigSpace.define_split``)."""

    def define_knob(self, *a, **k):
        """No-op: the knob was defined when the space was built (``ConfigSpace.define_knob``)."""

    def define_reorder(self, *a, **k):
        """No-op: the knob was defined when the space was built (``ConfigSpace.define_reorder``).
        """

    def define_annotate(self, *a, **k):
        """No-op: the knob was defined when the space was built (``ConfigSpace.define_annotate``).
        """

    def add_flop(self, n):
        """No-op: FLOPs are counted when the space is built (``ConfigSpace.add_flop``)."""

    def raise_error(self, msg: str) -> None:
        """Reject this configuration from template code.

        Raises:
            TuningError: always, with ``msg``."""
        raise TuningError(msg)

    def values(self) -> dict[str, Any]:
        """``{knob name: chosen value}``."""
        return {n: e.val for n, e in self._entities.items()}

    def to_json(self) -> dict:
        """``{"index": i, "entity": [[name, kind, value], ...]}``."""
        return {"index": self.index,
                "entity": [[n, e.kind, e.val] for n, e in self._entities.items()]}

    @classmethod
    def from_json(cls, d: dict, space: ConfigSpace) -> "ConfigEntity":
        """Rebuild from ``to_json`` output, checked against ``space`` by value (so a record
        stays valid only while its knobs' candidates exist).

        Raises:
            TuningError: unknown knob, or a value that is not a candidate of ``space``.
        """
        vals = {n: v for n, _, v in d["entity"]}
        if set(vals) != set(space.knobs):
            raise TuningError(f"record knobs {sorted(vals)} do not match the space's "
                              f"{sorted(space.knobs)}")
        pos = [k.index_of(vals[n]) for n, k in space.knobs.items()]
        return cls(space, space.knob2point(pos))

    def __eq__(self, other):
        return isinstance(other, ConfigEntity) and other.index == self.index \
            and other.space is self.space

    def __hash__(self):
        return hash(self.index)

    def __repr__(self):
        return f"ConfigEntity({self.index}, {self.values()})"
