"""The rows of profile datasets as calibration keeps them (jobs alone, co-located groups, one dataset per GPU
and sharing mode), and the job key every reader gives them; read by :mod:`.data` and :mod:`.layouts`."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import ValidationError

SHARING_MODES = ("timeslice", "mps")


@dataclass(frozen=True, slots=True)
class IsolatedRow:
    """One job measured alone: step time (s) of ``scope``, torch's peak allocation and NVML's whole-GPU used
    memory (MiB), NVML utilisation (%); ``None`` where not measured; the optimizer it trained with; the
    relative standard deviation of its timed steps (``None`` where the profile does not give them); the NVML
    timestamped samples the utilisation rests on (``None`` where it was not read from them: older profiles,
    the polled fallback) and the seconds its window covered (``None`` where not recorded)."""

    model: str
    dataset: str
    batch_size: int
    step_time_s: float
    scope: str = "compute"
    amp: bool = False
    peak_memory_mib: float | None = None
    gmem_mib: float | None = None
    gpu_util: float | None = None
    optimizer: str = "sgd"
    step_time_rel_sd: float | None = None
    util_samples: int | None = None
    util_window_s: float | None = None

    @property
    def key(self) -> tuple[str, str, int, bool]:
        """The job this row measured: ``(model, dataset, batch_size, amp)``."""
        return self.model, self.dataset, self.batch_size, self.amp


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One co-located group: each member's key and normalized speed, the group's NVML memory and
    utilisation."""

    members: tuple[tuple[str, str, int, bool], ...]
    speeds: tuple[float, ...]
    gmem_mib: float | None = None
    gpu_util: float | None = None

    @property
    def models(self) -> frozenset[str]:
        """The models of the group's members."""
        return frozenset(m[0] for m in self.members)


@dataclass(frozen=True, slots=True)
class ProfileData:
    """What one GPU type taught under one sharing mode, from one or more dataset folders."""

    gpu: str
    sharing: str
    isolated: tuple[IsolatedRow, ...]
    groups: tuple[GroupRow, ...]
    tf32: frozenset[str] = frozenset()
    sources: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def isolated_by_key(self) -> dict[tuple[str, str, int, bool], IsolatedRow]:
        """The isolated rows by job key (where a job was measured more than once, its mean step time and
        memory, its utilisation from its best readings: :func:`mean_row`)."""
        seen: dict[tuple[str, str, int, bool], list[IsolatedRow]] = {}
        for row in self.isolated:
            seen.setdefault(row.key, []).append(row)
        return {k: v[0] if len(v) == 1 else mean_row(v) for k, v in seen.items()}


def util_rank(row: IsolatedRow) -> int:
    """How well a utilisation reading is known: the NVML samples it rests on (0 where it was not read from
    NVML's timestamped samples)."""
    return row.util_samples or 0


def best_util_readings(rows: Sequence[IsolatedRow]) -> list[IsolatedRow]:
    """The utilisation readings of a job measured several times, for the job (:func:`with_best_utilisation`):
    those of ``rows`` resting on the most NVML samples (all of them where none records its samples)."""
    got = [r for r in rows if r.gpu_util is not None]
    best = max((util_rank(r) for r in got), default=0)
    return [r for r in got if util_rank(r) == best]


def with_best_utilisation(rows: Sequence[IsolatedRow]) -> tuple[IsolatedRow, ...]:
    """``rows`` with the utilisation of each job kept only on its best readings (:func:`best_util_readings`)
    and dropped (``None``) on the others; step times and memory untouched.

    NVML's utilisation over a window of a few sample periods does not repeat between runs (the same job on
    an H200 read 69% and 56% over 0.8-1 s windows, within about 4.5% over 2.4-10 s), so a job profiled
    several times takes its utilisation from the reading with the longest sampled window, not the mean."""
    by_key: dict[tuple[str, str, int, bool], list[IsolatedRow]] = {}
    for r in rows:
        by_key.setdefault(r.key, []).append(r)
    kept = {id(r) for same in by_key.values() for r in best_util_readings(same)}
    return tuple(r if r.gpu_util is None or id(r) in kept else replace(r, gpu_util=None) for r in rows)


def mean_row(rows: Sequence[IsolatedRow]) -> IsolatedRow:
    """One row of a job measured several times: the mean of each measured value, the utilisation that of
    its best readings (:func:`best_util_readings`)."""

    def mean(values: Iterable[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return sum(got) / len(got) if got else None

    first = rows[0]
    step = float(mean(r.step_time_s for r in rows) or first.step_time_s)
    util = best_util_readings(rows)
    windows = [r.util_window_s for r in util if r.util_window_s is not None]
    return IsolatedRow(first.model, first.dataset, first.batch_size, step, first.scope, first.amp,
                       mean(r.peak_memory_mib for r in rows), mean(r.gmem_mib for r in rows),
                       mean(r.gpu_util for r in util), first.optimizer, _pooled_rel_sd(rows, step),
                       util[0].util_samples if util else None, max(windows) if windows else None)


def _pooled_rel_sd(rows: Sequence[IsolatedRow], step: float) -> float | None:
    """Relative spread of a job measured in several runs: its steps' spread within a run (root mean square)
    and the spread of the runs' step times about their mean, together."""
    within = [r.step_time_rel_sd for r in rows if r.step_time_rel_sd is not None]
    if not within and len(rows) < 2:
        return None
    between = sum((r.step_time_s / step - 1.0) ** 2 for r in rows) / max(len(rows) - 1, 1)
    return (sum(w * w for w in within) / max(len(within), 1) + between) ** 0.5


def _canonical(model: str, dataset: str | None) -> tuple[str, str]:
    from dltsched.predictors.zoo.graphs import resolve

    try:
        return resolve(model, dataset or None)
    except (KeyError, ValueError) as err:
        raise ValidationError("model", f"'{model}' ({dataset}) is not a zoo model: {err}") from None


def canonical_job(model: str, dataset: str | None, batch: Any, amp: Any) -> tuple[str, str, int, bool]:
    """A job's key as calibration keeps it: the zoo's model and dataset ids, the batch size, AMP."""
    mid, ds = _canonical(str(model), dataset)
    return mid, ds, int(float(batch)), str(amp).strip().lower() in ("1", "true", "1.0")


def files_digest(folder: Path) -> str:
    """Short SHA-256 of a dataset folder's CSV and JSON files (names and contents)."""
    digest = hashlib.sha256()
    for name in sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix in (".csv", ".json")):
        digest.update(name.encode())
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()[:16]
