"""The optimizing policy's working set: bounded rounds, jobs sharing GPUs kept together, nothing lost."""

from __future__ import annotations

import pytest

from dltsched.engine.app.api import optimizing_policy
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Assignment, Cluster, ClusterState, Job, JobState, Node, Plan
from dltsched.engine.policies.optimizing import sharing_groups
from dltsched.engine.sim.faults import FaultConfig
from dltsched.engine.sim.simulator import SimulationConfig, simulate
from dltsched.engine.sim.truth import MeasuredTruth
from dltsched.formulations.testing import Tables

FAULTS = FaultConfig(mtbf_s=4 * 3600.0, mttr_s=900.0, checkpoint_interval_s=600.0)


@pytest.mark.parametrize("objective", ["jct", "effective_progress"])
def test_rounds_stay_within_the_working_set_and_every_job_finishes(analytic, small_instance, objective,
                                                                    backend):
    inst = small_instance(4, num_jobs=40, mean_gap_s=15.0)
    policy = optimizing_policy(analytic, max_round_jobs=5, time_limit_s=0.5, objective=objective,
                               backend=backend)
    res = simulate(inst, policy, truth=MeasuredTruth(use_measurements=False),
                   config=SimulationConfig(seed=2, faults=FAULTS))
    assert sorted(r.job_id for r in res.records) == sorted(j.id for j in inst.jobs)
    assert all(entry["jobs"] <= 5 for entry in policy.solve_log)
    assert any(entry["active_jobs"] > 5 for entry in policy.solve_log), \
        "the cap never bound: test shows nothing"
    assert all(entry["status"] != "fallback" for entry in policy.solve_log)
    assert {entry["trigger"] for entry in policy.solve_log} <= {"new_waiting", "movers", "changed"}
    assert sum(policy.triggers.values()) == len(policy.solve_log)


def test_without_a_cap_the_round_sees_every_active_job(analytic, small_instance, backend):
    inst = small_instance(4, num_jobs=40, mean_gap_s=15.0)
    policy = optimizing_policy(analytic, max_round_jobs=None, time_limit_s=0.5, backend=backend)
    simulate(inst, policy, truth=MeasuredTruth(use_measurements=False))
    assert all(entry["jobs"] == entry["active_jobs"] for entry in policy.solve_log if entry["scope"] == "all")
    assert all(entry["scope"] in ("all", "roomy") for entry in policy.solve_log)
    assert any(entry["scope"] == "all" and entry["active_jobs"] > 5 for entry in policy.solve_log)


def _state(num_gpus: int, left: dict[str, float], on: dict[str, tuple[int, ...]]) -> ClusterState:
    return ClusterState(0.0, Cluster((Node("n0", "v100", num_gpus),)), tuple(
        JobState(Job(k, "resnet18", 32, 10_000.0), left[k],
                 assignment=Assignment(k, on[k]) if k in on else None)
        for k in left))


def test_working_set_takes_urgent_waiting_jobs_and_long_running_ones_and_keeps_the_rest(backend):
    # 1 s per iteration everywhere, every GPU busy (nobody could move). Running: a 1000 s left on GPU 0,
    # b 10 s on GPU 1, c 500 s and d 50 s sharing GPU 2; waiting: q1 20 s, q2 5000 s. Cap 4: half for the
    # waiting jobs (q1, q2); the running groups by longest remaining time: a (1000 s) fits, {c, d} (500 s)
    # does not fit the 1 slot left, b (10 s) does. c and d keep GPU 2, which the round sees as unavailable.
    tables = Tables(step_s={k: [1.0] for k in ("a", "b", "c", "d", "q1", "q2")})
    state = _state(3, {"a": 1000.0, "b": 10.0, "c": 500.0, "d": 50.0, "q1": 20.0, "q2": 5000.0},
                   {"a": (0,), "b": (1,), "c": (2,), "d": (2,)})
    policy = optimizing_policy(tables.bundle(), max_round_jobs=4, objective="jct", time_limit_s=1.0,
                               backend=backend)
    round_state, kept, trigger = policy.next_round(state)
    assert [s.job.id for s in round_state.jobs] == ["a", "b", "q1", "q2"]
    assert kept == (Assignment("c", (2,)), Assignment("d", (2,)))
    assert round_state.down_gpus == {2} and trigger == "new_waiting"
    plan = policy.schedule(state)
    by_job = plan.by_job()
    assert by_job["c"] == Assignment("c", (2,)) and by_job["d"] == Assignment("d", (2,))
    assert all(2 not in a.gpus for k, a in by_job.items() if k not in ("c", "d"))
    assert "q1" in by_job, "the shortest waiting job runs"


