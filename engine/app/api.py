"""The embedding API: solve one scheduling round, or simulate an instance, in a few lines.

Stable entry points for schedulers written in Python:

- :func:`solve_round` — ``ClusterState`` in, :class:`~dltsched.engine.domain.model.Plan` out; always feasible.
  Round settings are one :class:`~dltsched.formulations.problem.RoundOptions` (objective, round length,
  time limit, threads and determinism, cross-node placement, co-location and freeze levels); the caller's
  own measurements (:class:`~dltsched.engine.app.measured.Measurements`) are used before any prediction.
- :class:`~dltsched.formulations.pipeline.ConfiguredSolver` — ``solve_round`` under fixed settings: the round
  solver a policy receives (the round pipeline's; ``dltsched.engine.app.api.ConfiguredSolver`` is deprecated).
- :data:`DEFAULT_OPTIONS` — the settings used when none are given (objective ``jct``, as everywhere).
- :func:`optimizing_policy` — :class:`~dltsched.engine.policies.optimizing.OptimizingPolicy` deciding its
  rounds with ``solve_round`` (the registry's ``optimizing`` policies).
- :func:`simulate_instance` — one policy over one instance (file or object) with ground truth.
- :func:`initial_state` — the first round of an instance (every job queued).
- :func:`plan_to_dict` — a plan as JSON: placements, co-location groups, freeze levels, provenance, status.

A scheduler that owns its job table and measures its jobs (the plain "your scheduler" case; Gavel's and
Blox's policy interfaces are in :mod:`dltsched.engine.app.adapters.gavel` and ``.blox``)::

    from dltsched.engine.app.api import RoundOptions, solve_round
    from dltsched.engine.app.measured import JobMeasurement, Measurements
    from dltsched.engine.domain.model import MEASURED_ONLY, Cluster, ClusterState, Job, JobState

    cluster = Cluster.homogeneous("v100", num_nodes=2, gpus_per_node=4)
    jobs = [JobState(Job("a", MEASURED_ONLY, 64, 10_000), 10_000),
            JobState(Job("b", "resnet50", 32, 5_000), 5_000)]
    seen = Measurements({"a": JobMeasurement(step_time_s={"v100": 0.21}),   # no zoo model: numbers only
                         "b": JobMeasurement(
                             samples_per_s={"v100": 410.0})},             # zoo model: predicted where missing
                        unknown_memory="trust")                           # no memory filtering
    plan = solve_round(ClusterState(0.0, cluster, tuple(jobs)), RoundOptions(objective="jct", round_s=360.0),
                       backend="cpsat", measurements=seen)
    plan.by_job()["a"].gpus, plan.provenance["a"]  # {'step_time': 'measured', 'memory': 'trusted', ...}

(``tests/ecosystem/test_eco_api.py`` runs this example.)
"""

from __future__ import annotations

import functools
import logging
import math
import time
import warnings
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltsched.engine.app.measured import (
    Measurements,
    as_measurements,
    measured_predictors,
    prepare_state,
    provenance,
)
from dltsched.engine.app.registry import make_policy, policy_names
from dltsched.engine.app.vocabulary import AUTO, BackendChoice, parse_backend, parse_policy
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import (
    DEFAULT_OBJECTIVE,
    MEASURED_ONLY,
    ClusterState,
    Instance,
    JobState,
    Plan,
)
from dltsched.formulations.backends import BACKENDS
from dltsched.formulations.pipeline import DEFAULT_OPTIONS, ROUND_FIELDS, RoundOptions
from dltsched.formulations.pipeline import ConfiguredSolver as _ConfiguredSolver

if TYPE_CHECKING:
    from dltsched.engine.app.vocabulary import BackendChoice
    from dltsched.engine.domain.predictors import Predictors
    from dltsched.engine.domain.protocols import GroundTruth
    from dltsched.engine.policies.optimizing import OptimizingPolicy
    from dltsched.engine.sim.metrics import SimulationResult
    from dltsched.engine.sim.simulator import Policy
    from dltsched.formulations.pipeline import ConfiguredSolver

__all__ = ["DEFAULT_OPTIONS", "RoundOptions", "SolveConfig", "initial_state", "optimizing_policy",
           "plan_to_dict", "simulate_instance", "solve_round"]

log = logging.getLogger(__name__)

