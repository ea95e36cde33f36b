"""Other people's profile layouts, read as calibration data: Gavel's throughput tables and Lucid's CSVs.

- **Gavel** (``simulation_throughputs.json`` or ``physical_cluster_throughputs.json``, or a folder holding
  one): steps per second of each job type alone and of each pair sharing one GPU, per GPU type (K80, P100,
  V100). Jobs alone become whole iterations with their input pipeline (scope ``iteration``) on one GPU, with
  the optimizer of Gavel's training script; a pair's speeds are its steps per second over each job's alone,
  on the same GPU. Gavel ran a pair as two processes on one GPU without MPS: ``timeslice``. MIT licence.
- **Lucid** (``single_data.csv`` and ``colocate_info.csv`` without a ``gpu`` column): jobs alone (samples per
  second, NVML utilisation and memory) and pairs (normalized speeds, memory, utilisation). Lucid does not
  record its GPU, so the caller names it (``dltsched calibrate --gpu``). Its licence (S-Lab License 1.0)
  allows non-commercial use only: every source read from it is marked ``shippable: false`` and a bundle
  fitted on it says so.
"""

from __future__ import annotations

import csv
import hashlib
import os
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.calibration.rows import (
    GroupRow,
    IsolatedRow,
    ProfileData,
    canonical_job,
    files_digest,
)

#: Gavel's throughput files, the simulation's first (the one Gavel's own simulator reads)
GAVEL_FILES = ("simulation_throughputs.json", "physical_cluster_throughputs.json")
LUCID_LICENSE = "S-Lab License 1.0 (Lucid): non-commercial use only"


def gavel_file(path: str | os.PathLike[str]) -> Path | None:
    """Gavel's throughput file at ``path`` (the file, or a folder holding one); ``None`` when it is not
    Gavel's."""
    p = Path(path)
    if p.is_file():
        return p if p.name in GAVEL_FILES or p.name.endswith("throughputs.json") else None
    return next((p / name for name in GAVEL_FILES if (p / name).is_file()), None)


def read_gavel(path: str | os.PathLike[str]) -> list[ProfileData]:
    """One :class:`ProfileData` per GPU type of Gavel's throughput file ``path`` (module docstring)."""
    from dltsched.engine.domain.catalog import gpu_catalog
    from dltsched.instances.readers.gavel_throughputs import read_gavel_throughputs
    from dltsched.predictors.steptime.measurements import GAVEL_OPTIMIZERS

    file = Path(path)
    try:
        table = read_gavel_throughputs(file)
    except (OSError, ValueError, SyntaxError) as err:
        raise ValidationError(str(file), f"not Gavel's throughput layout ({err}); give Gavel's "
                                         f"{' or '.join(GAVEL_FILES)}") from None
    alone: dict[str, dict[Any, IsolatedRow]] = {}
    for (gpu, jt, scale, consolidated), steps_per_s in sorted(table.isolated.items(),
                                                              key=lambda kv: str(kv[0])):
        if scale != 1 or not consolidated or steps_per_s <= 0:
            continue
        model, dataset, batch, amp = canonical_job(jt.model, jt.dataset, jt.batch_size, False)
        optimizer = GAVEL_OPTIMIZERS.get(jt.model, "momentum")
        alone.setdefault(gpu, {})[jt] = IsolatedRow(model, dataset, batch, 1.0 / steps_per_s, "iteration",
                                                    amp, optimizer=optimizer)
    groups: dict[str, dict[frozenset[Any], GroupRow]] = {}
    for (gpu, a, b), (rate_a, rate_b) in sorted(table.pairs.items(), key=lambda kv: str(kv[0])):
        rows = alone.get(gpu, {})
        if a not in rows or b not in rows:
            continue
        pair = frozenset((a.label, b.label))
        if pair in groups.setdefault(gpu, {}):
            continue  # Gavel lists each pair in both orders
        ra, rb = rows[a], rows[b]
        groups[gpu][pair] = GroupRow((ra.key, rb.key), (rate_a * ra.step_time_s, rate_b * rb.step_time_s))
    source = {"path": str(file), "files_sha256": hashlib.sha256(file.read_bytes()).hexdigest()[:16],
              "layout": "gavel", "license": "MIT (Gavel)", "shippable": True}
    out = []
    for gpu in sorted(alone):
        gpu_id = gpu_catalog().resolve(gpu)
        got = tuple(groups.get(gpu, {}).values())
        out.append(ProfileData(gpu_id, "timeslice", tuple(alone[gpu].values()), got, frozenset(),
                               ({**source, "gpu": gpu_id, "jobs": len(alone[gpu]), "groups": len(got)},)))
    return out