def test_jobs_sharing_a_gpu_while_one_is_idle_are_reconsidered_first(backend):
    # As above but with GPU 3 idle: c and d (sharing GPU 2) could spread out, so they come first and
    # take the 2 running slots (2 waiting jobs -> at most 2 x 2 + 2 movers, cap 4 - 2 = 2).
    tables = Tables(step_s={k: [1.0] for k in ("a", "b", "c", "d", "q1", "q2")})
    state = _state(4, {"a": 1000.0, "b": 10.0, "c": 500.0, "d": 50.0, "q1": 20.0, "q2": 5000.0},
                   {"a": (0,), "b": (1,), "c": (2,), "d": (2,)})
    policy = optimizing_policy(tables.bundle(), max_round_jobs=4, objective="jct", time_limit_s=1.0,
                               backend=backend)
    round_state, kept, trigger = policy.next_round(state)
    assert [s.job.id for s in round_state.jobs] == ["c", "d", "q1", "q2"]
    assert kept == (Assignment("a", (0,)), Assignment("b", (1,)))


def test_a_round_with_nothing_waiting_and_nobody_to_move_keeps_every_placement_without_solving(backend):
    tables = Tables(step_s={k: [1.0] for k in ("a", "b")})
    state = _state(2, {"a": 100.0, "b": 50.0}, {"a": (0,), "b": (1,)})
    policy = optimizing_policy(tables.bundle(), time_limit_s=1.0, backend=backend)
    plan = policy.schedule(state)
    assert plan.incremental and not plan.assignments and not policy.solve_log
    moving = _state(2, {"a": 100.0, "b": 50.0}, {"a": (0,), "b": (0,)})  # sharing GPU 0, GPU 1 idle
    plan = policy.schedule(moving)
    assert len(policy.solve_log) == 1
    assert {a.gpus for a in plan.assignments} == {(0,), (1,)}, "the pair spreads over both GPUs"


@pytest.mark.parametrize(("busy_v100", "on", "moves"), [
    # a 4-GPU job on k80 (3x slower): the idle v100 GPUs must hold its gang in one node
    ({0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13}, {"g": (16, 17, 18, 19)}, False),  # 2 + 2 idle in two nodes
    ({0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15}, {"g": (16, 17, 18, 19)}, True),  # 4 idle in node 0
    # a pair sharing a v100 GPU: only an idle v100 (not an idle k80) could hold one of them
    (set(range(16)) - {3}, {"a": (3,), "b": (3,)}, False),
    (set(range(16)) - {3, 7}, {"a": (3,), "b": (3,)}, True),
])
def test_movers_are_jobs_that_idle_gpus_could_really_hold_faster(busy_v100, on, moves, backend):
    from dltsched.engine.policies.optimizing import Idle

    tables = Tables(step_s={k: [1.0] for k in ("g", "a", "b", *(f"x{i}" for i in range(16)))},
                    type_factor={"k80": 3.0})
    cluster = Cluster((Node("v0", "v100", 8), Node("v1", "v100", 8), Node("k0", "k80", 8)))
    fillers = [JobState(Job(f"x{i}", "resnet18", 32, 100.0), 100.0, assignment=Assignment(f"x{i}", (g,)))
               for i, g in enumerate(sorted(busy_v100))]
    mine = [JobState(Job(k, "resnet18", 32, 100.0, num_gpus=len(gpus)), 100.0, assignment=Assignment(k, gpus))
            for k, gpus in on.items()]
    state = ClusterState(0.0, cluster, (*fillers, *mine))
    policy = optimizing_policy(tables.bundle(), backend=backend)
    group = [(s.job, s.assignment) for s in mine]
    assert policy.working_set.could_move(group, Idle.of(state), state) is moves


