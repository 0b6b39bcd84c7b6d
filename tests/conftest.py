"""pytest configuration shared by every test folder; helpers live in ``shared_data``."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared_data import FIXTURES
from synth_fixture import synth_runs  # noqa: F401  (the generated runs, for every test folder)


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"fixtures not found at {FIXTURES}")
    return FIXTURES
