"""Constraint behaviour on every backend: tiny rounds with the optimum worked out in comments."""

from __future__ import annotations

import pytest

from dltsched.engine.domain.model import Assignment, Plan
from dltsched.formulations import RoundOptions, check_plan, solve_problem
from dltsched.formulations.backends import BackendOutcome
from dltsched.formulations.candidates import build_candidates, objective_of
from dltsched.formulations.result import Termination
from dltsched.formulations.solve import finish, starting_selection
from dltsched.formulations.testing import Tables, checked, job, make_round


def test_k1_places_the_heavier_job(backend: str) -> None:
    # one GPU, one job per GPU; normalised progress of a job alone is 1 -> objective = its weight.
    tables = Tables(step_s={"a": [1.0], "b": [1.0]})
    problem = make_round(tables, [("v100", 1)], [job("a", weight=2.0), job("b")],
                         options=RoundOptions(max_jobs_per_gpu=1, relative_gap=0.0))
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(2.0)
    assert [a.job_id for a in result.plan.assignments] == ["a"]
    assert result.plan.status == "optimal" and result.plan.gap == 0.0


def test_colocation_pays_when_speeds_sum_high(backend: str) -> None:
    # a (weight 2) alone = 2.0; with b at speeds 0.8 / 0.6: 2 * 0.8 + 0.6 = 2.2 -> share the GPU.
    tables = Tables(step_s={"a": [1.0], "b": [1.0]}, speeds={("a", "b"): [0.8, 0.6]})
    problem = make_round(tables, [("v100", 1)], [job("a", weight=2.0), job("b")])
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(2.2)
    assert result.plan.colocation_groups() == {0: ("a", "b")}


def test_freezing_makes_a_pair_fit(backend: str) -> None:
    # level 0: 9000 MiB each (18000 > 16384); level 1: 7000 MiB, step 0.8 s, penalty 0.3 -> rate 0.875.
    # pair at speed 0.8 with one job frozen: 0.8 * 1 + 0.8 * 0.875 = 1.5 (both frozen: 1.4; alone: 1.0).
    spec = {"step_s": [1.0, 0.8], "memory": [9000.0, 7000.0], "penalty": [0.0, 0.3]}
    tables = Tables(step_s={k: spec["step_s"] for k in "ab"}, memory={k: spec["memory"] for k in "ab"},
                    penalty={k: spec["penalty"] for k in "ab"}, speeds={("a", "b"): [0.8, 0.8]})
    jobs = [job(k, freeze_allowed=True, accuracy_budget=0.5) for k in "ab"]
    problem = make_round(tables, [("v100", 1)], jobs, options=RoundOptions(freeze_levels=2, relative_gap=0.0))
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(1.5)
    assert sorted(a.freeze_level for a in result.plan.assignments) == [0, 1]


def test_gang_stays_in_one_node_or_pays_cross_node(backend: str) -> None:
    # nodes of 2 + 2 GPUs: the 2-GPU job fits one node; the 3-GPU job must span both (normalised to 1).
    tables = Tables(step_s={"g2": [1.0], "g3": [1.0]})
    problem = make_round(tables, [("v100", 2), ("v100", 2)], [job("g2", 2), job("g3", 3)],
                         options=RoundOptions(objective="effective_progress", max_jobs_per_gpu=1,
                                              relative_gap=0.0))
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(1.0)
    placed = result.plan.by_job()
    assert len(placed) == 1
    split = Plan(tuple(a for a in result.plan.assignments))
    assert check_plan(problem, split).feasible