def test_a_mover_the_solver_keeps_in_place_triggers_no_more_solves_until_it_moves(backend):
    # j runs on the p100 (GPU 1); the v100 (GPU 0) is idle and 5% faster: a mover, but the move gains
    # 0.05 / 1 of j's value and costs 0.1, so the solve keeps it. Later rounds do not solve again for it,
    # also after a checkpoint; once it sits elsewhere it is a mover again.
    tables = Tables(step_s={"j": [1.0]}, type_factor={"p100": 1.05})
    cluster = Cluster((Node("v0", "v100", 1), Node("p0", "p100", 2)))

    def at(time_s: float, gpu: int) -> ClusterState:
        return ClusterState(time_s, cluster, (JobState(Job("j", "resnet18", 32, 1e4), 1e4,
                                                       assignment=Assignment("j", (gpu,))),))

    policy = optimizing_policy(tables.bundle(), time_limit_s=1.0, backend=backend)
    assert policy.schedule(at(0.0, 1)).by_job()["j"].gpus == (1,)
    assert len(policy.solve_log) == 1 and policy.solve_log[0]["movers"] == 1
    assert policy.schedule(at(1000.0, 1)) == Plan(incremental=True) and len(policy.solve_log) == 1
    resumed = optimizing_policy(tables.bundle(), time_limit_s=1.0, backend=backend)
    resumed.load_state_dict(policy.state_dict())
    assert resumed.schedule(at(1000.0, 1)) == Plan(incremental=True) and not resumed.solve_log
    policy.schedule(at(2000.0, 2))
    assert len(policy.solve_log) == 2


def test_a_declined_mover_is_reconsidered_when_more_gpus_fall_idle(backend):
    # j on a p100 declined a 5%-faster v100 while x held the other v100; when x finishes, more v100s are
    # idle than the solve saw, so j triggers a solve again (a long job is not left on a slow GPU forever).
    tables = Tables(step_s={"j": [1.0], "x": [1.0]}, type_factor={"p100": 1.05})
    cluster = Cluster((Node("v0", "v100", 2), Node("p0", "p100", 2)))
    j = JobState(Job("j", "resnet18", 32, 1e4), 1e4, assignment=Assignment("j", (2,)))
    x = JobState(Job("x", "resnet18", 32, 1e4), 1e4, assignment=Assignment("x", (0,)))
    policy = optimizing_policy(tables.bundle(), time_limit_s=1.0, backend=backend)
    policy.schedule(ClusterState(0.0, cluster, (j, x)))
    assert len(policy.solve_log) == 1 and policy.solve_log[0]["movers"] == 1
    assert policy.schedule(ClusterState(1000.0, cluster, (j, x))) == Plan(incremental=True)
    resumed = optimizing_policy(tables.bundle(), time_limit_s=1.0, backend=backend)
    resumed.load_state_dict(policy.state_dict())
    for p in (policy, resumed):
        p.schedule(ClusterState(2000.0, cluster, (j,)))
    assert len(policy.solve_log) == 2 and len(resumed.solve_log) == 1
    assert policy.solve_log[-1]["movers"] == 1


def test_a_waiting_job_a_solve_has_seen_waits_for_a_change_or_a_free_gpu(backend):
    # Two GPUs, one job per GPU: r (100 s left) and x (200 s) run, w (10,000 s) waits; under jct the solve
    # keeps r and x (worth 100x and 50x more) and w waits. Without news, no solve, not even at the
    # periodic tick (round_interval_s = 1,800 s after the last solve): only the clock moved. When x is
    # gone after the tick, the round's inputs changed: a solve ("changed"). When r is gone too, w starts
    # greedily on a free GPU without a solve.
    tables = Tables(step_s={"r": [1.0], "x": [1.0], "w": [1.0]})
    cluster = Cluster((Node("v0", "v100", 2),))
    r = JobState(Job("r", "resnet18", 32, 1e4), 100.0, assignment=Assignment("r", (0,)))
    x = JobState(Job("x", "resnet18", 32, 1e4), 200.0, assignment=Assignment("x", (1,)))
    w = JobState(Job("w", "resnet18", 32, 1e4), 1e4)
    policy = optimizing_policy(tables.bundle(), time_limit_s=1.0, max_jobs_per_gpu=1, backend=backend)
    assert set(policy.schedule(ClusterState(0.0, cluster, (r, x, w))).by_job()) == {"r", "x"}
    assert policy.schedule(ClusterState(400.0, cluster, (r, x, w))) == Plan(incremental=True)
    assert policy.schedule(ClusterState(1800.0, cluster, (r, x, w))) == Plan(incremental=True)
    assert len(policy.solve_log) == 1 and policy.skipped_solves == 1
    resumed = optimizing_policy(tables.bundle(), time_limit_s=1.0, max_jobs_per_gpu=1, backend=backend)
    resumed.load_state_dict(policy.state_dict())
    assert resumed.schedule(ClusterState(1900.0, cluster, (r, x, w))) == Plan(incremental=True)
    assert not resumed.solve_log and resumed.skipped_solves == 1
    plan = policy.schedule(ClusterState(2000.0, cluster, (r, w)))
    assert len(policy.solve_log) == 2 and policy.solve_log[-1]["trigger"] == "changed"
    assert policy.triggers == {"new_waiting": 1, "changed": 1}
    plan = policy.schedule(ClusterState(2200.0, cluster, (w,)))
    assert "w" in plan.by_job() and len(policy.solve_log) == 2


