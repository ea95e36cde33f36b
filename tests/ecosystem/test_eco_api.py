"""The embedding API: solve_round on every backend, the fallback, the optimizer policy, the caller's own
measurements (measured first, predicted fallback, provenance), round settings, the "your scheduler"
example."""

from __future__ import annotations

from dataclasses import fields

import pytest

from dltsched.engine.app.api import (
    DEFAULT_OPTIONS,
    RoundOptions,
    SolveConfig,
    initial_state,
    load_predictors,
    optimizing_policy,
    plan_to_dict,
    simulate_instance,
    solve_round,
)
from dltsched.engine.app.measured import (
    GroupMeasurement,
    JobMeasurement,
    Measurements,
    measured_predictors,
    prepare_state,
)
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import (
    DEFAULT_OBJECTIVE,
    MEASURED_ONLY,
    Cluster,
    ClusterState,
    Job,
    JobState,
    Plan,
)
from dltsched.engine.policies.optimizing import OptimizingPolicy
from dltsched.formulations import build_round, check_plan
from dltsched.formulations.pipeline import ConfiguredSolver


def _feasible(plan: Plan, state: ClusterState, max_jobs_per_gpu: int = 2) -> None:
    jobs = {s.job.id: s.job for s in state.jobs}
    load = [0] * state.cluster.num_gpus
    for a in plan.assignments:
        assert len(a.gpus) == jobs[a.job_id].num_gpus
        assert len({state.cluster.gpu_type_of(g) for g in a.gpus}) == 1
        for g in a.gpus:
            load[g] += 1
    assert max(load, default=0) <= max_jobs_per_gpu


@pytest.mark.parametrize("backend", ["cpsat", "milp", "greedy", "greedy:sjf", "greedy:gandiva", "auto"])
def test_solve_round_every_backend_gives_a_feasible_marked_plan(make_state, backend):
    state = make_state(10, 8, seed=3)
    plan = solve_round(state, ConfiguredSolver.of(backend=backend, time_limit_s=5.0))
    _feasible(plan, state)
    assert plan.assignments, "8 free GPUs and 10 jobs: something must run"
    expected = {"cpsat": "cpsat", "milp": "milp", "greedy": "greedy", "auto": "cpsat"}.get(backend, backend)
    assert plan.backend == expected
    if backend.startswith("greedy:"):
        assert plan.status == "heuristic" and not plan.fallback


@pytest.mark.parametrize("backend", ["cpsat", "milp", "greedy", "greedy:sjf", "auto"])
def test_solve_round_never_uses_down_gpus(make_state, backend):
    base = make_state(10, 8, seed=3)
    down = frozenset(range(4, 8))  # GPUs no running job holds failed
    assert not {g for s in base.running() for g in s.assignment.gpus} & down
    state = ClusterState(base.time_s, base.cluster, base.jobs, down)
    plan = solve_round(state, ConfiguredSolver.of(backend=backend, time_limit_s=5.0))
    _feasible(plan, state)
    assert plan.assignments, "4 GPUs are up and 10 jobs wait: something must run"
    assert not {g for a in plan.assignments for g in a.gpus} & down


def test_a_running_job_on_a_down_gpu_is_a_clear_error(make_state):
    base = make_state(10, 8, seed=3)
    job = base.running()[0]
    state = ClusterState(base.time_s, base.cluster, base.jobs, frozenset(job.assignment.gpus))
    with pytest.raises(ValidationError, match=f"job '{job.job.id}' runs on down GPU"):
        solve_round(state, ConfiguredSolver.of(backend="greedy"))


def test_exact_backend_at_least_as_good_as_its_heuristic(make_state):
    state = make_state(6, 8, seed=5)
    exact = solve_round(state, ConfiguredSolver.of(backend="cpsat", time_limit_s=10.0))
    greedy = solve_round(state, ConfiguredSolver.of(backend="greedy"))
    assert exact.status == "optimal"
    assert exact.objective is not None and greedy.objective is not None
    assert exact.objective >= greedy.objective - 1e-6  # effective progress is maximised


