"""The round pipeline below the policies: its solver asks the layers above only through the registered round
services, its prices are a public API that a cache keeps exactly, and the old paths warn."""

from __future__ import annotations

import importlib
import sys
import warnings
from dataclasses import replace

import pytest

from dltsched.engine.domain.model import Assignment, Cluster, ClusterState, Job, JobState, Node
from dltsched.engine.domain.predictors import MemoryObservations, observing_memory
from dltsched.engine.domain.protocols import register_round_services, round_services
from dltsched.engine.policies.optimizing import PredictionCache
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import build_round
from dltsched.formulations.checker import check_plan
from dltsched.formulations.pipeline import (
    ConfiguredSolver,
    RoundOptions,
    best_alone,
    decide_round,
    node_types,
    reference_rate,
)
from dltsched.formulations.testing import Tables
from dltsched.predictors import analytic_predictors


class _Recording:
    """The registered round services, each call recorded (method name, then what identifies it)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def parse_backend(self, name):
        self.calls.append(("parse_backend", name))
        return self.inner.parse_backend(name)

    def policy_names(self):
        return self.inner.policy_names()

    def prepare(self, state, predictors, bundle, measurements):
        self.calls.append(("prepare", bundle))
        return self.inner.prepare(state, predictors, bundle, measurements)

    def baseline_plan(self, state, policy, predictors, *, status, message=""):
        self.calls.append(("baseline_plan", policy, status))
        return self.inner.baseline_plan(state, policy, predictors, status=status, message=message)

    def annotate(self, plan, state, predictors, measurements):
        self.calls.append(("annotate", plan.status))
        return self.inner.annotate(plan, state, predictors, measurements)


@pytest.fixture
def recording():
    app = round_services()
    services = _Recording(app)
    register_round_services(lambda: services)
    try:
        yield services
    finally:
        register_round_services(lambda: app)


def _two_jobs() -> ClusterState:
    # one v100 node of 2 GPUs, two one-GPU jobs waiting: every backend starts both, one per GPU
    cluster = Cluster((Node("n0", "v100", 2),))
    return ClusterState(0.0, cluster, tuple(JobState(Job(k, "resnet18", 32, 1e3), 1e3) for k in ("a", "b")))


def test_the_solver_asks_the_layers_above_only_through_the_registered_services(recording):
    tables = Tables(step_s={"a": [1.0], "b": [2.0]})
    state = _two_jobs()
    solver = ConfiguredSolver.of(backend="greedy:sjf", predictors="analytic")
    plan = solver.solve(state, predictors=tables.bundle())
    # the baseline decides, through the services
    assert ("baseline_plan", "sjf", "heuristic") in recording.calls
    assert plan.status == "heuristic" and {a.job_id for a in plan.assignments} == {"a", "b"}
    recording.calls.clear()
    cpsat = ConfiguredSolver.of(backend="cpsat", time_limit_s=5.0)
    exact = cpsat.solve(state, predictors=tables.bundle())
    assert {c[0] for c in recording.calls} == {"parse_backend", "prepare", "annotate"}  # no baseline: checked
    assert exact.status != "fallback" and {a.job_id for a in exact.assignments} == {"a", "b"}
    assert check_plan(build_round(state, tables.bundle(), cpsat.options), exact).feasible


def test_a_failing_backend_falls_back_through_the_services(recording, monkeypatch):
    import dltsched.formulations.pipeline as pipeline

    def broken(*args, **kwargs):
        raise RuntimeError("solver gone")

    monkeypatch.setattr(pipeline, "solve_problem", broken)
    plan = ConfiguredSolver.of(backend="cpsat", fallback_policy="fifo").solve(
        _two_jobs(), predictors=Tables(step_s={"a": [1.0], "b": [1.0]}).bundle())
    assert plan.status == "fallback" and "solver gone" in plan.message
    assert ("baseline_plan", "fifo", "fallback") in recording.calls


def test_decide_round_hands_the_fallback_the_checkers_reason():
    tables = Tables(step_s={"a": [1.0], "b": [1.0]})
    reasons = []

    def fallback(reason):
        reasons.append(reason)
        return replace(_two_jobs().current_plan(), status="fallback")

    plan = decide_round(_two_jobs(), tables.bundle(), RoundOptions(time_limit_s=5.0), "no-such-backend",
                        fallback=fallback)
    assert plan.status == "fallback" and reasons and "no-such-backend" in reasons[0]


def test_the_prediction_cache_gives_what_the_pipeline_prices_and_drops_it_when_memory_is_measured():
    raw = analytic_predictors()
    state = synthetic_state(30, 16, seed=4)
    options = RoundOptions(freeze_levels=1)
    cache = PredictionCache(raw)
    types = cache.node_types(state)
    assert types is cache.node_types(replace(state, time_s=state.time_s + 60.0))  # same cluster, same GPUs up
    assert types == node_types(state)
    down = replace(state, down_gpus=frozenset({0}))
    assert cache.node_types(down) is not types and cache.node_types(down).total != types.total
    js = next(s for s in state.jobs if s.assignment is None)
    fresh = best_alone(js, state.time_s, types, raw, options)
    assert cache.best_alone(js, state.time_s, types, options) == fresh
    assert cache.reference_rate(js, types, options) == reference_rate(js, types, raw, options)
    with observing_memory(MemoryObservations()) as seen:
        before = cache.reference_rate(js, types, options)
        best = cache.best_alone(js, state.time_s, types, options)
        assert best is not None
        # measured far above every GPU's memory on its best type: the cached answers no longer hold
        seen.record(js.job, best.gpu_type, best.freeze_level, 1e9)
        after = cache.best_alone(js, state.time_s, types, options)
        assert after == best_alone(js, state.time_s, types, cache.predictors, options)
        assert after is None or after.gpu_type != best.gpu_type
        fresh_rate = reference_rate(js, types, cache.predictors, options)
        assert cache.reference_rate(js, types, options) == fresh_rate
        assert before is not None


def test_a_running_job_on_its_fastest_type_is_remembered_per_placement():
    tables = Tables(step_s={"j": [1.0]}, type_factor={"p100": 2.0})
    cluster = Cluster((Node("v0", "v100", 1), Node("p0", "p100", 1)))
    job = Job("j", "resnet18", 32, 1e3)
    cache = PredictionCache(tables.bundle())
    state = ClusterState(0.0, cluster, (JobState(job, 1e3, assignment=Assignment("j", (0,))),))
    assert cache.on_fastest(job, Assignment("j", (0,)), state)
    assert not cache.on_fastest(job, Assignment("j", (1,)), state)
    assert cache.remaining_s(state.jobs[0], state) == pytest.approx(1e3)


@pytest.mark.parametrize(("old", "name", "new"), [
    ("dltsched.engine.app.api", "ConfiguredSolver", "dltsched.formulations.pipeline"),
    ("dltsched.engine.policies.optimizing", "colocation_fallbacks", "dltsched.formulations.pipeline"),
])
def test_moved_names_warn_and_are_the_pipelines(old, name, new):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}.{name} is deprecated.*{new.replace('.', '[.]')}"):
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)


def test_the_old_decide_module_warns_and_gives_the_pipelines_decide_round():
    sys.modules.pop("dltsched.formulations.decide", None)
    with pytest.warns(DeprecationWarning, match=r"dltsched.formulations.decide is deprecated.*pipeline"):
        module = importlib.import_module("dltsched.formulations.decide")
    assert module.decide_round is decide_round


def test_the_new_paths_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from dltsched.engine import ConfiguredSolver as from_engine
        from dltsched.engine.policies.optimizing import OptimizingPolicy, sharing_groups  # noqa: F401
        from dltsched.formulations import ConfiguredSolver as from_package
        from dltsched.formulations import decide_round as decide_from_package

    assert from_engine is from_package is ConfiguredSolver and decide_from_package is decide_round
