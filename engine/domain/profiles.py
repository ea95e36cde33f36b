"""Profiles: what a short run of a job measures, and the predictor bundle that uses them.

Gavel, Lucid and Sia profile a job when it arrives: its first minutes on a GPU type measure its isolated step
time, peak memory and GPU utilisation there, and a group of co-located jobs, once it has run together, shows
each member's speed. A :class:`ProfileBook` holds such measurements for one run; whoever measures (the
simulator, or a cluster's monitoring) feeds it through the :class:`ProfileSink` protocol, and
:func:`dltsched.engine.domain.profiled.profiled` wraps a policy's
:class:`~dltsched.engine.domain.predictors.Predictors` so that every prediction about a profiled job uses
the measurement where there is one and predicts only what is missing:

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
    """One job alone on ``num_gpus`` GPUs of one type over ``num_nodes`` nodes, at freeze level 0.

    Parameters
    ----------
    num_gpus
        GPUs the job ran on while measured.
    num_nodes
        Nodes those GPUs spanned.
    step_time_s
        Measured seconds per iteration.
    memory_mib
        Measured peak memory per GPU, MiB.
    utilization
        Measured GPU utilisation (0..1); ``None`` when not measured.
    """

    num_gpus: int
    num_nodes: int
    step_time_s: float
    memory_mib: float
    utilization: float | None


class ProfileSink(Protocol):
    """Where measurements go (a :class:`ProfileBook` is one)."""

    def record_isolated(self, job: Job, gpu_type: str, profile: IsolatedProfile) -> bool:
        """Remember ``job``'s isolated profile on ``gpu_type``.

        Parameters
        ----------
        job
            The measured job.
        gpu_type
            The GPU type it ran on.
        profile
            What was measured.

        Returns
        -------
        bool
            ``True`` when the profile is new (the first for this job and GPU type).
        """
        ...

    def record_colocated(self, jobs: Sequence[Job], gpu_type: str, speeds: Sequence[float]) -> bool:
        """Remember the measured speeds of ``jobs`` sharing one GPU of ``gpu_type``.

        Parameters
        ----------
        jobs
            The co-located jobs (two or more).
        gpu_type
            The GPU type they shared.
        speeds
            Each job's speed relative to running alone, in the order of ``jobs``.

        Returns
        -------
        bool
            ``True`` when the group's speeds are new.
        """
        ...


class ProfileBook:
    """Profiles measured in one run, by job id (see the module docstring); JSON-ready via :meth:`to_list`."""

    __slots__ = ("_isolated", "_colocated", "_versions")

    def __init__(self) -> None:
        self._isolated: dict[tuple[str, str], IsolatedProfile] = {}
        self._colocated: dict[tuple[tuple[str, ...], str], tuple[float, ...]] = {}
        self._versions: dict[str, int] = {}

    def record_isolated(self, job: Job, gpu_type: str, profile: IsolatedProfile) -> bool:
        """Remember ``job``'s isolated profile on ``gpu_type`` (see :meth:`ProfileSink.record_isolated`).

        Parameters
        ----------
        job
            The measured job.
        gpu_type
            The GPU type it ran on.
        profile
            What was measured.

        Returns
        -------
        bool
            ``True`` when new; a second profile of the same job and type is ignored.
        """
        key = (job.id, gpu_type)
        if key in self._isolated:
            return False
        self._isolated[key] = profile
        self._versions[job.id] = self._versions.get(job.id, 0) + 1
        return True

    def record_colocated(self, jobs: Sequence[Job], gpu_type: str, speeds: Sequence[float]) -> bool:
        """Remember a group's measured speeds (see :meth:`ProfileSink.record_colocated`).

        Parameters
        ----------
        jobs
            The co-located jobs; fewer than two are ignored.
        gpu_type
            The GPU type they shared.
        speeds
            Each job's relative speed, in the order of ``jobs``.

        Returns
        -------
        bool
            ``True`` when new; a group measured before is ignored.
        """
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].id)
        key = (tuple(jobs[i].id for i in order), gpu_type)
        if key in self._colocated or len(jobs) < 2:
            return False
        self._colocated[key] = tuple(float(speeds[i]) for i in order)
        for job in jobs:
            self._versions[job.id] = self._versions.get(job.id, 0) + 1
        return True

    def isolated(self, job_id: str, gpu_type: str) -> IsolatedProfile | None:
        """The job's isolated profile on ``gpu_type``.

        Parameters
        ----------
        job_id
            The job.
        gpu_type
            The GPU type.

        Returns
        -------
        IsolatedProfile or None
            The measurement; ``None`` when never measured.
        """
        return self._isolated.get((job_id, gpu_type))

    def has_isolated(self, job_id: str, gpu_type: str) -> bool:
        """Whether the job was measured alone on ``gpu_type``.

        Parameters
        ----------
        job_id
            The job.
        gpu_type
            The GPU type.

        Returns
        -------
        bool
            ``True`` when a profile exists.
        """
        return (job_id, gpu_type) in self._isolated

    def has_colocated(self, job_ids: Sequence[str], gpu_type: str) -> bool:
        """Whether the group was measured together on ``gpu_type``.

        Parameters
        ----------
        job_ids
            The group's jobs, in any order.
        gpu_type
            The GPU type.

        Returns
        -------
        bool
            ``True`` when its speeds were measured.
        """
        return (tuple(sorted(job_ids)), gpu_type) in self._colocated

    def colocated(self, job_ids: Sequence[str], gpu_type: str) -> tuple[float, ...] | None:
        """Measured speeds of the group.

        Parameters
        ----------
        job_ids
            The group's jobs, in any order.
        gpu_type
            The GPU type.

        Returns
        -------
        tuple of float or None
            Speeds in the order of ``job_ids``; ``None`` when never measured.
        """
        order = sorted(range(len(job_ids)), key=lambda i: job_ids[i])
        hit = self._colocated.get((tuple(job_ids[i] for i in order), gpu_type))
        if hit is None:
            return None
        out = [0.0] * len(job_ids)
        for rank, i in enumerate(order):
            out[i] = hit[rank]
        return tuple(out)

    def version(self, job_id: str) -> int:
        """How many measurements involve ``job_id``.

        Parameters
        ----------
        job_id
            The job.

        Returns
        -------
        int
            The count (0: none); it grows with every new profile of the job.
        """
        return self._versions.get(job_id, 0)

    def __len__(self) -> int:
        return len(self._isolated) + len(self._colocated)

    def to_list(self) -> list[list[Any]]:
        """``[["isolated", job id, GPU type, GPUs, nodes, step s, memory MiB, util or None], ...,
        ["colocated", [job ids], GPU type, [speeds]], ...]`` in recording order.

        Returns
        -------
        list of list
            The book as JSON-ready rows (:meth:`from_list` reads them back).
        """
        rows: list[list[Any]] = [["isolated", j, t, p.num_gpus, p.num_nodes, p.step_time_s, p.memory_mib,
                                  p.utilization] for (j, t), p in self._isolated.items()]
        rows += [["colocated", list(ids), t, list(speeds)] for (ids, t), speeds in self._colocated.items()]
        return rows

    @classmethod
    def from_list(cls, rows: Sequence[Sequence[Any]]) -> ProfileBook:
        """The book :meth:`to_list` wrote.

        Parameters
        ----------
        rows
            Rows as :meth:`to_list` returns them.

        Returns
        -------
        ProfileBook
            A book with the same profiles and versions.
        """
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
    """Within the block, :func:`profiled` predictors answer from ``book``.

    Parameters
    ----------
    book
        The run's profiles.

    Returns
    -------
    Iterator[ProfileBook]
        A context manager yielding ``book``.
    """
    token = _PROFILES.set(book)
    try:
        yield book
    finally:
        _PROFILES.reset(token)


def profile_version(job_id: str) -> int:
    """How many measurements of the current run involve ``job_id``.

    Parameters
    ----------
    job_id
        The job.

    Returns
    -------
    int
        The count; 0 outside a profiling run.
    """
    book = _PROFILES.get()
    return 0 if book is None else book.version(job_id)


def current_profiles() -> ProfileBook | None:
    """The book of the current run (:func:`observing_profiles`).

    Returns
    -------
    ProfileBook or None
        The book; ``None`` outside a profiling run.
    """
    return _PROFILES.get()