def test_solver_failure_falls_back_to_a_marked_greedy_plan(make_state, monkeypatch):
    import dltsched.formulations.pipeline as decide

    def broken(*_args, **_kwargs):
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(decide, "solve_problem", broken)
    state = make_state(5, 8, seed=1)
    plan = solve_round(state, ConfiguredSolver.of(backend="cpsat"))
    assert plan.status == "fallback" and plan.fallback and "solver exploded" in plan.message
    assert plan.backend == "greedy:sjf"
    _feasible(plan, state, max_jobs_per_gpu=1)
    assert {a.job_id for a in plan.assignments} == {s.job.id for s in state.jobs}  # 5 jobs fit on 8 GPUs


@pytest.mark.parametrize(("field", "kwargs"), [
    ("backend", {"backend": "gurobi"}), ("backend", {"backend": "greedy:nope"}),
                                               ("objective", {"objective": "x"}),
    ("max_jobs_per_gpu", {"max_jobs_per_gpu": 4}), ("time_limit_s", {"time_limit_s": 0}),
])
def test_config_errors_name_the_field(field, kwargs):
    with pytest.raises(ValidationError, match=field):
        ConfiguredSolver.of(**kwargs)


def test_plan_to_dict_reports_colocation_groups(make_state):
    state = make_state(16, 8, seed=2, running_fraction=0.0)
    plan = solve_round(state, ConfiguredSolver.of(backend="greedy:gandiva"))
    data = plan_to_dict(plan)
    assert len(data["assignments"]) == len(plan.assignments)
    shared = {g for g, jobs in plan.colocation_groups().items() if len(jobs) > 1}
    assert {g["gpu"] for g in data["colocation_groups"]} == shared


def test_optimizer_policy_finishes_every_job(instance_dir):
    policy = OptimizingPolicy(ConfiguredSolver.of(backend="cpsat", time_limit_s=2.0))
    result = simulate_instance(instance_dir / "eco-0.json", policy)
    assert result.num_jobs_finished == result.num_jobs == 6
    assert policy.solve_log and {r["status"] for r in policy.solve_log} <= {"optimal", "feasible", "timeout"}


@pytest.mark.slow
def test_optimizer_policy_beats_fifo_on_the_default_instance(repo_root):
    # measured: avg JCT 5,264 s (dltsched:cpsat) vs 13,103 s (fifo); the margin leaves room for solver noise
    path = repo_root / "instances" / "examples" / "default.json"
    ours = simulate_instance(path, "dltsched:cpsat", config=ConfiguredSolver.of(time_limit_s=2.0))
    fifo = simulate_instance(path, "fifo")
    assert ours.num_jobs_finished == ours.num_jobs
    assert ours.avg_jct_s < fifo.avg_jct_s


def test_initial_state_queues_every_arrived_job(instance_dir):
    from dltsched.instances.schema import load_instance

    inst = load_instance(instance_dir / "eco-1.json")
    state = initial_state(inst)
    assert len(state.jobs) == len(inst.jobs) and not state.running()


