"""Fixtures of the graph-pass tests (helpers live in pass_helpers.py)."""

import pytest

from pass_helpers import check_pass_text


@pytest.fixture
def check_pass():
    return check_pass_text