def test_down_gpus_are_never_used(backend: str) -> None:
    # nodes of 4 + 2 v100 with GPUs 1 and 4 down: 3 + 1 usable. The 4-GPU job fits no node now and
    # cross-node is off, so it is unplaceable; the 3-GPU job takes node 0's three usable GPUs and
    # the 1-GPU job GPU 5 -> objective 2 (each alone at its reference rate).
    tables = Tables(step_s={"g4": [1.0], "g3": [1.0], "g1": [1.0]})
    problem = make_round(tables, [("v100", 4), ("v100", 2)], [job("g4", 4), job("g3", 3), job("g1")],
                         options=RoundOptions(max_jobs_per_gpu=1, allow_cross_node=False, relative_gap=0.0),
                         down=(1, 4))
    assert [(u.job_id, u.while_down) for u in problem.unplaceable] == [("g4", True)]
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(2.0)
    assert result.plan.by_job()["g3"].gpus == (0, 2, 3)
    assert result.plan.by_job()["g1"].gpus == (5,)


def test_a_gpu_type_that_is_all_down_is_named(backend: str) -> None:
    tables = Tables(step_s={"a": [1.0]})
    problem = make_round(tables, [("k80", 1), ("v100", 1)], [job("a", gpu_types=("k80",))], down=(0,))
    assert problem.unplaceable[0].reason == "every k80 GPU is down" and problem.unplaceable[0].while_down
    plan = solve_problem(problem, backend).plan
    assert plan.assignments == () and plan.status == "optimal"
    assert "waiting for down GPUs: job 'a'" in plan.message


@pytest.mark.parametrize(("penalty", "kept"), [(0.1, "a"), (0.01, "b")])
def test_running_job_moves_only_when_it_pays(backend: str, penalty: float, kept: str) -> None:
    # a runs on the only GPU; b (weight 1.05) would give 1.05 - penalty (a preempted) against 1.0.
    tables = Tables(step_s={"a": [1.0], "b": [1.0]})
    options = RoundOptions(max_jobs_per_gpu=1, migration_penalty=penalty, relative_gap=0.0)
    problem = make_round(tables, [("v100", 1)], [job("a"), job("b", weight=1.05)], running={"a": (0,)},
                         options=options)
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(max(1.0, 1.05 - penalty))
    assert [a.job_id for a in result.plan.assignments] == [kept]


@pytest.mark.parametrize("long_iterations", [1e4, 1e6])
@pytest.mark.parametrize(("penalty", "moves"), [(0.5, True), (0.8, True), (1.5, False)])
def test_jct_moves_a_long_job_to_a_faster_gpu_when_the_move_pays_for_itself(
        backend: str, long_iterations: float, penalty: float, moves: bool) -> None:
    # k80 steps take 3x as long. a (k80 only, 300 s left) runs on k80 GPU 1; c runs on k80 GPU 2, the
    # v100 (GPU 0) is free. c's term is its value scale s_c (about 0.5 here: longer than the median) times
    # its rate share: 1/3 on the k80, 1 on the v100; a move costs penalty x s_c x min(1, s_c), as its gain
    # lasts c's whole remaining time. So c moves iff 2/3 > penalty x s_c, however long c is (a flat cost
    # would keep a long, low-value job on the slow GPU for good).
    tables = Tables(step_s={"a": [1.0], "c": [1.0]}, type_factor={"k80": 3.0})
    jobs = [job("a", iterations=100, gpu_types=("k80",)), job("c", iterations=long_iterations)]
    options = RoundOptions(objective="jct", max_jobs_per_gpu=1, migration_penalty=penalty, relative_gap=0.0)
    problem = make_round(tables, [("v100", 1), ("k80", 2)], jobs, running={"a": (1,), "c": (2,)},
                         options=options)
    result = solve_problem(problem, backend)
    reference = (300.0 + long_iterations) / 2.0  # median of the remaining times 300 s and c's
    scale_a, scale_c = reference / 300.0, reference / long_iterations
    assert (2.0 / 3.0 > penalty * scale_c) is moves
    expected = scale_a + (scale_c - penalty * scale_c * scale_c if moves else scale_c / 3.0)
    assert checked(problem, result) == pytest.approx(expected)
    assert result.plan.by_job()["c"].gpus == ((0,) if moves else (2,))


