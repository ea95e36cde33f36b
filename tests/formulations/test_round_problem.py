"""RoundProblem: options validation, coefficients from predictors, JSON round trip, checker rules."""

from __future__ import annotations

import pytest

from dltsched.engine.app.registry import predictors
from dltsched.engine.domain.errors import InvalidPlanError, ValidationError
from dltsched.engine.domain.model import Assignment, Job, Plan
from dltsched.formulations import (
    RoundOptions,
    RoundProblem,
    build_round,
    check_plan,
    evaluate_objective,
    solve_problem,
)
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.testing import Tables, checked, job, make_round, make_state


@pytest.mark.parametrize(("field", "value"), [("objective", "fastest"), ("max_jobs_per_gpu", 4),
                                              ("freeze_levels", 0), ("time_limit_s", -1.0)])
def test_bad_options_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=f"options.{field}"):
        RoundOptions(**{field: value})  # type: ignore[arg-type]


def test_freeze_levels_respect_budget_and_permission() -> None:
    # levels 0..3 with penalties 0, 0.05, 0.2, 0.5: a budget of 0.1 keeps levels 0 and 1 only.
    tables = Tables(step_s={"f": [1.0, 0.9, 0.8, 0.7], "n": [1.0, 0.9, 0.8, 0.7]},
                    penalty={"f": [0.0, 0.05, 0.2, 0.5], "n": [0.0, 0.05, 0.2, 0.5]})
    jobs = [job("f", freeze_allowed=True, accuracy_budget=0.1), job("n")]
    problem = make_round(tables, [("v100", 1)], jobs, options=RoundOptions(freeze_levels=4))
    assert [o.freeze_level for o in problem.jobs[0].options] == [0, 1]
    assert [o.freeze_level for o in problem.jobs[1].options] == [0]


def test_gpu_types_restrict_options_and_fractional_jobs_take_one_gpu() -> None:
    tables = Tables(step_s={"t": [1.0], "frac": [1.0]})
    jobs = [job("t", gpu_types=("a100-40gb",)), job("frac", gpu_fraction=0.5)]
    problem = make_round(tables, [("v100", 1), ("a100-40gb", 1)], jobs)
    assert {o.gpu_type for o in problem.jobs[0].options} == {"a100-40gb"}
    assert problem.jobs[1].num_gpus == 1 and len(problem.jobs[1].options) == 2


def test_json_round_trip(tmp_path) -> None:  # noqa: ANN001
    state = synthetic_state(12, 16, seed=3)
    problem = build_round(state, predictors("analytic"),
                          RoundOptions(max_jobs_per_gpu=3, freeze_levels=(0, 2)))
    path = tmp_path / "round.json"
    problem.save(path)
    again = RoundProblem.load(path)
    assert again == problem
    assert again.groups and any(job.running for job in again.jobs)
    with pytest.raises(ValidationError, match="format"):
        RoundProblem.from_dict({"format": "other"})


def test_backends_agree_on_an_analytic_round(tmp_path, backends) -> None:  # noqa: ANN001
    state = synthetic_state(24, 24, seed=7)
    problem = build_round(state, predictors("analytic"),
                          RoundOptions(relative_gap=0.0, migration_penalty=0.2))
    values = [checked(problem, solve_problem(problem, b, time_limit_s=30)) for b in backends]
    assert values == pytest.approx([values[0]] * len(values), rel=1e-5)
    greedy = solve_problem(problem, "greedy")
    assert checked(problem, greedy) <= values[0] + 1e-9


def _two_gpu_round(down: tuple[int, ...] = ()) -> RoundProblem:
    tables = Tables(step_s={"a": [1.0], "b": [1.0], "c": [1.0], "big": [1.0]},
                    memory={"a": [9000.0], "b": [9000.0], "c": [2000.0], "big": [1000.0]},
                    speeds={("a", "c"): [0.9, 0.9]})
    jobs = [job("a"), job("b"), job("c"), job("big", 2)]
    return make_round(tables, [("v100", 1), ("v100", 1)], jobs,
                      options=RoundOptions(allow_cross_node=False, max_jobs_per_gpu=2), down=down)


@pytest.mark.parametrize(("assignments", "broken"), [
    ([Assignment("a", (0,)), Assignment("b", (0,))], "not an allowed co-location group"),
    ([Assignment("a", (0, 1))], "gang needs 1"),
    ([Assignment("a", (0,), freeze_level=2)], "freeze level 2"),
    ([Assignment("zz", (0,))], "not a placeable job"),
])
def test_checker_names_what_is_broken(assignments: list[Assignment], broken: str) -> None:
    problem = _two_gpu_round()
    report = check_plan(problem, Plan(tuple(assignments)))
    assert not report.feasible and report.objective is None
    assert any(broken in v for v in report.violations), report.violations
    with pytest.raises(InvalidPlanError):
        evaluate_objective(problem, Plan(tuple(assignments)))


def test_checker_rejects_down_gpus_and_json_keeps_them() -> None:
    problem = _two_gpu_round(down=(1,))
    report = check_plan(problem, Plan((Assignment("a", (1,)),)))
    assert report.violations == ("job 'a': placed on down GPU(s) [1]",)
    assert check_plan(problem, Plan((Assignment("a", (0,)),))).feasible
    again = RoundProblem.from_dict(problem.to_dict())
    assert again == problem and again.down_gpus() == {1}


