"""The ``backend`` fixture: every constraint-behaviour test runs on every backend."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["cpsat", "milp"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
