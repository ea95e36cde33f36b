"""The round pipeline: build -> solve -> check -> fallback, the one way a round is decided, and the prices
a round is built from.

It is the layer the policies reach the formulations through (an import contract says so):

- :func:`decide_round` builds the round of a cluster snapshot from the predictors
  (:func:`~dltsched.formulations.build.build_round`), solves it with a backend of the registry
  (:func:`~dltsched.formulations.solve.solve_problem`), has the solver-independent checker
  (:func:`~dltsched.formulations.checker.check_plan`) accept the plan, and otherwise returns the plan of the
  ``fallback`` it is given, saying why. It knows no policy.
- :class:`ConfiguredSolver` is :func:`decide_round` under fixed settings: the
  :class:`~dltsched.engine.domain.protocols.RoundSolver` the optimizing policy receives and the embedding
  API (:func:`dltsched.engine.app.api.solve_round`) runs. What it needs from the layers above (a predictor
  bundle by name, the caller's measurements, the baseline policy that decides when the solver fails) it asks
  the registered :class:`~dltsched.engine.domain.protocols.RoundServices`.

Pricing, as a round prices a job, for a policy that decides without a solve:

- :func:`node_types`: the GPU classes of a snapshot (per type: GPUs up, largest node, memory), which every
  price below is asked for; :func:`node_classes`: the same per node.
- :func:`best_alone`: the option (GPU type, freeze level) at which a job progresses fastest alone; no
  objective values a job's placement above it.
- :func:`reference_rate`: the rate a round normalises a job's progress by.
- :class:`GroupPrices`: the co-location prices of groups, kept across rounds on memoized predictors.
- :class:`KeptOptions`: what a round derives about one job's options (its predicted memory and step times
  per GPU type and freeze level, its options at its last progress), kept between rounds and asks.
- :func:`colocation_fallbacks`: the jobs of a plan whose co-location rests on a predicted profile.

A price depends on the job, the node types, the predictors and the run's measurements (memory peaks,
profiles); a caller that keeps prices across rounds keys them by all of these.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import DEFAULT_OBJECTIVE, ClusterState, Plan
from dltsched.engine.domain.predictors import Predictors
from dltsched.engine.domain.protocols import RoundServices, round_services
from dltsched.formulations.build import (
    GroupPrices,
    KeptOptions,
    best_alone,
    build_round,
    node_classes,
    reference_rate,
)
from dltsched.formulations.checker import check_plan
from dltsched.formulations.gcpause import gc_paused
from dltsched.formulations.interference import simulate_stages
from dltsched.formulations.problem import (
    JCT_MIN_REMAINING_S,
    JobOption,
    NodeTypes,
    RoundOptions,
    median_remaining_s,
)
from dltsched.formulations.solve import solve_problem

__all__ = ["DEFAULT_OPTIONS", "JCT_MIN_REMAINING_S", "ROUND_FIELDS", "ConfiguredSolver", "GroupPrices",
           "JobOption", "KeptOptions", "NodeTypes", "RoundOptions", "best_alone", "check_down_gpus",
           "colocation_fallbacks", "decide_round", "median_remaining_s", "node_classes", "node_types",
           "reference_rate", "simulate_stages"]

log = logging.getLogger(__name__)

#: round settings when the caller gives none: ``RoundOptions`` with the one default objective (``jct``)
DEFAULT_OPTIONS = RoundOptions(objective=DEFAULT_OBJECTIVE)
#: the names of the round settings (:class:`RoundOptions` fields)
ROUND_FIELDS = frozenset(f.name for f in fields(RoundOptions))


def decide_round(state: ClusterState, predictors: Predictors, options: RoundOptions, backend: str, *,
                 fallback: Callable[[str], Plan], warm_start: Plan | None = None,
                 fallback_name: str = "fallback") -> Plan:
    """Decide the round of ``state`` with ``backend``; the checker has the last word.

    Parameters
    ----------
    state
        The cluster snapshot: active jobs, their placements, down GPUs.
    predictors
        Predictors that give the round's coefficients.
    options
        Objective, co-location and freezing limits, time limit.
    backend
        A name of :data:`~dltsched.formulations.backends.BACKENDS`.
    fallback
        Called with the reason when the backend fails or the checker rejects its plan; returns the plan to
        use instead (the API's is a baseline policy's plan marked ``status="fallback"``).
    warm_start
        A plan to start from (e.g. the previous round's); a hint only.
    fallback_name
        How the log names the fallback.

    Returns
    -------
    Plan
        The backend's plan when the checker accepts it, else ``fallback(reason)``.

    Raises
    ------
    ValidationError
        Invalid input (raised, never turned into a fallback).
    """
    began = time.perf_counter()  # options.time_limit_s bounds the whole round, building included
    try:
        with gc_paused():  # a round's many short-lived objects would trigger full collections
            problem = build_round(state, predictors, options)
            result = solve_problem(problem, backend, time_limit_s=options.time_limit_s,
                                   warm_start=warm_start, started_s=began)
            report = check_plan(problem, result.plan)
    except ValidationError:
        raise
    except Exception as err:  # a solver crash must not take the scheduler down
        log.warning("backend %s failed (%s: %s); using %s", backend, type(err).__name__, err, fallback_name)
        return fallback(f"{backend} failed: {type(err).__name__}: {err}")
    if not report.feasible:  # the independent checker has the last word on every solver result
        log.warning("backend %s returned a plan the checker rejects (%s); using %s", backend,
                    "; ".join(report.violations[:3]), fallback_name)
        return fallback(f"{backend} plan failed the checker: {report.violations[0]}")
    return result.plan


def node_types(state: ClusterState) -> NodeTypes:
    """The GPU classes of ``state`` per type, as a round sees them (down GPUs left out).

    Parameters
    ----------
    state
        The cluster snapshot.

    Returns
    -------
    NodeTypes
        Per GPU type: GPUs up, the largest node, memory per GPU.
    """
    return NodeTypes.of(node_classes(state))


def check_down_gpus(state: ClusterState) -> None:
    """Reject a state that runs a job on a down GPU (a failed GPU's jobs stopped with it).

    Parameters
    ----------
    state
        The cluster snapshot.

    Raises
    ------
    ValidationError
        When a running job holds a down GPU (the message names the job and the fix).
    """
    if not state.down_gpus:
        return
    for job_id, a in state.placements_by_id().items():
        if hit := sorted(state.down_gpus.intersection(a.gpus)):
            raise ValidationError("jobs", f"job '{job_id}' runs on down GPU(s) {hit}; a failed GPU's jobs "
                                  "stop with it: pass them as queued (assignment none)")


def colocation_fallbacks(colocation: Any, plan: Plan, state: ClusterState) -> tuple[str, ...]:
    """Ids of the jobs sharing a GPU in ``plan`` whose co-location numbers rest on a fallback.

    The co-location predictor (found through the wrappers' ``inner``) reports them ``predicted``: it had no
    profile of the job on that GPU type and predicted its step time, memory and utilisation
    (``colocation_sources``, the profile model's per-job sources; ``partial``, a profile with some values
    predicted, is not a fallback).

    Parameters
    ----------
    colocation
        The co-location predictor that priced the plan.
    plan
        The plan.
    state
        The state it was decided for.

    Returns
    -------
    tuple of str
        The job ids, sorted; empty when the predictor reports no sources.
    """
    sources = None
    for _ in range(8):  # memo, profiled and measured wrappers
        sources = getattr(colocation, "colocation_sources", None)
        if sources is not None or not hasattr(colocation, "inner"):
            break
        colocation = colocation.inner
    if sources is None:
        return ()
    jobs = {s.job.id: s.job for s in state.jobs}
    out: set[str] = set()
    for gpu, members in plan.resolved(state).colocation_groups().items():
        group = [jobs[j] for j in members if j in jobs]
        if len(group) < 2:
            continue
        try:
            found = sources(group, state.cluster.gpu_type_of(gpu))
        except ValidationError:  # a group larger than the predictor answers for: not priced by it either
            continue
        out.update(j.id for j, src in zip(group, found, strict=True) if src == "predicted")
    return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class ConfiguredSolver:
    """:func:`decide_round` under fixed settings: a :class:`~dltsched.engine.domain.protocols.RoundSolver`, as
    the optimizing policy receives it.

    Parameters
    ----------
    options
        The round settings (:class:`RoundOptions`; default :data:`DEFAULT_OPTIONS`).
    backend
        ``cpsat`` | ``milp`` (Pyomo -> HiGHS) | ``greedy`` (the formulation's heuristic) | ``greedy:<policy>``
        (a registered baseline such as ``greedy:sjf``) | ``auto`` (``cpsat`` for rounds of at most
        ``exact_max_jobs`` active jobs, else ``greedy``: bounded latency).
    predictors
        Name of the predictor bundle for what is not measured (``default`` or ``analytic``); ``NAME@CAL.json``
        puts the calibration bundle ``CAL.json`` (``dltsched calibrate``) on top: the GPU types it covers are
        priced by it, and each plan's ``provenance`` names it per placed job.
    fallback_policy
        Decides the round when the solver is missing or fails; the plan is then ``status="fallback"``.
    exact_max_jobs
        Largest round ``auto`` hands to ``cpsat``.

    Raises
    ------
    ValidationError
        When a setting is not understood (the message names it).
    """

    options: RoundOptions = DEFAULT_OPTIONS
    backend: str = "cpsat"
    predictors: str = "default"
    fallback_policy: str = "sjf"
    exact_max_jobs: int = 100

    def __post_init__(self) -> None:
        if isinstance(self.options, ConfiguredSolver):  # the former ConfiguredSolver(SolveConfig(...))
            source = self.options
            for f in fields(self):
                object.__setattr__(self, f.name, getattr(source, f.name))
        if not isinstance(self.options, RoundOptions):
            raise ValidationError("options", f"{type(self.options).__name__} not understood; a RoundOptions")
        services = round_services()
        object.__setattr__(self, "backend", str(services.parse_backend(self.backend)))
        names = services.policy_names()
        if not isinstance(self.fallback_policy, str) or self.fallback_policy.lower() not in names:
            raise ValidationError("fallback_policy", f"policy '{self.fallback_policy}' not understood; "
                                  f"known: {', '.join(names)}")
        limit = self.exact_max_jobs
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError("exact_max_jobs", f"{self.exact_max_jobs!r} not understood; must be >= 1")

    @classmethod
    def of(cls, **settings: Any) -> ConfiguredSolver:
        """A solver from flat settings.

        Parameters
        ----------
        **settings
            :class:`RoundOptions` fields (over :data:`DEFAULT_OPTIONS`, or over ``options`` when given) mixed
            with this class's (``backend``, ``predictors``, ``fallback_policy``, ``exact_max_jobs``).

        Returns
        -------
        ConfiguredSolver
            The solver.

        Raises
        ------
        ValidationError
            When a setting is not understood (the path is the setting's name).
        """
        own = {f.name for f in fields(cls)} - {"options"}
        unknown = set(settings) - own - ROUND_FIELDS - {"options"}
        if unknown:
            raise ValidationError(sorted(unknown)[0], "not understood; round settings are "
                                  f"{', '.join(sorted(ROUND_FIELDS))} and {', '.join(sorted(own))}")
        options = settings.pop("options", DEFAULT_OPTIONS)
        round_kw = {k: v for k, v in settings.items() if k in ROUND_FIELDS}
        if isinstance(round_kw.get("freeze_levels"), list):
            round_kw["freeze_levels"] = tuple(round_kw["freeze_levels"])
        try:
            options = replace(options, **round_kw) if round_kw else options
        except ValidationError as err:  # RoundOptions names its fields "options.<name>"
            raise ValidationError(err.path.removeprefix("options."), err.problem) from None
        except TypeError as err:
            raise ValidationError("options", str(err)) from None
        return cls(options, **{k: v for k, v in settings.items() if k in own})

    @property
    def objective(self) -> str:
        """The rounds' objective, ``options.objective``."""
        return self.options.objective

    @property
    def time_limit_s(self) -> float:
        """The solver's time limit per round, ``options.time_limit_s``."""
        return self.options.time_limit_s

    @property
    def marks_colocation_fallbacks(self) -> bool:
        """Always true: :meth:`solve` marks the plan's ``colocation_fallbacks`` itself."""
        return True

    def backend_for(self, num_jobs: int) -> str:
        """The formulation backend that decides a round of ``num_jobs`` active jobs.

        Parameters
        ----------
        num_jobs
            The round's active jobs.

        Returns
        -------
        str
            A name of :data:`~dltsched.formulations.backends.BACKENDS` (``auto`` resolved).
        """
        return round_services().parse_backend(self.backend).for_jobs(num_jobs, self.exact_max_jobs)

    @property
    def baseline_policy(self) -> str | None:
        """The policy name of a ``greedy:<policy>`` backend, else ``None``."""
        return round_services().parse_backend(self.backend).policy

    def with_options(self, **round_settings: Any) -> ConfiguredSolver:
        """This solver with some :class:`RoundOptions` fields changed.

        Parameters
        ----------
        **round_settings
            :class:`RoundOptions` fields and their new values.

        Returns
        -------
        ConfiguredSolver
            A copy with those settings.
        """
        return replace(self, options=replace(self.options, **round_settings))

    def solve(self, state: ClusterState, *, warm_start: Plan | None = None,
              predictors: Predictors | None = None, measurements: object = None) -> Plan:
        """Decide the round of ``state`` under these settings: :func:`decide_round` with the fallback policy.

        Parameters
        ----------
        state
            The cluster snapshot.
        warm_start
            A plan to start from; a hint only.
        predictors
            Predictors to price the round with; ``None``: the bundle :attr:`predictors` names.
        measurements
            The caller's measurements (:class:`~dltsched.engine.app.measured.Measurements` or its dict form),
            used before any prediction; ``plan.provenance`` says which is which.

        Returns
        -------
        Plan
            A plan the checker accepts, or the fallback policy's.

        Raises
        ------
        ValidationError
            When the state or a measurement is not understood.
        """
        services = round_services()
        state, preds, measured = self.prepare(state, predictors, measurements, services=services)
        plan = self._decide(state, preds, warm_start, services)
        plan = services.annotate(plan, state, preds, measured)
        fallbacks = colocation_fallbacks(preds.colocation, plan, state)
        if fallbacks:
            log.info("co-location of %d job(s) priced on predicted profiles (no profile on their GPU type): "
                     "%s", len(fallbacks), ", ".join(fallbacks))
            plan = replace(plan, colocation_fallbacks=fallbacks)
        return plan

    def fallback_plan(self, state: ClusterState, message: str, *, measurements: object = None) -> Plan:
        """The fallback policy's plan for ``state`` (``status="fallback"``), priced like :meth:`solve`.

        Parameters
        ----------
        state
            The cluster snapshot.
        message
            Why the fallback decides.
        measurements
            The caller's measurements, as for :meth:`solve`.

        Returns
        -------
        Plan
            The fallback policy's plan.
        """
        services = round_services()
        state, preds, _ = self.prepare(state, None, measurements, services=services)
        return services.baseline_plan(state, self.fallback_policy, preds, status="fallback", message=message)

    def prepare(self, state: ClusterState, predictors: Predictors | None, measurements: object, *,
                services: RoundServices | None = None) -> tuple[ClusterState, Predictors, object]:
        """The state, the predictors (measured first) and the checked measurements a round is decided with.

        Parameters
        ----------
        state
            The cluster snapshot.
        predictors
            The caller's predictors; ``None``: the bundle :attr:`predictors` names.
        measurements
            The caller's measurements (``None``: none).
        services
            Resolve names with these (default: the registered round services).

        Returns
        -------
        tuple
            The state (measured-only jobs kept to their measured GPU types), the predictors and the checked
            measurements (or ``None``).

        Raises
        ------
        ValidationError
            A measurement is not understood, a job has neither a zoo model nor a measured step time, or a job
            runs on a down GPU.
        """
        services = services or round_services()
        state, preds, measured = services.prepare(state, predictors, self.predictors, measurements)
        check_down_gpus(state)
        return state, preds, measured

    def _decide(self, state: ClusterState, preds: Predictors, warm_start: Plan | None,
                services: RoundServices) -> Plan:
        baseline = services.parse_backend(self.backend).policy
        if baseline is not None:
            return services.baseline_plan(state, baseline, preds, status="heuristic")

        def fallback(message: str) -> Plan:
            return services.baseline_plan(state, self.fallback_policy, preds, status="fallback",
                                          message=message)

        return decide_round(state, preds, self.options, self.backend_for(len(state.jobs)), fallback=fallback,
                            warm_start=warm_start, fallback_name=self.fallback_policy)
