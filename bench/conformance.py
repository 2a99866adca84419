"""ONNX backend conformance: run onnx's own backend test suite through ember and keep score.

The suite is the one the installed ``onnx`` package carries (2,036 cases with onnx 1.23):

- ``node``: ``onnx.backend.test.case.node.collect_testcases()`` single-operator cases,
- ``node-expanded``: the ``*_expanded*`` cases of the same collection (function bodies),
- ``simple``: the model cases of ``onnx.backend.test.case.model.collect_testcases()``,
- ``pytorch-converted``, ``pytorch-operator``: the data folders of that name,
- ``light``: the 9 light models (inputs as onnx's runner makes them, expected outputs from the
  ``*_output_0.pb`` files).

Each case runs in a worker process (``ember.compile(model).run(inputs)``, the public door) with
a time-out, so a crash or a hang is recorded and the run goes on. Outputs are compared with
``onnx.backend.test.runner.Runner.assert_similar_outputs`` and the case's tolerances. The result
is a scoreboard (passed / wrong result / error, by category, by operator, error kinds) written as
JSON and markdown into ``bench/results/``, plus the list of passing case names.

Usage::

    python bench/conformance.py                    # everything, 2 workers
    python bench/conformance.py -k 'test_resize'   # cases whose name matches a regex
    python bench/conformance.py --cases bench/results/conformance_passing.txt --no-write
    nice python bench/conformance.py --target webgpu   # through WebGPU (lavapipe in CI):
        # conformance_webgpu.{json,md}, conformance_webgpu_passing.txt; the markdown lists
        # every case the CPU passes and this target does not, with its reason
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CATEGORIES = ("node", "node-expanded", "simple", "pytorch-converted", "pytorch-operator", "light")
DEFAULT_TIMEOUT = {"light": 900.0}
TIMEOUT = 180.0
TARGET = "llvm"  # the target every worker compiles for (set by --target before the pool forks)


@dataclass
class Case:
    """One conformance case. ``source`` is ``("node", index)`` / ``("simple", index)`` (a
    collected TestCase, regenerated in the worker) or ``("dir", path)`` / ``("light", path)``."""

    name: str
    category: str
    op: str
    source: tuple
    rtol: float = 1e-3
    atol: float = 1e-7


@dataclass
class Result:
    name: str
    category: str
    op: str
    status: str  # passed | wrong | error | timeout | crash
    kind: str = ""
    message: str = ""
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


# collecting -------------------------------------------------------------------------------------

def _quiet():
    import warnings
    warnings.filterwarnings("ignore")


def _data_dir() -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data"


_NODE_CACHE: dict = {}


def _node_cases():
    if "node" not in _NODE_CACHE:
        _quiet()
        import numpy as np
        from onnx.backend.test.case.node import collect_testcases
        with np.errstate(all="ignore"):
            _NODE_CACHE["node"] = collect_testcases()
    return _NODE_CACHE["node"]


def _model_cases():
    if "simple" not in _NODE_CACHE:
        from onnx.backend.test.case.model import collect_testcases
        _NODE_CACHE["simple"] = [c for c in collect_testcases() if c.kind == "simple"]
    return _NODE_CACHE["simple"]


def _ops_of(model) -> list[str]:
    return sorted({n.op_type for n in model.graph.node})


def collect(categories=CATEGORIES) -> list[Case]:
    """Every case of the suite in ``categories`` (deterministic order)."""
    import onnx
    cases: list[Case] = []
    if "node" in categories or "node-expanded" in categories:
        node = _node_cases()
        op_of = {c.name: "+".join(_ops_of(c.model)) for c in node}
        for k, c in enumerate(node):
            expanded = "_expanded" in c.name
            cat = "node-expanded" if expanded else "node"
            if cat not in categories:
                continue
            op = op_of.get(c.name.split("_expanded")[0], op_of[c.name]) if expanded else op_of[c.name]
            cases.append(Case(c.name, cat, op, ("node", k), c.rtol, c.atol))
    if "simple" in categories:
        for k, c in enumerate(_model_cases()):
            cases.append(Case(c.name, "simple", "+".join(_ops_of(c.model)), ("simple", k),
                              c.rtol, c.atol))
    for cat in ("pytorch-converted", "pytorch-operator"):
        if cat not in categories:
            continue
        from onnx.backend.test.loader import load_model_tests
        for c in sorted(load_model_tests(kind=cat), key=lambda c: c.name):
            m = onnx.load(os.path.join(c.model_dir, "model.onnx"), load_external_data=False)
            cases.append(Case(c.name, cat, "+".join(_ops_of(m)), ("dir", c.model_dir),
                              c.rtol, c.atol))
    if "light" in categories:
        from onnx.backend.test.case.model import collect_testcases
        for c in collect_testcases():
            if c.kind == "real" and c.url and c.url.startswith("onnx/backend/test/data/light/"):
                path = str(_data_dir() / "light" / os.path.basename(c.url))
                cases.append(Case(c.name, "light", "model", ("light", path), c.rtol, c.atol))
    return cases


# running one case (in a worker) -----------------------------------------------------------------

def _load_case_data(case: Case):
    """``(model, [(inputs, expected outputs)])`` of a case."""
    import glob

    import numpy as np
    import onnx
    from onnx import numpy_helper
    kind, ref = case.source
    if kind in ("node", "simple"):
        tc = (_node_cases() if kind == "node" else _model_cases())[ref]
        norm = lambda t: numpy_helper.to_array(t) if isinstance(t, onnx.TensorProto) else t  # noqa: E731
        sets = [([norm(x) for x in ins], [norm(x) for x in outs]) for ins, outs in tc.data_sets]
        return tc.model, sets
    if kind == "dir":
        from onnx.backend.test.runner import Runner
        model = onnx.load(os.path.join(ref, "model.onnx"))
        sets = []
        for d in sorted(glob.glob(os.path.join(ref, "test_data_set*"))):
            ins, outs = [], []
            n_in = len(glob.glob(os.path.join(d, "input_*.pb")))
            for i in range(n_in):
                Runner._load_proto(None, os.path.join(d, f"input_{i}.pb"), ins,
                                   model.graph.input[i].type)
            n_out = len(glob.glob(os.path.join(d, "output_*.pb")))
            for i in range(n_out):
                Runner._load_proto(None, os.path.join(d, f"output_{i}.pb"), outs,
                                   model.graph.output[i].type)
            sets.append((ins, outs))
        return model, sets
    if kind == "light":
        from onnx.backend.test.runner import Runner
        model = onnx.load(ref)
        inits = {i.name for i in model.graph.initializer}
        ins = [Runner.generate_dummy_data(x, seed=0, name=case.name, random=False)
               for x in model.graph.input if x.name not in inits]
        prefix = os.path.splitext(ref)[0]
        outs = []
        for i in range(len(model.graph.output)):
            t = onnx.TensorProto()
            with open(f"{prefix}_output_{i}.pb", "rb") as f:
                t.ParseFromString(f.read())
            outs.append(numpy_helper.to_array(t))
        return model, [(ins, outs)]
    raise ValueError(f"unknown case source {kind!r}")


def _error_kind(e: BaseException) -> str:
    name = type(e).__name__
    op = getattr(e, "op", None)
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    msg = re.sub(r"^node '[^']*' \([^)]*\): ", "", msg)
    msg = msg.split("; reached from")[0]
    msg = re.sub(r"graph input '[^']*'", "graph input", msg)
    msg = re.sub(r"'[^']*'", "'…'", msg)
    msg = re.sub(r"\d+", "N", msg)
    if op:
        return f"{name}[{op}]: {msg[:90]}"
    return f"{name}: {msg[:110]}"


def assert_similar(ref: list, out: list, rtol: float, atol: float) -> None:
    """``Runner.assert_similar_outputs``, except that a sequence output is compared element by
    element as a list of outputs (the runner's own recursion passes the elements, 0-d arrays
    included, where it expects lists, and raises TypeError on ``len()`` of a 0-d array)."""
    from onnx.backend.test.runner import Runner
    if len(ref) != len(out):
        raise AssertionError(f"{len(out)} outputs, expected {len(ref)}")
    for r, o in zip(ref, out):
        if isinstance(r, (list, tuple)):
            if not isinstance(o, (list, tuple)) or len(o) != len(r):
                raise AssertionError(f"sequence output of {type(o).__name__} "
                                     f"(length {len(o) if isinstance(o, (list, tuple)) else '-'}), "
                                     f"expected a sequence of length {len(r)}")
            assert_similar(list(r), list(o), rtol, atol)
        else:
            Runner.assert_similar_outputs([r], [o], rtol=rtol, atol=atol)


def run_case(case: Case) -> Result:
    """Compile and run one case through the public door, ``ember.compile(model).run(inputs)``
    (the default ``executor="auto"``); compare like onnx's runner. ``extra`` records which
    executor ``ember.compile`` chose (and why), and for a staged model its host operators and
    compiled segments."""
    import numpy as np

    t0 = time.perf_counter()
    res = Result(case.name, case.category, case.op, "error")
    try:
        model, sets = _load_case_data(case)
    except Exception as e:  # noqa: BLE001 - a broken case is recorded, not fatal
        res.kind, res.message = "case data: " + type(e).__name__, str(e)[:500]
        return res
    import ember
    try:
        compiled = ember.compile(model) if TARGET == "llvm" else ember.compile(model,
                                                                                target=TARGET)
        outputs = []
        with np.errstate(all="ignore"):
            for ins, _ in sets:
                outputs.append(list(compiled.run(ins)))
    except Exception as e:  # noqa: BLE001 - every failure is a scoreboard entry
        res.kind = _error_kind(e)
        res.message = (str(e) or type(e).__name__)[:1000]
        if not hasattr(e, "__module__") or not type(e).__module__.startswith("ember"):
            res.message += "\n" + "".join(traceback.format_exception(e)[-3:])[-1500:]
        res.seconds = time.perf_counter() - t0
        return res
    try:
        for (ins, ref), out in zip(sets, outputs):
            assert_similar(ref, out, case.rtol, case.atol)
        res.status = "passed"
    except AssertionError as e:
        res.status = "wrong"
        text = str(e)
        res.kind = ("wrong shape" if "incorrect shape" in text else
                    "wrong dtype" if "dtype" in text.lower() and "Mismatched" not in text else
                    "wrong number of outputs" if "len" in text.lower() and "Items are not equal"
                    in text and "ACTUAL" in text and "shape" not in text else "wrong values")
        res.message = text[:1000]
    except Exception as e:  # noqa: BLE001 - e.g. an output of an unexpected type
        res.status = "wrong"
        res.kind = "wrong output type"
        res.message = f"{type(e).__name__}: {e}"[:1000]
    res.extra = {"executor": compiled.info.get("executor", "static"),
                 "staged_reason": compiled.info.get("staged_reason", "")[:200]}
    if hasattr(compiled, "report"):
        try:
            rep_report = compiled.report()
            res.extra.update(host_ops=sorted({h["op"] for h in rep_report["host_nodes"]}),
                             segments=len(rep_report["segments"]))
        except Exception:  # noqa: BLE001
            pass
    else:
        res.extra.update(host_ops=[], segments=1)
    res.seconds = time.perf_counter() - t0
    return res


def _worker(conn, cases_by_index):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _quiet()
    sys.path.insert(0, str(ROOT))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        case = msg
        try:
            r = run_case(case)
        except BaseException as e:  # noqa: BLE001
            r = Result(case.name, case.category, case.op, "error", type(e).__name__, str(e)[:500])
        conn.send(r)


# the pool ---------------------------------------------------------------------------------------

class _Slot:
    def __init__(self, ctx):
        self.ctx = ctx
        self.start()

    def start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, None), daemon=True)
        self.proc.start()
        child.close()
        self.case: Case | None = None
        self.t0 = 0.0

    def kill(self):
        try:
            self.proc.kill()
            self.proc.join(5)
        except Exception:  # noqa: BLE001
            pass
        self.conn.close()


def run_cases(cases: list[Case], jobs: int = 2, timeout: float | None = None,
              progress: bool = True) -> list[Result]:
    """Run ``cases`` on ``jobs`` worker processes; a case over its time-out (``timeout`` or the
    category default) is killed and recorded as ``timeout``, a dying worker as ``crash``."""
    ctx = mp.get_context("fork")
    _node_cases() if any(c.source[0] == "node" for c in cases) else None
    _model_cases() if any(c.source[0] == "simple" for c in cases) else None
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    slots = [_Slot(ctx) for _ in range(max(1, min(jobs, len(cases))))]
    queue = list(cases)
    results: list[Result] = []
    t_start = time.perf_counter()
    done = 0

    def limit(c: Case) -> float:
        return timeout if timeout is not None else DEFAULT_TIMEOUT.get(c.category, TIMEOUT)

    def finish(r: Result):
        nonlocal done
        results.append(r)
        done += 1
        if progress:
            el = time.perf_counter() - t_start
            print(f"[{done}/{len(cases)} {el:6.0f}s] {r.status:7s} {r.name} "
                  f"{('- ' + r.kind) if r.kind else ''}", flush=True)

    try:
        while queue or any(s.case for s in slots):
            for s in slots:
                if s.case is None and queue:
                    s.case = queue.pop(0)
                    s.t0 = time.perf_counter()
                    try:
                        s.conn.send(s.case)
                    except (BrokenPipeError, OSError):
                        s.kill()
                        s.start()
                        s.case = None
                        queue.insert(0, s.case) if s.case else None
            busy = [s for s in slots if s.case]
            if not busy:
                continue
            ready = wait([s.conn for s in busy], timeout=1.0)
            now = time.perf_counter()
            for s in busy:
                if s.conn in ready:
                    try:
                        r = s.conn.recv()
                    except (EOFError, OSError):
                        code = s.proc.exitcode
                        r = Result(s.case.name, s.case.category, s.case.op, "crash",
                                   f"worker died (exit code {code})", "", now - s.t0)
                        s.kill()
                        s.start()
                    finish(r)
                    s.case = None
                elif now - s.t0 > limit(s.case):
                    r = Result(s.case.name, s.case.category, s.case.op, "timeout",
                               f"timeout after {limit(s.case):.0f}s", "", now - s.t0)
                    s.kill()
                    s.start()
                    finish(r)
                    s.case = None
    finally:
        for s in slots:
            try:
                s.conn.send(None)
            except Exception:  # noqa: BLE001
                pass
            s.kill()
    order = {c.name: k for k, c in enumerate(cases)}
    return sorted(results, key=lambda r: order[r.name])


# the scoreboard ---------------------------------------------------------------------------------

def _native(r: Result) -> bool:
    """A passing case that ran as one compiled segment with no host kernel."""
    return r.status == "passed" and r.extra.get("segments") == 1 and not r.extra.get("host_ops")


def _counts(rs) -> dict:
    c = collections.Counter(r.status for r in rs)
    return {"passed": c["passed"], "wrong": c["wrong"],
            "error": c["error"] + c["timeout"] + c["crash"], "timeout": c["timeout"],
            "crash": c["crash"], "total": len(rs), "native": sum(_native(r) for r in rs)}


def scoreboard(results: list[Result]) -> dict:
    """The scoreboard as a JSON-able dict."""
    import onnx
    by_cat = {cat: _counts([r for r in results if r.category == cat])
              for cat in CATEGORIES if any(r.category == cat for r in results)}
    ops = collections.defaultdict(list)
    for r in results:
        if r.category in ("node", "node-expanded"):
            ops[r.op].append(r)
    kinds = collections.Counter(r.kind for r in results if r.status != "passed")
    host = collections.Counter(op for r in results if r.status == "passed"
                               for op in r.extra.get("host_ops", []))
    return {
        "onnx_version": onnx.__version__,
        "totals": _counts(results),
        "by_category": by_cat,
        "by_operator": {op: _counts(rs) for op, rs in sorted(ops.items())},
        "failure_kinds": dict(kinds.most_common()),
        "host_ops_in_passing_cases": dict(host.most_common()),
        "cases": {r.name: {"category": r.category, "op": r.op, "status": r.status,
                           "kind": r.kind, "message": r.message[:300],
                           "seconds": round(r.seconds, 2)} for r in results},
    }


def markdown(sb: dict) -> str:
    """The scoreboard as a markdown page."""
    t = sb["totals"]
    lines = [f"# ONNX backend conformance (onnx {sb['onnx_version']})", "",
             f"**{t['passed']} / {t['total']} passed**, {t['wrong']} wrong results, "
             f"{t['error']} errors ({t['timeout']} time-outs, {t['crash']} crashes).", "",
             "| category | passed | wrong | error | total | passed as one native segment |",
             "|---|---:|---:|---:|---:|---:|"]
    for cat, c in sb["by_category"].items():
        lines.append(f"| {cat} | {c['passed']} | {c['wrong']} | {c['error']} | {c['total']} | "
                     f"{c['native']} |")
    lines += ["", "## Operators not fully passing (node cases)", "",
              "| operator | passed | wrong | error | total |", "|---|---:|---:|---:|---:|"]
    for op, c in sb["by_operator"].items():
        if c["passed"] != c["total"]:
            lines.append(f"| {op} | {c['passed']} | {c['wrong']} | {c['error']} | {c['total']} |")
    lines += ["", "## Failure kinds", "", "| count | kind |", "|---:|---|"]
    for k, n in sb["failure_kinds"].items():
        lines.append(f"| {n} | {k.replace('|', '/')} |")
    if sb.get("host_ops_in_passing_cases"):
        lines += ["", "## Operators run as host kernels (in passing cases)", "",
                  ", ".join(f"{k} ({v})" for k, v in sb["host_ops_in_passing_cases"].items())]
    fully = [op for op, c in sb["by_operator"].items() if c["passed"] == c["total"]]
    lines += ["", f"## Operators fully passing ({len(fully)})", "", ", ".join(fully), ""]
    if sb.get("cpu_passing_failing_here") is not None:
        lost = sb["cpu_passing_failing_here"]
        lines += [f"## Cases the CPU target passes and {sb['target']} does not ({len(lost)} of "
                  f"{sb['cpu_passing_in_run']})", "", "| count | reason |", "|---:|---|"]
        for k, n in sb["cpu_passing_failing_here_by_reason"].items():
            lines.append(f"| {n} | {k.replace('|', '/')} |")
        lines += ["", "| case | status | reason |", "|---|---|---|"]
        for name, c in sorted(lost.items()):
            msg = next((ln.strip() for ln in c["message"].splitlines() if ln.strip()), "")
            msg = msg[:160].replace("|", "/")
            lines.append(f"| {name} | {c['status']} | {c['kind'].replace('|', '/')}: {msg} |")
        lines.append("")
    return "\n".join(lines)


def _against_cpu(sb: dict, out: Path) -> None:
    """For a non-CPU target: the cases of this run that the CPU's last scoreboard
    (``conformance_passing.txt``) passes and this target does not."""
    cpu = out / "conformance_passing.txt"
    if TARGET == "llvm" or not cpu.exists():
        return
    passing = set(cpu.read_text().split())
    sb["target"] = TARGET
    sb["cpu_passing_in_run"] = sum(1 for n in sb["cases"] if n in passing)
    sb["cpu_passing_failing_here"] = lost = {n: c for n, c in sb["cases"].items()
                                             if n in passing and c["status"] != "passed"}
    reasons = collections.Counter(_reason(c) for c in lost.values())
    sb["cpu_passing_failing_here_by_reason"] = dict(reasons.most_common())


_DTYPE = re.compile(r"dtype (\w+) has no WGSL form")


def _reason(c: dict) -> str:
    """A lost case's reason group: the dtype the target cannot represent, the operator without a
    GPU kernel, or the failure kind."""
    m = _DTYPE.search(c["message"])
    if m:
        return f"dtype {m.group(1)} (no WGSL form)"
    m = re.search(r"kernel \w+ \(([\w.]+)\): micro-kernel call", c["message"])
    if m:
        return f"{m.group(1)}: CPU micro-kernel composite, no GPU kernel"
    return f"{c['status']}: {c['kind']}"


def write_results(results: list[Result], out: Path = RESULTS, keep_from: dict | None = None) -> dict:
    """Write ``conformance.json``, ``conformance.md`` and ``conformance_passing.txt``
    (``conformance_<target>*`` for a target other than the CPU). ``keep_from``: an earlier
    scoreboard of the same results (``--rescore``) whose native-segment counts are kept (the
    per-case JSON does not hold them)."""
    out.mkdir(parents=True, exist_ok=True)
    sb = scoreboard(results)
    if keep_from is not None:
        sb["totals"]["native"] = keep_from["totals"]["native"]
        for cat, c in sb["by_category"].items():
            c["native"] = keep_from["by_category"].get(cat, c)["native"]
    _against_cpu(sb, out)
    stem = "conformance" if TARGET == "llvm" else "conformance_" + re.sub(r"\W+", "_", TARGET)
    (out / f"{stem}.json").write_text(json.dumps(sb, indent=1, sort_keys=False) + "\n")
    (out / f"{stem}.md").write_text(markdown(sb))
    passing = sorted(r.name for r in results if r.status == "passed")
    (out / f"{stem}_passing.txt").write_text("\n".join(passing) + "\n")
    return sb


def main(argv=None) -> int:
    """Command line entry (also ``ember conformance``)."""
    p = argparse.ArgumentParser(prog="ember conformance", description=__doc__.split("\n\n")[0])
    p.add_argument("-k", "--filter", help="regex: run the cases whose name matches")
    p.add_argument("--category", action="append", choices=CATEGORIES,
                   help="restrict to a category (repeatable)")
    p.add_argument("--cases", help="file with one case name per line: run only those")
    p.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds per case (default {TIMEOUT:.0f}, light models "
                        f"{DEFAULT_TIMEOUT['light']:.0f})")
    p.add_argument("--out", default=str(RESULTS), help="results folder (default bench/results)")
    p.add_argument("--no-write", action="store_true", help="print only, write no results")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-case progress lines")
    p.add_argument("--target", default="llvm",
                   help="compile for this target (default llvm; e.g. webgpu)")
    p.add_argument("--rescore", metavar="JSON",
                   help="rewrite the scoreboard files from a results JSON this script wrote "
                        "(no cases run)")
    a = p.parse_args(argv)
    global TARGET
    TARGET = a.target
    if a.rescore:
        sb = json.loads(Path(a.rescore).read_text())
        results = [Result(n, c["category"], c["op"], c["status"], c["kind"], c["message"],
                          c["seconds"]) for n, c in sb["cases"].items()]
        write_results(results, Path(a.out), keep_from=sb)
        return 0
    cases = collect(tuple(a.category) if a.category else CATEGORIES)
    if a.filter:
        rx = re.compile(a.filter)
        cases = [c for c in cases if rx.search(c.name)]
    if a.cases:
        want = {ln.strip() for ln in Path(a.cases).read_text().splitlines() if ln.strip()}
        cases = [c for c in cases if c.name in want]
    if not cases:
        print("no cases selected")
        return 1
    t0 = time.perf_counter()
    results = run_cases(cases, jobs=a.jobs, timeout=a.timeout, progress=not a.quiet)
    sb = write_results(results, Path(a.out)) if not a.no_write else scoreboard(results)
    t = sb["totals"]
    print(f"\n{t['passed']}/{t['total']} passed, {t['wrong']} wrong, {t['error']} errors "
          f"in {time.perf_counter() - t0:.0f}s")
    for cat, c in sb["by_category"].items():
        print(f"  {cat:18s} {c['passed']:5d} / {c['total']:5d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
