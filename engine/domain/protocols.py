"""Protocols between the layers: what the simulator, the policies and the application hand each other.

- :class:`RoundSolver`: decides one round; the optimizing policy receives one (the round pipeline's
  :class:`dltsched.formulations.pipeline.ConfiguredSolver`, or any object of this shape), so policies never
  import the application layer. It declares everything the policy asks of it.
- :class:`RoundServices`: what the round pipeline needs from the layers above it (named predictor bundles,
  the caller's measurements, the baseline policy that decides when a solver fails). The engine package
  registers the application's (:func:`register_round_services`) when it is imported, loaded on first use.
- :class:`GroundTruth`: what the simulator advances jobs with; policies never see it.
- :class:`GroundTruthFactory`: builds a ground truth from a data folder. Instance readers and the generator
  turn trace durations into iterations with one (:mod:`dltsched.instances.reference`) without importing the
  simulator: the engine package registers the simulator's measured truth (:func:`register_ground_truth`)
  when it is imported, which every import of the domain does first.

The predictor protocols (step time, co-location, freezing) live in :mod:`dltsched.engine.domain.predictors`.
Nothing here imports beyond the domain model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from dltsched.engine.domain.model import ClusterState, Job, Plan
    from dltsched.engine.domain.predictors import Predictors

#: the type of a round solver's settings (the round pipeline's ``RoundOptions``)
OptionsT_co = TypeVar("OptionsT_co", covariant=True)


class RoundSolver(Protocol[OptionsT_co]):
    """Decides one scheduling round: which jobs run where, shared with whom, at which freeze level.

    The optimizing policy asks nothing else of its solver: the settings its rounds use (to price the jobs it
    starts between solves the way a round would), a copy with some settings changed, whether the solver
    marks co-location fallbacks on its plans itself, and the solve.
    """

    @property
    def objective(self) -> str:
        """The objective the rounds optimise (one of ``dltsched.engine.domain.model.OBJECTIVES``)."""
        ...

    @property
    def options(self) -> OptionsT_co:
        """The round settings the solves use (objective, freeze levels, time limit, ...)."""
        ...

    @property
    def marks_colocation_fallbacks(self) -> bool:
        """Whether :meth:`solve` marks the plan's ``colocation_fallbacks`` itself (else the caller does)."""
        ...

    def with_options(self, **round_settings: Any) -> RoundSolver[OptionsT_co]:
        """This solver with some round settings changed.

        Parameters
        ----------
        **round_settings
            Fields of :attr:`options` and their new values.

        Returns
        -------
        RoundSolver
            A solver like this one but for those settings.
        """
        ...

    def solve(self, state: ClusterState, *, warm_start: Plan | None = None,
              predictors: Predictors | None = None) -> Plan:
        """Decide the round of ``state``.

        Parameters
        ----------
        state
            The cluster snapshot: the jobs to decide about and the GPUs they may use.
        warm_start
            A plan to start from, e.g. the running jobs' current placements; a hint only.
        predictors
            Predictors to price the round with; ``None``: the solver's own.

        Returns
        -------
        Plan
            A feasible plan for ``state`` (a fallback plan when the solver gives nothing usable).

        Raises
        ------
        ValidationError
            When ``state`` is contradictory (e.g. a job runs on a down GPU).
        """
        ...


class BackendSpec(Protocol):
    """A parsed backend name, as the round pipeline reads it (``str()`` gives the canonical name)."""

    @property
    def policy(self) -> str | None:
        """The baseline policy of ``greedy:<policy>``, else ``None``."""
        ...

    def for_jobs(self, num_jobs: int, exact_max_jobs: int = 100) -> str:
        """The formulation backend that decides a round of ``num_jobs`` active jobs.

        Parameters
        ----------
        num_jobs
            The round's active jobs.
        exact_max_jobs
            The largest round ``auto`` hands to an exact backend.

        Returns
        -------
        str
            A formulation backend's name.
        """
        ...


