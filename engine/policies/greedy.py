"""First-come-first-served and shortest-job-first, exclusive GPUs, non-preemptive.

* **FIFO**: jobs start in arrival order on exclusive GPUs; a job that does not fit blocks the ones behind
  it (strict head-of-line order, as in the YARN-CS/FIFO baselines of Tiresias, NSDI'19, and Gandiva).
  ``backfill=True`` lets later jobs that fit start meanwhile.
* **SJF**: the queued job with the shortest *predicted* remaining run time starts first (jobs that do not
  fit are skipped: backfilling), the classic SJF baseline of Tiresias (Gu et al., NSDI'19) with durations
  from the step-time predictor, not from an oracle.

Each job goes to the GPU type with the shortest predicted step time among those with enough free GPUs
and memory, on as few nodes as possible (best fit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from dltsched.engine.domain.model import Assignment, ClusterState, JobState, Plan
from dltsched.engine.domain.predictors import Predictors
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.predictors import available_predictors


def place_exclusive(state: ClusterState, order: Iterable[JobState], est: Estimates, *,
                    blocking: bool) -> Plan:
    """Keep running jobs where they are; start queued jobs in ``order`` on free exclusive GPUs.

    The plan is incremental (it lists only the starts), so a round costs O(jobs tried), not O(running).

    Parameters
    ----------
    state
        The round's snapshot.
    order
        The queued jobs in the order to try them.
    est
        The policy's memoized predictions (the GPU types each job fits on).
    blocking
        Stop at the first job that does not fit (FIFO) instead of trying later ones (backfilling).

    Returns
    -------
    Plan
        The starts, incremental.
    """
    pool = GpuPool.current(state)
    if not any(pool.free_by_type.values()):
        return Plan((), incremental=True)
    placed: list[Assignment] = []
    most_free = max(pool.free_by_type.values())
    for s in order:
        gpus = None
        if s.job.num_gpus <= most_free:
            for gpu_type in est.candidate_types(s.job, state.cluster):
                gpus = pool.take_free(s.job, gpu_type)
                if gpus is not None:
                    break
        if gpus is None:
            if blocking:
                break
            continue
        pool.occupy(s.job.id, gpus)
        placed.append(Assignment(s.job.id, gpus))
        most_free = max(pool.free_by_type.values())
        if most_free == 0:
            break
    return Plan(tuple(placed), incremental=True)


@dataclass
class FifoPolicy:
    """First come, first served on exclusive GPUs (see module docstring).

    Parameters
    ----------
    predictors
        What the policy may know of jobs (step time, memory, co-location, freezing predictions).
    backfill
        Start later jobs that fit while the head of the queue waits.
    name
        The policy's name in results.
    round_interval_s
        A round at least this often, seconds (``None``: on arrivals and completions only).
    """

    predictors: Predictors = field(default_factory=available_predictors)
    backfill: bool = False
    name: str = "fifo"
    round_interval_s: float | None = None

    def __post_init__(self) -> None:
        self._est = Estimates(self.predictors)

    def schedule(self, state: ClusterState) -> Plan:
        """The plan of one round: the starts (incremental): running jobs keep their GPUs."""
        return place_exclusive(state, state.queued(), self._est, blocking=not self.backfill)


@dataclass
class SjfPolicy:
    """Shortest predicted job first, with backfilling (see module docstring).

    Parameters
    ----------
    predictors
        What the policy may know of jobs (step time, memory, co-location, freezing predictions).
    name
        The policy's name in results.
    round_interval_s
        A round at least this often, seconds (``None``: on arrivals and completions only).
    """

    predictors: Predictors = field(default_factory=available_predictors)
    name: str = "sjf"
    round_interval_s: float | None = None

    def __post_init__(self) -> None:
        self._est = Estimates(self.predictors)

    def predicted_duration_s(self, s: JobState, state: ClusterState) -> float:
        """The predicted time ``s`` still needs on its fastest GPU type that it fits on.

        Parameters
        ----------
        s
            The job.
        state
            The round's snapshot (its cluster).

        Returns
        -------
        float
            Seconds; ``inf`` when it fits on no GPU type.
        """
        types = self._est.candidate_types(s.job, state.cluster)
        if not types:
            return float("inf")
        return s.remaining_iterations * self._est.step_time_s(s.job, types[0])

    def schedule(self, state: ClusterState) -> Plan:
        """The plan of one round: the starts (incremental), shortest predicted job first."""
        key: Callable[[JobState], tuple[float, float, str]] = lambda s: (  # noqa: E731
            self.predicted_duration_s(s, state), s.job.arrival_time_s, s.job.id)
        return place_exclusive(state, sorted(state.queued(), key=key), self._est, blocking=False)
