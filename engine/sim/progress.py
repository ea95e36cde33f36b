"""Lazy progress of running jobs: a job's remaining work is brought up to date only when it is needed.

A round that reads the running jobs' progress records its instant instead of bringing every running job up
to it; a job later steps through the instants recorded since its last sync, in order, so its values are
bit-identical to those of syncing it at each of them (:meth:`ProgressRun._sync`). Also the completion heap
(finish time per running job, stale entries skipped) and, with faults, the periodic checkpoints a failed job
rolls back to.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np

from dltsched.engine.sim.run_state import ActiveJob, RunState


class ProgressRun(RunState):
    """:class:`RunState` plus lazy progress and the completion heap (see module docstring)."""

    # declared per module: type checkers do not follow the package mapping to the base class
    _read_array: np.ndarray

    def _sync(self, a: ActiveJob) -> None:
        """Bring ``a.remaining``/``a.attained_s`` up to ``self.time`` at its current rate.

        A round that reads the running jobs' progress records its instant in ``_read_at`` instead of
        bringing every running job up to it; a job steps through the instants recorded since its last sync
        first, in order, so its values are bit-identical to those of syncing it at each of them."""
        reads = self._read_at
        if a.assignment is not None and reads and reads[-1] > a.synced_at:
            start = bisect.bisect_right(reads, a.synced_at)
            if self.faults is not None:
                for t in reads[start:]:
                    self._step(a, t)
            elif len(reads) - start < 48 or not _replay_with_numpy(a, self._read_array[start:len(reads)]):
                self._replay(a, reads[start:])
        self._step(a, self.time)

    def _replay(self, a: ActiveJob, instants: list[float]) -> None:
        """:meth:`_step` to each of ``instants`` (ascending, after ``a.synced_at``) without faults, inlined:
        the same operations on the same values (``max`` spelled out)."""
        assert a.assignment is not None
        n = len(a.assignment.gpus)
        attained, remaining, rate, ready, t_last = a.attained_s, a.remaining, a.rate, a.ready_at, a.synced_at
        for t_to in instants:
            attained += (t_to - t_last) * n
            if rate > 0:
                t_from = t_last if t_last > ready else ready
                if t_to > t_from:
                    left = remaining - rate * (t_to - t_from)
                    remaining = left if left > 0.0 else 0.0
            t_last = t_to
        a.attained_s, a.remaining, a.synced_at = attained, remaining, t_last

    def _step(self, a: ActiveJob, t_to: float) -> None:
        """Progress of ``a`` from its last sync to ``t_to`` at its current rate."""
        t_last = a.synced_at
        if t_to <= t_last or a.assignment is None:
            a.synced_at = max(t_last, t_to)
            return
        a.attained_s += (t_to - t_last) * len(a.assignment.gpus)
        t_from = max(a.ready_at, t_last)
        if t_to > t_from and a.rate > 0:
            if self.faults is not None:
                self._periodic_checkpoint(a, t_from, t_to)
            a.remaining = max(0.0, a.remaining - a.rate * (t_to - t_from))
        a.synced_at = t_to

    def sync_all(self) -> None:
        """Every running job's progress brought up to now (before a snapshot or a checkpoint)."""
        for a in self.running.values():
            self._sync(a)

    def _finish_time(self, a: ActiveJob) -> float:
        return max(a.ready_at, a.synced_at) + a.remaining / a.rate if a.rate > 0 else math.inf

    def _schedule_finish(self, a: ActiveJob) -> None:
        a.version += 1
        t = self._finish_time(a)
        if math.isfinite(t):
            self._seq += 1
            heapq.heappush(self._finish_heap, (t, self._seq, a.job.id, a.version))

    def _valid_top(self) -> tuple[float, int, str, int] | None:
        heap = self._finish_heap
        while heap:
            t, _, job_id, version = heap[0]
            a = self.running.get(job_id)
            if a is not None and a.version == version:
                return heap[0]
            heapq.heappop(heap)
        return None


    def _periodic_checkpoint(self, a: ActiveJob, t_from: float, t_to: float) -> None:
        """Record the job's remaining work at the last checkpoint instant in (t_from, t_to]."""
        assert self.faults is not None
        every = self.faults.config.checkpoint_interval_s
        origin = max(a.ready_at, a.placed_at)
        k = math.floor((t_to - origin) / every)
        instant = origin + k * every
        if k >= 1 and instant > t_from:
            a.ckpt_remaining = max(0.0, a.remaining - a.rate * (instant - t_from))


    def _read_running(self) -> None:
        """This round reads the running jobs' progress: each is brought up to now when next synced."""
        if self.running and (not self._read_at or self._read_at[-1] != self.time):
            self._read_at.append(self.time)
            if len(self._read_at) > len(self._read_array):
                self._read_array = np.concatenate((self._read_array, np.empty(len(self._read_array))))
            self._read_array[len(self._read_at) - 1] = self.time



def _replay_with_numpy(a: ActiveJob, t: np.ndarray) -> bool:
    """:meth:`ProgressRun._replay` to the instants ``t`` as array operations: the same terms, summed in the
    same order (``np.cumsum`` adds one term after the other, unlike ``np.sum``); ``False``, with ``a``
    unchanged, when the remaining work reaches 0 on the way (the loop clamps it there)."""
    assert a.assignment is not None
    before = np.empty_like(t)
    before[0], before[1:] = a.synced_at, t[:-1]
    attained = np.cumsum(np.concatenate(((a.attained_s,), (t - before) * len(a.assignment.gpus))))[-1]
    remaining = a.remaining
    if a.rate > 0:
        t_from = np.maximum(before, a.ready_at)
        runs = t > t_from
        if runs.any():
            steps = np.cumsum(np.concatenate(((remaining,), -(a.rate * (t[runs] - t_from[runs])))))
            if not (steps[1:] > 0.0).all():
                return False
            remaining = float(steps[-1])
    a.attained_s, a.remaining, a.synced_at = float(attained), remaining, float(t[-1])
    return True