@pytest.mark.parametrize(("objective", "expected"), [("weighted_completion", 600.0), ("makespan", 800.0 / 3)])
def test_multi_stage_objectives(backend: str, objective: str, expected: float) -> None:
    # a: 100 it, b: 200 it, 1 it/s alone, weight a = 2, round 300 s. Sharing at 0.6 each: a ends at
    # 166.7 s; b did 100 it, runs alone to 266.7 s -> 2 * 166.7 + 266.7 = 600, makespan 266.7.
    # alone: a first -> 2 * 100 + (300 + 200) = 700, makespan 500; b first -> 1000, makespan 400.
    tables = Tables(step_s={"a": [1.0], "b": [1.0]}, speeds={("a", "b"): [0.6, 0.6]})
    jobs = [job("a", weight=2.0, iterations=100), job("b", iterations=200)]
    problem = make_round(tables, [("v100", 1)], jobs,
                         options=RoundOptions(objective=objective, relative_gap=0.0))
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(expected)
    assert result.plan.bound == pytest.approx(expected, rel=1e-5)


def test_jct_runs_the_shortest_remaining_job_first(backend: str) -> None:
    # one GPU, 1 it/s: remaining times 1000 / 100 / 10000 s, median 1000 -> values 1, 10, 0.1 (under
    # effective_progress all three are worth 1); the shortest runs: objective 10.
    tables = Tables(step_s={k: [1.0] for k in "abc"})
    jobs = [job("a", iterations=1000), job("b", iterations=100), job("c", iterations=10000)]
    problem = make_round(tables, [("v100", 1)], jobs,
                         options=RoundOptions(objective="jct", max_jobs_per_gpu=1, relative_gap=0.0))
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(10.0)
    assert [a.job_id for a in result.plan.assignments] == ["b"]


@pytest.mark.parametrize(("speeds", "shared"), [((0.9, 0.5), False), ((0.95, 0.6), True)])
def test_jct_shares_a_gpu_only_when_the_short_job_loses_little(backend: str, speeds: tuple[float, float],
                                                              shared: bool) -> None:
    # remaining 100 s and 1000 s, median 550 -> values 5.5 and 0.55. a alone: 5.5. Shared at (0.9, 0.5):
    # 4.95 + 0.275 = 5.225 < 5.5, a runs alone; at (0.95, 0.6): 5.225 + 0.33 = 5.555 > 5.5, they share.
    # (effective_progress shares in both cases: 1.4 and 1.55 > 1.)
    tables = Tables(step_s={"a": [1.0], "b": [1.0]}, speeds={("a", "b"): list(speeds)})
    jobs = [job("a", iterations=100), job("b", iterations=1000)]
    problem = make_round(tables, [("v100", 1)], jobs, options=RoundOptions(objective="jct", relative_gap=0.0))
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(5.555 if shared else 5.5)
    assert sorted(a.job_id for a in result.plan.assignments) == (["a", "b"] if shared else ["a"])


def test_infeasible_jobs_are_named_not_crashed(backend: str) -> None:
    tables = Tables(step_s={"ok": [1.0], "huge": [1.0], "fat": [1.0]}, memory={"fat": [20000.0]})
    options = RoundOptions(allow_cross_node=False, relative_gap=0.0)
    problem = make_round(tables, [("v100", 2), ("v100", 2)], [job("ok"), job("huge", 3), job("fat")],
                         options=options)
    result = solve_problem(problem, backend)
    assert result.plan.status == "infeasible"
    assert {u.job_id for u in result.infeasible_jobs} == {"huge", "fat"}
    assert "huge" in result.plan.message and "MiB" in result.plan.message
    assert checked(problem, result) == pytest.approx(1.0)


def test_warm_start_reaches_the_same_optimum(backend: str) -> None:
    tables = Tables(step_s={k: [1.0] for k in "abcd"}, speeds={("a", "b"): [0.8, 0.7]})
    problem = make_round(tables, [("v100", 2)], [job(k) for k in "abcd"])
    first = solve_problem(problem, backend)
    again = solve_problem(problem, backend, warm_start=first.plan, time_limit_s=5)
    assert checked(problem, again) == pytest.approx(checked(problem, first))