def test_jobs_sharing_any_gpu_form_one_group():
    def running(job_id: str, gpus: tuple[int, ...]) -> JobState:
        return JobState(Job(job_id, "resnet18", 32, 100.0, num_gpus=len(gpus)), 100.0,
                        assignment=Assignment(job_id, gpus))

    jobs = [running("a", (0, 1)), running("b", (2,)), running("c", (1, 0)), running("d", (3,)),
            running("e", (2,))]
    assert [[s.job.id for s in g] for g in sharing_groups(jobs)] == [["a", "c"], ["b", "e"], ["d"]]


def test_a_solver_without_the_round_solver_members_is_refused_naming_them(analytic):
    from dltsched.engine.policies.optimizing import OptimizingPolicy

    class OnlySolves:
        objective = "jct"

        def solve(self, state, **kw):
            return Plan()

    with pytest.raises(ValidationError, match=r"solver.*lacks options, with_options, "
                                              r"marks_colocation_fallbacks"):
        OptimizingPolicy(OnlySolves(), analytic)


@pytest.mark.parametrize("cap", [1, 0, 2.5])
def test_bad_working_set_size_names_the_field(analytic, cap):
    with pytest.raises(ValidationError, match="max_round_jobs"):
        optimizing_policy(analytic, max_round_jobs=cap)


def test_colocation_on_predicted_profiles_is_marked_in_the_plan_and_the_solve_log(caplog):
    # resnet18:32 has a Gavel profile on the V100, shufflenet_v2:64 none: sharing one GPU, the second one's
    # co-location rests on a predicted profile, whichever solver decides
    import logging
    from dataclasses import replace

    from dltsched.engine.domain.predictors import Predictors, memoized
    from dltsched.formulations.pipeline import colocation_fallbacks
    from dltsched.predictors import default_predictors

    bundle = default_predictors()
    cluster = Cluster((Node("n0", "v100", 1),))
    jobs = (JobState(Job("a", "resnet18", 32, 1e4), 1e4, assignment=Assignment("a", (0,))),
            JobState(Job("b", "shufflenet_v2", 64, 1e4), 1e4, assignment=Assignment("b", (0,))),
            JobState(Job("c", "resnet18", 32, 1e4), 1e4))
    state = ClusterState(0.0, cluster, jobs)
    shared = Plan((Assignment("a", (0,)), Assignment("b", (0,))))
    wrapped = memoized(Predictors(bundle.step_time, bundle.colocation, bundle.freezing)).colocation
    assert colocation_fallbacks(wrapped, shared, state) == ("b",)
    alone = Plan((Assignment("a", (0,)),))
    assert colocation_fallbacks(wrapped, alone, state) == ()
    assert colocation_fallbacks(object(), shared, state) == ()  # a predictor without sources marks nothing
    policy = optimizing_policy(bundle, time_limit_s=1.0, min_interval_s=0.0)
    with caplog.at_level(logging.INFO, logger="dltsched.engine.policies.optimizing"):
        plan = policy.schedule(state)
    assert plan.colocation_groups() == {0: ("a", "b")}  # moving the running pair costs more than c gains
    assert plan.colocation_fallbacks == ("b",) and plan == replace(plan, colocation_fallbacks=())
    assert policy.solve_log[-1]["colocation_fallbacks"] == 1
    assert any("predicted profiles" in r.message and ": b" in r.message for r in caplog.records)

    class Unmarked:  # a round solver that does not mark fallbacks itself: the policy marks them
        objective = "jct"
        marks_colocation_fallbacks = False

        def __init__(self, inner):
            self.inner = inner
            self.options = inner.options

        def with_options(self, **settings):
            return Unmarked(self.inner.with_options(**settings))

        def solve(self, round_state, **kw):
            return replace(self.inner.solve(round_state, **kw), colocation_fallbacks=())

    policy = optimizing_policy(bundle, time_limit_s=1.0, min_interval_s=0.0)
    assert policy.solver.marks_colocation_fallbacks
    policy.solver = Unmarked(policy.solver)
    plan = policy.schedule(state)
    assert plan.colocation_groups() == {0: ("a", "b")} and plan.colocation_fallbacks == ("b",)