class GavelStylePolicy:
    """The adapter of the engine.api docstring: a Gavel-style policy that owns its job table."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.config = cluster, ConfiguredSolver.of(backend="cpsat", time_limit_s=2.0)
        self.last: Plan | None = None

    def allocate(self, jobs: dict[str, Job], remaining: dict[str, float],
                 now_s: float) -> dict[str, tuple[int, ...]]:
        state = ClusterState(now_s, self.cluster, tuple(JobState(j, remaining[i]) for i, j in jobs.items()))
        self.last = solve_round(state, self.config, warm_start=self.last)
        return {a.job_id: a.gpus for a in self.last.assignments}


def test_gavel_style_adapter():
    cluster = Cluster.homogeneous("v100", num_nodes=1, gpus_per_node=4)
    jobs = {f"j{i}": Job(f"j{i}", m, b, 1000.0) for i, (m, b) in
            enumerate([("resnet18", 128), ("resnet50", 64), ("transformer", 128), ("lstm_lm", 20),
                       ("a3c", 4)])}
    policy = GavelStylePolicy(cluster)
    first = policy.allocate(jobs, {j: 1000.0 for j in jobs}, 0.0)
    second = policy.allocate(jobs, {j: 900.0 for j in jobs}, 300.0)  # warm-started from the first plan
    assert len(first) >= 4 and len(second) >= 4
    assert all(0 <= g < 4 for gpus in second.values() for g in gpus)


# ----------------------------------------------------------------------------- the caller's measurements


def _checked(plan: Plan, state: ClusterState, measurements: Measurements,
             options: RoundOptions = DEFAULT_OPTIONS, base: str | None = "default") -> None:
    """Re-check ``plan`` with the solver-independent checker on the round the API built."""
    m = measurements.checked()
    prepared = prepare_state(state, m)
    problem = build_round(prepared, measured_predictors(load_predictors(base) if base else None, m), options)
    report = check_plan(problem, plan)
    assert report.feasible, report.violations


def your_scheduler_round() -> tuple[ClusterState, Measurements]:
    """The example of the api module docstring and README: one numbers-only job, one zoo job measured."""
    cluster = Cluster.homogeneous("v100", num_nodes=2, gpus_per_node=4)
    jobs = [JobState(Job("a", MEASURED_ONLY, 64, 10_000), 10_000),
            JobState(Job("b", "resnet50", 32, 5_000), 5_000)]
    seen = Measurements({"a": JobMeasurement(step_time_s={"v100": 0.21}),
                         "b": JobMeasurement(samples_per_s={"v100": 410.0})}, unknown_memory="trust")
    return ClusterState(0.0, cluster, tuple(jobs)), seen


def test_your_scheduler_example_runs_measured_only_jobs():
    state, seen = your_scheduler_round()
    options = RoundOptions(objective="jct", round_s=360.0)
    plan = solve_round(state, options, backend="cpsat", measurements=seen)
    _checked(plan, state, seen, options)
    assert plan.status == "optimal" and {a.job_id for a in plan.assignments} == {"a", "b"}
    assert plan.provenance["a"] == {"step_time": "measured", "memory": "trusted", "colocation": "alone",
                                    "gpu_type": "v100"}
    assert plan.provenance["b"]["step_time"] == "measured"
    assert plan_to_dict(plan)["provenance"]["a"]["step_time"] == "measured"


def test_measured_step_times_replace_the_predictions():
    """Two zoo jobs, one GPU each of two types: the measurement (not the prediction) decides who gets the fast
    one."""
    cluster = Cluster((*Cluster.homogeneous("v100", 1, 1).nodes, *Cluster.homogeneous("k80", 1, 1).nodes))
    jobs = (JobState(Job("x", "resnet50", 64, 1000), 1000), JobState(Job("y", "resnet50", 64, 1000), 1000))
    state = ClusterState(0.0, cluster, jobs)
    options = RoundOptions(objective="effective_progress", max_jobs_per_gpu=1, freeze_levels=(0,))
    # x barely gains from the V100, y gains 10x: y should get it, whatever the predictor thinks of twins
    seen = Measurements({"x": JobMeasurement(step_time_s={"v100": 0.50, "k80": 0.55}),
                         "y": JobMeasurement(step_time_s={"v100": 0.10, "k80": 1.00})})
    plan = solve_round(state, options, measurements=seen)
    _checked(plan, state, seen, options)
    gpu_of = {a.job_id: cluster.gpu_type_of(a.gpus[0]) for a in plan.assignments}
    assert gpu_of == {"y": "v100", "x": "k80"}
    seen_swapped = Measurements({"x": JobMeasurement(step_time_s={"v100": 0.10, "k80": 1.00}),
                                 "y": JobMeasurement(step_time_s={"v100": 0.50, "k80": 0.55})})
    swapped = solve_round(state, options, measurements=seen_swapped)
    assert {a.job_id: cluster.gpu_type_of(a.gpus[0])
            for a in swapped.assignments} == {"x": "v100", "y": "k80"}


def test_measured_group_speeds_decide_co_location():
    """Three numbers-only jobs, two GPUs: the pair measured to share well is the one co-located."""
    cluster = Cluster.homogeneous("a100", 1, 2)
    jobs = tuple(JobState(Job(i, MEASURED_ONLY, 32, 5000), 5000) for i in ("p", "q", "r"))
    state = ClusterState(0.0, cluster, jobs)
    one = {"a100": 0.2}
    groups = (GroupMeasurement(("p", "q"), "a100", speeds=(0.95, 0.9)),
              GroupMeasurement(("q", "r"), "a100", step_time_s=(0.5, 0.5)))
    seen = Measurements({j: JobMeasurement(step_time_s=one) for j in ("p", "q", "r")}, groups)
    options = RoundOptions(objective="effective_progress")
    plan = solve_round(state, options, measurements=seen)
    _checked(plan, state, seen, options, base=None)
    shared = [set(js) for js in plan.colocation_groups().values() if len(js) > 1]
    assert shared == [{"p", "q"}]
    assert plan.provenance["p"]["colocation"] == "measured" and plan.provenance["r"]["colocation"] == "alone"
    # unmeasured groups of numbers-only jobs are time-sliced (no gain): with one GPU per job nothing shares
    plain = Measurements({j: JobMeasurement(step_time_s=one) for j in ("p", "q")})
    two = ClusterState(0.0, cluster, jobs[:2])
    assert all(len(js) == 1
               for js in solve_round(two, options, measurements=plain).colocation_groups().values())


def test_memory_can_be_trusted_or_predicted():
    """A job predicted not to fit a small GPU: ``predict`` keeps it off, ``trust`` and a measured peak let it
    run."""
    cluster = Cluster.homogeneous("k80", 1, 1)
    big = Job("big", "gpt2_xl", 32, 100) if "gpt2_xl" in _zoo() else Job("big", "bert_large", 64, 100)
    state = ClusterState(0.0, cluster, (JobState(big, 100),))
    predicted = solve_round(state, measurements=Measurements({}, unknown_memory="predict"))
    if predicted.assignments:
        pytest.skip("the zoo's largest job fits a K80 by prediction; nothing to switch off")
    trusted = solve_round(state, measurements=Measurements({}, unknown_memory="trust"))
    assert [a.job_id
            for a in trusted.assignments] == ["big"] and trusted.provenance["big"]["memory"] == "trusted"
    measured = solve_round(state,
                           measurements=Measurements({"big": JobMeasurement(memory_mib={"k80": 9000.0})}))
    assert [a.job_id
            for a in measured.assignments] == ["big"] and measured.provenance["big"]["memory"] == "measured"


def _zoo() -> tuple[str, ...]:
    from dltsched.engine.domain.catalog import model_catalog

    return model_catalog().ids()


@pytest.mark.parametrize(("measurements", "field"), [
    (None, "jobs[0]"),
    (Measurements({"a": JobMeasurement(memory_mib={"v100": 100.0})}), "jobs[0]"),
    (Measurements({"a": JobMeasurement(step_time_s={"v100": -1.0})}),
     "measurements.jobs['a'].step_time_s['v100']"),
    (Measurements({"a": JobMeasurement(step_time_s={"h900": 1.0})}),
     "measurements.jobs['a'].step_time_s['h900']"),
    (Measurements({"zz": JobMeasurement(step_time_s={"v100": 1.0})}), "measurements.jobs['zz']"),
    (Measurements({"a": JobMeasurement(step_time_s={"v100": 1.0})}, unknown_memory="maybe"),
     "measurements.unknown_memory"),
    (Measurements({"a": JobMeasurement(step_time_s={"v100": 1.0})},
                  (GroupMeasurement(("a",), "v100", speeds=(1.0,)),)),
     "measurements.groups[0].job_ids"),
    ({"jobs": {"a": {"step_time": 1.0}}}, "measurements.jobs['a']"),
])
def test_a_job_without_model_or_measurement_is_one_clear_error(measurements, field):
    state = ClusterState(0.0, Cluster.homogeneous("v100", 1, 2),
                         (JobState(Job("a", MEASURED_ONLY, 8, 100), 100),))
    with pytest.raises(ValidationError) as err:
        solve_round(state, measurements=measurements)
    assert err.value.path == field and "\n" not in str(err.value)


def test_measurements_as_plain_dicts():
    state, _ = your_scheduler_round()
    plan = solve_round(state, measurements={"jobs": {"a": {"step_time_s": {"v100": 0.21}},
                                                     "b": {"samples_per_s": {"v100": 410.0}}},
                                            "unknown_memory": "trust"})
    assert {a.job_id for a in plan.assignments} == {"a", "b"}


# ----------------------------------------------------------------------------- round settings


def test_every_round_setting_is_reachable_and_one_default_objective():
    assert DEFAULT_OPTIONS.objective == DEFAULT_OBJECTIVE == "jct"
    assert ConfiguredSolver().objective == ConfiguredSolver.of().objective == optimizing_policy(
        load_predictors("analytic")).solver.objective == DEFAULT_OBJECTIVE
    everything = {"round_s": 360.0, "num_workers": 4, "deterministic": False, "time_limit_s": 3.0,
                  "allow_cross_node": False, "objective": "effective_progress", "freeze_levels": (0, 2),
                  "max_jobs_per_gpu": 1, "migration_penalty": 0.5, "starvation_weight": 0.1,
                  "max_partners": 2, "relative_gap": 0.01, "max_nodes_per_unit": 2,
                  "value_reference_s": 3600.0, "length_weight": 0.5, "stage_horizon_s": 600.0}
    assert set(everything) == {f.name for f in fields(RoundOptions)}
    solver = ConfiguredSolver.of(backend="greedy", **everything)
    assert all(getattr(solver.options, k) == v for k, v in everything.items())
    policy = optimizing_policy(load_predictors("analytic"), **everything)
    assert all(getattr(policy.solver.options, k) == v for k, v in everything.items())
    state, seen = your_scheduler_round()
    plan = solve_round(state, solver.options, backend="greedy", measurements=seen)
    assert plan.backend == "greedy" and plan.assignments


def test_solve_config_is_a_deprecated_alias_of_configured_solver():
    with pytest.warns(DeprecationWarning, match=r"SolveConfig is deprecated.*ConfiguredSolver[.]of"):
        old = SolveConfig(backend="auto", time_limit_s=2.0, round_s=360.0)
    assert isinstance(old, ConfiguredSolver) and old.options.round_s == 360.0 and old.backend == "auto"
    assert old == ConfiguredSolver.of(backend="auto", time_limit_s=2.0, round_s=360.0)
    assert ConfiguredSolver(old) == old  # the former ConfiguredSolver(SolveConfig(...)) still works
    with pytest.raises(ValidationError, match="round_length"), pytest.warns(DeprecationWarning):
        SolveConfig(round_length=3)


def test_group_memory_is_the_members_memory_plus_the_predicted_overhead():
    base = load_predictors("default")
    a, b = Job("a", "resnet50", 32, 100), Job("b", "resnet18", 64, 100)
    mem = base.step_time.memory_mib
    overhead = max(0.0, base.colocation.group_memory_mib([a, b], "v100") - mem(a, "v100") - mem(b, "v100"))
    step_only = measured_predictors(base,
                                    Measurements({"a": JobMeasurement(step_time_s={"v100": 0.2})}).checked())
    assert step_only.colocation.group_memory_mib([a, b], "v100") == pytest.approx(
        mem(a, "v100") + mem(b, "v100") + overhead)
    peak = measured_predictors(base,
                               Measurements({"a": JobMeasurement(memory_mib={"v100": 1000.0})}).checked())
    assert peak.step_time.memory_mib(a, "v100") == 1000.0
    assert peak.colocation.group_memory_mib([a, b],
                                            "v100") == pytest.approx(1000.0 + mem(b, "v100") + overhead)
    trusted = measured_predictors(base, Measurements({}, unknown_memory="trust").checked())
    assert trusted.colocation.group_memory_mib([a, b], "v100") == 0.0
