"""Tuning records: one JSON object per line, one line per measured candidate.

A line holds ``{"version": 1, "task": {"name", "args", "key"}, "target": "llvm ...",
"config": {...}`` (a template configuration, ``ConfigEntity.to_json()``), ``"trace": [...]`` (a template-free
search program) or ``"default": {}`` (the untuned kernel, measured for comparison, so a
"tuned" program slower than the default is never applied), ``"costs": [seconds...], "error_no": 0, "error": "...",
"all_cost": s, "timestamp": t}`` and, for candidates timed side by side (interleaved),
``"group": id``, and ``"threads": n`` (the thread count it was timed with; 0: the target's
default; absent in older files: unknown). Files are appended to, so an interrupted run keeps what it
measured, and a resumed run skips it (``Tuner.load_history``).

Thread counts: a time is comparable only with times taken at the same thread count. A resumed
run keeps (skips, and ranks against) only the records of its own count or of an unknown count
(``at_threads``); ``apply_history_best`` reads one count per workload (``one_thread_count``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from ..errors import TuningError
from .measure import MeasureErrorNo, MeasureInput, MeasureResult

RECORD_VERSION = 1


@dataclass
class Record:
    """One measured candidate read back from a records file."""

    task_name: str
    task_args: list
    task_key: str
    target: str
    kind: str            # "config", "trace" or "default"
    config: object       # the JSON of the config or trace
    result: MeasureResult

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def cost(self) -> float:
        return self.result.mean


def encode(inp: MeasureInput, res: MeasureResult) -> str:
    """The JSON line of one measurement."""
    if inp.config is None:
        kind, cfg = "default", {}
    else:
        cfg = inp.config.to_json()
        kind = "trace" if isinstance(cfg, list) else "config"
    d = {"version": RECORD_VERSION, "task": inp.task.to_json(), "target": str(inp.task.target),
         kind: cfg, "costs": [float(c) for c in res.costs], "error_no": int(res.error_no),
         "error": res.error_msg[:500], "all_cost": round(float(res.all_cost), 6),
         "timestamp": round(float(res.timestamp), 3)}
    if res.group:
        d["group"] = res.group
    if res.threads is not None:
        d["threads"] = int(res.threads)
    return json.dumps(d, separators=(",", ":"))


def decode(line: str) -> Record:
    """Parse one line of a records file.

    Raises:
        TuningError: not a record line (the message quotes its start).
    """
    try:
        d = json.loads(line)
        kind = "trace" if "trace" in d else "default" if "default" in d else "config"
        t = d["task"]
        if int(d.get("version", RECORD_VERSION)) > RECORD_VERSION:
            raise ValueError(f"record version {d['version']} is newer than this ember's "
                             f"{RECORD_VERSION} (update ember, or tune again)")
        if not isinstance(d["costs"], list):
            raise TypeError(f"costs must be a list of seconds, not {d['costs']!r}")
        costs = [float(c) for c in d["costs"]]
        if not all(c >= 0 for c in costs):  # (NaN fails too)
            raise ValueError(f"costs must be non-negative seconds, not {costs}")
        res = MeasureResult(costs, int(d["error_no"]), d.get("error", ""),
                            float(d.get("all_cost", 0)), float(d.get("timestamp", 0)),
                            str(d.get("group", "")),
                            None if d.get("threads") is None else int(d["threads"]))
        return Record(t["name"], list(t["args"]), t["key"], d["target"], kind, d[kind], res)
    except (ValueError, KeyError, TypeError) as e:
        raise TuningError(f"not a tuning record line ({type(e).__name__}: {e}): "
                          f"{line[:120]!r}") from None


def load_records(path: "str | os.PathLike") -> Iterator[Record]:
    """The records of a file, in order; blank lines are skipped, a malformed line raises
    ``TuningError`` naming the file and line number (a last line cut short by an interrupted
    run is skipped). A missing file yields nothing (a tuning run starts from scratch);
    a directory or a file that is not UTF-8 text raises ``TuningError``."""
    if not os.path.exists(path):
        return
    if os.path.isdir(path):
        raise TuningError(f"records path {os.fspath(path)!r} is a directory: give the JSON-lines "
                          f"records file that `ember tune --records FILE` wrote")
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield decode(line)
                except TuningError as e:
                    if n > 1 and not line.endswith("\n"):
                        return  # a last line cut short by an interrupted run
                    raise TuningError(f"{path}:{n}: {e}; delete or repair that line (records "
                                      f"are one JSON object per line)") from None
    except UnicodeDecodeError as e:
        raise TuningError(f"records file {os.fspath(path)!r} is not UTF-8 text ({e.reason} at "
                          f"byte {e.start}): give the JSON-lines records file that `ember tune "
                          f"--records FILE` wrote") from None


def save_records(path: "str | os.PathLike", pairs: Iterable[tuple[MeasureInput, MeasureResult]],
                 mode: str = "a") -> None:
    """Append (``mode="a"``) or write the measurements ``pairs`` to ``path``. Appending to a
    file whose last line was cut short (an interrupted run) first drops that fragment, so the
    new records start on a line of their own."""
    if "a" in mode:
        _end_cleanly(path)
    with open(path, mode) as f:
        for inp, res in pairs:
            f.write(encode(inp, res) + "\n")


def _end_cleanly(path: "str | os.PathLike") -> None:
    """Make ``path`` (when it exists and is not empty) end with a newline: a last line without
    one is a record cut short by an interrupted write and is removed, unless it parses (then
    only the newline is added)."""
    try:
        with open(path, "rb+") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            # find the start of the last line
            pos, chunk = size, 4096
            start = 0
            while pos > 0:
                lo = max(0, pos - chunk)
                f.seek(lo)
                buf = f.read(pos - lo)
                nl = buf.rfind(b"\n")
                if nl >= 0:
                    start = lo + nl + 1
                    break
                pos = lo
            f.seek(start)
            last = f.read().decode("utf-8", errors="replace")
            try:
                decode(last)
            except TuningError:
                f.truncate(start)  # the fragment of an interrupted write
                return
            f.seek(size)
            f.write(b"\n")
    except FileNotFoundError:
        return


#: group id prefix of in-model measurements (``ember.tune.model_check``): the summed in-model
#: time of a task's kernels, tuned and default, interleaved; not comparable with candidates
#: timed alone, so only ``paired_speedups(..., in_model=True)`` reads them
MODEL_GROUP = "model:"


def is_in_model(r: Record) -> bool:
    """Whether ``r`` is an in-model measurement (``ember.tune.model_check``)."""
    return r.result.group.startswith(MODEL_GROUP)


def at_threads(records: Iterable[Record], threads: int) -> list[Record]:
    """The records a run timing with ``threads`` threads counts as measured: those timed with
    ``threads`` and those of an unknown count (``threads`` absent: written before ember recorded
    it, kept as before). Records timed with another count are left out, so a run resumed with
    another ``--measure-threads`` measures their candidates again and never ranks their times
    against its own."""
    return [r for r in records if r.result.threads is None or r.result.threads == threads]


def _workload(r: Record) -> tuple[str, str]:
    """``(workload, target)`` of a record: the kernel (``task_args[0]``) all its tasks share
    (``rule``, ``tile``, ``search`` and the untuned ``default``), so their times are compared."""
    return (str(r.task_args[0]) if r.task_args else r.task_key), r.target


def _target_threads(target: str) -> int | None:
    """The thread count a target string runs with (``-num-threads``; 0: the runtime's
    default), as ``measure.measured_threads`` stamps it; ``None`` for a malformed string."""
    from ..errors import TargetError
    from ..target import Target
    try:
        return Target(target).num_threads or 0
    except TargetError:
        return None


def one_thread_count(records: Iterable[Record]) -> list[Record]:
    """``records`` with, per ``(workload, target)``, only those timed at one thread count, so
    no time of one known count is compared with a time of another: the target's own count
    (``-num-threads=N``, 0 when it has none, as the tuner stamps it) when the records hold
    it, else the count of the most recent record with a count (largest ``timestamp``).
    Records of an unknown count (written before ember recorded it) are kept beside it, as
    ``at_threads`` keeps them for a resumed run, so an older file reads as before. In-model
    measurements (``is_in_model``: interleaved tuned-vs-default ratios) are all kept."""
    records = list(records)
    latest: dict[tuple[str, str], dict] = {}
    for r in records:
        if not is_in_model(r) and r.result.threads is not None:
            counts = latest.setdefault(_workload(r), {})
            t = r.result.threads
            counts[t] = max(counts.get(t, float("-inf")), r.result.timestamp)
    chosen = {}
    for k, counts in latest.items():
        own = _target_threads(k[1])
        chosen[k] = own if own in counts else max(counts, key=lambda t: counts[t])
    return [r for r in records if is_in_model(r) or r.result.threads is None
            or r.result.threads == chosen[_workload(r)]]


def best_records(records: Iterable[Record]) -> dict[tuple[str, str], Record]:
    """The fastest successful record of each ``(task key, target)`` (candidates timed alone;
    in-model measurements are not comparable and are left out)."""
    best: dict[tuple[str, str], Record] = {}
    for r in records:
        if not r.ok or not r.result.costs or is_in_model(r):
            continue
        k = (r.task_key, r.target)
        if k not in best or r.cost < best[k].cost:
            best[k] = r
    return best


def paired_speedups(records: Iterable[Record], in_model: bool = False
                    ) -> dict[tuple[str, str], dict[int, list[float]]]:
    """Side-by-side evidence: per ``(task key, target)`` and configuration index, the speed-ups
    over configuration 0 (the default schedule of a ``rule`` task; > 1 is faster), one per
    repeat of every interleaved measurement group that timed both (``default cost /
    candidate cost`` of the same repeat). ``in_model``: the groups of in-model measurements
    (``MODEL_GROUP``) instead of those of candidates timed alone."""
    groups: dict[str, list[Record]] = {}
    for r in records:
        if r.ok and r.result.group and r.kind == "config" and isinstance(r.config, dict) \
                and is_in_model(r) == in_model:
            groups.setdefault(r.result.group, []).append(r)
    out: dict[tuple[str, str], dict[int, list[float]]] = {}
    for g in groups.values():
        base = [r for r in g if r.config.get("index") == 0]
        if not base:
            continue
        d = base[0]
        for r in g:
            if r.config.get("index") == 0 or r.task_key != d.task_key:
                continue
            ratios = [a / b for a, b in zip(d.result.costs, r.result.costs) if b > 0]
            out.setdefault((r.task_key, r.target), {}).setdefault(
                int(r.config["index"]), []).extend(ratios)
    return out



def best_paired_speedup(per: dict[int, list[float]], min_evidence: int = 2
                        ) -> tuple[int, float] | None:
    """``(configuration index, median speed-up)`` of the configuration in ``per`` (one task's
    entry of ``paired_speedups``) with the best median side-by-side speed-up over the default,
    among those with at least ``min_evidence`` repeats; ``None`` when none has that many."""
    medians = [(i, float(np.median(v))) for i, v in per.items() if len(v) >= min_evidence]
    return max(medians, key=lambda x: x[1]) if medians else None


def error_name(error_no: int) -> str:
    """Readable name of an error number."""
    try:
        return MeasureErrorNo(error_no).name
    except ValueError:
        return f"ERROR_{error_no}"
