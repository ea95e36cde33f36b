"""Both backends reach the brute-force optimum on random tiny rounds (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dltsched.formulations import RoundOptions, solve_problem
from dltsched.formulations.oracle import brute_force
from dltsched.formulations.testing import Tables, checked, job, make_round


@st.composite
def tiny_rounds(draw: st.DrawFn):  # noqa: ANN201
    nodes = draw(st.sampled_from([[("v100", 2)], [("v100", 1), ("a100-40gb", 2)], [("v100", 2), ("v100", 2)],
                                  [("v100", 3)], [("a100-40gb", 4)]]))
    num_jobs = draw(st.integers(2, 4 if sum(k for _, k in nodes) > 3 else 5))
    levels = draw(st.integers(1, 2))
    ids = [f"j{i}" for i in range(num_jobs)]
    floats = st.floats(0.3, 2.0)
    tables = Tables(
        step_s={i: [draw(floats) for _ in range(levels)] for i in ids},
        memory={i: [draw(st.floats(3000, 12000)) for _ in range(levels)] for i in ids},
        penalty={i: [0.0] + [draw(st.floats(0.0, 0.4)) for _ in range(levels - 1)] for i in ids},
        speeds={(a, b): [draw(st.floats(0.3, 0.95)), draw(st.floats(0.3, 0.95))]
                for n, a in enumerate(ids) for b in ids[n + 1:]},
        default_speed=draw(st.floats(0.3, 0.6)))
    jobs = [job(i, num_gpus=draw(st.sampled_from([1, 1, 2])), weight=draw(st.sampled_from([1.0, 2.0])),
                iterations=draw(st.floats(50, 500)), freeze_allowed=levels > 1, accuracy_budget=0.3)
            for i in ids]
    running: dict[str, tuple[int, ...]] = {}
    free = 0
    for j in jobs:
        if draw(st.booleans()) and j.num_gpus == 1 and free < sum(k for _, k in nodes):
            running[j.id] = (free,)
            free += 1
    total = sum(k for _, k in nodes)
    down = draw(st.sampled_from([(), (), (total - 1,)])) if free < total else ()
    options = RoundOptions(objective=draw(st.sampled_from(["effective_progress", "jct", "weighted_completion",
                                                           "makespan"])),
                           max_jobs_per_gpu=draw(st.sampled_from([1, 2, 2, 3])), freeze_levels=levels,
                           migration_penalty=draw(st.sampled_from([0.0, 0.05, 0.5])),
                           starvation_weight=draw(st.sampled_from([0.0, 0.1])), relative_gap=0.0,
                           round_s=200.0)
    return make_round(tables, nodes, jobs, running=running, options=options, time_s=1800.0, down=down)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=tiny_rounds())
def test_backends_reach_the_oracle_optimum(backend: str, problem) -> None:  # noqa: ANN001
    best, _plan = brute_force(problem)
    result = solve_problem(problem, backend, time_limit_s=20)
    assert result.plan.status == "optimal"
    assert checked(problem, result) == pytest.approx(best, rel=1e-5, abs=1e-6)


def test_oracle_refuses_big_rounds() -> None:
    tables = Tables(step_s={f"j{i}": [1.0] for i in range(7)})
    problem = make_round(tables, [("v100", 2)], [job(f"j{i}") for i in range(7)])
    with pytest.raises(ValueError, match="too big"):
        brute_force(problem)
