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