class RoundServices(Protocol):
    """What the round pipeline needs from the layers above it: names resolved to objects.

    The pipeline knows no policy, no predictor bundle by name and no measurement format; the application
    resolves them (:func:`register_round_services`).
    """

    def parse_backend(self, name: str) -> BackendSpec:
        """The backend ``name`` stands for.

        Parameters
        ----------
        name
            A backend name (``cpsat``, ``auto``, ``greedy:sjf``, ...).

        Returns
        -------
        BackendSpec
            The parsed name.

        Raises
        ------
        ValidationError
            When the name is not understood.
        """
        ...

    def policy_names(self) -> Sequence[str]:
        """The registered policies (the fallback policies a solver may name).

        Returns
        -------
        Sequence of str
            Their names, lower case.
        """
        ...

    def prepare(self, state: ClusterState, predictors: Predictors | None, bundle: str,
                measurements: object) -> tuple[ClusterState, Predictors, object]:
        """The state, the predictors and the checked measurements a round is decided with.

        Parameters
        ----------
        state
            The cluster snapshot.
        predictors
            The caller's predictors; ``None``: the bundle named ``bundle``.
        bundle
            The name of the predictor bundle for what is neither given nor measured.
        measurements
            The caller's measurements (``None``: none).

        Returns
        -------
        tuple
            The state to decide, the predictors (measured first) and the checked measurements (or ``None``).

        Raises
        ------
        ValidationError
            When a measurement or the state is not understood.
        """
        ...

    def baseline_plan(self, state: ClusterState, policy: str, predictors: Predictors, *, status: str,
                      message: str = "") -> Plan:
        """The plan of the baseline ``policy`` for ``state``, marked with ``status``.

        Parameters
        ----------
        state
            The cluster snapshot.
        policy
            A registered baseline policy.
        predictors
            The predictors it uses.
        status
            The plan's status (``fallback`` or ``heuristic``).
        message
            Why the baseline decides.

        Returns
        -------
        Plan
            The baseline's plan.
        """
        ...

    def annotate(self, plan: Plan, state: ClusterState, predictors: Predictors, measurements: object) -> Plan:
        """``plan`` with what the application adds: where its numbers came from (``provenance``).

        Parameters
        ----------
        plan
            The round's plan.
        state
            The state it was decided for.
        predictors
            The predictors that priced it.
        measurements
            The checked measurements (``None``: none).

        Returns
        -------
        Plan
            The plan, annotated.
        """
        ...


_ROUND_SERVICES: list[Callable[[], RoundServices]] = []


def register_round_services(factory: Callable[[], RoundServices]) -> None:
    """Make ``factory`` give the services :func:`round_services` returns.

    Parameters
    ----------
    factory
        Called on first use (the engine package registers the application's).
    """
    _ROUND_SERVICES[:] = [factory]


def round_services() -> RoundServices:
    """The registered round services (see :func:`register_round_services`).

    Returns
    -------
    RoundServices
        What the factory registered last gives.

    Raises
    ------
    LookupError
        When none is registered.
    """
    if not _ROUND_SERVICES:
        raise LookupError("no round services registered: import dltsched.engine, or register some")
    return _ROUND_SERVICES[0]()


class GroundTruth(Protocol):
    """What the simulator advances jobs with; policies never see it."""

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1,
                    freeze_level: int = 0) -> float:
        """The measured (or modelled) time of one iteration.

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.
        num_gpus
            Its GPUs.
        num_nodes
            The nodes they span.
        freeze_level
            Leading layers frozen.

        Returns
        -------
        float
            Seconds per iteration, alone on its GPUs.
        """
        ...

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """The speed of each of ``jobs`` while they share GPUs of ``gpu_type``.

        Parameters
        ----------
        jobs
            The jobs sharing.
        gpu_type
            The GPU type.

        Returns
        -------
        tuple of float
            Each job's speed relative to running alone (1.0: no slowdown).
        """
        ...

    def memory_mib(self, job: Job, gpu_type: str, freeze_level: int = 0) -> float:
        """The memory ``job`` really takes on a GPU.

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.
        freeze_level
            Leading layers frozen.

        Returns
        -------
        float
            MiB per GPU.
        """
        ...

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float) -> float:
        """The share of progress freezing costs (accuracy lost to frozen layers).

        Parameters
        ----------
        job
            The job.
        freeze_level
            Leading layers frozen.
        start_progress
            The finished fraction when freezing starts.

        Returns
        -------
        float
            The penalty in [0, 1).
        """
        ...


class GroundTruthFactory(Protocol):
    """Builds a ground truth from a data folder."""

    def __call__(self, data_dir: str | None) -> GroundTruth:
        """The ground truth of ``data_dir``.

        Parameters
        ----------
        data_dir
            The data folder with the measurements; ``None``: none was found, use the documented fallback.

        Returns
        -------
        GroundTruth
            The truth, measured where the folder has measurements.
        """
        ...


_GROUND_TRUTH: list[GroundTruthFactory] = []


def register_ground_truth(factory: GroundTruthFactory) -> None:
    """Make ``factory`` the ground truth that :func:`ground_truth_factory` gives.

    Parameters
    ----------
    factory
        Builds the truth from a data folder (the engine package registers the simulator's measured truth).
    """
    _GROUND_TRUTH[:] = [factory]


def ground_truth_factory() -> GroundTruthFactory:
    """The registered ground truth (see :func:`register_ground_truth`).

    Returns
    -------
    GroundTruthFactory
        The factory registered last.

    Raises
    ------
    LookupError
        When none is registered.
    """
    if not _GROUND_TRUTH:
        raise LookupError("no ground truth registered: import dltsched.engine, or pass one")
    return _GROUND_TRUTH[0]
