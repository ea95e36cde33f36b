"""What every trace reader shares: trace rows, time windows, clusters, model assignment, Instance.

Readers parse their files into :class:`TraceJob` rows and call :func:`build_instance`, which

1. sorts rows by arrival (stable) and keeps ``start_s <= arrival < end_s`` (trace time);
2. keeps the first ``max_jobs`` of them and re-bases arrivals so the window starts at 0
   (at ``start_s`` when given, else at the first kept arrival);
3. takes the cluster from the caller (a :class:`Cluster` or a spec string, see
   :mod:`dltsched.instances.clusters`) or sizes the documented default mixed cluster to the jobs;
4. drops jobs that need more GPUs of one type than the cluster has and counts them in
   ``metadata["dropped_too_large"]`` (never silently);
5. turns trace durations into iterations with the reference step time
   (:mod:`dltsched.instances.reference`) on ``reference_gpu`` and keeps the duration in
   ``duration_hint_s``.

**Model rule for traces without model names** (Philly, Alibaba): each row, in file order, gets one
of Gavel's 26 job types (:data:`~dltsched.instances.generator.GAVEL_JOB_TYPES`) uniformly at random
from ``numpy.random.default_rng(seed)`` - the rule Gavel used to build its Philly-derived traces
(their job-type counts are near-uniform). Draws happen before windowing, so a job keeps its model
in every subset of the trace.

**Freezing rule** (traces say nothing about it): a job allows layer freezing when a hash of its id
falls in the lowest ``freeze_fraction`` (default 0.3, as in the generator), with an accuracy budget
(largest acceptable frozen penalty) uniform in [0.01, 0.05] from a second hash - stable across windows
and seeds, so every policy and subset sees the same owners' choices. ``freeze_fraction=0`` turns it off.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.hashing import hash_unit
from dltsched.engine.domain.model import Cluster, Instance, Job
from dltsched.instances.clusters import default_cluster_for, format_cluster_spec, parse_cluster_spec
from dltsched.instances.reference import ReferenceStepTime, reference_step_time

DEFAULT_REFERENCE_GPU = "v100"


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job as a trace gives it; exactly one of ``duration_s`` / ``total_iterations`` drives its work.

    Parameters
    ----------
    id
        The job's id.
    arrival_s
        Its arrival, trace time in seconds.
    num_gpus
        GPUs it asks for.
    model, batch_size, dataset
        Its model-zoo id, batch size per GPU and dataset (``None``: the model's default).
    duration_s
        How long it ran in the trace (turned into iterations with the reference step time).
    total_iterations
        Its work, when the trace gives it.
    gpu_fraction
        Share of a GPU it asks for (fractional-GPU traces).
    gpu_types
        GPU types it may use (empty: any).
    optimizer
        Its optimizer (memory model).
    hyperparameters
        Further settings the trace records.
    """

    id: str
    arrival_s: float
    num_gpus: int
    model: str
    batch_size: int
    dataset: str | None = None
    duration_s: float | None = None
    total_iterations: float | None = None
    gpu_fraction: float = 1.0
    gpu_types: tuple[str, ...] = ()
    optimizer: str = "sgd"
    hyperparameters: tuple[tuple[str, float | str], ...] = ()


@dataclass(frozen=True, slots=True)
class Window:
    """Which part of a trace to keep (trace time, seconds) and how many jobs at most.

    Parameters
    ----------
    start_s, end_s
        Keep jobs arriving in ``[start_s, end_s)`` (``None``: unbounded).
    max_jobs
        Then keep the first this many.

    Raises
    ------
    ValidationError
        When ``max_jobs`` is below 1 or ``end_s`` is not after ``start_s``.
    """

    start_s: float | None = None
    end_s: float | None = None
    max_jobs: int | None = None

    def __post_init__(self) -> None:
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValidationError("max_jobs", f"{self.max_jobs!r} not understood; must be >= 1")
        if self.start_s is not None and self.end_s is not None and self.end_s <= self.start_s:
            raise ValidationError(
                "end_s", f"{self.end_s!r} not understood; must be > start_s ({self.start_s:g})"
            )

    def apply(self, rows: Sequence[TraceJob]) -> tuple[list[TraceJob], float]:
        """Rows in the window (sorted by arrival, first ``max_jobs``) and the re-basing offset.

        Parameters
        ----------
        rows
            The trace's rows.

        Returns
        -------
        kept : list of TraceJob
            The rows kept.
        offset : float
            The first kept arrival (subtracted from every arrival).

        Raises
        ------
        ValidationError
            When no job arrives in the window.
        """
        ordered = sorted(rows, key=lambda r: r.arrival_s)
        lo = -np.inf if self.start_s is None else self.start_s
        hi = np.inf if self.end_s is None else self.end_s
        kept = [r for r in ordered if lo <= r.arrival_s < hi][: self.max_jobs]
        if not kept:
            raise ValidationError("start_s/end_s", f"no job arrives in [{lo:g}, {hi:g}); widen the window")
        offset = self.start_s if self.start_s is not None else kept[0].arrival_s
        return kept, offset

    def as_dict(self) -> dict[str, Any]:
        """The window as instance metadata records it.

        Returns
        -------
        dict of str to Any
            ``start_s``, ``end_s`` and ``max_jobs``.
        """
        return {"start_s": self.start_s, "end_s": self.end_s, "max_jobs": self.max_jobs}


