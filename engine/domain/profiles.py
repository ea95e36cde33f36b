"""Profiles: what a short run of a job measures, and the predictor bundle that uses them.

Gavel, Lucid and Sia profile a job when it arrives: its first minutes on a GPU type measure its isolated step
time, peak memory and GPU utilisation there, and a group of co-located jobs, once it has run together, shows
each member's speed. A :class:`ProfileBook` holds such measurements for one run; whoever measures (the
simulator, or a cluster's monitoring) feeds it through the :class:`ProfileSink` protocol, and
:func:`dltsched.engine.domain.profiled.profiled` wraps a policy's :class:`~dltsched.engine.domain.predictors.Predictors` so that every
prediction about a profiled job uses the measurement where there is one and predicts only what is missing:

* step time on a profiled GPU type: the prediction scaled by measured / predicted at the measured
  configuration (so other GPU counts and freeze levels keep the predictor's relative shape);
* memory likewise (measured peak x the prediction's ratio between freeze levels);
* co-located speeds of a group measured together: the measured speeds.

The book answers within :func:`observing_profiles` (per thread/context, as
:func:`~dltsched.engine.domain.predictors.observing_memory` does; :func:`current_profiles`); outside it,
predictions are unchanged.
Memoized predictors key their answers by :func:`profile_version`, so a new profile is seen at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from dltsched.engine.domain.model import Job


@dataclass(frozen=True, slots=True)
class IsolatedProfile:
    """One job alone on ``num_gpus`` GPUs of one type over ``num_nodes`` nodes, at freeze level 0."""

    num_gpus: int
    num_nodes: int
    step_time_s: float
    memory_mib: float
    utilization: float | None


class ProfileSink(Protocol):
    """Where measurements go (a :class:`ProfileBook` is one)."""

    def record_isolated(self, job: Job, gpu_type: str, profile: IsolatedProfile) -> bool:
        """Remember ``job``'s isolated profile on ``gpu_type``; ``True`` when it is new."""
        ...

    def record_colocated(self, jobs: Sequence[Job], gpu_type: str, speeds: Sequence[float]) -> bool:
        """Remember the measured speeds of ``jobs`` sharing one GPU of ``gpu_type``; ``True`` when new."""
        ...


class ProfileBook:
    """Profiles measured in one run, by job id (see the module docstring); JSON-ready via :meth:`to_list`."""

    __slots__ = ("_isolated", "_colocated", "_versions")

    def __init__(self) -> None:
        self._isolated: dict[tuple[str, str], IsolatedProfile] = {}
        self._colocated: dict[tuple[tuple[str, ...], str], tuple[float, ...]] = {}
        self._versions: dict[str, int] = {}

    def record_isolated(self, job: Job, gpu_type: str, profile: IsolatedProfile) -> bool:
        key = (job.id, gpu_type)
        if key in self._isolated:
            return False
        self._isolated[key] = profile
        self._versions[job.id] = self._versions.get(job.id, 0) + 1
        return True

    def record_colocated(self, jobs: Sequence[Job], gpu_type: str, speeds: Sequence[float]) -> bool:
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].id)
        key = (tuple(jobs[i].id for i in order), gpu_type)
        if key in self._colocated or len(jobs) < 2:
            return False
        self._colocated[key] = tuple(float(speeds[i]) for i in order)
        for job in jobs:
            self._versions[job.id] = self._versions.get(job.id, 0) + 1
        return True

    def isolated(self, job_id: str, gpu_type: str) -> IsolatedProfile | None:
        return self._isolated.get((job_id, gpu_type))

    def has_isolated(self, job_id: str, gpu_type: str) -> bool:
        return (job_id, gpu_type) in self._isolated

    def has_colocated(self, job_ids: Sequence[str], gpu_type: str) -> bool:
        return (tuple(sorted(job_ids)), gpu_type) in self._colocated

    def colocated(self, job_ids: Sequence[str], gpu_type: str) -> tuple[float, ...] | None:
        """Measured speeds of the group, in the order of ``job_ids``; ``None`` when never measured."""
        order = sorted(range(len(job_ids)), key=lambda i: job_ids[i])
        hit = self._colocated.get((tuple(job_ids[i] for i in order), gpu_type))
        if hit is None:
            return None
        out = [0.0] * len(job_ids)
        for rank, i in enumerate(order):
            out[i] = hit[rank]
        return tuple(out)

    def version(self, job_id: str) -> int:
        """How many measurements involve ``job_id`` (0: none)."""
        return self._versions.get(job_id, 0)

    def __len__(self) -> int:
        return len(self._isolated) + len(self._colocated)

    def to_list(self) -> list[list[Any]]:
        """``[["isolated", job id, GPU type, GPUs, nodes, step s, memory MiB, util or None], ...,
        ["colocated", [job ids], GPU type, [speeds]], ...]`` in recording order."""
        rows: list[list[Any]] = [["isolated", j, t, p.num_gpus, p.num_nodes, p.step_time_s, p.memory_mib,
                                  p.utilization] for (j, t), p in self._isolated.items()]
        rows += [["colocated", list(ids), t, list(speeds)] for (ids, t), speeds in self._colocated.items()]
        return rows

    @classmethod
    def from_list(cls, rows: Sequence[Sequence[Any]]) -> ProfileBook:
        out = cls()
        for row in rows:
            if row[0] == "isolated":
                _, j, t, n, nodes, step, mem, util = row
                out._isolated[(str(j), str(t))] = IsolatedProfile(int(n), int(nodes), float(step), float(mem),
                                                                  None if util is None else float(util))
                out._versions[str(j)] = out._versions.get(str(j), 0) + 1
            else:
                _, ids, t, speeds = row
                out._colocated[(tuple(str(i) for i in ids), str(t))] = tuple(float(x) for x in speeds)
                for i in ids:
                    out._versions[str(i)] = out._versions.get(str(i), 0) + 1
        return out


_PROFILES: ContextVar[ProfileBook | None] = ContextVar("dltsched_profiles", default=None)


@contextmanager
def observing_profiles(book: ProfileBook) -> Iterator[ProfileBook]:
    """Within the block, :func:`profiled` predictors answer from ``book``."""
    token = _PROFILES.set(book)
    try:
        yield book
    finally:
        _PROFILES.reset(token)


def profile_version(job_id: str) -> int:
    """How many measurements of the current run involve ``job_id`` (0 outside a profiling run)."""
    book = _PROFILES.get()
    return 0 if book is None else book.version(job_id)


def current_profiles() -> ProfileBook | None:
    """The book of the current run (:func:`observing_profiles`), or ``None``."""
    return _PROFILES.get()
