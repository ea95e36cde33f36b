"""Profile datasets as calibration reads them: what ``dltsched profile --out`` wrote, per GPU and sharing
mode.

A dataset folder holds ``steptime.csv`` (jobs alone), ``colocate_info.csv`` / ``colocate3_info.csv`` (groups),
``groups.json`` (all of it with every step time) and ``measurement.json`` (GPU, driver, math mode, sharing,
command). ``groups.json`` is read where it exists, else the CSVs (Lucid's layout, with ``single_data.csv``
beside them: a folder laid out like Lucid's own data reads the same way when its ``gpu`` column names a
catalog GPU). Folders are found under each path given (``h200/`` and ``h200/mps/`` alike).

Every row is keyed by GPU and sharing mode: time-slicing (``timeslice``, several processes on one GPU) and
CUDA MPS (``mps``) are different regimes and are never pooled.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.calibration.layouts import gavel_file, is_lucid_folder, read_gavel, read_lucid
from dltsched.predictors.calibration.rows import (
    SHARING_MODES,
    GroupRow,
    IsolatedRow,
    ProfileData,
    canonical_job,
    files_digest,
    mean_row,
    with_best_utilisation,
)


def _number(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def step_rel_sd(raw: dict[str, Any], step_s: float) -> float | None:
    """Relative standard deviation of a profile's timed steps: from its ``step_times_s`` (``groups.json``), or
    from the steps timed ``n`` and the 95% interval ``step_time_ci95_low_s`` .. ``step_time_ci95_high_s``
    (``steptime.csv``); ``None`` where the profile gives neither."""
    steps = [float(v) for v in raw.get("step_times_s") or () if _number(v)]
    if len(steps) >= 2:
        mean = sum(steps) / len(steps)
        return (sum((v - mean) ** 2 for v in steps) / (len(steps) - 1)) ** 0.5 / mean
    n, low, high = (_number(raw.get(k)) for k in ("n", "step_time_ci95_low_s", "step_time_ci95_high_s"))
    if n and n >= 2 and low is not None and high is not None and high >= low and step_s > 0:
        return (high - low) / 2.0 / 1.96 * math.sqrt(n) / step_s
    return None


def util_window(raw: dict[str, Any]) -> dict[str, Any]:
    """The :class:`IsolatedRow` fields of a profile's utilisation window: ``util_samples``, the NVML samples
    the reading rests on (``None`` unless ``util_source`` is ``nvml_samples``: a polled reading counts polls,
    not samples), and ``util_window_s``, the seconds its window covered (``None`` where the profile does not
    say)."""
    samples = _number(raw.get("util_samples"))
    from_samples = str(raw.get("util_source") or "").strip() == "nvml_samples"
    return {"util_samples": int(samples) if from_samples and samples else None,
            "util_window_s": _number(raw.get("util_window_s"))}


def dataset_folders(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Every folder under ``paths`` that holds a profile dataset (``steptime.csv`` or ``groups.json``)."""
    out: list[Path] = []
    for given in paths:
        path = Path(given)
        if not path.is_dir():
            raise ValidationError("DIR", f"'{path}' is not a folder; give a 'dltsched profile --out' folder")
        found = sorted({p.parent for name in ("steptime.csv", "groups.json", "colocate_info.csv")
                        for p in path.rglob(name)})
        if not found:
            raise ValidationError("DIR", f"'{path}' holds no profile dataset (steptime.csv, groups.json or "
                                         "colocate_info.csv); give a 'dltsched profile --out' folder")
        out += [f for f in found if f not in out]
    return out


def _record(folder: Path) -> dict[str, Any]:
    path = folder / "measurement.json"
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text())
    except ValueError as err:
        raise ValidationError(str(path), f"not JSON ({err}); rewrite it or remove it") from None
    return record if isinstance(record, dict) else {}


def _tf32(record: dict[str, Any]) -> frozenset[str]:
    """Op classes that ran in TF32 per the record (cuDNN convolutions; matmuls)."""
    def on(key: str) -> bool:
        return str(record.get(key, "")).strip().lower() == "true"

    conv = {"conv"} if on("tf32_cudnn") else set()
    return frozenset(conv | ({"linear", "bmm"} if on("tf32_matmul") else set()))


_Read = tuple[list[IsolatedRow], list[GroupRow], str | None, str | None]


