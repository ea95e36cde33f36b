"""Multi-stage values: a co-located survivor is credited with the speed-up it gets as partners finish."""

from __future__ import annotations

import math

import pytest

from dltsched.engine.domain.errors import ValidationError
from dltsched.formulations import RoundOptions, solve_problem
from dltsched.formulations.interference import horizon_speeds
from dltsched.formulations.testing import Tables, checked, job, make_round


def _pair(active: tuple[int, ...]) -> list[float]:
    return [0.5, 0.5] if len(active) == 2 else [1.0]


def test_horizon_speeds_credit_the_survivor_only_within_the_horizon() -> None:
    # a: 50 it, b: 400 it, 1 it/s alone, 0.5 each together: a ends at 100 s; b did 50 it and runs alone.
    assert horizon_speeds([50, 400], [1, 1], _pair, 0.0) == (0.5, 0.5)  # first stage
    assert horizon_speeds([50, 400], [1, 1], _pair, 80.0) == (0.5, 0.5)  # nobody ends within 80 s
    # horizon 200 s: b at 0.5 for 100 s then 1.0 for 100 s -> mean 0.75; a ends first, keeps 0.5
    assert horizon_speeds([50, 400], [1, 1], _pair, 200.0) == pytest.approx((0.5, 0.75))
    # whole run: b ends at 100 + 350 = 450 s having done 400 it -> mean 400 / 450
    assert horizon_speeds([50, 400], [1, 1], _pair, math.inf) == pytest.approx((0.5, 400 / 450))
    with pytest.raises(ValueError, match="horizon_s"):
        horizon_speeds([1, 1], [1, 1], _pair, -1.0)


def test_stage_horizon_is_validated() -> None:
    with pytest.raises(ValidationError, match="stage_horizon_s"):
        RoundOptions(stage_horizon_s=-5.0)


@pytest.mark.parametrize(("horizon", "shared"), [(0.0, False), (1000.0, True)])
def test_multi_stage_values_share_a_gpu_when_the_survivor_speeds_up(backend: str, horizon: float,
                                                                    shared: bool) -> None:
    # one GPU, 1 it/s alone; a: 100 it, b: 1000 it -> median 550 s, jct values 5.5 and 0.55. a alone: 5.5.
    # Shared at (0.95, 0.5), first stage: 5.225 + 0.275 = 5.5, no better than a alone. Horizon 1000 s: a ends
    # at 105.3 s; b does 52.6 it at 0.5, then runs alone to 1000 s: mean speed (52.6 + 894.7) / 1000 = 0.947
    # -> 5.225 + 0.521 = 5.746 > 5.5: they share.
    tables = Tables(step_s={"a": [1.0], "b": [1.0]}, speeds={("a", "b"): [0.95, 0.5]})
    jobs = [job("a", iterations=100), job("b", iterations=1000)]
    problem = make_round(tables, [("v100", 1)], jobs,
                         options=RoundOptions(objective="jct", relative_gap=0.0, stage_horizon_s=horizon,
                                              freeze_levels=(0,)))
    result = solve_problem(problem, backend)
    value = checked(problem, result)
    if shared:
        b_mean = (100 / 0.95 * 0.5 + (1000 - 100 / 0.95)) / 1000
        assert value == pytest.approx(5.5 * 0.95 + 0.55 * b_mean)
        assert result.plan.colocation_groups() == {0: ("a", "b")}
    else:
        assert value == pytest.approx(5.5)
