"""Shared pytest set-up: hypothesis profiles and the repository paths tests use.

The kernel cache stays the user's (``$EMBER_CACHE_DIR`` or ``~/.cache/ember``) so reruns are
fast; tests that damage cache entries point ``EMBER_CACHE_DIR`` at a temporary folder of their
own. Hypothesis runs derandomized by default (the same examples every run, so their kernels
are cached after the first run); ``HYPOTHESIS_PROFILE=explore`` draws fresh examples.
"""

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/op_cases.py

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large,
                                                     HealthCheck.filter_too_much],
               print_blob=True)
settings.register_profile("default", derandomize=True, database=None, **_common)
settings.register_profile("explore", derandomize=False, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run the tests marked slow (more than a few seconds each: whole "
                          "heavy models, a dask cluster...)")


#: how to run the tests marked slow (the end of their skip reason)
RUN_SLOW = "run with --runslow, EMBER_RUN_SLOW=1 or -m slow"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run with ``--runslow``, ``EMBER_RUN_SLOW=1`` or a ``-m`` that
    names them; the default run leaves them out, skipped with the reason: ``slow test`` and
    what the test gives as ``@pytest.mark.slow(reason="...")`` (e.g. "a whole model", "a
    dask cluster"), then how to run it."""
    import pytest
    if config.getoption("--runslow") or os.environ.get("EMBER_RUN_SLOW") == "1" \
            or "slow" in (config.getoption("-m") or ""):
        return
    for item in items:
        mark = item.get_closest_marker("slow")
        if mark is not None:
            why = mark.kwargs.get("reason")
            item.add_marker(pytest.mark.skip(
                reason=f"slow test{f' ({why})' if why else ''}: {RUN_SLOW}"))