#: the backends :func:`solve_round` accepts: those of ``dltsched.formulations`` (its one registry) and
#: ``auto``; ``greedy:<policy>`` runs a baseline policy instead
SOLVER_BACKENDS: tuple[str, ...] = (*BACKENDS, AUTO)
#: the warning of ``dltsched.engine.app.api.ConfiguredSolver``
CONFIGURED_SOLVER_MOVED = ("dltsched.engine.app.api.ConfiguredSolver is deprecated and will be removed in "
                           "0.3.0; import ConfiguredSolver from dltsched.formulations.pipeline (or "
                           "dltsched.engine)")


def __getattr__(name: str) -> Any:
    if name == "ConfiguredSolver":
        warnings.warn(CONFIGURED_SOLVER_MOVED, DeprecationWarning, stacklevel=2)
        return _ConfiguredSolver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _AppRoundServices:
    """What the round pipeline (:mod:`dltsched.formulations.pipeline`) asks the application: the vocabulary's
    backend and policy names, predictor bundles by name, the caller's measurements and the baseline policies
    (registered by the engine package, :func:`~dltsched.engine.domain.protocols.register_round_services`)."""

    def parse_backend(self, name: str) -> BackendChoice:
        return parse_backend(name)  # the one parser of backend names (vocabulary)

    def policy_names(self) -> tuple[str, ...]:
        return tuple(policy_names())

    def prepare(self, state: ClusterState, predictors: Predictors | None, bundle: str,
                measurements: object) -> tuple[ClusterState, Predictors, Measurements | None]:
        measured = as_measurements(measurements)  # type: ignore[arg-type]  # checked there, field by field
        measured = measured.checked() if measured is not None else None
        needs_zoo = any(s.job.model != MEASURED_ONLY for s in state.jobs)
        if measured is not None:
            state = prepare_state(state, measured)
        elif any(s.job.model == MEASURED_ONLY for s in state.jobs):
            i, bad = next((i, s.job.id) for i, s in enumerate(state.jobs) if s.job.model == MEASURED_ONLY)
            raise ValidationError(f"jobs[{i}]", f"job '{bad}' has no zoo model and no measured step time; "
                                  "give model (a zoo id) or measurements.jobs['<id>'].step_time_s")
        base = predictors if predictors is not None else (load_predictors(bundle) if needs_zoo else None)
        preds = measured_predictors(base, measured) if measured is not None else base
        if preds is None:  # no job at all
            preds = load_predictors(bundle)
        return state, preds, measured

    def baseline_plan(self, state: ClusterState, policy: str, predictors: Predictors, *, status: str,
                      message: str = "") -> Plan:
        return baseline_plan(state, policy, predictors, status=status, message=message)

    def annotate(self, plan: Plan, state: ClusterState, predictors: Predictors, measurements: object) -> Plan:
        if isinstance(measurements, Measurements):
            plan = replace(plan, provenance=provenance(plan, state, measurements))
        priced = _calibration_provenance(predictors, plan, state)
        if priced:  # a calibration bundle on top: say what it priced
            plan = replace(plan, provenance={j: {**plan.provenance.get(j, {}), **priced.get(j, {})}
                                             for j in {*plan.provenance, *priced}})
        return plan


#: the application's round services (the engine package registers them for the round pipeline)
ROUND_SERVICES = _AppRoundServices()


#: the warning of :func:`SolveConfig`
SOLVE_CONFIG_DEPRECATED = ("SolveConfig is deprecated and will be removed in 0.3.0; use "
                           "ConfiguredSolver.of(**fields) or ConfiguredSolver(RoundOptions(...), "
                           "backend=...) from dltsched.engine")


def SolveConfig(**settings: Any) -> ConfiguredSolver:  # noqa: N802 (the former class's name)
    """Deprecated (warns; removed in 0.3.0): use ``ConfiguredSolver(RoundOptions(...), backend=...)`` or
    :meth:`ConfiguredSolver.of`.

    Kept for callers of the former ``SolveConfig`` class, whose round fields are now those of
    :class:`RoundOptions` (every one reachable: ``round_s``, ``num_workers``, ``deterministic``,
    ``allow_cross_node``, ...). Returns ``ConfiguredSolver.of(**settings)``; the default objective is ``jct``.
    """
    warnings.warn(SOLVE_CONFIG_DEPRECATED, DeprecationWarning, stacklevel=2)
    return _ConfiguredSolver.of(**settings)