def test_checker_rejects_partial_sharing() -> None:
    tables = Tables(step_s={"g2": [1.0], "a": [1.0]})
    problem = make_round(tables, [("v100", 2)], [job("g2", 2), job("a")])
    report = check_plan(problem, Plan((Assignment("g2", (0, 1)), Assignment("a", (0,)))))
    assert not report.feasible and "not all their GPUs" in report.violations[0]


def test_checker_objective_by_hand() -> None:
    # a + c share GPU 0 at 0.9 each (9000 + 2000 MiB fits), b alone on GPU 1: 0.9 + 0.9 + 1 = 2.8.
    problem = _two_gpu_round()
    plan = Plan((Assignment("a", (0,)), Assignment("c", (0,)), Assignment("b", (1,))))
    assert evaluate_objective(problem, plan) == pytest.approx(2.8)
    assert {u.job_id for u in problem.unplaceable} == {"big"}


def test_state_helper_builds_running_jobs() -> None:
    state = make_state([("v100", 2)], [Job("x", "resnet18", 8, 10.0)], running={"x": (1,)})
    assert state.running()[0].assignment == Assignment("x", (1,))


def test_jct_value_scale_is_median_over_remaining_time_with_a_floor() -> None:
    # 1 it/s: remaining 10 s (counted as 60 s, the floor), 300 s, 600 s, 1200 s -> median (300 + 600) / 2 =
    # 450
    tables = Tables(step_s={k: [1.0] for k in "abcd"})
    jobs = [job("a", iterations=10), job("b", iterations=300), job("c", iterations=600),
            job("d", iterations=1200)]
    jct = make_round(tables, [("v100", 1)], jobs, options=RoundOptions(objective="jct"))
    assert [jct.value_scale(j)
            for j in range(4)] == pytest.approx([450 / 60, 450 / 300, 450 / 600, 450 / 1200])
    plain = make_round(tables, [("v100", 1)], jobs, options=RoundOptions(objective="effective_progress"))
    assert [plain.value_scale(j) for j in range(4)] == [1.0] * 4
    assert RoundProblem.from_dict(jct.to_dict()).value_scale(0) == pytest.approx(450 / 60)


def test_migration_cost_is_amortised_over_long_jobs_under_jct() -> None:
    # penalty 0.1 x value scale, and x the value scale again for jobs longer than the median (scale < 1)
    tables = Tables(step_s={k: [1.0] for k in "abcd"})
    jobs = [job("a", iterations=10), job("b", iterations=300), job("c", iterations=600),
            job("d", iterations=1200)]
    jct = make_round(tables, [("v100", 1)], jobs,
                     options=RoundOptions(objective="jct", migration_penalty=0.1))
    assert [jct.migration_cost(j) for j in range(4)] == pytest.approx(
        [0.1 * 450 / 60, 0.1 * 450 / 300, 0.1 * (450 / 600) ** 2, 0.1 * (450 / 1200) ** 2])
    plain = make_round(tables, [("v100", 1)], jobs,
                       options=RoundOptions(objective="effective_progress", migration_penalty=0.1))
    assert [plain.migration_cost(j) for j in range(4)] == pytest.approx([0.1] * 4)


def test_length_weight_scales_effective_progress_longest_first_and_is_refused_elsewhere() -> None:
    # 1 it/s: remaining 60 (floor), 300, 600, 1200 s -> median 450 s; scale (T_j / 450) ** w
    tables = Tables(step_s={k: [1.0] for k in "abcd"})
    jobs = [job("a", iterations=10), job("b", iterations=300), job("c", iterations=600),
            job("d", iterations=1200)]
    for weight in (1.0, 0.5):
        lpt = make_round(tables, [("v100", 1)], jobs,
                         options=RoundOptions(objective="effective_progress", length_weight=weight))
        assert [lpt.value_scale(j) for j in range(4)] == pytest.approx(
            [(t / 450) ** weight for t in (60, 300, 600, 1200)])
        assert RoundProblem.from_dict(lpt.to_dict()).value_scale(3) == pytest.approx((1200 / 450) ** weight)
    off = make_round(tables, [("v100", 1)], jobs,
                     options=RoundOptions(objective="effective_progress", length_weight=0))
    assert [off.value_scale(j) for j in range(4)] == [1.0] * 4
    for bad in ({"objective": "jct", "length_weight": 1.0},
                {"objective": "effective_progress", "length_weight": -1},
                {"objective": "effective_progress", "length_weight": True}):
        with pytest.raises(ValidationError, match="options.length_weight"):
            RoundOptions(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["cpsat", "milp", "greedy"])
def test_length_weight_places_the_longest_job_on_the_one_gpu(backend: str) -> None:
    tables = Tables(step_s={k: [1.0] for k in "abcd"})
    jobs = [job("a", iterations=10), job("b", iterations=300), job("c", iterations=600),
            job("d", iterations=1200)]
    options = RoundOptions(objective="effective_progress", length_weight=1.0, max_jobs_per_gpu=1,
                           relative_gap=0.0)
    problem = make_round(tables, [("v100", 1)], jobs, options=options)
    result = solve_problem(problem, backend, time_limit_s=30)
    assert checked(problem, result) == pytest.approx(1200 / 450)
    assert [a.job_id for a in result.plan.assignments] == ["d"]
