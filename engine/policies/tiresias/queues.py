"""What the Tiresias index is made of: job priorities, the running jobs of one GPU type in priority order
(:class:`RunningLine`), and what the index asks of the policy (:class:`Ranking`)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from operator import sub
from typing import Protocol

from dltsched.engine.domain.model import Cluster, Job, JobState

#: a job's priority: (queue, arrival, id), smallest first
Key = tuple[int, float, str]
#: what admission reads of a waiting job: its GPU count and the GPU types it fits on, fastest first
Group = tuple[int, tuple[str, ...]]


class Ranking(Protocol):
    """What the index asks of the policy: a job's queue, when it changes, and where the job fits."""

    def queue_of(self, s: JobState, now_s: float) -> int:
        """The queue ``s`` is in at ``now_s``.

        Parameters
        ----------
        s
            The job.
        now_s
            The instant.

        Returns
        -------
        int
            The queue, 0 served first.
        """
        ...

    def changes_at_s(self, s: JobState, level: int, now_s: float) -> float:
        """When ``s``'s queue next changes if nothing else happens.

        Parameters
        ----------
        s
            The job.
        level
            Its queue at ``now_s``.
        now_s
            The instant.

        Returns
        -------
        float
            The instant (``inf``: never).
        """
        ...

    def candidate_types(self, job: Job, cluster: Cluster) -> Sequence[str]:
        """The GPU types ``job`` fits on, fastest first.

        Parameters
        ----------
        job
            The job.
        cluster
            The cluster.

        Returns
        -------
        Sequence of str
            The types.
        """
        ...


@dataclass(slots=True)
class RunningLine:
    """The running jobs on one GPU type in priority order, with the GPUs held from each position on."""

    keys: list[Key] = field(default_factory=list, init=False)
    gpus: list[int] = field(default_factory=list, init=False)
    # -(GPUs held from position i on), on demand
    _neg_from: list[int] | None = field(default=None, init=False)

    def add(self, key: Key, n: int) -> None:
        """Insert the job of priority ``key`` holding ``n`` GPUs.

        Parameters
        ----------
        key
            The job's priority (queue, arrival, id).
        n
            The GPUs it holds.
        """
        i = bisect.bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.gpus.insert(i, n)
        self._neg_from = None

    def remove(self, key: Key) -> None:
        """Remove the job of priority ``key`` (which must be in the line).

        Parameters
        ----------
        key
            The job's priority.
        """
        i = bisect.bisect_left(self.keys, key)
        del self.keys[i], self.gpus[i]
        self._neg_from = None

    def _neg(self) -> list[int]:
        """``-(sum of gpus[i:])`` for every ``i`` (one more entry than jobs, the last 0)."""
        if self._neg_from is None:
            neg = list(accumulate(reversed(self.gpus), sub, initial=0))
            neg.reverse()
            self._neg_from = neg
        return self._neg_from

    def total(self) -> int:
        """The GPUs held by every job in the line.

        Returns
        -------
        int
            Their sum.
        """
        return -self._neg()[0]

    def after(self, key: Key) -> int:
        """The GPUs held by the jobs after ``key``.

        Parameters
        ----------
        key
            A priority (in the line or not).

        Returns
        -------
        int
            The GPUs held by the jobs of lower priority.
        """
        return -self._neg()[bisect.bisect_right(self.keys, key)]

    def first_short(self, key: Key | None, deficit: int) -> int | None:
        """The first job after ``key`` that no longer fits when its type is ``deficit`` GPUs short.

        Parameters
        ----------
        key
            Start after this priority; ``None``: from the start.
        deficit
            GPUs the type is short.

        Returns
        -------
        int or None
            The position of the first job after which fewer than ``deficit`` GPUs are held; ``None`` when
            there is none.
        """
        neg = self._neg()
        lo = 0 if key is None else bisect.bisect_right(self.keys, key)
        j = bisect.bisect_right(neg, -deficit, lo=lo + 1) - 1
        return j if j < len(self.keys) else None
