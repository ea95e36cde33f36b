"""Job profiles: what a short isolated run of a job type on one GPU type measures.

A :class:`JobProfile` holds the step time at a batch size, peak GPU memory (MiB), GPU (SM)
utilisation (%) and, where the tool reported it, memory-bandwidth utilisation (%: the share of time
the memory controller was busy, NVML's ``utilization.memory``). Real schedulers (Gavel, Lucid, Sia)
take such a profile when a job arrives; predictors use it where there is one and predict only what
is missing, and ``source`` says which (``"measured"``, or ``"predicted"`` for a profile filled in by
the step-time and memory models).

Readers:

- :func:`read_gavel_profiles`: Gavel's isolated throughputs (K80, P100, V100; step time only; MIT);
- :func:`read_lucid_profiles`: Lucid's ``single_data.csv`` (step time, memory, SM and memory
  utilisation on one unrecorded GPU, id ``"lucid"``; non-commercial licence: read at run time only);
- :func:`read_harness_profiles`: the profiling harness's ``steptime.csv`` or ``single_data.csv``
  (``dltsched profile``, :mod:`dltsched.predictors.profiling.dataset`).

Lucid's ``gmem_util`` is read as memory-bandwidth utilisation: ``gmem / gmem_util`` is not a
constant GPU capacity across its rows (12 to 32 GiB), so it is not the share of memory used.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dltsched.engine.domain.catalog import gpu_spec, model_catalog, normalize_name
from dltsched.engine.domain.errors import ValidationError
from dltsched.instances.datadir import data_file

#: GPU id of Lucid's measurements (its GPU model is not recorded)
LUCID_GPU = "lucid"

ProfileSource = Literal["measured", "predicted"]


@dataclass(frozen=True, slots=True, order=True)
class ProfileKey:
    """What a profile is of: a job type (model, batch size, precision, dataset) on one GPU type."""

    gpu: str
    model: str
    batch_size: int
    amp: bool = False
    dataset: str | None = None


@dataclass(frozen=True, slots=True)
class JobProfile:
    """One isolated run of a job type on a GPU type; ``None`` where not measured."""

    key: ProfileKey
    step_time_s: float
    memory_mib: float | None = None
    gpu_util: float | None = None
    mem_bw_util: float | None = None
    source: ProfileSource = "measured"
    origin: str = ""

    def __post_init__(self) -> None:
        if not (isinstance(self.step_time_s, int | float) and math.isfinite(self.step_time_s)
                and self.step_time_s > 0):
            raise ValidationError("step_time_s", f"{self.step_time_s!r} not understood; must be a number > 0")
        if self.memory_mib is not None and not (math.isfinite(self.memory_mib) and self.memory_mib >= 0):
            raise ValidationError("memory_mib",
                                  f"{self.memory_mib!r} not understood; must be >= 0 MiB or None")
        for name in ("gpu_util", "mem_bw_util"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and 0.0 <= value <= 100.0):
                raise ValidationError(name,
                                      f"{value!r} not understood; must be a percentage in [0, 100] or None")
        if self.source not in ("measured", "predicted"):
            raise ValidationError("source", f"{self.source!r} not understood; one of 'measured', 'predicted'")

    @property
    def throughput(self) -> float:
        """Samples per second alone on the GPU."""
        return self.key.batch_size / self.step_time_s


class ProfileSet(Mapping[ProfileKey, JobProfile]):
    """Profiles by key; :meth:`find` also matches a job whose dataset is not given."""

    __slots__ = ("_by_key", "_by_job")

    def __init__(self, profiles: Iterable[JobProfile] = ()) -> None:
        self._by_key: dict[ProfileKey, JobProfile] = {}
        self._by_job: dict[tuple[str, str, int, bool], list[JobProfile]] = {}
        for p in profiles:
            if p.key in self._by_key:
                raise ValidationError("profiles", f"two profiles of {p.key}; one per job type and GPU")
            self._by_key[p.key] = p
            k = p.key
            self._by_job.setdefault((k.gpu, k.model, k.batch_size, k.amp), []).append(p)

    def __getitem__(self, key: ProfileKey) -> JobProfile:
        return self._by_key[key]

    def __iter__(self) -> Iterator[ProfileKey]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def find(self, gpu: str, model: str, batch_size: int, amp: bool = False,
             dataset: str | None = None) -> JobProfile | None:
        """The profile of exactly this job type; with ``dataset`` ``None``, the only profile of the model at
        this batch size and precision on ``gpu`` (``None`` when there is none or several)."""
        exact = self._by_key.get(ProfileKey(gpu, model, batch_size, amp, dataset))
        if exact is not None or dataset is not None:
            return exact
        found = self._by_job.get((gpu, model, batch_size, amp), [])
        return found[0] if len(found) == 1 else None

    def gpus(self) -> tuple[str, ...]:
        """The GPU types profiled.

        Returns
        -------
        tuple[str, ...]
            Sorted GPU types.
        """
        return tuple(sorted({k.gpu for k in self._by_key}))

    def merged(self, other: Iterable[JobProfile]) -> ProfileSet:
        """These profiles, with ``other``'s replacing any of the same key."""
        table = dict(self._by_key)
        table.update({p.key: p for p in other})
        return ProfileSet(table.values())