def _arrival_state(busy: tuple[int, ...]) -> ClusterState:
    # four v100 and two p100 GPUs (p100 1.5x slower); x, y1, ... run on the GPUs ``busy``; w (freezing
    # allowed) arrives. w's rate per freeze level: 1 / 1.0, 0.9 / 0.8 = 1.125, 0.85 / 0.7 = 1.21 (best),
    # 0.5 / 0.6
    cluster = Cluster((Node("v0", "v100", 4), Node("p0", "p100", 2)))
    x = JobState(Job("x", "resnet18", 32, 1e4), 1e4, assignment=Assignment("x", busy[:1]))
    filler = [JobState(Job(f"y{g}", "resnet18", 32, 1e4), 1e4, assignment=Assignment(f"y{g}", (g,)))
              for g in busy[1:]]
    w = JobState(Job("w", "resnet18", 32, 1e4, freeze_allowed=True, accuracy_budget=0.2), 1e4)
    return ClusterState(0.0, cluster, (x, *filler, w))


def _arrival_tables() -> Tables:
    steps = {k: [1.0] for k in ("x", "y1", "y2", "y3", "y4", "y5")}
    return Tables(step_s={**steps, "w": [1.0, 0.8, 0.7, 0.6]}, penalty={"w": [0.0, 0.1, 0.15, 0.5]},
                  type_factor={"p100": 1.5})


@pytest.mark.parametrize(("freeze_levels", "solved_level"), [(None, 2), (1, 0)],
                         ids=["frozen-would-be-faster", "unfrozen-is-best"])
def test_an_arrival_starts_unfrozen_at_its_fastest_type_without_a_solve(backend, freeze_levels, solved_level):
    """Idle GPUs hold the arrival alone at its fastest type: it starts there unfrozen without a solve,
    whether a frozen level would be faster (a solve picks level 2) or unfrozen is its best option anyway;
    freezing is left to the solves."""
    state = _arrival_state((0, 1, 2))
    levels = {} if freeze_levels is None else {"freeze_levels": freeze_levels}
    policy = optimizing_policy(_arrival_tables().bundle(), time_limit_s=1.0, shortcuts_above_gpus=0,
                               backend=backend, **levels)
    plan = policy.schedule(state)
    assert plan.incremental and plan.assignments == (Assignment("w", (3,), 0),)
    assert not policy.solve_log and policy.settled_starts == 1
    solved = policy.solver.solve(state).by_job()["w"]  # what a solve of the whole round gives w
    assert solved.freeze_level == solved_level and state.cluster.gpu_type_of(solved.gpus[0]) == "v100"


def test_an_arrival_whose_best_type_is_full_is_solved_in_a_round_of_the_waiting_jobs_and_movers(backend):
    # v100s busy with x, y1, y2, y3 (none could move faster): w's best type is full, so a solve decides w
    # with the two longest running jobs (three per waiting job) while the others keep their v100s; w's 1.5x
    # faster run on a v100 is not worth moving a running job there, so w runs on an idle p100
    state = _arrival_state((0, 1, 2, 3))
    policy = optimizing_policy(_arrival_tables().bundle(), time_limit_s=1.0, shortcuts_above_gpus=0,
                               backend=backend)
    plan = policy.schedule(state).by_job()
    assert policy.settled_starts == 0 and len(policy.solve_log) == 1
    entry = policy.solve_log[0]
    assert entry["scope"] == "roomy" and entry["jobs"] == 3 and entry["active_jobs"] == 5
    assert all(plan[k] == Assignment(k, (g,)) for k, g in (("x", 0), ("y1", 1), ("y2", 2), ("y3", 3)))
    assert plan["w"].gpus[0] in (4, 5) and plan["w"].freeze_level == 2


def test_a_mover_waits_for_the_periodic_round(backend):
    # v100s hold x and y, j runs on a p100 (2x slower), w arrives: its best type is full, so a solve places it
    # on the other p100. When y is gone at 600 s, j could move to the idle v100: a mover, but with nothing
    # new waiting it waits for the periodic round (round_interval_s = 1,800 s after the last solve)
    tables = Tables(step_s={k: [1.0] for k in ("x", "y", "j", "w")}, type_factor={"p100": 2.0})
    cluster = Cluster((Node("v0", "v100", 2), Node("p0", "p100", 2)))

    def running(k: str, g: int) -> JobState:
        return JobState(Job(k, "resnet18", 32, 1e5), 1e5, assignment=Assignment(k, (g,)))

    x, y, j = running("x", 0), running("y", 1), running("j", 2)
    policy = optimizing_policy(tables.bundle(), time_limit_s=1.0, shortcuts_above_gpus=0, backend=backend)
    w = JobState(Job("w", "resnet18", 32, 1e5), 1e5)
    first = policy.schedule(ClusterState(0.0, cluster, (x, y, j, w)))
    assert first.by_job()["w"].gpus == (3,) and len(policy.solve_log) == 1
    w = running("w", 3)
    assert policy.schedule(ClusterState(600.0, cluster, (x, j, w))) == Plan(incremental=True)
    assert len(policy.solve_log) == 1
    plan = policy.schedule(ClusterState(1800.0, cluster, (x, j, w)))
    assert policy.solve_log[-1]["trigger"] == "movers" and plan.by_job()["j"].gpus == (1,)


