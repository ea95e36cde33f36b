"""The embedding API: solve one scheduling round, or simulate an instance, in a few lines.

Stable entry points for schedulers written in Python:

- :class:`SolveConfig` — how a round is solved (backend, objective, co-location, freezing, time limit).
- :func:`solve_round` — ``ClusterState`` in, :class:`~dltsched.engine.domain.model.Plan` out; always feasible.
- :class:`ConfiguredSolver` — ``solve_round`` under one config: the round solver a policy receives.
- :func:`optimizing_policy` — :class:`~dltsched.engine.policies.optimizing.OptimizingPolicy` deciding its
  rounds with ``solve_round`` (the registry's ``optimizing`` policies).
- :func:`simulate_instance` — one policy over one instance (file or object) with ground truth.
- :func:`initial_state` — the first round of an instance (every job queued).
- :func:`plan_to_dict` — a plan as JSON: placements, co-location groups, freeze levels, status, timing.

A Gavel-style policy (it owns its job table and asks for an allocation each round) calls it like this::

    from dltsched.engine.app.api import SolveConfig, solve_round
    from dltsched.engine.domain.model import Cluster, ClusterState, Job, JobState

    class DltschedGavelPolicy:
        def __init__(self, cluster: Cluster) -> None:
            self.cluster, self.config = cluster, SolveConfig(backend="cpsat", time_limit_s=2.0)
            self.last = None

        def allocate(self, jobs: dict[str, Job], remaining: dict[str, float], now_s: float) -> dict:
            state = ClusterState(now_s, self.cluster,
                                 tuple(JobState(j, remaining[i]) for i, j in jobs.items()))
            self.last = solve_round(state, self.config, warm_start=self.last)
            return {a.job_id: a.gpus for a in self.last.assignments}

(``tests/ecosystem/test_eco_api.py`` runs this adapter.)
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltsched.engine.app.registry import make_policy, policy_names
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import OBJECTIVES, ClusterState, Instance, JobState, Plan
from dltsched.formulations.backends import BACKENDS

if TYPE_CHECKING:
    from dltsched.engine.domain.predictors import Predictors
    from dltsched.engine.domain.protocols import GroundTruth
    from dltsched.engine.policies.optimizing import OptimizingPolicy
    from dltsched.engine.sim.metrics import SimulationResult
    from dltsched.engine.sim.simulator import Policy

log = logging.getLogger(__name__)

#: the backends :class:`SolveConfig` accepts: those of ``dltsched.formulations`` (its one registry) and
#: ``auto``; ``greedy:<policy>`` runs a baseline policy instead
SOLVER_BACKENDS: tuple[str, ...] = (*BACKENDS, "auto")


@dataclass(frozen=True, slots=True)
class SolveConfig:
    """How :func:`solve_round` decides one round.

    ``backend``: ``cpsat`` | ``milp`` (Pyomo -> HiGHS) | ``greedy`` (the formulation's heuristic) |
    ``greedy:<policy>`` (a registered baseline such as ``greedy:sjf``) | ``auto`` (``cpsat`` for rounds of at
    most ``exact_max_jobs`` active jobs, else ``greedy``: bounded latency). ``freeze_levels`` is a count
    of levels or the allowed levels. ``fallback_policy`` decides the round when the solver is missing
    or fails; the plan is then marked ``status="fallback"``.
    """

    backend: str = "cpsat"
    objective: str = "effective_progress"
    max_jobs_per_gpu: int = 2
    freeze_levels: tuple[int, ...] | int = 4
    time_limit_s: float = 10.0
    predictors: str = "default"
    migration_penalty: float = 0.1
    fallback_policy: str = "sjf"
    exact_max_jobs: int = 100
    #: reproducible solves (see ``RoundOptions.deterministic``); ``False``: several workers, wall-clock limit
    deterministic: bool = True

    def __post_init__(self) -> None:
        base, _, policy = self.backend.partition(":")
        if base not in SOLVER_BACKENDS or (policy and base != "greedy"):
            raise ValidationError("backend", f"'{self.backend}' not understood; one of {', '.join(BACKENDS)}, "
                                  "greedy:<policy>, auto")
        for name in (policy, self.fallback_policy):
            if name and name.lower() not in policy_names():
                raise ValidationError("backend" if name == policy else "fallback_policy",
                                      f"policy '{name}' not understood; known: {', '.join(policy_names())}")
        if self.objective not in OBJECTIVES:
            raise ValidationError("objective", f"'{self.objective}' not understood; one of {', '.join(OBJECTIVES)}")
        if self.max_jobs_per_gpu not in (1, 2, 3):
            raise ValidationError("max_jobs_per_gpu", f"{self.max_jobs_per_gpu!r} not understood; must be 1, 2 or 3")
        if not isinstance(self.time_limit_s, int | float) or not math.isfinite(self.time_limit_s) \
                or self.time_limit_s <= 0:
            raise ValidationError("time_limit_s", f"{self.time_limit_s!r} not understood; must be > 0")
        if isinstance(self.freeze_levels, list):
            object.__setattr__(self, "freeze_levels", tuple(self.freeze_levels))

    def backend_for(self, num_jobs: int) -> str:
        """The formulation backend that decides a round of ``num_jobs`` active jobs."""
        if self.backend != "auto":
            return self.backend
        return "cpsat" if num_jobs <= self.exact_max_jobs else "greedy"

    @property
    def baseline_policy(self) -> str | None:
        """The policy name of a ``greedy:<policy>`` backend, else ``None``."""
        base, _, policy = self.backend.partition(":")
        return policy.lower() or None

    def round_options(self) -> Any:
        """The ``dltsched.formulations.RoundOptions`` of this config (needs the formulations package)."""
        from dltsched.formulations import RoundOptions

        return RoundOptions(objective=self.objective, max_jobs_per_gpu=self.max_jobs_per_gpu,
                            freeze_levels=self.freeze_levels, time_limit_s=self.time_limit_s,
                            migration_penalty=self.migration_penalty, deterministic=self.deterministic)


@functools.lru_cache(maxsize=8)
def load_predictors(name: str) -> Predictors:
    """The predictor bundle registered as ``name``, loaded once per process (bundles are read-only)."""
    from dltsched.engine.app.registry import predictors

    return predictors(name)  # type: ignore[no-any-return]


def solve_round(state: ClusterState, config: SolveConfig | None = None, *, warm_start: Plan | None = None,
                predictors: Predictors | None = None) -> Plan:
    """Decide one round for ``state``: which jobs run where, shared with whom, at which freeze level.

    The round pipeline: build the round (``dltsched.formulations.build_round``), solve it with
    ``config.backend``, check the plan with the solver-independent checker, and fall back to the
    ``config.fallback_policy`` plan (``status="fallback"``, the reason in ``message``) when the package
    is missing, the solver fails or the checker rejects its plan.

    Parameters
    ----------
    state
        The cluster snapshot: active jobs (queued or running), their placements and the down GPUs.
    config
        How the round is solved (default :class:`SolveConfig`).
    warm_start
        A plan to start from (e.g. the previous round's); a hint only.
    predictors
        Predictors to price the round with; default: the bundle named by ``config.predictors``.

    Returns
    -------
    Plan
        A plan the checker accepts (never an infeasible one for a valid state), with ``status``,
        ``objective``, ``bound``, ``gap``, timings and ``backend`` filled in.

    Raises
    ------
    ValidationError
        When ``state`` is contradictory (a job runs on a down GPU) or the round's input is invalid.
    """
    config = config or SolveConfig()
    preds = predictors or load_predictors(config.predictors)
    _check_down_gpus(state)
    if config.baseline_policy is not None:
        return baseline_plan(state, config.baseline_policy, preds, status="heuristic")
    try:
        from dltsched.formulations.decide import decide_round
    except ImportError as err:
        return baseline_plan(state, config.fallback_policy, preds, status="fallback",
                             message=f"dltsched.formulations not available ({err})")

    def fallback(message: str) -> Plan:
        return baseline_plan(state, config.fallback_policy, preds, status="fallback", message=message)

    return decide_round(state, preds, config.round_options(), config.backend_for(len(state.jobs)),
                        fallback=fallback, warm_start=warm_start, fallback_name=config.fallback_policy)


@dataclass(frozen=True, slots=True)
class ConfiguredSolver:
    """:func:`solve_round` under a fixed :class:`SolveConfig`: a
    :class:`~dltsched.engine.domain.protocols.RoundSolver`, as the optimizing policy receives it.

    Parameters
    ----------
    config
        How every round is solved (backend, objective, time limit, fallback policy, ...).
    """

    config: SolveConfig

    @property
    def objective(self) -> str:
        """The rounds' objective, ``config.objective``."""
        return self.config.objective

    def solve(self, state: ClusterState, *, warm_start: Plan | None = None,
              predictors: Predictors | None = None) -> Plan:
        """:func:`solve_round` of ``state`` under ``config``; see there."""
        return solve_round(state, self.config, warm_start=warm_start, predictors=predictors)


def _check_down_gpus(state: ClusterState) -> None:
    """A failed GPU's jobs stopped with it: a state that still runs one there is contradictory."""
    if not state.down_gpus:
        return
    for job_id, a in state.placements_by_id().items():
        if hit := sorted(state.down_gpus.intersection(a.gpus)):
            raise ValidationError("jobs", f"job '{job_id}' runs on down GPU(s) {hit}; a failed GPU's jobs "
                                  "stop with it: pass them as queued (assignment none)")


def baseline_plan(state: ClusterState, policy: str, preds: Predictors, *, status: str, message: str = "") -> Plan:
    """The plan of baseline ``policy`` for ``state``, timed and marked with ``status``."""
    start = time.perf_counter()
    plan: Plan = make_policy(policy, predictors=preds).schedule(state).resolved(state)
    return replace(plan, status=status, solve_time_s=time.perf_counter() - start, backend=f"greedy:{policy}",
                   fallback=status == "fallback", message=message)


def make_named_policy(name: str, preds: Predictors, config: SolveConfig | None = None) -> Policy:
    """A policy by name.

    Parameters
    ----------
    name
        A registered policy, or ``dltsched[:<backend>]``: the optimizing policy deciding with ``config``, on
        ``backend`` when given (``dltsched:milp``), under that name.
    preds
        The predictors the policy uses.
    config
        Solve settings of a ``dltsched`` policy (default :class:`SolveConfig`).

    Returns
    -------
    Policy
        The policy object.

    Raises
    ------
    ValidationError
        When the name is not registered (the message lists close matches).
    """
    base, _, backend = name.partition(":")
    if base == "dltsched":
        cfg = config or SolveConfig()
        settings = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name != "predictors"}  # preds decide
        settings |= {"backend": backend} if backend else {}
        return optimizing_policy(preds, name=name, **settings)
    return make_policy(name, predictors=preds)  # type: ignore[no-any-return]


#: the optimizing policy's solve settings where the caller gives none: rounds aimed at low average completion
#: time, short enough to re-solve at every batch of events (a round that times out keeps its best plan)
POLICY_DEFAULTS: dict[str, Any] = {"objective": "jct", "time_limit_s": 1.0}


def optimizing_policy(predictors: Predictors | None = None, **options: Any) -> OptimizingPolicy:
    """The rolling-horizon optimizing policy deciding its rounds with :func:`solve_round`.

    The registry's ``optimizing`` factory.

    Parameters
    ----------
    predictors
        Predictors for the rounds; ``None``: the bundle named by the ``predictors`` option (default
        ``"default"``).
    **options
        :class:`SolveConfig` fields (``backend``, ``time_limit_s``, ...) mixed with
        :class:`~dltsched.engine.policies.optimizing.OptimizingPolicy` fields (``min_interval_s``,
        ``round_interval_s``, ``max_round_jobs``, ``name``); :data:`POLICY_DEFAULTS` fill the solve settings
        not given.

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

    config_fields = {f.name for f in fields(SolveConfig)}
    config = SolveConfig(**(POLICY_DEFAULTS | {k: v for k, v in options.items() if k in config_fields}))
    policy_kw = {k: v for k, v in options.items() if k not in config_fields}
    preds = predictors if predictors is not None else load_predictors(config.predictors)
    return OptimizingPolicy(ConfiguredSolver(config), preds, **policy_kw)


def without_colocation(predictors: Predictors | None = None, **options: Any) -> OptimizingPolicy:
    """Ablation: :func:`optimizing_policy` with one job per GPU (no co-location)."""
    return optimizing_policy(predictors, **({"name": "optimizing-nocoloc"} | options | {"max_jobs_per_gpu": 1}))


def without_freezing(predictors: Predictors | None = None, **options: Any) -> OptimizingPolicy:
    """Ablation: :func:`optimizing_policy` with freezing disabled (freeze level 0 only)."""
    return optimizing_policy(predictors, **({"name": "optimizing-nofreeze"} | options | {"freeze_levels": (0,)}))


def simulate_instance(instance: Instance | str | Path, policy: str | Policy = "sjf", *, seed: int = 0,
                      predictors: str = "default", truth: GroundTruth | None = None,
                      memory: str = "oom", config: SolveConfig | None = None) -> SimulationResult:
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
    return simulate(inst, pol, truth=truth, config=SimulationConfig(seed=seed, memory=memory))  # type: ignore[arg-type]


def initial_state(instance: Instance, time_s: float | None = None) -> ClusterState:
    """The first round of ``instance``: every job queued with all its iterations left.

    Parameters
    ----------
    instance
        The instance whose jobs and cluster make the round.
    time_s
        The round's time; default: the last arrival, so every job has arrived. Jobs arriving later are left out.

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
        when not finite), timings, ``assignments`` and ``colocation_groups`` (GPU -> jobs, shared GPUs only).
    """
    return {
        "status": plan.status, "backend": plan.backend, "fallback": plan.fallback, "message": plan.message,
        "objective": finite_or_none(plan.objective), "bound": finite_or_none(plan.bound), "gap": finite_or_none(plan.gap),
        "solve_time_s": plan.solve_time_s, "build_time_s": plan.build_time_s,
        "assignments": [{"job_id": a.job_id, "gpus": list(a.gpus), "freeze_level": a.freeze_level}
                        for a in plan.assignments],
        "colocation_groups": [{"gpu": g, "job_ids": list(js)} for g, js in plan.colocation_groups().items()
                              if len(js) > 1],
    }


def finite_or_none(value: float | None) -> float | None:
    """``value`` when it is a finite number, else ``None`` (JSON has no NaN)."""
    return value if value is not None and math.isfinite(value) else None
