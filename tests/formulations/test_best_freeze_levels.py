"""The best freeze levels of every unit, decided together in numpy, are those of the one-unit-at-a-time loop,
to the bit: the same levels and scores, hence the same candidates and model."""

from __future__ import annotations

import pytest

from dltsched.formulations import RoundOptions
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import build_round
from dltsched.formulations.candidates import best_freeze_levels, unplaced_completion_s
from dltsched.predictors import analytic_predictors

VARIANTS = [
    {},
    {"objective": "effective_progress", "starvation_weight": 0.3},
    {"objective": "effective_progress", "length_weight": 1.0},
    {"max_jobs_per_gpu": 3, "stage_horizon_s": 3600.0},
    {"freeze_levels": (0, 2)},
    {"objective": "weighted_completion"},
]


@pytest.mark.parametrize("settings", VARIANTS,
                         ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "jct")
def test_bulk_decision_equals_the_loop(settings: dict[str, object]) -> None:
    problem = build_round(synthetic_state(80, 64, seed=4), analytic_predictors(),
                          RoundOptions(**settings))  # type: ignore[arg-type]
    types = {j: tuple(dict.fromkeys(o.gpu_type for o in job.options)) for j, job in enumerate(problem.jobs)}
    asks = [((j,), t) for j in range(len(problem.jobs)) for t in types[j]]
    asks += [(g.jobs, g.gpu_type) for g in problem.groups if g.allowed]
    assert any(len(jobs) == 2 for jobs, _ in asks)
    waiting = unplaced_completion_s(problem)
    bulk = best_freeze_levels(problem, asks, waiting)
    loop = best_freeze_levels(problem, asks, waiting, bulk=False)
    assert bulk == loop  # exact: floats compared bit for bit
    assert sum(b is not None for b in bulk) > len(asks) // 2  # most units fit somewhere
