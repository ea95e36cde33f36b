"""Predictor protocols the engine and formulations use, and the bundle policies receive.

Implementations live in ``dltsched.predictors`` (DeletePop-style step time, IceFrog-style
freezing, E-GGAT co-location); ``dltsched.predictors.analytic`` holds the catalog-based fallback.
Policies only ever see predictions through these protocols, never the simulator's ground truth.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from dltsched.engine.domain.model import Job
from dltsched.engine.domain.profiles import profile_version


@runtime_checkable
class StepTimePredictor(Protocol):
    """Isolated (not co-located) time of one training iteration, and GPU memory per GPU."""

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        """Seconds per iteration of ``job`` on ``num_gpus`` (default ``job.num_gpus``) GPUs of
        ``gpu_type`` spread over ``num_nodes`` nodes, with the first ``freeze_level`` blocks frozen.

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.
        num_gpus
            GPUs (default: the job's).
        freeze_level
            Leading blocks frozen.
        num_nodes
            Nodes the GPUs span.

        Returns
        -------
        float
            Seconds per iteration.
        """
        ...

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        """Peak GPU memory of one of the job's workers, in MiB.

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.
        freeze_level
            Leading blocks frozen.

        Returns
        -------
        float
            MiB.
        """
        ...


@runtime_checkable
class FreezingPredictor(Protocol):
    """Layer freezing: which levels exist and what accuracy they cost."""

    def num_freeze_levels(self, job: Job) -> int:
        """Number of freeze levels; level 0 (nothing frozen) .. ``n - 1``.

        Parameters
        ----------
        job
            The job.

        Returns
        -------
        int
            ``n``.
        """
        ...

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float = 0.0) -> float:
        """Fraction of each iteration's training progress lost (0 = none) when freezing at ``freeze_level``
        from training progress ``start_progress`` (0..1) on: useful progress runs at ``(1 - penalty)`` x the
        layer-aware throughput, so the job needs ``1 / (1 - penalty)`` times the iterations.

        Parameters
        ----------
        job
            The job.
        freeze_level
            Leading blocks frozen.
        start_progress
            Training progress (0..1) when freezing starts.

        Returns
        -------
        float
            The fraction of progress lost per iteration.
        """
        ...


@runtime_checkable
class ColocationPredictor(Protocol):
    """Speed of jobs that share one GPU, relative to each running alone on it."""

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """Normalized speed of each job (co-located throughput / isolated throughput).

        Parameters
        ----------
        jobs
            The jobs sharing one GPU.
        gpu_type
            The GPU type.

        Returns
        -------
        tuple of float
            One speed per job, in its order (1.0: as fast as alone).
        """
        ...

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        """GPU memory used by the group on one GPU, in MiB.

        Parameters
        ----------
        jobs
            The jobs sharing one GPU.
        gpu_type
            The GPU type.

        Returns
        -------
        float
            MiB.
        """
        ...


@dataclass(frozen=True, slots=True)
class Predictors:
    """The predictors a policy or a round builder uses.

    Parameters
    ----------
    step_time
        Step time and memory.
    colocation
        Speeds of jobs sharing a GPU.
    freezing
        Freeze levels and their accuracy penalty.
    """

    step_time: StepTimePredictor
    colocation: ColocationPredictor
    freezing: FreezingPredictor

    def effective_progress_rate(self, job: Job, gpu_type: str, freeze_level: int = 0,
                                start_progress: float = 0.0, num_nodes: int = 1) -> float:
        """Useful iterations per second: layer-aware throughput x (1 - frozen penalty).

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.
        freeze_level
            Leading blocks frozen.
        start_progress
            Training progress (0..1) when freezing starts.
        num_nodes
            Nodes the job's GPUs span.

        Returns
        -------
        float
            Useful iterations per second.
        """
        step = self.step_time.step_time_s(job, gpu_type, freeze_level=freeze_level, num_nodes=num_nodes)
        penalty = self.freezing.frozen_penalty(job, freeze_level, start_progress) if freeze_level else 0.0
        return (1.0 - penalty) / step


def memory_kind(job: Job) -> tuple[str, int, bool, str | None, str]:
    """What a job's memory footprint depends on: model, batch size, AMP, dataset and optimizer. A peak
    measured for one job is known for every job of the same kind, as a profile would be.

    Parameters
    ----------
    job
        The job.

    Returns
    -------
    tuple of (str, int, bool, str or None, str)
        Model, batch size, AMP, dataset and optimizer.
    """
    return job.model, job.batch_size, job.amp, job.dataset, job.optimizer.lower()


class MemoryObservations:
    """Peak GPU memory per worker (MiB) measured in one simulation run, by job kind (:func:`memory_kind`),
    GPU type and freeze level.

    A job that crashes out of memory has shown its real footprint on that GPU type, and so have the jobs
    it shared the GPU with: the simulator records them here, and every memory prediction a policy asks for
    while the run is on (:func:`observing_memory`) is raised to the measured peak
    (:func:`learned_memory_mib`), as a real scheduler learns from a crashed job. Levels never measured keep
    their prediction."""

    __slots__ = ("_peak", "changes")

    def __init__(self) -> None:
        self._peak: dict[tuple[object, ...], float] = {}
        self.changes = 0  #: bumps with every new measurement (caches of judgments built on memory check it)

    def record(self, job: Job, gpu_type: str, freeze_level: int, peak_mib: float) -> bool:
        """Remember a measured peak; ``True`` when it is news (not measured before at this value or above).

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.
        freeze_level
            Its freeze level.
        peak_mib
            The measured peak per worker, MiB.

        Returns
        -------
        bool
            Whether the peak is news.
        """
        key = (*memory_kind(job), gpu_type, freeze_level)
        if self._peak.get(key, -1.0) >= peak_mib:
            return False
        self._peak[key] = peak_mib
        self.changes += 1
        return True

    def peak_mib(self, job: Job, gpu_type: str, freeze_level: int = 0) -> float | None:
        """The peak measured for jobs of ``job``'s kind on ``gpu_type`` at ``freeze_level``.

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.
        freeze_level
            The freeze level.

        Returns
        -------
        float or None
            MiB; ``None`` when none was measured.
        """
        return self._peak.get((*memory_kind(job), gpu_type, freeze_level)) if self._peak else None

    def __len__(self) -> int:
        return len(self._peak)

    def to_list(self) -> list[list[Any]]:
        """``[[model, batch size, amp, dataset, optimizer, GPU type, freeze level, peak MiB], ...]``
        (JSON-ready, e.g. for a checkpoint).

        Returns
        -------
        list of list
            One row per measured peak.
        """
        return [[*key, peak] for key, peak in sorted(self._peak.items(), key=repr)]

    @classmethod
    def from_list(cls, rows: Sequence[Sequence[Any]]) -> MemoryObservations:
        """The observations :meth:`to_list` gave.

        Parameters
        ----------
        rows
            Its rows.

        Returns
        -------
        MemoryObservations
            The observations.
        """
        out = cls()
        for *key, peak in rows:
            out._peak[tuple(key)] = float(peak)
            out.changes += 1
        return out


_OBSERVED: ContextVar[MemoryObservations | None] = ContextVar("dltsched_memory_observations", default=None)


@contextmanager
def observing_memory(observations: MemoryObservations) -> Iterator[MemoryObservations]:
    """Within the block, :func:`learned_memory_mib` answers from ``observations`` (per thread/context, so
    simulations running side by side do not see each other's measurements).

    Parameters
    ----------
    observations
        The run's observations.

    Yields
    ------
    MemoryObservations
        ``observations``.
    """
    token = _OBSERVED.set(observations)
    try:
        yield observations
    finally:
        _OBSERVED.reset(token)


def learned_memory_mib(predicted_mib: float, job: Job, gpu_type: str, freeze_level: int = 0) -> float:
    """``predicted_mib`` (one worker of ``job`` on ``gpu_type``) raised to the peak measured in the
    current run (:func:`observing_memory`), if any. Every memory estimate a policy uses goes through it.

    Parameters
    ----------
    predicted_mib
        The prediction, MiB.
    job
        The job.
    gpu_type
        The GPU type.
    freeze_level
        The freeze level.

    Returns
    -------
    float
        MiB, at least the measured peak.
    """
    observations = _OBSERVED.get()
    if observations is None:
        return predicted_mib
    peak = observations.peak_mib(job, gpu_type, freeze_level)
    return predicted_mib if peak is None or peak <= predicted_mib else peak


def memory_observations_version() -> int:
    """A number that changes whenever the current run measures a new peak (0 outside a run): a policy
    that caches judgments built on memory estimates drops them when it changes.

    Returns
    -------
    int
        The version.
    """
    observations = _OBSERVED.get()
    return 0 if observations is None else observations.changes


_MISSING = object()


class _Memo:
    """Results by key, at most ``max_entries``; when full, the older half is dropped (insertion order)."""

    __slots__ = ("_max", "_values")

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._values: dict[Hashable, Any] = {}

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        try:
            return self._values[key]
        except KeyError:
            pass
        value = compute()
        self.put(key, value)
        return value

    def peek(self, key: Hashable) -> Any:
        """The value kept under ``key``, or ``_MISSING``."""
        return self._values.get(key, _MISSING)

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key`` (dropping the older half first when full)."""
        if len(self._values) >= self._max:
            for old in list(self._values)[: self._max // 2]:
                del self._values[old]
        self._values[key] = value


class _MemoStepTime:
    def __init__(self, inner: StepTimePredictor, memo: _Memo) -> None:
        self.inner, self._memo = inner, memo

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        key = ("step", job, gpu_type, num_gpus, freeze_level, num_nodes, profile_version(job.id))
        step_s: float = self._memo.get(key, lambda: self.inner.step_time_s(
            job, gpu_type, num_gpus, freeze_level=freeze_level, num_nodes=num_nodes))
        return step_s

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        key = ("memory", job, gpu_type, freeze_level, profile_version(job.id))
        predicted: float = self._memo.get(key, lambda: self.inner.memory_mib(job, gpu_type,
                                                                             freeze_level=freeze_level))
        return learned_memory_mib(predicted, job, gpu_type, freeze_level)  # measured peaks are never memoized


def is_order_symmetric(colocation: object) -> bool:
    """Whether a co-location predictor says that a pair's answers the other way round are the same numbers,
    the speeds swapped (its optional ``order_symmetric()``; ``False`` when it has none).

    Parameters
    ----------
    colocation
        The co-location predictor.

    Returns
    -------
    bool
        What it says.
    """
    symmetric = getattr(colocation, "order_symmetric", None)
    return bool(symmetric is not None and symmetric())


def ask_colocated_many(colocation: Any, groups: Sequence[tuple[Sequence[Job], str]]
                       ) -> list[tuple[tuple[float, ...], float]]:
    """Per (jobs, GPU type): a co-location predictor's speeds and group memory (MiB), in one call of its
    optional ``colocated_many`` where it has one, else asked group by group (``colocated_speeds``,
    ``group_memory_mib``).

    Parameters
    ----------
    colocation
        The co-location predictor.
    groups
        The groups, each with the GPU type it is asked on.

    Returns
    -------
    list of tuple
        Per group, its speeds and its memory.
    """
    many = getattr(colocation, "colocated_many", None)
    if many is not None:
        return many(groups)  # type: ignore[no-any-return]
    return [(tuple(colocation.colocated_speeds(jobs, gpu_type)), colocation.group_memory_mib(jobs, gpu_type))
            for jobs, gpu_type in groups]


class _MemoColocation:
    def __init__(self, inner: ColocationPredictor, memo: _Memo) -> None:
        self.inner, self._memo = inner, memo
        #: where a round builder keeps what it derives from these answers across rounds (same answers, same
        #: jobs)
        self.group_prices: object | None = None

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        group = tuple(jobs)
        versions = tuple(profile_version(j.id) for j in group)
        return self._memo.get(("speeds", group, gpu_type, versions),  # type: ignore[no-any-return]
                              lambda: tuple(self.inner.colocated_speeds(group, gpu_type)))

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        group = tuple(jobs)
        return self._memo.get(("group_memory", group, gpu_type),  # type: ignore[no-any-return]
                              lambda: self.inner.group_memory_mib(group, gpu_type))

    def order_symmetric(self) -> bool:
        """The inner predictor's ``order_symmetric`` (``False`` when it has none)."""
        return is_order_symmetric(self.inner)

    def colocated_many(self, groups: Sequence[tuple[Sequence[Job], str]]
                       ) -> list[tuple[tuple[float, ...], float]]:
        """Per (jobs, GPU type): :meth:`colocated_speeds` and :meth:`group_memory_mib`, the groups not kept
        asked of the inner predictor in one call when it has ``colocated_many``."""
        memo = self._memo
        out: list[Any] = []
        missing: list[tuple[int, Any, Any]] = []
        for i, (jobs, gpu_type) in enumerate(groups):
            group = tuple(jobs)
            speeds_key = ("speeds", group, gpu_type, tuple(profile_version(j.id) for j in group))
            memory_key = ("group_memory", group, gpu_type)
            speeds, memory = memo.peek(speeds_key), memo.peek(memory_key)
            out.append((speeds, memory))
            if speeds is _MISSING or memory is _MISSING:
                missing.append((i, speeds_key, memory_key))
        if missing:
            asked = [(tuple(groups[i][0]), groups[i][1]) for i, _, _ in missing]
            answers = ask_colocated_many(self.inner, asked)
            for (i, speeds_key, memory_key), (speeds, memory) in zip(missing, answers, strict=True):
                kept_speeds, kept_memory = out[i]
                if kept_speeds is _MISSING:
                    kept_speeds = tuple(speeds)
                    memo.put(speeds_key, kept_speeds)
                if kept_memory is _MISSING:
                    kept_memory = memory
                    memo.put(memory_key, memory)
                out[i] = (kept_speeds, kept_memory)
        return out


class _MemoFreezing:
    def __init__(self, inner: FreezingPredictor, memo: _Memo) -> None:
        self.inner, self._memo = inner, memo

    def num_freeze_levels(self, job: Job) -> int:
        return self._memo.get(  # type: ignore[no-any-return]
            ("levels", job), lambda: self.inner.num_freeze_levels(job))

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float = 0.0) -> float:
        return self.inner.frozen_penalty(job, freeze_level, start_progress)  # depends on progress: not kept


def memoized(predictors: Predictors, max_entries: int = 1_000_000) -> Predictors:
    """``predictors`` with their answers remembered per job (the immutable :class:`Job` itself is the
    key, so a job whose spec changes is a new key), for a policy that asks about the same jobs every
    round. Answers about a job profiled since (:func:`~dltsched.engine.domain.profiles.profile_version`) are
    asked again. Frozen penalties depend on training progress and are not kept; memory answers are raised to
    the peaks measured in the current run (:func:`learned_memory_mib`) on every call. At most ``max_entries``
    answers are kept (the older half is dropped when full).

    Parameters
    ----------
    predictors
        The predictors.
    max_entries
        Answers kept at most.

    Returns
    -------
    Predictors
        The memoized predictors (same answers).
    """
    memo = _Memo(max_entries)
    return Predictors(_MemoStepTime(predictors.step_time, memo), _MemoColocation(predictors.colocation, memo),
                      _MemoFreezing(predictors.freezing, memo))

