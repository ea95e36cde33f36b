"""The rows of profile datasets as calibration keeps them (jobs alone, co-located groups, one dataset per GPU
and sharing mode), and the job key every reader gives them; read by :mod:`.data` and :mod:`.layouts`."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import ValidationError

SHARING_MODES = ("timeslice", "mps")


@dataclass(frozen=True, slots=True)
class IsolatedRow:
    """One job measured alone: step time (s) of ``scope``, torch's peak allocation and NVML's whole-GPU used
    memory (MiB), NVML utilisation (%); ``None`` where not measured; the optimizer it trained with; the
    relative standard deviation of its timed steps (``None`` where the profile does not give them)."""

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
        """The isolated rows by job key (the mean step time where a job was measured more than once)."""
        seen: dict[tuple[str, str, int, bool], list[IsolatedRow]] = {}
        for row in self.isolated:
            seen.setdefault(row.key, []).append(row)
        return {k: v[0] if len(v) == 1 else mean_row(v) for k, v in seen.items()}


def mean_row(rows: Sequence[IsolatedRow]) -> IsolatedRow:
    """One row of a job measured several times: the mean of each measured value."""

    def mean(values: Iterable[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return sum(got) / len(got) if got else None

    first = rows[0]
    step = float(mean(r.step_time_s for r in rows) or first.step_time_s)
    return IsolatedRow(first.model, first.dataset, first.batch_size, step, first.scope, first.amp,
                       mean(r.peak_memory_mib for r in rows), mean(r.gmem_mib for r in rows),
                       mean(r.gpu_util for r in rows), first.optimizer, _pooled_rel_sd(rows, step))


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
