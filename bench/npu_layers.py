"""ResNet-18's layer shapes on the simulated NPU (ember.npu): cycles, bounds, utilization with
1 and 2 virtual threads, bit-exactness against the integer NumPy reference, and the wall time
of simulating the whole network's convolutions + fc.

    python bench/npu_layers.py [--out bench/results/npu_layers.txt] [--quick]

Every layer runs in cycle mode with the hazard checker on, for virtual_threads 1 and 2;
``compute`` and ``memory`` are the busy cycles of the compute unit and of the shared DRAM port
(Stats.compute_bound / memory_bound); utilization = MACs / (cycles * 256). The whole-network
line simulates each of ResNet-18's 21 layers once (functional mode, hazard checker on).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from ember import npu
from ember.npu import reference

# name, C, H(=W), O, K, stride, pad, count in ResNet-18 (224x224 input)
LAYERS = [
    ("conv1 7x7/2", 3, 224, 64, 7, 2, 3, 1),
    ("layer1 3x3", 64, 56, 64, 3, 1, 1, 4),
    ("layer2.0 3x3/2", 64, 56, 128, 3, 2, 1, 1),
    ("layer2 3x3", 128, 28, 128, 3, 1, 1, 3),
    ("layer2 ds 1x1/2", 64, 56, 128, 1, 2, 0, 1),
    ("layer3.0 3x3/2", 128, 28, 256, 3, 2, 1, 1),
    ("layer3 3x3", 256, 14, 256, 3, 1, 1, 3),
    ("layer3 ds 1x1/2", 128, 28, 256, 1, 2, 0, 1),
    ("layer4.0 3x3/2", 256, 14, 512, 3, 2, 1, 1),
    ("layer4 3x3", 512, 7, 512, 3, 1, 1, 3),
    ("layer4 ds 1x1/2", 256, 14, 512, 1, 2, 0, 1),
    ("fc", 512, 1, 1000, 1, 1, 0, 1),
]


def build(layer, vt, rng):
    name, c, h, o, k, s, p, _n = layer
    if name == "fc":
        x = rng.integers(-128, 128, (1, c), dtype=np.int8)
        w = rng.integers(-128, 128, (o, c), dtype=np.int8)
        b = rng.integers(-2**14, 2**14, o).astype(np.int32)
        kern = npu.lower_dense(w, b, batch=1, multiplier=5, shift=14, virtual_threads=vt)
        ref = reference.dense_int8(x, w, b, 5, 14)
        return kern, x, ref
    x = rng.integers(-128, 128, (1, c, h, h), dtype=np.int8)
    w = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    b = rng.integers(-2**14, 2**14, o).astype(np.int32)
    kern = npu.lower_conv2d(w, b, input_shape=x.shape, strides=(s, s), pads=(p,) * 4,
                            multiplier=5, shift=14, relu=True, virtual_threads=vt)
    ref = reference.conv2d_int8(x, w, b, (s, s), (p,) * 4, 5, 14, True)
    return kern, x, ref


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="skip the whole-network timing")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    when = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
    lines = [f"# bench/npu_layers.py on {platform.node()}, {when}",
             f"# config {npu.load_config().name}: 1x16x16 GEMM, 8 B/cycle DRAM, latency 64",
             "# layer              vt  MACs        cycles     compute    memory     "
             "max<=cyc<=sum  util   stall(l,c,s)          exact  tiling(ocb,oh,ow,icb)"]
    for layer in LAYERS:
        for vt in (1, 2):
            kern, x, ref = build(layer, vt, rng)
            y, st = kern.run(x, mode="cycle")
            cb, mb = st.compute_bound, st.memory_bound
            ok = max(cb, mb) <= st.cycles <= cb + mb
            util = kern.macs / (st.cycles * kern.cfg.macs_per_cycle)
            t = kern.tiling
            stalls = [a + b for a, b in zip(st.token_stall, st.port_stall)]
            lines.append(f"{layer[0]:20s} {vt:2d}  {kern.macs:<11d} {st.cycles:<10d} {cb:<10d} "
                         f"{mb:<10d} {str(ok):14s} {util:5.3f}  {str(stalls):21s} "
                         f"{str(np.array_equal(y, ref)):6s} "
                         f"({t.t_ocb},{t.t_oh},{t.t_ow},{t.t_icb})")
            print(lines[-1], flush=True)
    if not args.quick:
        total_macs, t_sim, t0 = 0, 0.0, time.perf_counter()
        cpu0 = time.process_time()
        for layer in LAYERS:
            kern, x, ref = build(layer, 2, rng)
            for _ in range(layer[7]):
                t1 = time.perf_counter()
                y, st = kern.run(x, mode="functional")
                t_sim += time.perf_counter() - t1
                total_macs += kern.macs
                assert np.array_equal(y, ref)
        dt, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        load = os.getloadavg()[0]
        lines.append(f"# whole ResNet-18 (21 layers, {total_macs / 1e9:.3f} GMAC), functional "
                     f"mode + hazard checker, 2 virtual threads: simulate {t_sim:.1f} s wall; "
                     f"with compile + reference check {dt:.1f} s wall, {cpu:.1f} s CPU "
                     f"(host load average {load:.1f} on {os.cpu_count()} cores)")
        print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