def test_auto_cadence_scales_with_the_cluster(backend):
    # 512 busy v100 GPUs (64 nodes of 8): auto gives a solve at most every 300 x 512 / 128 = 1,200 s; an
    # arrival 600 s after a solve waits for the next at 1,200 s (rounds stay within max_round_jobs, 256)
    cluster = Cluster(tuple(Node(f"n{i}", "v100", 8) for i in range(64)))
    busy = tuple(JobState(Job(f"r{g}", "resnet18", 32, 1e6), 1e6 - g, assignment=Assignment(f"r{g}", (g,)))
                 for g in range(512))
    tables = Tables(step_s={k: [1.0] for k in (*(f"r{g}" for g in range(512)), "w1", "w2")})
    policy = optimizing_policy(tables.bundle(), time_limit_s=0.2, max_jobs_per_gpu=1, backend=backend,
                               arrival_share=0.0)  # every arrival solved: the cadence alone decides
    w1, w2 = (JobState(Job(k, "resnet18", 32, 1e6), 1e6) for k in ("w1", "w2"))
    policy.schedule(ClusterState(0.0, cluster, (*busy, w1)))
    assert len(policy.solve_log) == 1 and policy.solve_log[0]["jobs"] <= 256
    assert policy.solve_log[0]["scope"] == "capped"
    policy.schedule(ClusterState(600.0, cluster, (*busy, w1, w2)))
    assert len(policy.solve_log) == 1
    policy.schedule(ClusterState(1200.0, cluster, (*busy, w1, w2)))
    assert len(policy.solve_log) == 2 and policy.solve_log[1]["trigger"] == "new_waiting"


@pytest.mark.parametrize(("key", "value"), [("min_interval_s", -1.0), ("min_interval_s", "soon"),
                                            ("max_round_jobs", 1), ("max_round_jobs", "many")])
def test_bad_cadence_or_round_size_names_the_field(analytic, key, value):
    with pytest.raises(ValidationError, match=key):
        optimizing_policy(analytic, **{key: value})


def test_on_a_small_cluster_a_lone_arrival_starts_where_a_solve_would_put_it(backend):
    """At or below ``shortcuts_above_gpus`` GPUs (256 by default), an arrival that idle GPUs hold alone at its
    best option while nothing else waits starts there without a solve, at the freeze level a solve gives it
    (level 2: 0.85 / 0.7 beats unfrozen 1 / 1)."""
    state = _arrival_state((0, 1, 2))
    policy = optimizing_policy(_arrival_tables().bundle(), time_limit_s=1.0, backend=backend)
    plan = policy.schedule(state)
    assert plan.incremental and plan.assignments == (Assignment("w", (3,), 2),)
    assert not policy.solve_log and policy.settled_starts == 1
    solved = policy.solver.solve(state).by_job()["w"]
    assert solved.freeze_level == 2 and state.cluster.gpu_type_of(solved.gpus[0]) == "v100"


def test_on_a_small_cluster_an_arrival_is_solved_while_another_job_waits(backend):
    # g, a 4-GPU gang, cannot start (three v100s idle, one job per GPU, x worth more): a solve lets it wait.
    # w then arrives and idle GPUs hold it at its best option, but g waits too: a solve decides them both
    cluster = Cluster((Node("v0", "v100", 4), Node("p0", "p100", 2)))
    tables = Tables(step_s={"x": [1.0], "g": [1.0], "w": [1.0]}, type_factor={"p100": 1.5})
    x = JobState(Job("x", "resnet18", 32, 1e4), 1e3, assignment=Assignment("x", (0,)))
    g = JobState(Job("g", "resnet18", 32, 1e4, num_gpus=4), 1e4)
    w = JobState(Job("w", "resnet18", 32, 1e4), 1e4)
    policy = optimizing_policy(tables.bundle(), time_limit_s=1.0, max_jobs_per_gpu=1, backend=backend)
    assert "g" not in policy.schedule(ClusterState(0.0, cluster, (x, g))).by_job()
    policy.schedule(ClusterState(400.0, cluster, (x, g, w)))
    assert policy.settled_starts == 0 and [e["trigger"] for e in policy.solve_log] == ["new_waiting"] * 2