def _from_groups_json(folder: Path, scope: str) -> _Read:
    raw = json.loads((folder / "groups.json").read_text())
    isolated, groups, gpu, sharing = [], [], None, None
    for r in raw.get("isolated", []):
        if r.get("gpu") in (None, "", "cpu"):
            continue
        gpu = gpu or r["gpu"]
        mid, ds, batch, amp = canonical_job(r["model"], r.get("dataset"), r["batch_size"], r.get("amp", 0))
        step = float(r["step_time_s"])
        isolated.append(IsolatedRow(mid, ds, batch, step, r.get("scope") or scope, amp,
                                    _number(r.get("peak_memory_mib")), _number(r.get("gmem_mib")),
                                    _number(r.get("gpu_util")), step_time_rel_sd=step_rel_sd(r, step),
                                    **util_window(r)))
    for g in raw.get("groups", []):
        if g.get("gpu") in (None, "", "cpu"):
            continue
        gpu, sharing = gpu or g["gpu"], sharing or g.get("sharing")
        members = tuple(canonical_job(j["model"], j.get("dataset"), j["batch_size"], j.get("amp", 0))
                        for j in g["jobs"])
        groups.append(GroupRow(members, tuple(float(j["speed"]) for j in g["jobs"]), _number(g.get("gmem")),
                               _number(g.get("gpu_util"))))
    return isolated, groups, gpu, sharing


def _from_csvs(folder: Path, scope: str) -> _Read:
    isolated, groups, gpu, sharing = [], [], None, None
    if (folder / "steptime.csv").is_file():
        with (folder / "steptime.csv").open(newline="") as fh:
            for r in csv.DictReader(fh):
                if (r.get("gpu") or "cpu").strip() == "cpu" or int(float(r.get("num_gpus") or 1)) != 1:
                    continue
                gpu = gpu or r["gpu"].strip()
                mid, ds, batch, amp = canonical_job(r["model"], r.get("dataset"), r["batch_size"],
                                                    r.get("amp", 0))
                step = float(r["step_time_s"])
                isolated.append(IsolatedRow(mid, ds, batch, step, (r.get("scope") or scope).strip(), amp,
                                            _number(r.get("peak_memory_mib")),
                                            _number(r.get("gmem_used_mib")), _number(r.get("gpu_util")),
                                            step_time_rel_sd=step_rel_sd(r, step),
                                            **util_window(r)))
    elif (folder / "single_data.csv").is_file():
        with (folder / "single_data.csv").open(newline="") as fh:
            for r in csv.DictReader(fh):
                if not (r.get("gpu") or "").strip():
                    continue
                gpu = gpu or r["gpu"].strip()
                mid, ds, batch, amp = canonical_job(r["model"], r.get("dataset"), r["batchsize"],
                                                    r.get("amp", 0))
                speed = _number(r.get("speed"))
                if speed and speed > 0:
                    isolated.append(IsolatedRow(mid, ds, batch, batch / speed, scope, amp, None,
                                                _number(r.get("gmem")), _number(r.get("gpu_util")),
                                                **util_window(r)))
    for name in ("colocate_info.csv", "colocate3_info.csv"):
        if not (folder / name).is_file():
            continue
        with (folder / name).open(newline="") as fh:
            reader = csv.DictReader(fh)
            size = sum(1 for c in reader.fieldnames or () if c.startswith("model"))
            for r in reader:
                if (r.get("gpu") or "").strip() in ("", "cpu"):
                    continue
                gpu, sharing = gpu or r["gpu"].strip(), sharing or (r.get("sharing") or "").strip() or None
                members = tuple(canonical_job(r[f"model{i}"], r.get(f"dataset{i}"), r[f"batchsize{i}"],
                                              r.get(f"amp{i}", 0)) for i in range(1, size + 1))
                groups.append(GroupRow(members, tuple(float(r[f"speed{i}"]) for i in range(1, size + 1)),
                                       _number(r.get("gmem")), _number(r.get("gpu_util"))))
    return isolated, groups, gpu, sharing