def _calibration_provenance(preds: Predictors, plan: Plan, state: ClusterState) -> dict[str, dict[str, str]]:
    """Per placed job, the calibration bundle that priced it (empty without one)."""
    from dltsched.predictors.calibration.wrap import calibration_provenance

    return calibration_provenance(preds, plan, state)


@functools.lru_cache(maxsize=8)
def load_predictors(name: str) -> Predictors:
    """The predictor bundle registered as ``name``, loaded once per process (bundles are read-only)."""
    from dltsched.engine.app.registry import predictors

    return predictors(name)  # type: ignore[no-any-return]


def solve_round(state: ClusterState, options: RoundOptions | ConfiguredSolver | None = None, *,
                backend: str | None = None, measurements: Measurements | dict[str, Any] | None = None,
                warm_start: Plan | None = None, predictors: Predictors | str | None = None,
                fallback_policy: str | None = None) -> Plan:
    """Decide one round for ``state``: which jobs run where, shared with whom, at which freeze level.

    The round pipeline (:func:`dltsched.formulations.pipeline.decide_round`): build the round, solve it with
    ``backend``, check the plan with the solver-independent checker, and fall back to the
    ``fallback_policy`` plan (``status="fallback"``, the reason in ``message``) when the solver fails or the
    checker rejects its plan. Numbers come from ``measurements`` first and from the predictors for the rest.

    Parameters
    ----------
    state
        The cluster snapshot: active jobs (queued or running), their placements and the down GPUs. A job
        whose ``model`` is :data:`~dltsched.engine.domain.model.MEASURED_ONLY` needs a measured step time.
    options
        Round settings (default :data:`DEFAULT_OPTIONS`: objective ``jct``, 300 s rounds, 10 s limit, two
        jobs per GPU, four freeze levels, deterministic); or a :class:`ConfiguredSolver` (its settings).
    backend
        ``cpsat`` (default) | ``milp`` | ``greedy`` | ``greedy:<policy>`` | ``auto``.
    measurements
        The caller's measured throughputs, co-located groups, memory and utilisation
        (:class:`~dltsched.engine.app.measured.Measurements` or its dict form); predictions fill only what
        is missing, and ``plan.provenance`` says which is which.
    warm_start
        A plan to start from (e.g. the previous round's); a hint only.
    predictors
        A predictor bundle, or the name of one (default ``"default"``), for what is not measured.
    fallback_policy
        The baseline that decides when the solver fails (default ``sjf``).

    Returns
    -------
    Plan
        A plan the checker accepts (never an infeasible one for a valid state), with ``status``,
        ``objective``, ``bound``, ``gap``, timings, ``backend`` and (with measurements) ``provenance``.

    Raises
    ------
    ValidationError
        When ``state``, a setting or a measurement is not understood, or a job has neither a zoo model nor
        a measured step time (the message names the field and the fix).
    """
    solver = options if isinstance(options, _ConfiguredSolver) \
        else _ConfiguredSolver(options or DEFAULT_OPTIONS)
    changes: dict[str, Any] = {}
    if backend is not None:
        changes["backend"] = backend
    if fallback_policy is not None:
        changes["fallback_policy"] = fallback_policy
    if isinstance(predictors, str):
        changes["predictors"] = predictors
        predictors = None
    if changes:
        solver = replace(solver, **changes)
    return solver.solve(state, warm_start=warm_start, predictors=predictors, measurements=measurements)


def baseline_plan(state: ClusterState, policy: str, preds: Predictors, *,
                  status: str, message: str = "") -> Plan:
    """The plan of baseline ``policy`` for ``state``, timed and marked with ``status`` (a
    :class:`~dltsched.engine.domain.model.PlanStatus` or its name, made the enum here)."""
    from dltsched.engine.domain.model import PlanStatus

    marked = PlanStatus(status)
    start = time.perf_counter()
    plan: Plan = make_policy(policy, predictors=preds).schedule(state).resolved(state)
    return replace(plan, status=marked, solve_time_s=time.perf_counter() - start,
                   backend=str(BackendChoice.baseline(policy)), fallback=marked is PlanStatus.FALLBACK,
                   message=message)