def canonical_gpu(gpu: str) -> str:
    """Catalog id of ``gpu`` (``"lucid"`` stays); unknown names raise with close matches."""
    if gpu.strip().lower() == LUCID_GPU:
        return LUCID_GPU
    try:
        return gpu_spec(gpu).id
    except ValueError as err:
        raise ValidationError("gpu", str(err)) from None


def job_identity(model: str, dataset: str | None) -> tuple[str, str | None]:
    """Catalog model id and catalog dataset name (``None`` when the model has no such dataset)."""
    try:
        spec = model_catalog().get(model)
    except ValueError as err:
        raise ValidationError("model", str(err)) from None
    if dataset is None:
        return spec.id, None
    key = normalize_name(dataset)
    return spec.id, next((d for d in spec.datasets if normalize_name(d) == key), None)


def _number(row: Mapping[str, str], name: str, path: Path) -> float | None:
    text = (row.get(name) or "").strip()
    if text == "" or text.lower() == "nan":
        return None
    try:
        return float(text)
    except ValueError:
        raise ValidationError(f"{path.name}: {name}", f"{text!r} not understood; must be a number") from None


# ---------------------------------------------------------------------------------------- readers


def read_gavel_profiles(path: str | os.PathLike[str] | None = None, *,
                        data_dir: str | os.PathLike[str] | None = None) -> ProfileSet:
    """Gavel's isolated throughputs (one GPU, consolidated) as step-time-only profiles (MIT-licensed data)."""
    from dltsched.instances.readers.gavel_throughputs import read_gavel_throughputs

    raw = read_gavel_throughputs(path, data_dir=data_dir)
    out = []
    for (gpu, jt, scale, consolidated), steps_per_s in sorted(raw.isolated.items(),
                                                              key=lambda kv: str(kv[0])):
        if scale == 1 and consolidated and steps_per_s > 0:
            out.append(JobProfile(ProfileKey(gpu, jt.model, jt.batch_size, False, jt.dataset),
                                  1.0 / steps_per_s, origin="gavel"))
    return ProfileSet(out)


def _single_rows(path: Path, default_gpu: str | None, origin: str) -> list[JobProfile]:
    """Rows in Lucid's ``single_data.csv`` layout (``speed`` in samples/s), ``gpu`` column optional."""
    out = []
    with path.open(newline="") as fh:
        for n, row in enumerate(csv.DictReader(fh), start=2):
            gpu = (row.get("gpu") or "").strip() or default_gpu
            if gpu is None:
                raise ValidationError(f"{path.name}:{n}: gpu", "missing; add a gpu column")
            model, dataset = job_identity(row["model"], row.get("dataset"))
            batch = int(float(row["batchsize"]))
            speed = _number(row, "speed", path)
            if speed is None or speed <= 0:
                raise ValidationError(f"{path.name}:{n}: speed",
                                      f"{row['speed']!r} not understood; must be > 0")
            util, bw = _number(row, "gpu_util", path), _number(row, "gmem_util", path)
            out.append(JobProfile(ProfileKey(canonical_gpu(gpu), model, batch, bool(int(float(row["amp"]))),
                                             dataset),
                                  batch / speed, _number(row, "gmem", path),
                                  None if util is None else min(100.0, util),
                                  None if bw is None else min(100.0, bw), origin=origin))
    return out


def read_lucid_profiles(path: str | os.PathLike[str] | None = None, *,
                        data_dir: str | os.PathLike[str] | None = None) -> ProfileSet:
    """Lucid's isolated profiles (``single_data.csv``) on GPU ``"lucid"``; non-commercial licence."""
    p = Path(path) if path is not None else data_file("lucid", "single_data.csv", data_dir=data_dir)
    return ProfileSet(_single_rows(p, LUCID_GPU, "lucid"))


def read_harness_profiles(path: str | os.PathLike[str]) -> ProfileSet:
    """The profiling harness's isolated runs: ``steptime.csv`` (single-GPU rows on a GPU, CPU smoke rows
    skipped, a repeated job type's last row kept; memory = NVML's ``gmem_used_mib`` where measured, else
    torch's peak) or ``single_data.csv`` with a ``gpu`` column."""
    p = Path(path)
    with p.open(newline="") as fh:
        header = next(csv.reader(fh), [])
    if "speed" in header:
        return ProfileSet(_single_rows(p, None, f"harness:{p.name}"))
    if "step_time_s" not in header:
        raise ValidationError(p.name, "not a profile file; expected steptime.csv or single_data.csv from "
                                      "`dltsched profile`")
    out: dict[ProfileKey, JobProfile] = {}
    with p.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if int(float(row.get("num_gpus") or 1)) != 1 or row.get("gpu", "").strip().lower() in ("", "cpu"):
                continue
            model, dataset = job_identity(row["model"], row.get("dataset"))
            step = _number(row, "step_time_s", p)
            if step is None:
                continue
            memory = _number(row, "gmem_used_mib", p)
            memory = memory if memory is not None else _number(row, "peak_memory_mib", p)
            util = _number(row, "gpu_util", p)
            amp = (row.get("amp") or "0").strip().lower() in ("1", "true", "1.0")
            key = ProfileKey(canonical_gpu(row["gpu"]), model, int(float(row["batch_size"])), amp, dataset)
            out[key] = JobProfile(key, step, memory, None if util is None else min(100.0, util),
                                  origin=f"harness:{p.name}")
    return ProfileSet(out.values())