def assign_gavel_models(count: int, seed: int) -> list[tuple[str, int, str | None]]:
    """(model, batch size, dataset) for ``count`` rows by the documented uniform Gavel rule.

    Parameters
    ----------
    count
        The number of rows.
    seed
        The random seed.

    Returns
    -------
    list of (str, int, str or None)
        One triple per row.
    """
    from dltsched.instances.generator import GAVEL_JOB_TYPES
    from dltsched.instances.readers.gavel_throughputs import parse_job_type

    types = [parse_job_type(label) for label in GAVEL_JOB_TYPES]
    picks = np.random.default_rng(seed).integers(0, len(types), size=count)
    return [(types[k].model, types[k].batch_size, types[k].dataset) for k in picks.tolist()]


def resolve_cluster(cluster: Cluster | str | None, rows: Sequence[TraceJob]) -> Cluster:
    """The caller's cluster, or the default mixed cluster sized to ``rows``.

    Parameters
    ----------
    cluster
        The caller's cluster or its spec.
    rows
        The rows (their largest job and mean GPU demand size the default).

    Returns
    -------
    Cluster
        The cluster.

    Raises
    ------
    ValidationError
        When ``cluster`` is neither a cluster nor a spec.
    """
    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, str):
        return parse_cluster_spec(cluster)
    if cluster is not None:
        raise ValidationError(
            "cluster", f"{cluster!r} not understood; give a Cluster or a spec like 'v100:8x8'"
        )
    span_s = max(rows[-1].arrival_s - rows[0].arrival_s, 1.0)
    gpu_s = sum(r.num_gpus * r.gpu_fraction * (r.duration_s or 0.0) for r in rows)
    return default_cluster_for(max(r.num_gpus for r in rows), gpu_s / span_s)


def _fits(row: TraceJob, by_type: dict[str, int], largest: int) -> bool:
    if not row.gpu_types:
        return row.num_gpus <= largest
    return row.num_gpus <= max((by_type.get(t, 0) for t in row.gpu_types), default=0)


def build_instance(
    name: str,
    rows: Sequence[TraceJob],
    *,
    window: Window,
    cluster: Cluster | str | None,
    data_dir: str | os.PathLike[str] | None,
    metadata: dict[str, Any],
    reference_gpu: str = DEFAULT_REFERENCE_GPU,
    freeze_fraction: float = 0.3,
) -> Instance:
    """The :class:`Instance` of a trace's rows (see module docstring for the steps).

    Parameters
    ----------
    name
        The instance's name.
    rows
        The trace's rows.
    window
        The part to keep.
    cluster
        The cluster, its spec, or ``None`` for the default sized to the rows.
    data_dir
        The data folder with the reference step times.
    metadata
        What the reader records (source, files); the window and conversion are added.
    reference_gpu
        The GPU type trace durations were measured on.
    freeze_fraction
        Share of jobs that allow layer freezing (chosen by a hash of the job id).

    Returns
    -------
    Instance
        The instance, arrivals re-based to the first kept one.

    Raises
    ------
    ValidationError
        When no job of the window fits the cluster.
    """
    kept, offset = window.apply(rows)
    resolved = resolve_cluster(cluster, kept)
    by_type = resolved.gpus_by_type()
    largest = max(by_type.values())
    fitting = [r for r in kept if _fits(r, by_type, largest)]
    if not fitting:
        raise ValidationError(
            "cluster", f"no job of the window fits {format_cluster_spec(resolved)}; grow the cluster"
        )
    step_s = _StepTimes(reference_step_time(data_dir), reference_gpu)
    jobs = [_job(r, offset, step_s, freeze_fraction) for r in fitting]
    meta = {
        **metadata,
        "window": window.as_dict(),
        "arrival_offset_s": offset,
        "num_jobs_in_window": len(kept),
        "dropped_too_large": len(kept) - len(fitting),
        "cluster_gpus_by_type": by_type,
        "cluster_given": cluster is not None,
        "reference_gpu": reference_gpu,
        "step_times": step_s.reference.source,
        "freeze_fraction": freeze_fraction,
    }
    if len(resolved.nodes) <= 64:
        meta["cluster_spec"] = format_cluster_spec(resolved)
    return Instance(name, resolved, tuple(jobs), meta)


@dataclass(frozen=True, slots=True)
class _StepTimes:
    """Reference step time per (model, batch, dataset, #GPUs), computed once per distinct key."""

    reference: ReferenceStepTime
    gpu_type: str
    cache: dict[tuple[str, int, str | None, int], float] = field(default_factory=dict)

    def of(self, row: TraceJob) -> float:
        key = (row.model, row.batch_size, row.dataset, row.num_gpus)
        if key not in self.cache:
            draft = Job(row.id, row.model, row.batch_size, 1.0, num_gpus=row.num_gpus, dataset=row.dataset)
            self.cache[key] = self.reference.step_time_s(draft, self.gpu_type)
        return self.cache[key]


def _unit(*parts: str) -> float:
    """A number in [0, 1) from a hash of ``parts``."""
    return hash_unit("|".join(parts))


def _job(row: TraceJob, offset: float, step_s: _StepTimes, freeze_fraction: float) -> Job:
    freezable = _unit("freeze", row.id) < freeze_fraction
    iterations = row.total_iterations
    if iterations is None:
        iterations = float(max(1, round((row.duration_s or 0.0) / step_s.of(row))))
    return Job(
        row.id,
        row.model,
        row.batch_size,
        iterations,
        num_gpus=row.num_gpus,
        arrival_time_s=row.arrival_s - offset,
        dataset=row.dataset,
        gpu_fraction=row.gpu_fraction,
        gpu_types=row.gpu_types,
        optimizer=row.optimizer,
        hyperparameters=row.hyperparameters,
        duration_hint_s=row.duration_s,
        freeze_allowed=freezable,
        accuracy_budget=round(0.01 + 0.04 * _unit("budget", row.id), 4) if freezable else 0.0,
    )
