"""Protocols between the layers: what the simulator, the policies and the application hand each other.

- :class:`RoundSolver`: decides one round; the optimizing policy receives one (the application builds
  it, e.g. :class:`dltsched.engine.app.api.ConfiguredSolver`), so policies never import the application layer.
- :class:`GroundTruth`: what the simulator advances jobs with; policies never see it.
- :class:`GroundTruthFactory`: builds a ground truth from a data folder. Instance readers and the generator
  turn trace durations into iterations with one (:mod:`dltsched.instances.reference`) without importing the
  simulator: the engine package registers the simulator's measured truth (:func:`register_ground_truth`)
  when it is imported, which every import of the domain does first.

The predictor protocols (step time, co-location, freezing) live in :mod:`dltsched.engine.domain.predictors`.
Nothing here imports beyond the domain model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dltsched.engine.domain.model import ClusterState, Job, Plan
    from dltsched.engine.domain.predictors import Predictors


class RoundSolver(Protocol):
    """Decides one scheduling round: which jobs run where, shared with whom, at which freeze level."""

    @property
    def objective(self) -> str:
        """The objective the rounds optimise (one of ``dltsched.engine.domain.model.OBJECTIVES``)."""
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


class GroundTruth(Protocol):
    """What the simulator advances jobs with; policies never see it."""

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1,
                    freeze_level: int = 0) -> float:
        """The measured (or modelled) time of one iteration.

        Parameters
        ----------
        job : Job
            The job.
        gpu_type : str
            The GPU type.
        num_gpus : int
            Its GPUs.
        num_nodes : int
            The nodes they span.
        freeze_level : int
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
        jobs : Sequence of Job
            The jobs sharing.
        gpu_type : str
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
        job : Job
            The job.
        gpu_type : str
            The GPU type.
        freeze_level : int
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
        job : Job
            The job.
        freeze_level : int
            Leading layers frozen.
        start_progress : float
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
