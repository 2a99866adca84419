"""Built-in tuning templates.

``tile``: multi-level tiling of any single-reduction kernel (conv, matmul, gemm, pooling... with
fused epilogues). Its args name the workload either by key, ``[workload_key]`` (a kernel found
by ``extract_tasks``, see ``ember.tune.extract``), or as one operator, ``[op, attrs, input
types, output types]`` with types as ``[shape, dtype]``; the untuned kernel is the workload's
default lowering. Knobs (``tiling.TileSpec``):

- ``tile_<loop>``: ``define_split`` of each spatial loop into ``[outer, inner]`` (inner <= 64);
- ``reduce_inside``: 0 = reduction between the tile levels with an accumulator block, 1 = keep a
  scalar accumulator innermost;
- ``inner_last``: which spatial loop is innermost in the block (vectorized);
- ``parallel``: outer loops fused into the OpenMP loop (0 = serial);
- ``vectorize``, ``unroll``: annotate the inner block loops;
- ``hoist_pad`` (padded convolutions and pooling): read a padded copy of the input made once
  per call instead of guarding every load (``ember.tune.padding``).

Configurations whose accumulator block exceeds ``MAX_BLOCK`` elements are invalid.
"""

from __future__ import annotations

import functools
import json
import math

from ..errors import TuningError
from ..tir.stmt import PrimFunc
from .features import _count_ops
from .task import register_template
from .tiling import TileSpec, as_reduction_nest, tile_reduction_nest

MAX_BLOCK = 1024
MAX_INNER = 64


@functools.lru_cache(maxsize=256)
def _lower_workload(workload_json: str) -> PrimFunc:
    from ..graph.ir import Binding, Call, TensorType, Var
    from ..graph.lower import lower_binding
    op, attrs, in_types, out_types = json.loads(workload_json)
    args = tuple(Var(f"x{k}", TensorType(tuple(s), d)) for k, (s, d) in enumerate(in_types))
    outs = tuple(Var(f"y{k}", TensorType(tuple(s), d)) for k, (s, d) in enumerate(out_types))
    from ..ops import get_op
    attrs = get_op(op).normalize_attrs(_attrs_from_json(attrs), f"tile workload {op}: ")
    return lower_binding(Binding(outs, Call(op, args, attrs)), "default")


def _attrs_from_json(attrs: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}


def workload_func(*args) -> PrimFunc:
    """The untuned kernel of a workload: ``(key,)`` or ``(op, attrs, in_types, out_types)``."""
    if len(args) == 1:
        from .extract import get_workload
        return get_workload(args[0])
    if len(args) != 4:
        raise TuningError(f"tile template args are [workload_key] or [op, attrs, input types, "
                          f"output types], got {len(args)} values")
    op, attrs, in_types, out_types = args
    return _lower_workload(json.dumps([op, attrs, in_types, out_types], sort_keys=True,
                                      default=list))


def nest_flops(nest) -> float:
    """Floating-point operations of a reduction stage (update body x iterations)."""
    per, _ = _count_ops(nest.update.value)
    iters = math.prod(lp.extent for lp in nest.spatial + nest.reduce)
    return float(max(per, 1) * iters)


def define_tile_space(cfg, nest) -> None:
    """Declare the ``tile`` knobs of a reduction nest on ``cfg``."""
    for lp in nest.spatial:
        cfg.define_split(f"tile_{lp.var.name}", lp.extent, num_outputs=2, max_factor=MAX_INNER)
    cfg.define_knob("reduce_inside", [0, 1])
    cfg.define_knob("inner_last", list(range(len(nest.spatial)))[::-1])
    cfg.define_knob("parallel", [1, 2, 0])
    cfg.define_knob("vectorize", [1, 0])
    cfg.define_knob("unroll", [1, 0])
    if _has_guarded_input(nest):
        cfg.define_knob("hoist_pad", [1, 0])
    cfg.add_flop(nest_flops(nest))


