"""A trained co-location model exported to a JSON table: the engine's predictor, no torch needed.

Entries are keyed by GPU and the sorted job types of a group (``"k80|resnet18:32|resnet50:64"``)
and hold each job's speed, the group's memory (MiB, ``null`` when the model has no memory head)
and GPU utilisation (%). Lookup for a group outside the table, in order:

1. exact key;
2. each job's batch size replaced by the nearest tabulated batch size of the same model, GPU and
   precision (counted as ``fallback="nearest_batch"``);
3. the analytic contention model (counted as ``fallback="analytic"``; a warning once per model the table
   has never seen and once for the first missing group of known models), unless
   ``strict`` is set, which raises instead.

Group memory missing from the table comes from the analytic memory of the step-time predictor.
Groups larger than the table's ``max_jobs`` and unknown GPUs or models raise a ValidationError.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.predictors.colocation.baselines import AnalyticContention, as_job
from dltsched.predictors.colocation.features import Group, check_group, resolve_gpu
from dltsched.predictors.colocation.metrics import GroupPrediction
from dltsched.predictors.colocation.samples import (
    LUCID_GPU,
    LUCID_PROXY_GPU,
    ColocDataset,
    IsolatedProfile,
    JobSpec,
)

log = logging.getLogger(__name__)

DEFAULT_TABLE = "default_table.json"


def job_key(job: JobSpec) -> str:
    """A job type's key in a table (its label).

    Parameters
    ----------
    job
        The job type.

    Returns
    -------
    str
        ``model:batch[:amp]``.
    """
    return job.label


def group_key(gpu: str, jobs: Sequence[JobSpec]) -> str:
    """A group's key in a table: the GPU type and the sorted job keys, joined by ``|``.

    Parameters
    ----------
    gpu
        The GPU type.
    jobs
        The job types.

    Returns
    -------
    str
        The key.
    """
    return "|".join([gpu, *sorted(job_key(j) for j in jobs)])


def parse_job(text: str) -> JobSpec:
    """``MODEL:BATCH[:amp]`` -> JobSpec (model names resolve through the catalog)."""
    from dltsched.engine.domain.catalog import model_catalog

    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[1].isdigit() or (len(parts) == 3 and parts[2].lower() != "amp"):
        raise ValidationError("job", f"'{text}' not understood; write MODEL:BATCH or MODEL:BATCH:amp")
    try:
        model = model_catalog().resolve(parts[0])
    except ValueError as err:
        raise ValidationError("job", str(err)) from None
    return JobSpec(model, int(parts[1]), len(parts) == 3)


@dataclass(slots=True)
class ColocationTable:
    """Tabulated co-location predictions implementing the engine's ``ColocationPredictor``."""

    entries: dict[str, GroupPrediction]
    max_jobs: int
    record: dict[str, Any] = field(default_factory=dict)
    strict: bool = False
    analytic: AnalyticContention = field(default_factory=AnalyticContention)
    fallbacks: Counter[str] = field(default_factory=Counter)
    _batches: dict[tuple[str, str, bool], tuple[int, ...]] = field(default_factory=dict)
    _memory: dict[tuple[str, JobSpec], float] = field(default_factory=dict)  # analytic memory per (GPU, job)
    #: analytic predictions of groups outside the table, by GPU and jobs in order
    _analytic_groups: dict[tuple[str, tuple[JobSpec, ...]], GroupPrediction] = field(default_factory=dict)
    _warned: set[str] = field(default_factory=set)  # models outside the table, warned about
    _warned_group: bool = False  # the first missing group of known models was warned about

    def __post_init__(self) -> None:
        sizes: dict[tuple[str, str, bool], set[int]] = {}
        for key in self.entries:
            gpu, *labels = key.split("|")
            for label in labels:
                model, batch, *amp = label.split(":")
                sizes.setdefault((gpu, model, bool(amp)), set()).add(int(batch))
        self._batches = {k: tuple(sorted(v)) for k, v in sizes.items()}

    # ------------------------------------------------------------------ group interface
    def predict_group(self, group: Group) -> GroupPrediction:
        """Speeds (in the order of ``group.jobs``), memory and utilisation, with the fallbacks above."""
        found, gpu = self._speeds(group)
        if found.memory_mib is None:
            memory = sum(self._analytic_memory_mib(gpu, j) for j in group.jobs)
            found = GroupPrediction(found.speeds, memory, found.gpu_util)
        return found

    def _analytic_memory_mib(self, gpu: str, job: JobSpec) -> float:
        key = (gpu, job)
        if key not in self._memory:
            real_gpu = LUCID_PROXY_GPU if gpu == LUCID_GPU else gpu
            self._memory[key] = self.analytic.step_time.memory_mib(as_job(job), real_gpu)
        return self._memory[key]

    def _speeds(self, group: Group) -> tuple[GroupPrediction, str]:
        """The table's (or a fallback's) prediction, memory possibly ``None``, and the canonical GPU id."""
        check_group(group, self.max_jobs)
        gpu = resolve_gpu(group.gpu)
        found = self._lookup(gpu, group.jobs)
        if found is None:
            near = tuple(self._nearest(gpu, j) for j in group.jobs)
            found = self._lookup(gpu, near)
            if found is not None:
                self.fallbacks["nearest_batch"] += 1
        if found is None:
            if self.strict:
                raise ValidationError("jobs",
                                      f"group {group_key(gpu, group.jobs)} not in the table (strict mode)")
            self.fallbacks["analytic"] += 1
            ordered = (gpu, tuple(group.jobs))  # speeds follow the group's order
            if ordered not in self._analytic_groups:
                self._warn_outside(gpu, group.jobs)
                self._analytic_groups[ordered] = self.analytic.predict([Group(gpu, group.jobs)],
                                                                       ColocDataset((), {}))[0]
            found = self._analytic_groups[ordered]
        return found, gpu

    def _warn_outside(self, gpu: str, jobs: Sequence[JobSpec]) -> None:
        """One warning per model the table has never seen, one for the first group of known models it lacks
        (each further group is logged at debug level; all are counted in ``fallbacks["analytic"]``)."""
        known = {model for (_, model, _) in self._batches}
        unknown = {j.model for j in jobs if j.model not in known}
        key = group_key(gpu, jobs)
        for model in sorted(unknown - self._warned):
            self._warned.add(model)
            log.warning("co-location: model %s is not in the table; its groups use the analytic contention "
                        "model (first: %s)", model, key)
        if not unknown and not self._warned_group:
            self._warned_group = True
            log.warning("co-location: %s not in the table; analytic fallback for it and similar groups "
                        "(counted in fallbacks)", key)
        elif not unknown:
            log.debug("co-location: %s not in the table; analytic fallback", key)

    def _lookup(self, gpu: str, jobs: Sequence[JobSpec]) -> GroupPrediction | None:
        entry = self.entries.get(group_key(gpu, jobs))
        if entry is None:
            return None
        order = sorted(range(len(jobs)), key=lambda i: job_key(jobs[i]))
        speeds = [0.0] * len(jobs)
        for pos, i in enumerate(order):
            speeds[i] = entry.speeds[pos]
        return GroupPrediction(tuple(speeds), entry.memory_mib, entry.gpu_util)

    def _nearest(self, gpu: str, job: JobSpec) -> JobSpec:
        sizes = self._batches.get((gpu, job.model, job.amp))
        if not sizes:
            return job
        best = min(sizes, key=lambda b: (abs(b - job.batch_size), b))
        return JobSpec(job.model, best, job.amp, job.dataset)

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """:class:`~.metrics.GroupPredictor` interface (isolated profiles are baked into the table)."""
        return [self.predict_group(g) for g in groups]

    # ------------------------------------------------------------------ engine interface
    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """Co-located speeds relative to running alone, from the table (the
        :class:`~dltsched.engine.domain.predictors.ColocationPredictor` protocol)."""
        return self._speeds(Group(gpu_type, tuple(_spec(j) for j in jobs)))[0].speeds

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        """The group's GPU memory, MiB, from the table (the
        :class:`~dltsched.engine.domain.predictors.ColocationPredictor` protocol)."""
        memory = self.predict_group(Group(gpu_type, tuple(_spec(j) for j in jobs))).memory_mib
        assert memory is not None
        return memory

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict[str, Any]:
        """The table as plain JSON data (what :meth:`from_json` reads).

        Returns
        -------
        dict[str, Any]
            Format tag, group size limit, record and entries.
        """
        return {"format": "dltsched-colocation-table/1", "max_jobs": self.max_jobs, "record": self.record,
                "entries": {k: [list(v.speeds), v.memory_mib, v.gpu_util]
                            for k, v in sorted(self.entries.items())}}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the table to ``path`` as compact JSON."""
        Path(path).write_text(json.dumps(self.to_json(), separators=(",", ":")))

    @classmethod
    def from_json(cls, raw: dict[str, Any], *, strict: bool = False) -> ColocationTable:
        """A table from :meth:`to_json`'s data.

        Parameters
        ----------
        raw
            The JSON data.
        strict
            Whether a group not in the table is an error rather than predicted.

        Returns
        -------
        ColocationTable
            The table.

        Raises
        ------
        ValidationError
            When the data is not a ``dltsched-colocation-table/1``.
        """
        if raw.get("format") != "dltsched-colocation-table/1":
            raise ValidationError("format",
                                  f"{raw.get('format')!r} not understood; expected "
                                  "dltsched-colocation-table/1")
        entries = {k: GroupPrediction(tuple(v[0]), v[1], v[2]) for k, v in raw["entries"].items()}
        return cls(entries, int(raw["max_jobs"]), raw.get("record", {}), strict)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, strict: bool = False) -> ColocationTable:
        """A table written by :meth:`save` (``strict``: a group not in the table is an error rather than
        predicted)."""
        return cls.from_json(json.loads(Path(path).read_text()), strict=strict)


def _spec(job: Job) -> JobSpec:
    return JobSpec(job.model, job.batch_size, job.amp, job.dataset)


def export_table(predictor: Any, gpus: Sequence[str], jobs: Sequence[JobSpec],
                 isolated: dict[tuple[str, JobSpec], IsolatedProfile], max_jobs: int,
                 record: dict[str, Any] | None = None) -> ColocationTable:
    """Tabulate a trained group predictor for every group of 2..``max_jobs`` of ``jobs`` on ``gpus``."""
    from dltsched.predictors.colocation.train import all_groups

    groups = all_groups(gpus, jobs, max_jobs)
    preds = predictor.predict(groups, ColocDataset((), isolated))
    entries = {}
    for g, p in zip(groups, preds, strict=True):
        order = sorted(range(len(g.jobs)), key=lambda i: job_key(g.jobs[i]))  # the key's job order
        entries[group_key(g.gpu, g.jobs)] = GroupPrediction(tuple(p.speeds[i] for i in order), p.memory_mib,
                                                            p.gpu_util)
    return ColocationTable(entries, max_jobs, dict(record or {}))


@cache
def _default_raw() -> dict[str, Any]:
    return json.loads(resources.files("dltsched.predictors.colocation").joinpath(DEFAULT_TABLE).read_text())


def default_table(*, strict: bool = False) -> ColocationTable:
    """The shipped table (trained on Gavel's MIT-licensed pairs only)."""
    return ColocationTable.from_json(_default_raw(), strict=strict)
