"""Paired A/B of two ember source trees on whole models, with the peers in the same rounds.

For each model (any name ``bench/compare.py --models`` takes: the five benchmark models or the
onnx package's light models, seeded random weights): the baseline tree (``--base``, e.g. main
unpacked with ``git archive main | tar -x -C DIR``) and this tree each compile the model in a
fresh process (``ember.compile``, ``-num-threads=THREADS``) and save it; this process loads
both artifacts (``ember.load``) and times them interleaved with onnxruntime and OpenVINO
(when installed) by ``ember.benchmark.compare_runtimes`` (turns of 1 untimed + 3 timed runs of
each runtime). Prints per model: the medians, the paired new/base ratio (median and the range
over the turns' ratios), new / best peer, agreement with onnxruntime, and whether the two
trees generated the same C source.

Usage: python bench/ab_models.py --base DIR [--models bvlc_alexnet,shufflenet] [--threads 2]
                                 [--repeat 20] [--json out.json] [--code-only]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

_COMPILE = r"""
import sys, time
sys.path.insert(0, {tree!r})
import onnx, ember
assert ember.__file__.startswith({tree!r}), ember.__file__
t = time.perf_counter()
cm = ember.compile(onnx.load({model!r}), target="llvm -num-threads={threads}", executor="static")
print(time.perf_counter() - t)
cm.save({out!r})
"""


def compile_in(tree: str, model_path: str, out: str, threads: int) -> float:
    """Compile the ONNX file ``model_path`` with the ember of source tree ``tree`` in a fresh
    process and save it to ``out``; returns the compile seconds."""
    env = dict(os.environ, PYTHONPATH=tree)
    r = subprocess.run([sys.executable, "-c", _COMPILE.format(tree=tree, model=model_path,
                                                              out=out, threads=threads)],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"compile with {tree} failed:\n{r.stderr[-3000:]}")
    return float(r.stdout.strip().splitlines()[-1])


def ab_model(name: str, base: str, threads: int, repeat: int, code_only: bool = False) -> dict:
    """One model's row (see the module doc); ``code_only``: only whether the two trees
    generate the same C source (no timing)."""
    import onnx
    import ember
    from compare import build_model
    from ember.benchmark import BLOCK, compare_runtimes
    m, x = build_model(name)
    with tempfile.TemporaryDirectory() as d:
        mp = os.path.join(d, "model.onnx")
        onnx.save(m, mp)
        cs = {}
        for tag, tree in (("base", base), ("new", ROOT)):
            cs[tag] = compile_in(tree, mp, os.path.join(d, f"{tag}.ember"), threads)
        mb, mn = (ember.load(os.path.join(d, f"{t}.ember")) for t in ("base", "new"))
    if code_only:
        diff = sorted(set(_kernels(mn.source)) ^ set(_kernels(mb.source)))
        return {"model": name, "same_code": mb.source == mn.source,
                "kernels_differing": len(diff) // 2 if diff else 0, "compile_s": cs}
    res = compare_runtimes(m, x, threads=threads, repeat=repeat, ember_model=mn,
                           variants={"ember-base": mb})
    r = {q.name: q for q in res}
    new, old = np.array(r["ember"].runs), np.array(r["ember-base"].runs)
    # one ratio per turn: the medians of the turn's BLOCK timed runs of each tree
    turns = [float(np.median(new[i:i + BLOCK]) / np.median(old[i:i + BLOCK]))
             for i in range(0, min(len(new), len(old)), BLOCK)]
    peers = {k: v.median_ms for k, v in r.items() if not k.startswith("ember")}
    best = min(peers, key=peers.get) if peers else None
    row = {"model": name, "ember_base_ms": r["ember-base"].median_ms,
           "ember_ms": r["ember"].median_ms, "peers_ms": peers,
           "new_over_base": float(np.median(turns)),
           "new_over_base_range": [min(turns), max(turns)],
           "best_peer": best,
           "new_over_best_peer": r["ember"].median_ms / peers[best] if best else None,
           "base_over_best_peer": r["ember-base"].median_ms / peers[best] if best else None,
           "matches_onnxruntime": r["ember"].matches, "max_abs_err": r["ember"].max_abs_err,
           "same_code": mb.source == mn.source, "compile_s": cs}
    return row


def _kernels(src: str) -> list:
    """The C source split at its kernels' comment lines (``/* name */``)."""
    return [k for k in src.split("\n/* ") if k]


def format_rows(rows: list, threads: int, repeat: int) -> str:
    """The rows as a text table."""
    out = [f"median ms, batch 1, {threads} threads, {repeat} interleaved runs per runtime; "
           f"new/base: median [range] of per-turn ratios",
           f"{'model':14}{'base':>9}{'new':>9}{'new/base':>10}{'range':>14}{'ort':>9}"
           f"{'openvino':>10}{'new/best':>10}{'base/best':>10}{'match':>7}{'same C':>8}"]
    for r in rows:
        p = r["peers_ms"]
        lo, hi = r["new_over_base_range"]
        out.append(f"{r['model']:14}{r['ember_base_ms']:9.2f}{r['ember_ms']:9.2f}"
                   f"{r['new_over_base']:10.3f}{f'[{lo:.2f}, {hi:.2f}]':>14}"
                   f"{p.get('onnxruntime', float('nan')):9.2f}"
                   f"{p.get('openvino', float('nan')):10.2f}"
                   f"{r['new_over_best_peer'] or float('nan'):10.2f}"
                   f"{r['base_over_best_peer'] or float('nan'):10.2f}"
                   f"{str(r['matches_onnxruntime']):>7}{str(r['same_code']):>8}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="source tree of the baseline ember")
    ap.add_argument("--models", default="bvlc_alexnet,shufflenet")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--code-only", action="store_true",
                    help="only report whether both trees generate the same C source")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        rows.append(ab_model(name, os.path.abspath(args.base), args.threads, args.repeat,
                             args.code_only))
        print(f"{name}: {rows[-1]}", file=sys.stderr, flush=True)
    if args.code_only:
        for r in rows:
            print(f"{r['model']:14} same C source: {r['same_code']}"
                  f" ({r['kernels_differing']} kernels differ)")
        return 0
    print(format_rows(rows, args.threads, args.repeat))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["matches_onnxruntime"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