def is_lucid_folder(folder: Path) -> bool:
    """Whether ``folder`` is laid out like Lucid's own data (its CSVs, no ``gpu`` column, no profiler
    record)."""
    if (folder / "measurement.json").is_file() or (folder / "groups.json").is_file():
        return False
    for name in ("colocate_info.csv", "single_data.csv"):
        if (folder / name).is_file():
            with (folder / name).open(newline="") as fh:
                header = next(csv.reader(fh), [])
            return "gpu" not in [h.strip() for h in header]
    return False


def _lucid_key(model: str, dataset: str | None, batch: str, amp: str | None) -> tuple[str, str, int, bool]:
    """Lucid's model and dataset names (``ResNet18``, ``CIFAR-10``) as a calibration job key."""
    from dltsched.predictors.colocation.samples import lucid_job

    spec = lucid_job(model, dataset or "", batch, amp or 0)
    return canonical_job(spec.model, spec.dataset, spec.batch_size, spec.amp)


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def read_lucid(folder: str | os.PathLike[str], gpu: str | None) -> ProfileData:
    """Lucid's ``single_data.csv`` and ``colocate_info.csv`` in ``folder``, measured on ``gpu`` (a catalog
    GPU; Lucid does not record its own): jobs alone and pairs, marked non-shippable (module docstring)."""
    from dltsched.engine.domain.catalog import gpu_catalog

    path = Path(folder)
    if not gpu:
        raise ValidationError("--gpu", f"'{path}' is in Lucid's layout, which does not record its GPU; name "
                                       "the GPU it was measured on with --gpu (a catalog GPU id)")
    try:
        gpu_id = gpu_catalog().resolve(gpu)
    except ValueError as err:
        raise ValidationError("--gpu", f"{err}; give a catalog GPU id") from None
    isolated: dict[Any, IsolatedRow] = {}
    if (path / "single_data.csv").is_file():
        with (path / "single_data.csv").open(newline="") as fh:
            for r in csv.DictReader(fh):
                speed = _number(r.get("speed"))
                if not speed or speed <= 0:
                    continue
                key = _lucid_key(r["model"], r.get("dataset"), r["batchsize"], r.get("amp"))
                isolated[key] = IsolatedRow(*key[:3], key[2] / speed, "iteration", key[3], None,
                                            _number(r.get("gmem")), _number(r.get("gpu_util")))
    groups = []
    if (path / "colocate_info.csv").is_file():
        with (path / "colocate_info.csv").open(newline="") as fh:
            for r in csv.DictReader(fh):
                members = tuple(_lucid_key(r[f"model{i}"], r.get(f"dataset{i}"), r[f"batchsize{i}"],
                                           r.get(f"amp{i}")) for i in (1, 2))
                groups.append(GroupRow(members, (float(r["speed1"]), float(r["speed2"])),
                                       _number(r.get("gmem")), _number(r.get("gpu_util"))))
    source = {"path": str(path), "files_sha256": files_digest(path), "layout": "lucid", "gpu": gpu_id,
              "license": LUCID_LICENSE, "shippable": False, "jobs": len(isolated), "groups": len(groups)}
    return ProfileData(gpu_id, "timeslice", tuple(isolated.values()), tuple(groups), frozenset(), (source,))