def make_named_policy(name: str, preds: Predictors, config: ConfiguredSolver | None = None) -> Policy:
    """A policy by name.

    Parameters
    ----------
    name
        A registered policy, or ``dltsched[:<backend>]``: the optimizing policy deciding with ``config``, on
        ``backend`` when given (``dltsched:milp``), under that name.
    preds
        The predictors the policy uses.
    config
        Solve settings of a ``dltsched`` policy (default :class:`ConfiguredSolver`: :data:`DEFAULT_OPTIONS`).

    Returns
    -------
    Policy
        The policy object.

    Raises
    ------
    ValidationError
        When the name is not registered (the message lists close matches).
    """
    choice = parse_policy(name)  # the one parser of policy names (vocabulary)
    if choice.project:
        cfg = config or _ConfiguredSolver()
        settings: dict[str, Any] = {f.name: getattr(cfg, f.name) for f in fields(cfg)
                                    if f.name != "predictors"}
        settings |= choice.options()  # the predictors are ``preds``
        return optimizing_policy(preds, name=choice.name, **settings)
    policy = make_policy(choice.policy, predictors=preds, **choice.options())
    if choice.name != choice.policy:
        policy.name = choice.name
    return policy  # type: ignore[no-any-return]


#: the optimizing policy's solve settings where the caller gives none: rounds aimed at low average completion
#: time, short enough to re-solve at every batch of events (a round that times out keeps its best plan)
POLICY_DEFAULTS: dict[str, Any] = {"objective": DEFAULT_OBJECTIVE, "time_limit_s": 1.0}


def optimizing_policy(predictors: Predictors | None = None, **options: Any) -> OptimizingPolicy:
    """The rolling-horizon optimizing policy deciding its rounds with :func:`solve_round`.

    The registry's ``optimizing`` factory.

    Parameters
    ----------
    predictors
        Predictors for the rounds; ``None``: the bundle named by the ``predictors`` option (default
        ``"default"``).
    **options
        ``options`` (a :class:`RoundOptions`), its fields (``time_limit_s``, ``round_s``, ``objective``, ...)
        and :class:`ConfiguredSolver`'s (``backend``, ``fallback_policy``, ...) mixed with
        :class:`~dltsched.engine.policies.optimizing.OptimizingPolicy` fields (``min_interval_s``,
        ``round_interval_s``, ``max_round_jobs``, ``name``); :data:`POLICY_DEFAULTS` fill the round settings
        not given (unless ``options`` is given).

    Returns
    -------
    OptimizingPolicy
        The policy, with a :class:`ConfiguredSolver` of those settings.

    Raises
    ------
    ValidationError
        When an option is not understood (the message names it).
    """
    from dltsched.engine.policies.optimizing import OptimizingPolicy

    solver_fields = ROUND_FIELDS | {f.name for f in fields(_ConfiguredSolver)}
    defaults = {} if "options" in options else POLICY_DEFAULTS
    solver = _ConfiguredSolver.of(**(defaults | {k: v for k, v in options.items() if k in solver_fields}))
    policy_kw = {k: v for k, v in options.items() if k not in solver_fields}
    preds = predictors if predictors is not None else load_predictors(solver.predictors)
    return OptimizingPolicy(solver, preds, **policy_kw)


def without_colocation(predictors: Predictors | None = None, **options: Any) -> OptimizingPolicy:
    """Ablation: :func:`optimizing_policy` with one job per GPU (no co-location)."""
    return optimizing_policy(predictors,
                             **({"name": "optimizing-nocoloc"} | options | {"max_jobs_per_gpu": 1}))


def without_freezing(predictors: Predictors | None = None, **options: Any) -> OptimizingPolicy:
    """Ablation: :func:`optimizing_policy` with freezing disabled (freeze level 0 only)."""
    return optimizing_policy(predictors,
                             **({"name": "optimizing-nofreeze"} | options | {"freeze_levels": (0,)}))


