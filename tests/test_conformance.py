"""ONNX backend conformance must not regress: every case listed in
``bench/results/conformance_passing.txt`` (the cases that passed when the scoreboard was last
written by ``bench/conformance.py``) still passes.

The cases run as ``bench/conformance.py`` runs them: through ``ember.compile(model).run(...)``
(the public door, default ``executor="auto"``), in a worker process per case slot, with a
time-out. Static models come from the compiled-model cache (``ember.compile_cache``) when they
were compiled before, so a rerun mostly loads and runs. ``make conformance`` runs the whole
suite and rewrites the scoreboard.
"""

import os
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "bench"))  # last: bench/ scripts must not shadow packages
import conformance  # noqa: E402

PASSING = ROOT / "bench" / "results" / "conformance_passing.txt"
# the whole passing list fits in ~10 minutes on 2 cores; EMBER_CONFORMANCE_HALF=1 runs a fixed,
# deterministic half of it (by name hash) where that is too slow
HALF = os.environ.get("EMBER_CONFORMANCE_HALF") == "1"


def _selected() -> set[str]:
    names = {ln.strip() for ln in PASSING.read_text().splitlines() if ln.strip()}
    if HALF:
        names = {n for n in names if zlib.crc32(n.encode()) % 2 == 0}
    return names


@pytest.mark.slow(reason="every onnx backend case that passed before")
def test_previously_passing_onnx_backend_cases_still_pass():
    want = _selected()
    cases = [c for c in conformance.collect() if c.name in want]
    missing = sorted(want - {c.name for c in cases})
    assert not missing, f"cases in {PASSING.name} that the installed onnx no longer has: {missing}"
    results = conformance.run_cases(cases, jobs=2, progress=False)
    failed = [f"{r.name}: {r.status} {r.kind} {r.message[:200]}" for r in results
              if r.status != "passed"]
    assert not failed, (f"{len(failed)} ONNX backend case(s) that passed before now fail:\n"
                        + "\n".join(failed))