class _LaterFreezing(Tables):
    """Tables whose frozen penalties fall with progress, ``penalty`` x (1 - progress); ``asked`` counts
    them."""

    asked = 0

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float = 0.0) -> float:
        self.asked += 1
        return super().frozen_penalty(job, freeze_level) * (1.0 - start_progress)


@pytest.mark.parametrize("step", [0.02, 1.0], ids=["between-solves", "only-solves"])
def test_a_running_job_alone_takes_its_best_freeze_level_in_place_between_solves(backend, step):
    # f runs alone on GPU 0 at level 0; levels 1-3 are 1.25x faster at penalties of 0.4, 0.6, 0.8 x
    # (1 - progress): level 1's rate is 0.6 / 0.8 = 0.75 < 1 at the start, 0.88 / 0.8 = 1.1 > 1 at 70%
    # progress (levels 2 and 3: 1.025 and 0.95). At 400 s (no solve: nothing waits) f goes to level 1 on its
    # GPU, unless only solves change levels
    cluster = Cluster((Node("v0", "v100", 2),))
    tables = _LaterFreezing(step_s={"f": [1.0, 0.8, 0.8, 0.8]}, penalty={"f": [0.0, 0.4, 0.6, 0.8]})
    job = Job("f", "resnet18", 32, 1e4, freeze_allowed=True, accuracy_budget=0.5)
    policy = optimizing_policy(tables.bundle(), time_limit_s=1.0, backend=backend, refreeze_step=step)

    def at(time_s: float, left: float, level: int) -> ClusterState:
        return ClusterState(time_s, cluster, (JobState(job, left, assignment=Assignment("f", (0,), level)),))

    assert policy.schedule(at(0.0, 1e4, 0)).assignments == ()
    assert policy.schedule(at(200.0, 9.9e3, 0)) == Plan(incremental=True) and policy.refrozen == 0
    plan = policy.schedule(at(400.0, 3e3, 0))
    assert not policy.solve_log
    if step < 1:
        assert plan == Plan((Assignment("f", (0,), 1),), incremental=True) and policy.refrozen == 1
        # priced at level 1 at 400 s: not again before it has run 2% of its work (200 s at its predicted 1 s
        # per iteration), also after a resume; a fresh policy prices it
        for p in (policy, resumed := optimizing_policy(tables.bundle(), time_limit_s=1.0, backend=backend)):
            p.load_state_dict(policy.state_dict())
            asked = tables.asked
            assert p.schedule(at(500.0, 2.9e3, 1)) == Plan(incremental=True) and tables.asked == asked
        fresh = optimizing_policy(tables.bundle(), time_limit_s=1.0, backend=backend)
        fresh.working_set.load_state_dict(policy.working_set.state_dict())
        assert fresh.schedule(at(500.0, 2.9e3, 1)) == Plan(incremental=True) and tables.asked > asked
        assert resumed.refrozen == fresh.refrozen == 0
    else:
        assert plan == Plan(incremental=True) and policy.refrozen == 0


def test_a_co_located_job_keeps_its_freeze_level_between_solves(backend):
    # f shares GPU 0 with s: its level is weighed with its partner's, which only a solve does
    cluster = Cluster((Node("v0", "v100", 1),))
    tables = _LaterFreezing(step_s={"f": [1.0, 0.8, 0.8, 0.8], "s": [1.0]},
                            penalty={"f": [0.0, 0.4, 0.6, 0.8]})
    f = JobState(Job("f", "resnet18", 32, 1e4, freeze_allowed=True, accuracy_budget=0.5), 3e3,
                 assignment=Assignment("f", (0,)))
    s = JobState(Job("s", "resnet18", 32, 1e4), 1e4, assignment=Assignment("s", (0,)))
    policy = optimizing_policy(tables.bundle(), time_limit_s=1.0, backend=backend)
    policy.working_set.last_solve_s = 0.0  # as after a solve: the next decision point is between solves
    assert policy.schedule(ClusterState(100.0, cluster, (f, s))) == Plan(incremental=True)
    assert policy.refrozen == 0


@pytest.mark.parametrize("step", [-0.1, 1.5, "often", True])
def test_bad_refreeze_step_names_the_field(analytic, step):
    with pytest.raises(ValidationError, match="refreeze_step"):
        optimizing_policy(analytic, refreeze_step=step)