def test_no_solution_in_time_falls_back_to_greedy() -> None:
    # greedy by gain per GPU: a pair at the default speeds 0.6 + 0.6 = 1.2 first, then one job alone: 2.2
    tables = Tables(step_s={k: [1.0] for k in "abc"})
    problem = make_round(tables, [("v100", 2)], [job(k) for k in "abc"])
    outcome = BackendOutcome(None, Termination.TIME_LIMIT, None, 0.0, 1.0, "nothing in time")
    cset = build_candidates(problem)
    result = finish(cset, outcome, "cpsat", 0.0, starting_selection(cset, None))
    assert result.plan.fallback and result.plan.status == "fallback" and result.solution_status == "fallback"
    assert checked(problem, result) == pytest.approx(2.2)
    assert len(result.plan.assignments) == 3


def test_the_start_keeps_a_warm_plan_that_beats_greedy() -> None:
    # 2 GPUs; big (2 GPUs, weight 2.2) runs on both; a and b share a GPU at 0.6 + 0.6 = 1.2 per GPU,
    # more than big's 1.15 per GPU (2.2 + 0.1 kept migration cost, over 2 GPUs). Greedy takes the pair
    # and preempts big: 1.2 - 0.1 = 1.1; the warm plan extended greedily keeps big: 2.2.
    tables = Tables(step_s={k: [1.0] for k in ("big", "a", "b")})
    problem = make_round(tables, [("v100", 2)], [job("big", 2, weight=2.2), job("a"), job("b")],
                         running={"big": (0, 1)})
    cset = build_candidates(problem)
    warm = Plan((Assignment("big", (0, 1)),))
    assert objective_of(cset, starting_selection(cset, None)) == pytest.approx(1.1)
    assert objective_of(cset, starting_selection(cset, warm)) == pytest.approx(2.2)
    outcome = BackendOutcome(None, Termination.TIME_LIMIT, None, 0.0, 1.0, "nothing in time")
    result = finish(cset, outcome, "cpsat", 0.0, starting_selection(cset, warm))
    assert checked(problem, result) == pytest.approx(2.2) and result.plan.fallback


def test_a_worse_incumbent_in_time_keeps_the_starting_selection() -> None:
    # the solver stopped by its time limit with nothing placed (feasible, objective 0): the round keeps
    # the greedy start (2.2), not an idle cluster
    tables = Tables(step_s={k: [1.0] for k in "abc"})
    problem = make_round(tables, [("v100", 2)], [job(k) for k in "abc"])
    cset = build_candidates(problem)
    outcome = BackendOutcome((), Termination.TIME_LIMIT, 3.0, 0.0, 1.0, "")
    result = finish(cset, outcome, "cpsat", 0.0, starting_selection(cset, None))
    assert checked(problem, result) == pytest.approx(2.2) and len(result.plan.assignments) == 3
    assert not result.plan.fallback and "starting selection" in result.plan.message
    assert result.plan.gap == pytest.approx((3.0 - 2.2) / 3.0)


def test_ortools_and_highspy_load_in_one_process() -> None:
    import highspy
    from ortools.sat.python import cp_model

    from dltsched.formulations.backends import SolveParams, get_backend
    from dltsched.formulations.model import RoundModel

    model = cp_model.CpModel()
    x = model.new_bool_var("x")
    model.maximize(x)
    assert cp_model.CpSolver().solve(model) == cp_model.OPTIMAL
    assert highspy.Highs().version()
    tables = Tables(step_s={"a": [1.0]})
    problem = make_round(tables, [("v100", 1)], [job("a")])
    outcome = get_backend("pyomo").solve(RoundModel(build_candidates(problem)), SolveParams(5.0))
    assert outcome.selected is not None