def simulate_instance(instance: Instance | str | Path, policy: str | Policy = "sjf", *, seed: int = 0,
                      predictors: str = "default", truth: GroundTruth | None = None,
                      memory: str = "oom", config: ConfiguredSolver | None = None) -> SimulationResult:
    """Simulate one policy over one instance with ground truth.

    Parameters
    ----------
    instance
        An :class:`Instance`, or the path of an instance JSON file.
    policy
        A registered policy name, ``dltsched[:<backend>]`` (the optimizing policy deciding with ``config``),
        or a policy object (``name``, ``round_interval_s``, ``schedule(state) -> Plan``).
    seed
        Seeds every random choice of the simulation.
    predictors
        Name of the predictor bundle the policy uses (``default`` or ``analytic``).
    truth
        What jobs really run at (default: the measured ground truth).
    memory
        ``oom`` (default): a job whose memory was under-predicted crashes, is re-queued and its measured
        peak is learned (counted in ``num_oom``); ``reject``: such a plan raises instead.
    config
        Solve settings for a ``dltsched[:<backend>]`` policy.

    Returns
    -------
    SimulationResult
        Per-job records and the aggregate metrics (JCT, makespan, utilisation, fairness, ...).

    Raises
    ------
    ValidationError
        When the instance, the policy name or ``memory`` is not understood (the message names the field).
    """
    from dltsched.engine.sim.simulator import SimulationConfig, simulate

    inst = load_instance_file(instance) if isinstance(instance, str | Path) else instance
    preds = load_predictors(predictors)
    pol = make_named_policy(policy, preds, config) if isinstance(policy, str) else policy
    if memory not in ("reject", "oom"):
        raise ValidationError("memory", f"'{memory}' not understood; one of reject, oom")
    return simulate(inst, pol, truth=truth,
                    config=SimulationConfig(seed=seed, memory=memory))  # type: ignore[arg-type]


def initial_state(instance: Instance, time_s: float | None = None) -> ClusterState:
    """The first round of ``instance``: every job queued with all its iterations left.

    Parameters
    ----------
    instance
        The instance whose jobs and cluster make the round.
    time_s
        The round's time; default: the last arrival, so every job has arrived. Jobs arriving later are left
        out.

    Returns
    -------
    ClusterState
        The snapshot, every arrived job queued since its arrival.
    """
    when = max(j.arrival_time_s for j in instance.jobs) if time_s is None else time_s
    jobs = tuple(JobState(j, j.total_iterations, queued_since_s=j.arrival_time_s) for j in instance.jobs
                 if j.arrival_time_s <= when)
    return ClusterState(when, instance.cluster, jobs)


def load_instance_file(path: str | Path) -> Instance:
    """An instance JSON file via ``dltsched.instances.schema`` (raises a clear error when missing)."""
    try:
        from dltsched.instances.schema import load_instance
    except ImportError as err:
        raise ValidationError("instance", f"cannot read instance files here ({err}); "
                              "install the dltsched.instances schema module") from None
    return load_instance(Path(path))  # type: ignore[no-any-return]


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """A plan as JSON-ready data.

    Parameters
    ----------
    plan
        Any plan, e.g. from :func:`solve_round`.

    Returns
    -------
    dict
        ``status``, ``backend``, ``fallback``, ``message``, ``objective``, ``bound``, ``gap`` (``None``
        when not finite), timings, ``assignments``, ``colocation_groups`` (GPU -> jobs, shared GPUs only),
        ``colocation_fallbacks`` (co-located jobs priced on a predicted profile: no profile of the job on
        that GPU type) and ``provenance`` (per job: measured / predicted numbers; empty without measurements).
    """
    return {
        "status": plan.status, "backend": plan.backend, "fallback": plan.fallback, "message": plan.message,
        "objective": finite_or_none(plan.objective), "bound": finite_or_none(plan.bound),
        "gap": finite_or_none(plan.gap), "solve_time_s": plan.solve_time_s, "build_time_s": plan.build_time_s,
        "assignments": [{"job_id": a.job_id, "gpus": list(a.gpus), "freeze_level": a.freeze_level}
                        for a in plan.assignments],
        "colocation_groups": [{"gpu": g, "job_ids": list(js)} for g, js in plan.colocation_groups().items()
                              if len(js) > 1],
        "colocation_fallbacks": list(plan.colocation_fallbacks),
        "provenance": {job: dict(entry) for job, entry in plan.provenance.items()},
    }


def finite_or_none(value: float | None) -> float | None:
    """``value`` when it is a finite number, else ``None`` (JSON has no NaN)."""
    return value if value is not None and math.isfinite(value) else None
