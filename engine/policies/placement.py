"""Placement helpers shared by the greedy policies: free-GPU pools, type choice, consolidated placement."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from dltsched.engine.domain.model import Cluster, ClusterState, Job
from dltsched.engine.domain.predictors import Predictors, learned_memory_mib, memory_observations_version


@dataclass(slots=True)
class GpuPool:
    """Which GPUs hold how many jobs during one round of a greedy policy.

    ``jobs_on[g]`` lists the jobs the policy has put on GPU ``g`` this round; ``free_by_node`` the GPUs
    that are up and empty, per node (ascending; a node's tuple is replaced when it changes, so pools share
    the others). A pool from :meth:`empty` starts with every up GPU free (the policy re-places the running
    jobs itself); one from :meth:`current` starts from the running placement, as non-preemptive policies
    need, without scanning the running jobs or the nodes' GPUs.

    Parameters
    ----------
    cluster
        The cluster the GPUs belong to.
    jobs_on
        The jobs on each GPU this round.
    free_by_node
        Per node, its GPUs that are up and empty, ascending.
    free_by_type
        The number of free GPUs of each type.
    """

    cluster: Cluster
    jobs_on: defaultdict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    free_by_node: list[tuple[int, ...]] = field(default_factory=list)
    free_by_type: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def empty(state: ClusterState) -> GpuPool:
        """All GPUs that are up, none holding a job.

        Parameters
        ----------
        state
            The round's snapshot (its cluster and down GPUs).

        Returns
        -------
        GpuPool
            The pool.
        """
        cluster = state.cluster
        down = state.down_gpus
        return GpuPool._of(cluster, [tuple(g for g in cluster.node_gpus(i) if g not in down)
                                     for i in range(len(cluster.nodes))])

    @staticmethod
    def current(state: ClusterState) -> GpuPool:
        """The GPUs that are up and hold no running job are free; the others are taken.

        Parameters
        ----------
        state
            The round's snapshot.

        Returns
        -------
        GpuPool
            The pool.
        """
        return GpuPool._of(state.cluster, list(state.free_gpus_by_node()))

    @staticmethod
    def _of(cluster: Cluster, free_by_node: list[tuple[int, ...]]) -> GpuPool:
        by_type = {t: sum(map(len, map(free_by_node.__getitem__, cluster.nodes_of_type(t))))
                   for t in cluster.gpu_types}
        return GpuPool(cluster, defaultdict(list), free_by_node, by_type)

    def occupy(self, job_id: str, gpus: tuple[int, ...]) -> None:
        """Put ``job_id`` on ``gpus`` (GPUs it is the first job on are no longer free).

        Parameters
        ----------
        job_id
            The job.
        gpus
            Its GPUs.
        """
        for g in gpus:
            on = self.jobs_on[g]
            if not on:
                node = self.cluster.gpu_node[g]
                free = self.free_by_node[node]
                if g in free:
                    self.free_by_node[node] = tuple(x for x in free if x != g)
                    self.free_by_type[self.cluster.gpu_type_of(g)] -= 1
            on.append(job_id)

    def release(self, gpus: Iterable[int]) -> None:
        """Make ``gpus`` free again (GPUs of jobs the policy stops this round), in index order.

        Parameters
        ----------
        gpus
            The GPUs.
        """
        for g in gpus:
            node = self.cluster.gpu_node[g]
            free = self.free_by_node[node]
            if g not in free:
                i = bisect.bisect_left(free, g)
                self.free_by_node[node] = (*free[:i], g, *free[i:])
                self.free_by_type[self.cluster.gpu_type_of(g)] += 1

    def are_free(self, gpus: tuple[int, ...]) -> bool:
        """Whether no job is on any of ``gpus`` this round.

        Parameters
        ----------
        gpus
            The GPUs.

        Returns
        -------
        bool
            ``True`` when all are empty.
        """
        return all(not self.jobs_on[g] for g in gpus)

    def take_free(self, job: Job, gpu_type: str) -> tuple[int, ...] | None:
        """Free GPUs of ``gpu_type`` for ``job``: the fullest single node that fits (best fit), else the
        fewest nodes, largest free sets first.

        Parameters
        ----------
        job
            The job (its GPU count).
        gpu_type
            The GPU type.

        Returns
        -------
        tuple of int or None
            The GPUs (not yet occupied: call :meth:`occupy`); ``None`` if not enough are free.
        """
        n = job.num_gpus
        if self.free_by_type.get(gpu_type, 0) < n:
            return None
        nodes = [i for i in self.cluster.nodes_of_type(gpu_type) if self.free_by_node[i]]
        fitting = [i for i in nodes if len(self.free_by_node[i]) >= n]
        if fitting:
            best = min(fitting, key=lambda i: (len(self.free_by_node[i]), i))
            return tuple(self.free_by_node[best][:n])
        chosen: list[int] = []
        for i in sorted(nodes, key=lambda i: (-len(self.free_by_node[i]), i)):
            chosen.extend(self.free_by_node[i][: n - len(chosen)])
            if len(chosen) == n:
                break
        return tuple(chosen)


@dataclass(slots=True)
class Estimates:
    """Memoized predictions a greedy policy needs (per job and GPU type).

    Parameters
    ----------
    predictors
        The predictors the estimates come from.
    """

    predictors: Predictors
    _step: dict[tuple[str, str], float] = field(default_factory=dict)
    _mem: dict[tuple[str, str], float] = field(default_factory=dict)
    _types: dict[tuple[str, tuple[str, ...], int, int], list[str]] = field(default_factory=dict)

    def step_time_s(self, job: Job, gpu_type: str) -> float:
        """Predicted step time of ``job`` on ``gpu_type`` (memoized).

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.

        Returns
        -------
        float
            Seconds per iteration.
        """
        key = (job.id, gpu_type)
        if key not in self._step:
            self._step[key] = self.predictors.step_time.step_time_s(job, gpu_type)
        return self._step[key]

    def memory_mib(self, job: Job, gpu_type: str) -> float:
        """Predicted memory, raised to the peak measured in this run after an out-of-memory crash.

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.

        Returns
        -------
        float
            MiB per GPU, scaled by the job's GPU fraction.
        """
        key = (job.id, gpu_type)
        if key not in self._mem:
            self._mem[key] = self.predictors.step_time.memory_mib(job, gpu_type)
        return learned_memory_mib(self._mem[key], job, gpu_type) * job.gpu_fraction

    def fits_alone(self, job: Job, gpu_type: str, cluster: Cluster) -> bool:
        """Whether ``job`` fits alone in the memory of a ``gpu_type`` GPU of ``cluster``.

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.
        cluster
            The cluster (its GPU types' memory).

        Returns
        -------
        bool
            ``True`` when the estimate fits.
        """
        return self.memory_mib(job, gpu_type) <= cluster.gpu_types[gpu_type].memory_mib

    def candidate_types(self, job: Job, cluster: Cluster) -> list[str]:
        """GPU types the job may use and fits on, fastest (by prediction) first.

        Parameters
        ----------
        job
            The job.
        cluster
            The cluster.

        Returns
        -------
        list of str
            The types (memoized; do not change the list).
        """
        # learned memory may not fit
        key = (job.id, job.gpu_types, id(cluster), memory_observations_version())
        hit = self._types.get(key)
        if hit is None:
            by_type = cluster.gpus_by_type()
            types = [t for t in (job.gpu_types or tuple(by_type))
                     if by_type.get(t, 0) >= job.num_gpus and self.fits_alone(job, t, cluster)]
            hit = self._types[key] = sorted(types, key=lambda t: (self.step_time_s(job, t), t))
        return hit
