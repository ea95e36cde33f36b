"""Snapshots: the frozen :class:`~dltsched.engine.domain.model.ClusterState` a policy sees at a round.

The running jobs' states are built lazily (a policy that only reads the queue never pays for snapshotting
the running jobs), the per-node free GPUs and per-GPU occupancy are recomputed for the nodes that changed
only (the occupancy is read through per-node tuples, so a snapshot costs O(nodes), not O(GPUs)), and the
running jobs' and placements' dicts are shared with the snapshot until they next change (copy on write).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain
from operator import eq
from types import MappingProxyType
from typing import overload

from dltsched.engine.domain.model import Assignment, ClusterState, Job, JobState
from dltsched.engine.sim.progress import ProgressRun


class _RunningStates(Mapping[str, JobState]):
    """The running jobs' states at one round, by id, each built when first read (see
    :meth:`ProgressRun._sync`).

    Taking it (:meth:`take`) counts as the round reading every running job's progress; reading it after the
    round raises."""

    __slots__ = ("_run", "_round", "_built", "_taken")

    def __init__(self, run: SnapshotRun) -> None:
        self._run = run
        self._round = run.rounds
        self._built: dict[str, JobState] = {}
        self._taken = False

    def take(self) -> _RunningStates:
        if not self._taken:
            self._taken = True
            self._run._read_running()
        return self

    def __getitem__(self, job_id: str) -> JobState:
        hit = self._built.get(job_id)
        if hit is None:
            run = self._run
            if run.rounds != self._round:
                raise RuntimeError("a round's snapshot of the running jobs was read after the round")
            a = run.running[job_id]
            run._sync(a)
            hit = self._built[job_id] = run.job_state(a, a.assignment)
        return hit

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._run.running))

    def __len__(self) -> int:
        return len(self._run.running)


class _Jobs(Sequence[JobState]):
    """The jobs of a snapshot: running ones (built on first use) then the queue (a ready tuple).

    A policy that only reads the queue (:meth:`ClusterState.queued`) never pays for snapshotting the
    running jobs, which keeps a round of a non-preemptive policy independent of the running-set size."""

    __slots__ = ("_make_running", "_num_running", "_queue", "_all")

    def __init__(self, make_running: Callable[[], tuple[JobState, ...]], num_running: int,
                 queue: tuple[JobState, ...]) -> None:
        self._make_running = make_running
        self._num_running = num_running
        self._queue = queue
        self._all: tuple[JobState, ...] | None = None

    def _full(self) -> tuple[JobState, ...]:
        if self._all is None:
            self._all = self._make_running() + self._queue
        return self._all

    def __len__(self) -> int:
        return self._num_running + len(self._queue)

    @overload
    def __getitem__(self, i: int) -> JobState: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[JobState, ...]: ...

    def __getitem__(self, i: int | slice) -> JobState | tuple[JobState, ...]:
        if isinstance(i, slice) and i.start == self._num_running and i.stop is None and i.step is None:
            return self._queue
        return self._full()[i]

    def __iter__(self) -> Iterator[JobState]:
        return iter(self._full())

    def __bool__(self) -> bool:
        return len(self) > 0

class _Occupancy(Sequence[tuple[str, ...]]):
    """Per GPU, the ids of the running jobs on it, read through per-node tuples: a snapshot costs O(nodes),
    not O(GPUs), and a node's tuple is rebuilt only when its GPUs' jobs change."""

    __slots__ = ("_by_node", "_gpu_node", "_first", "_flat")

    def __init__(self, by_node: tuple[tuple[tuple[str, ...], ...], ...], gpu_node: tuple[int, ...],
                 first: tuple[int, ...]) -> None:
        self._by_node = by_node
        self._gpu_node = gpu_node
        self._first = first
        self._flat: tuple[tuple[str, ...], ...] | None = None

    def __len__(self) -> int:
        return len(self._gpu_node)

    @overload
    def __getitem__(self, g: int) -> tuple[str, ...]: ...

    @overload
    def __getitem__(self, g: slice) -> tuple[tuple[str, ...], ...]: ...

    def __getitem__(self, g: int | slice) -> tuple[str, ...] | tuple[tuple[str, ...], ...]:
        if isinstance(g, slice):
            if self._flat is None:
                self._flat = tuple(chain.from_iterable(self._by_node))
            return self._flat[g]
        node = self._gpu_node[g]
        return self._by_node[node][g % len(self._gpu_node) - self._first[node]]

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        return chain.from_iterable(self._by_node)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Occupancy | tuple | list):
            return len(self) == len(other) and all(map(eq, self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class SnapshotRun(ProgressRun):
    """:class:`~dltsched.engine.sim.progress.ProgressRun` plus the snapshots policies see (see module
    docstring)."""

    # declared per module: type checkers do not follow the package mapping to the base class
    _queue_tuple: tuple[JobState, ...] | None
    _running_jobs: dict[str, Job]
    _placements: dict[str, Assignment]
    _shared: tuple[Mapping[str, Job], Mapping[str, Assignment]] | None

    def _gpu_views(self, down: frozenset[int]) -> tuple[tuple[tuple[int, ...], ...],
                                                        Sequence[tuple[str, ...]]]:
        """Per node the free GPUs, and per GPU its jobs, recomputed for the stale nodes only."""
        if self._stale_nodes:
            on = self.gpu_jobs
            for i in self._stale_nodes:
                gpus = self.cluster.node_gpus(i)
                self._free[i] = tuple(g for g in gpus if not on[g] and g not in down)
                self._occupancy[i] = tuple(map(tuple, on[gpus.start:gpus.stop]))
            self._stale_nodes.clear()
            cluster = self.cluster
            self._node_views = (tuple(self._free), _Occupancy(tuple(self._occupancy), cluster.gpu_node,
                                                              cluster.node_first_gpu))
        return self._node_views

    def _unshare(self) -> None:
        """Copy the running jobs' and placements' dicts before changing them if a snapshot has them."""
        if self._shared is not None:
            self._running_jobs = dict(self._running_jobs)
            self._placements = dict(self._placements)
            self._shared = None

    def _state(self) -> ClusterState:
        down: frozenset[int] = frozenset()
        if self.faults is not None and self.faults.down:
            down = frozenset(g for n in self.faults.down for g in self.cluster.node_gpus(n))
        if self._queue_tuple is None:
            self._queue_tuple = tuple(self.queue_snaps)
        if self._shared is None:
            self._shared = (MappingProxyType(self._running_jobs), MappingProxyType(self._placements))
        running = _RunningStates(self)
        jobs = _Jobs(lambda: tuple(running.take().values()), len(self.running), self._queue_tuple)
        return ClusterState(self.time, self.cluster, jobs, down, len(self.running), *self._gpu_views(down),
                            *self._shared, running.take, self.num_held_gpus)

    def _touch(self, g: int) -> None:
        """GPU ``g``'s set of jobs changed: its node's cached views and its jobs' rates are stale."""
        self._stale_nodes.add(self.cluster.gpu_node[g])
        self._dirty_gpus.add(g)
