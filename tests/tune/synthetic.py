"""A synthetic tuning task whose cost is a known function of the configuration (no compiling,
no timing), so tuners can be checked for finding the known best configuration."""

from __future__ import annotations

import time

from ember.tune import MeasureResult, register_template
from ember.tune.measure import BuildResult

BEST = {"tile": [4, 16], "unroll": 3, "mode": "b", "order": [2, 0, 1]}


@register_template("test.synthetic", override=True)
def synthetic(cfg, extent, n_unroll):
    cfg.define_split("tile", extent, num_outputs=2)
    cfg.define_knob("unroll", list(range(n_unroll)))
    cfg.define_knob("mode", ["a", "b", "c"])
    cfg.define_reorder("order", ["x", "y", "z"], policy="all")
    cfg.add_flop(1e6)
    return None


def synthetic_cost(cfg) -> float:
    """Seconds: 1 ms at the best configuration, more the further a knob is from it (smooth)."""
    v = cfg.values()
    inner = v["tile"][1]
    c = 1.0 + 0.3 * abs(inner.bit_length() - BEST["tile"][1].bit_length())
    c += 0.2 * abs(v["unroll"] - BEST["unroll"])
    c += {"a": 0.5, "b": 0.0, "c": 0.25}[v["mode"]]
    c += 0.15 * sum(a != b for a, b in zip(v["order"], BEST["order"]))
    return c * 1e-3


class SyntheticBuilder:
    n_parallel = 4

    def build(self, inputs):
        return [BuildResult(lib="synthetic") for _ in inputs]


class SyntheticRunner:
    def __init__(self):
        self.measured = []

    def run(self, inputs, builds):
        out = []
        for i in inputs:
            self.measured.append(i.config.index)
            out.append(MeasureResult([synthetic_cost(i.config)], 0, "", 0.0, time.time()))
        return out
