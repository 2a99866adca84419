"""Algorithm candidates (direct / Winograd F(2x2) / F(4x4)) of the four Winograd-eligible 3x3
stride-1 convolutions of ResNet-18 and ResNet-50 (64/128/256/512 channels at 56/28/14/7 px,
batch 1), measured as ``tune_model`` measures ``conv_algo`` tasks (``ember.tune.strategy``):
whole one-convolution programs, checked against the NumPy reference, cache flushed, all three
side by side (interleaved) in ``--rounds`` groups, order reversed every round.

Usage::

    python bench/tune_algorithms.py [--threads 2] [--rounds 2]

Prints per workload the fastest call of each candidate and its median ratio to the
heuristic's choice (configuration 0; > 1 = slower than the heuristic's).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout without installing ember

WORKLOADS = ((56, 64), (28, 128), (14, 256), (7, 512))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    from ember import tune
    from ember.tune.measure import (LocalBuilder, LocalRunner, MeasureInput,
                                    create_measure_batch, measure_option)
    print(f"# {args.threads} thread(s), load average {os.getloadavg()[0]:.1f}")
    for size, ch in WORKLOADS:
        wl = ["nn.conv", {"data_layout": "NHWC", "pads": [1, 1, 1, 1], "strides": [1, 1],
                          "dilations": [1, 1], "group": 1},
              [[[1, size, size, ch], "float32"], [[ch, ch, 3, 3], "float32"]],
              [[[1, size, size, ch], "float32"]]]
        task = tune.Task("conv_algo", wl, f"llvm -num-threads={args.threads}")
        runner = LocalRunner(number=10, repeat=3, per_call=True, interleave=True,
                             num_threads=args.threads)
        measure = create_measure_batch(measure_option(LocalBuilder(), runner))
        cfgs = list(task.config_space)
        tiles = [c.values()["tile"] for c in cfgs]
        ratios = {t: [] for t in tiles}
        best = {t: float("inf") for t in tiles}
        try:
            for rnd in range(args.rounds):
                order = cfgs if rnd % 2 == 0 else cfgs[::-1]
                res = measure([MeasureInput(task.target, task, c) for c in order])
                by = {c.values()["tile"]: r for c, r in zip(order, res)}
                for t, r in by.items():
                    if not r.ok:
                        raise SystemExit(f"{size}x{size}x{ch} tile {t}: {r.error_msg}")
                    ratios[t] += [a / b for a, b in zip(r.costs, by[tiles[0]].costs)]
                    best[t] = min(best[t], min(r.costs))
        finally:
            runner.close()
        name = {-1: "direct", 2: "F(2x2)", 4: "F(4x4)"}
        print(f"{size}x{size}x{ch}: heuristic {name[tiles[0]]}; " + "; ".join(
            f"{name[t]} {best[t] * 1e3:.3f} ms ({np.median(ratios[t]):.2f}x)" for t in tiles))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
