"""The shared regression cases (``../shared/cases`` beside the repository, or
``$EMBER_SHARED_CASES``): small ONNX models other compilers got wrong. Each is compiled, run on
its ``inputs.npz`` and compared with ``expected.npz`` (the ONNX specification's values) at the
case's ``rtol``/``atol``, output by output in graph-output order."""

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

import ember
from ember.errors import UnsupportedOpError
from ember.testing import assert_close

ROOT = Path(__file__).resolve().parent.parent


def _cases_dir() -> Path:
    """``$EMBER_SHARED_CASES``, else ``../shared/cases`` from the repository root (looked up
    through the ancestors too, for checkouts nested below it such as git worktrees)."""
    if os.environ.get("EMBER_SHARED_CASES"):
        return Path(os.environ["EMBER_SHARED_CASES"])
    for base in ROOT.parents:
        if (base / "shared" / "cases").is_dir():
            return base / "shared" / "cases"
    return ROOT.parent / "shared" / "cases"


CASES_DIR = _cases_dir()

# cases that fail today for want of an operator (issue 3 adds them and removes these marks);
# the mark expects exactly UnsupportedOpError, so a wrong answer is a failure, not an xfail
MISSING_OP = {
}


def case_params():
    if not CASES_DIR.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(
            reason=f"no shared cases folder at {CASES_DIR} (set EMBER_SHARED_CASES)"))]
    out = []
    for d in sorted(p for p in CASES_DIR.iterdir() if (p / "model.onnx").exists()):
        marks = [pytest.mark.xfail(strict=True, raises=UnsupportedOpError,
                                   reason=MISSING_OP[d.name])] if d.name in MISSING_OP else []
        out.append(pytest.param(d, id=d.name, marks=marks))
    return out


@pytest.mark.parametrize("case", case_params())
def test_shared_case(case):
    meta = json.loads((case / "meta.json").read_text())
    model = onnx.load(case / "model.onnx")
    with np.load(case / "inputs.npz") as f:
        inputs = {k: f[k] for k in f.files}
    with np.load(case / "expected.npz") as f:
        expected = {k: f[k] for k in f.files}
    compiled = ember.compile(model)
    got = compiled.run(inputs)
    names = [o.name for o in model.graph.output]
    assert len(got) == len(names)
    assert compiled.output_names == names
    for name, g in zip(names, got):
        assert_close(g, expected[name], meta["rtol"], meta["atol"],
                     f"{case.name}: output {name!r} ({meta['what']})")


def test_every_xfail_names_an_existing_case():
    if not CASES_DIR.is_dir():
        pytest.skip(f"no shared cases folder at {CASES_DIR}")
    names = {p.name for p in CASES_DIR.iterdir()}
    assert set(MISSING_OP) <= names, sorted(set(MISSING_OP) - names)
