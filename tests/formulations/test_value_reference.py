"""The jct objective's reference remaining time: the round's median by default, or the caller's."""

from __future__ import annotations

import pytest

from dltsched.engine.domain.errors import ValidationError
from dltsched.formulations import RoundOptions, solve_problem
from dltsched.formulations.testing import Tables, checked, job, make_round


def _round(reference: float | None):
    # three jobs at 1 s per step alone: 100, 400 and 1,600 s left; median 400 s
    tables = Tables(step_s={k: [1.0] for k in ("a", "b", "c")})
    jobs = [job("a", iterations=100.0), job("b", iterations=400.0), job("c", iterations=1600.0)]
    options = RoundOptions(objective="jct", relative_gap=0.0, value_reference_s=reference)
    return make_round(tables, [("v100", 4)], jobs, options=options)


def test_the_reference_defaults_to_the_rounds_median_and_scales_every_job_alike():
    median, given = _round(None), _round(800.0)
    assert [median.value_scale(j) for j in range(3)] == pytest.approx([4.0, 1.0, 0.25])
    assert [given.value_scale(j) for j in range(3)] == pytest.approx([8.0, 2.0, 0.5])
    result = solve_problem(given, "greedy")
    assert checked(given, result) == pytest.approx(10.5)  # each job alone on a GPU: 8 + 2 + 0.5


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), True, "300"])
def test_a_bad_reference_names_the_field(bad):
    with pytest.raises(ValidationError, match="value_reference_s"):
        RoundOptions(value_reference_s=bad)  # type: ignore[arg-type]