def read_folder(folder: str | os.PathLike[str], gpu_hint: str | None = None) -> ProfileData:
    """One dataset folder (see the module docstring; a folder in Lucid's own layout is measured on
    ``gpu_hint``: :func:`~.layouts.read_lucid`)."""
    from dltsched.engine.domain.catalog import gpu_catalog

    path = Path(folder)
    if is_lucid_folder(path):
        return read_lucid(path, gpu_hint)
    record = _record(path)
    scope = str(record.get("scope") or "compute") if record else "compute"
    reader = _from_groups_json if (path / "groups.json").is_file() else _from_csvs
    isolated, groups, gpu, sharing = reader(path, scope)
    gpu = str(record.get("gpu") or gpu or "")
    if not gpu or gpu == "cpu":
        raise ValidationError(str(path), "no GPU rows (CPU smoke runs calibrate nothing); profile on a GPU")
    try:
        gpu = gpu_catalog().resolve(gpu)
    except ValueError as err:
        raise ValidationError(f"{path}: gpu", f"{err}; add the GPU to the catalog") from None
    sharing = str(record.get("sharing") or sharing or "timeslice")
    if sharing not in SHARING_MODES:
        raise ValidationError(f"{path}: sharing",
                              f"'{sharing}' not understood; one of {', '.join(SHARING_MODES)}")
    source = {"path": str(path), "files_sha256": files_digest(path), "date_utc": record.get("date_utc"),
              "command": record.get("command"), "device_name": record.get("device_name"),
              "driver": record.get("driver"), "torch": record.get("torch"), "cuda": record.get("cuda"),
              "jobs": len(isolated), "groups": len(groups)}
    return ProfileData(gpu, sharing, tuple(isolated), tuple(groups), _tf32(record), (source,))


def read_steptime_csv(path: str | os.PathLike[str]) -> list[ProfileData]:
    """Jobs alone from an ``eval-steptime`` CSV (``dltsched predict convert-steptime gavel|zeus OUT.csv``,
    or a profiler's ``steptime.csv``), one :class:`ProfileData` per GPU (one-GPU rows; no groups, no
    memory)."""
    from dltsched.predictors.steptime.measurements import read_csv

    by_gpu: dict[str, list[IsolatedRow]] = {}
    for m in read_csv(path):
        if m.num_gpus != 1 or m.gpu == "cpu" or m.kernel_time:
            continue
        mid, ds, _, _ = canonical_job(m.model, m.dataset, m.batch_size, m.amp)
        by_gpu.setdefault(m.gpu, []).append(IsolatedRow(mid, ds, m.batch_size, m.step_time_s, m.scope, m.amp,
                                                         optimizer=(m.optimizer or "sgd").lower()))
    source = {"path": str(path), "files_sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]}
    return [ProfileData(gpu, "timeslice", tuple(rows), (), frozenset(), ({**source, "jobs": len(rows)},))
            for gpu, rows in sorted(by_gpu.items())]


def read_datasets(paths: Sequence[str | os.PathLike[str]], gpu: str | None = None) -> list[ProfileData]:
    """Every dataset under ``paths`` (folders; ``eval-steptime`` CSV files: :func:`read_steptime_csv`; Gavel's
    throughput files or folders and Lucid-layout folders: :mod:`.layouts`, the latter measured on ``gpu``),
    merged per (GPU, sharing mode). A job measured alone more than once keeps every run's step time and
    memory, and its utilisation from the reading on the most NVML samples
    (:func:`~.rows.with_best_utilisation`)."""
    from dltsched.engine.domain.catalog import gpu_catalog

    merged: dict[tuple[str, str], ProfileData] = {}
    found: list[ProfileData] = []
    gavel = {p: gavel_file(p) for p in paths}
    for path in paths:
        if gavel[path] is not None:
            found += read_gavel(gavel[path])  # type: ignore[arg-type]
        elif Path(path).is_file():
            for data in read_steptime_csv(path):
                found.append(ProfileData(gpu_catalog().resolve(data.gpu), data.sharing, data.isolated,
                                         data.groups, data.tf32, data.sources))
    folders = [p for p in paths if not Path(p).is_file() and gavel[p] is None]
    found += [read_folder(folder, gpu) for folder in (dataset_folders(folders) if folders else [])]
    for data in found:
        key = (data.gpu, data.sharing)
        if key in merged:
            old = merged[key]
            data = ProfileData(data.gpu, data.sharing, old.isolated + data.isolated, old.groups + data.groups,
                               old.tf32 | data.tf32, old.sources + data.sources)
        merged[key] = data
    return [ProfileData(d.gpu, d.sharing, with_best_utilisation(d.isolated), d.groups, d.tf32, d.sources)
            for d in (merged[k] for k in sorted(merged))]


__all__ = ["SHARING_MODES", "GroupRow", "IsolatedRow", "ProfileData", "canonical_job", "dataset_folders",
           "files_digest", "mean_row", "read_datasets", "read_folder", "read_steptime_csv", "util_window",
           "with_best_utilisation"]