def test_length_weight_starts_the_longest_job_first_and_finishes_the_batch_by_its_length(analytic):
    # one GPU type, 2 GPUs, no sharing or freezing; 1 h, 1 h and 2 h of work at time 0 (the 2 h job last):
    # longest first finishes in 2 h; starting the 2 h job after a 1 h one takes 3 h
    from dataclasses import replace

    from dltsched.engine.domain.model import Instance

    truth = MeasuredTruth(use_measurements=False)
    probe = Job("p", "resnet18", 32, 1.0)
    step = truth.step_time_s(probe, "v100", 1)
    jobs = tuple(replace(probe, id=k, total_iterations=round(h * 3600 / step))
                 for k, h in (("a", 1), ("b", 1), ("c", 2)))
    inst = Instance("lpt", Cluster((Node("n0", "v100", 2),)), jobs, {})
    policy = optimizing_policy(analytic, objective="effective_progress", length_weight=1.0,
                               max_jobs_per_gpu=1, freeze_levels=1, time_limit_s=1.0)
    res = simulate(inst, policy, truth=truth)
    assert {r.job_id: r.first_start_s for r in res.records}["c"] == 0.0
    assert res.makespan_s == pytest.approx(7200.0, rel=0.01)
    with pytest.raises(ValidationError, match="length_weight"):
        optimizing_policy(analytic, length_weight=1.0)  # the default objective is jct


def _batch_state(time_s: float, waiting: tuple[str, ...]) -> ClusterState:
    """32 v100s in four nodes; r0..r19 run alone on GPUs 0..19 (none could move faster); g, a 16-GPU gang of
    10^7 iterations, waits (never worth starting); ``waiting`` wait too (so an arrival is never settled)."""
    cluster = Cluster(tuple(Node(f"n{i}", "v100", 8) for i in range(4)))
    running = tuple(JobState(Job(f"r{g}", "resnet18", 32, 1e5), 1e5, assignment=Assignment(f"r{g}", (g,)))
                    for g in range(20))
    gang = JobState(Job("g", "resnet18", 32, 1e7, num_gpus=16), 1e7)
    return ClusterState(time_s, cluster, (*running, gang, *(JobState(Job(k, "resnet18", 32, 1e5), 1e5)
                                                            for k in waiting)))


def _batch_tables() -> Tables:
    return Tables(step_s={k: [1.0] for k in (*(f"r{g}" for g in range(20)), "g",
                                             *(f"w{i}" for i in range(5)))})


def test_a_lone_arrival_waits_for_more_or_the_periodic_round_and_starts_greedily_meanwhile(backend):
    # after w0's solve at 0 s, one new arrival among 22 active jobs is under 5% of them (1 < 1.1): w1 starts
    # greedily on a free GPU without a solve; two at once (w2, w3: 2 >= 1.15 of 23) are solved; w4, arriving
    # 1,800 s (round_interval_s) after the last solve, is solved however few it is
    policy = optimizing_policy(_batch_tables().bundle(), time_limit_s=1.0, max_jobs_per_gpu=1,
                               backend=backend)
    policy.schedule(_batch_state(0.0, ("w0",)))
    assert [e["trigger"] for e in policy.solve_log] == ["new_waiting"]
    plan = policy.schedule(_batch_state(400.0, ("w1",)))
    assert plan.incremental and [a.job_id for a in plan.assignments] == ["w1"]
    assert len(policy.solve_log) == 1 and policy.batched_arrivals == 1
    policy.schedule(_batch_state(800.0, ("w2", "w3")))
    assert len(policy.solve_log) == 2 and policy.batched_arrivals == 1
    policy.schedule(_batch_state(2600.0, ("w4",)))
    assert [e["trigger"] for e in policy.solve_log] == ["new_waiting"] * 3 and policy.batched_arrivals == 1


def test_without_batching_every_arrival_is_solved_at_once(backend):
    policy = optimizing_policy(_batch_tables().bundle(), time_limit_s=1.0, max_jobs_per_gpu=1,
                               backend=backend, arrival_share=0.0)
    policy.schedule(_batch_state(0.0, ("w0",)))
    policy.schedule(_batch_state(400.0, ("w1",)))
    assert len(policy.solve_log) == 2 and policy.batched_arrivals == 0


@pytest.mark.parametrize("share", [-0.1, 1.5, "half", True])
def test_bad_arrival_share_names_the_field(analytic, share):
    with pytest.raises(ValidationError, match="arrival_share"):
        optimizing_policy(analytic, arrival_share=share)