def _has_guarded_input(nest) -> bool:
    from .padding import hoist_padding
    return hoist_padding(nest.update, nest.acc, list(nest.spatial) + list(nest.reduce)) \
        is not None


def tile_spec(cfg, nest) -> TileSpec:
    """The ``TileSpec`` a configuration of ``define_tile_space`` chooses."""
    inner = [cfg[f"tile_{lp.var.name}"].size[-1] for lp in nest.spatial]
    if math.prod(inner) > MAX_BLOCK:
        raise TuningError(f"accumulator block {inner} has more than {MAX_BLOCK} elements")
    last = cfg["inner_last"].val
    order = [k for k in range(len(inner)) if k != last] + [last]
    return TileSpec(inner=inner, reduce_inside=bool(cfg["reduce_inside"].val),
                    inner_order=order, parallel=cfg["parallel"].val,
                    vectorize=bool(cfg["vectorize"].val), unroll=bool(cfg["unroll"].val),
                    hoist_pad=bool(cfg["hoist_pad"].val) if "hoist_pad" in cfg.space.knobs
                    else False)


@register_template("tile", reference=workload_func)
def tile(cfg, *workload) -> PrimFunc:
    """Multi-level tiling of one reduction kernel (see the module doc)."""
    nest = as_reduction_nest(workload_func(*workload))
    define_tile_space(cfg, nest)
    from .space import ConfigSpace
    if isinstance(cfg, ConfigSpace):
        return nest.func
    return tile_reduction_nest(nest, tile_spec(cfg, nest))


# the default rules' own decisions as a template ------------------------------------------------

@functools.lru_cache(maxsize=512)
def _rule_knobs(key: str, target: str):
    from ..tir.schedule.rules import rule_knobs
    return rule_knobs(workload_func(key), target)


def has_rule_space(key: str, target) -> bool:
    """True when the default rule scheduling workload ``key`` exposes tuning knobs."""
    return _rule_knobs(key, str(target)) is not None


def _redundant(rule_name: str, vals: dict, knobs: dict) -> str | None:
    """Why configuration ``vals`` builds the same program as another one (``None`` if not)."""
    if rule_name != "gemm_rule":
        return None
    default = {k: v[0] for k, v in knobs.items()}
    if vals["kblock"]:
        moved = [k for k in ("tile", "order", "fuse") if vals[k] != default[k]]
        if moved:
            return f"kblock={vals['kblock']} ignores {moved}"
    elif vals["tile"][0] == 1 and vals["order"] != default["order"]:
        return "a one-row tile has no loop order to choose"
    return None


def _rule_reference(key: str, target: str) -> PrimFunc:
    return workload_func(key)


@register_template("rule", reference=_rule_reference)
def rule(cfg, key: str, target: str) -> PrimFunc:
    """The default schedule rule of workload ``key`` with its own decisions as knobs
    (``ember.tir.schedule.rules.rule_knobs``; for the GEMM rule: register tile, loop order,
    reduction blocking, parallel fusion). Every knob's first value is the rule's default, so
    configuration 0 is the untuned schedule. Configurations that build the same program as
    another one are rejected (``TuningError``: invalid, not measured).

    Raises:
        TuningError: the kernel's default rule has no knobs, or ``cfg`` is redundant.
    """
    func = workload_func(key)
    found = _rule_knobs(key, str(target))
    if found is None:
        raise TuningError(f"the default schedule of workload {key} has no tuning knobs")
    name, knobs = found
    for k, vals in knobs.items():
        cfg.define_knob(k, vals)
    from .features import count_flops
    cfg.add_flop(float(count_flops(func)))
    from .space import ConfigSpace
    if isinstance(cfg, ConfigSpace):
        return func
    vals = cfg.values()
    why = _redundant(name, vals, knobs)
    if why:
        raise TuningError(f"redundant configuration: {why}")
    from ..tir.schedule.rules import schedule_config
    return schedule_config(func, target, name, vals)
