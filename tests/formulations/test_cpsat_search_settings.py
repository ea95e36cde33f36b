"""Which CP-SAT search parameters a round is solved with, by its size."""

from __future__ import annotations

import pytest

from dltsched.formulations.backends import cpsat
from dltsched.formulations.backends.cpsat import (
    FULL_LP_FROM_JOBS,
    SEARCH_PARAMETERS,
    SMALL_ROUND_PARAMETERS,
    CpSat,
)


def test_large_rounds_take_the_full_lp_and_presolve() -> None:
    settings = CpSat().search_settings(FULL_LP_FROM_JOBS)
    assert settings == SEARCH_PARAMETERS
    assert settings["linearization_level"] == 2
    assert "cp_model_presolve" not in settings  # CP-SAT's default: presolve on


def test_small_rounds_keep_the_default_linearization_and_skip_presolve() -> None:
    settings = CpSat().search_settings(FULL_LP_FROM_JOBS - 1)
    assert "linearization_level" not in settings
    assert settings["cp_model_presolve"] is False
    for name, value in SEARCH_PARAMETERS.items():
        if name != "linearization_level":
            assert settings[name] == value
    assert SMALL_ROUND_PARAMETERS.items() <= settings.items()


def test_a_subclass_changes_what_small_rounds_set() -> None:
    class Presolving(CpSat):
        small_round_parameters = {}

    assert "cp_model_presolve" not in Presolving().search_settings(10)
    assert CpSat().search_settings(10)["cp_model_presolve"] is False


@pytest.mark.parametrize("threshold", [1, 10_000])
def test_the_threshold_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch, threshold: int) -> None:
    monkeypatch.setattr(cpsat, "FULL_LP_FROM_JOBS", threshold)
    small = 50 < threshold
    assert ("cp_model_presolve" in CpSat().search_settings(50)) is small
