"""Cluster-state snapshots: what a policy sees at one decision point (the time, the cluster, every active
job's progress and placement).

:mod:`dltsched.engine.domain.model` re-exports every name here; import them from there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dltsched.engine.domain.plan import Assignment, Plan

if TYPE_CHECKING:
    from dltsched.engine.domain.model import Cluster, Job


@dataclass(frozen=True, slots=True)
class JobState:
    """An active (arrived, unfinished) job at snapshot time.

    Parameters
    ----------
    job
        The job as submitted.
    remaining_iterations
        Training steps still to run.
    attained_service_s
        GPU-seconds received so far (Tiresias' 2D attained service).
    assignment
        Where it runs now (``None``: queued).
    num_preemptions
        How often it was preempted so far.
    first_start_s
        When it first started (``None``: never yet).
    queued_since_s
        When it last entered the queue.
    """

    job: Job
    remaining_iterations: float
    attained_service_s: float = 0.0
    assignment: Assignment | None = None
    num_preemptions: int = 0
    first_start_s: float | None = None
    queued_since_s: float = 0.0

    @property
    def running(self) -> bool:
        """Whether the job holds GPUs."""
        return self.assignment is not None

    @property
    def progress(self) -> float:
        """The finished fraction of the job's iterations."""
        total: float = self.job.total_iterations
        return 1.0 - self.remaining_iterations / total


@dataclass(frozen=True, slots=True)
class ClusterState:
    """What a policy sees at one decision point: time, cluster, and every active job.

    Ground-truth speeds are not part of it; policies estimate with predictors. When ``num_running`` is
    given (the simulator does), ``jobs`` holds the running jobs first, then the queued ones in arrival
    order, so :meth:`running` and :meth:`queued` are slices; otherwise they filter (and :meth:`queued`
    sorts by arrival). The simulator keeps ``free_gpus``, ``gpu_jobs``, ``running_jobs`` and
    ``placements`` incrementally, so a policy can read placements without snapshotting every running
    job's progress; without them the methods below derive them from ``jobs``.

    Parameters
    ----------
    time_s
        The simulated time of the snapshot, seconds.
    cluster
        The cluster.
    jobs
        Every active job.
    down_gpus
        The GPUs on failed nodes; they must not be used.
    num_running
        How many of ``jobs`` (the first ones) run.
    free_gpus
        Per node, the GPUs that are up and hold no job.
    gpu_jobs
        Per GPU, the ids of the running jobs on it, in the order they were placed.
    running_jobs
        The running jobs by id.
    placements
        The running jobs' assignments by id.
    running_progress
        Returns the running jobs' states by id, each built when first read (see :meth:`running_states`).
    num_held_gpus
        The running jobs' GPUs (a GPU that k jobs share counts k times).
    """

    time_s: float
    cluster: Cluster
    jobs: Sequence[JobState]
    down_gpus: frozenset[int] = frozenset()
    num_running: int | None = None
    free_gpus: tuple[tuple[int, ...], ...] | None = None
    gpu_jobs: Sequence[tuple[str, ...]] | None = None
    running_jobs: Mapping[str, Job] | None = None
    placements: Mapping[str, Assignment] | None = None
    running_progress: Callable[[], Mapping[str, JobState]] | None = None
    num_held_gpus: int | None = None

    def free_gpus_by_node(self) -> tuple[tuple[int, ...], ...]:
        """Per node, the GPUs that are up and hold no running job.

        Returns
        -------
        tuple of tuple of int
            One tuple of GPU indices per node, in the order of ``cluster.nodes``.
        """
        if self.free_gpus is not None:
            return self.free_gpus
        busy = {g for s in self.running() if s.assignment is not None for g in s.assignment.gpus}
        skip = busy | self.down_gpus
        return tuple(tuple(g for g in self.cluster.node_gpus(i) if g not in skip)
                     for i in range(len(self.cluster.nodes)))

    def jobs_on_gpus(self) -> Sequence[tuple[str, ...]]:
        """Per GPU, the ids of the running jobs on it.

        Returns
        -------
        Sequence of tuple of str
            One entry per GPU of the cluster (empty for a GPU without a job).
        """
        if self.gpu_jobs is not None:
            return self.gpu_jobs
        on: list[list[str]] = [[] for _ in range(self.cluster.num_gpus)]
        for s in self.running():
            if s.assignment is not None:
                for g in s.assignment.gpus:
                    on[g].append(s.job.id)
        return tuple(tuple(x) for x in on)

    def running_jobs_by_id(self) -> Mapping[str, Job]:
        """The running jobs by id (no progress snapshot).

        Returns
        -------
        Mapping of str to Job
            Each running job, by its id.
        """
        if self.running_jobs is not None:
            return self.running_jobs
        return {s.job.id: s.job for s in self.running()}

    def placements_by_id(self) -> Mapping[str, Assignment]:
        """The running jobs' assignments by id (no progress snapshot).

        Returns
        -------
        Mapping of str to Assignment
            Each running job's assignment, by its id.
        """
        if self.placements is not None:
            return self.placements
        return {s.job.id: s.assignment for s in self.running() if s.assignment is not None}

    def running_states(self) -> Mapping[str, JobState]:
        """The running jobs' states (progress at this instant) by id.

        Taking it reads every running job's progress, as iterating ``jobs`` does; a simulator builds each
        entry when it is first read, so a policy that looks at a few running jobs does not pay for all of
        them.

        Returns
        -------
        Mapping of str to JobState
            Each running job's state, by its id.
        """
        if self.running_progress is not None:
            return self.running_progress()
        return {s.job.id: s for s in self.running()}

    def gpus_exclusive(self) -> bool:
        """Whether no GPU holds two running jobs and no running job holds a failed GPU.

        O(nodes) with ``num_held_gpus``.

        Returns
        -------
        bool
            ``True`` when the GPUs the running jobs hold are exactly the busy ones.
        """
        held = self.num_held_gpus
        if held is None:
            held = sum(len(a.gpus) for a in self.placements_by_id().values())
        busy: int = self.cluster.num_gpus - len(self.down_gpus) - sum(map(len, self.free_gpus_by_node()))
        return held == busy

    def available_by_type(self) -> dict[str, int]:
        """Number of GPUs of each type that are up (not on a failed node).

        Returns
        -------
        dict of str to int
            Per GPU type of the cluster, its GPUs that are up (a fresh dict).
        """
        out: dict[str, int] = self.cluster.gpus_by_type()
        for g in self.down_gpus:
            out[self.cluster.gpu_type_of(g)] -= 1
        return out

    def running(self) -> tuple[JobState, ...]:
        """The running jobs' states.

        Returns
        -------
        tuple of JobState
            The states of the jobs that hold GPUs.
        """
        if self.num_running is not None:
            return tuple(self.jobs[: self.num_running])
        return tuple(s for s in self.jobs if s.assignment is not None)

    def queued(self) -> tuple[JobState, ...]:
        """Waiting jobs in arrival order (ties by job id).

        Returns
        -------
        tuple of JobState
            The states of the jobs that hold no GPU.
        """
        if self.num_running is not None:
            return tuple(self.jobs[self.num_running:])
        waiting = (s for s in self.jobs if s.assignment is None)
        return tuple(sorted(waiting, key=lambda s: (s.job.arrival_time_s, s.job.id)))

    def current_plan(self) -> Plan:
        """The running placement, as a plan.

        Returns
        -------
        Plan
            A heuristic plan of the running jobs' assignments.
        """
        return Plan(tuple(s.assignment for s in self.running() if s.assignment is not None))

    def gpu_load(self) -> list[int]:
        """Number of running jobs on each GPU.

        Returns
        -------
        list of int
            One count per GPU of the cluster.
        """
        return [len(on) for on in self.jobs_on_gpus()]
