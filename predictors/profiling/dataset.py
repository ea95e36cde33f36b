"""Write a profiled dataset folder in the formats the project's evaluators read.

Files (CSV cells ``nan`` = not measured, JSON ``null``):

- ``steptime.csv``: isolated runs, ``model,dataset,gpu,batch_size,num_gpus,step_time_s,amp,optimizer,...``
  (``dltsched predict eval-steptime steptime.csv``) with ``scope`` (``compute``: synthetic inputs already on
  the device, no input pipeline), ``n`` (steps timed), ``step_time_ci95_low_s`` and ``step_time_ci95_high_s``
  (the median's distribution-free 95% interval, :mod:`.precision`) and ``stop`` (why the window ended:
  ``precision``, ``time_cap``, ``step_cap`` or ``steps``). Files written before these columns existed are
  read as scope ``compute`` when ``measurement.json`` beside them names ``dltsched profile``.
- ``single_data.csv``: isolated runs in Lucid's layout ``model,dataset,batchsize,amp,speed,gpu_util,
  gmem_util,gmem`` (+ ``gpu``); ``speed`` in samples/s.
- ``colocate_info.csv``: 2-job groups in Lucid's layout ``,model1,dataset1,gpu_num1,batchsize1,amp1,speed1,
  model2,...,speed2,gpu_util,gmem_util,gmem`` (+ ``gpu,sharing,gmem_source``); with ``single_data.csv``
  beside it, ``dltsched predict eval-colocation colocate_info.csv --format lucid`` reads it.
- ``colocate3_info.csv``: 3-job groups, the same layout with ``model3 ... speed3`` after job 2.
- ``groups.json``: every isolated and group row with all step times; ``measurement.json`` and
  ``MEASUREMENT.md``: GPU, driver, CUDA, torch, date, host, command.

``speedN`` = isolated step time / co-located step time (medians). ``gpu_util`` = mean NVML GPU utilisation (%)
over the utilisation window (the timed windows, which time on until it lasts at least 3 s and holds 15 NVML
sample periods, at most ``--max-window``: :mod:`.colocate`); ``util_source`` = ``nvml_samples`` (NVML's
timestamped samples whose whole period lies in the window) or ``polled`` (the mean of polled rates, where the
GPU does not give samples), ``util_samples`` = the readings it rests on, ``util_window_s`` = the seconds they
cover (``steptime.csv``, ``single_data.csv`` and the group files; files written before these columns existed
read as before, without them); ``gmem`` (MiB) = NVML's peak used memory of the whole GPU (``gmem_source``
``nvml``), else the sum of the workers' ``torch.cuda.max_memory_allocated`` (``torch``, a lower bound: no CUDA
contexts or allocator slack); ``gmem_util`` = ``gmem`` / total (%).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_LUCID_JOB = ("model", "dataset", "gpu_num", "batchsize", "amp", "speed")
_UTIL = ("util_source", "util_samples", "util_window_s")
_GROUP_TAIL = ("gpu_util", "gmem_util", "gmem", "gpu", "sharing", "gmem_source", *_UTIL)


def cell(value: Any) -> Any:
    """A CSV cell: ``nan`` for an unmeasured (``None``) value."""
    return "nan" if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows([[cell(v) for v in row] for row in rows])


def write_steptime(path: Path, isolated: Sequence[dict[str, Any]]) -> None:
    """Write the ``isolated`` rows to ``path`` as the step-time CSV (one row a measurement; s, MiB)."""
    keys = ("model", "dataset", "gpu", "batch_size", "num_gpus", "step_time_s", "amp", "optimizer",
            "peak_memory_mib", "gpu_util", "gmem_used_mib", "scope", "n", "step_time_ci95_low_s",
            "step_time_ci95_high_s", "stop", *_UTIL)
    _write_csv(path, keys, [[r.get(k) for k in keys] for r in isolated])


def write_lucid_single(path: Path, isolated: Sequence[dict[str, Any]]) -> None:
    """Write the ``isolated`` rows to ``path`` in Lucid's single-job layout (speed in samples/s, memory in
    MiB)."""
    header = ("model", "dataset", "batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem", "gpu", *_UTIL)
    _write_csv(path, header, [[r["model"], r["dataset"], r["batch_size"], r["amp"],
                               r["batch_size"] / r["step_time_s"], r["gpu_util"], r["gmem_util"],
                               r["gmem_mib"], r["gpu"], *(r.get(k) for k in _UTIL)] for r in isolated])


def write_lucid_groups(path: Path, groups: Sequence[dict[str, Any]], size: int) -> None:
    """Groups of ``size`` jobs in Lucid's co-location layout (one row per group)."""
    header = ["", *(f"{k}{i}" for i in range(1, size + 1) for k in _LUCID_JOB), *_GROUP_TAIL]
    rows = []
    for n, group in enumerate(groups):
        jobs = [[j["model"], j["dataset"], 1, j["batch_size"], j["amp"], j["speed"]] for j in group["jobs"]]
        rows.append([n, *(v for job in jobs for v in job), *(group.get(k) for k in _GROUP_TAIL)])
    _write_csv(path, header, rows)


def _markdown(record: dict[str, Any]) -> str:
    lines = ["# Profiling measurement", "", "Written by `dltsched profile`; definitions in "
             "`predictors/profiling/dataset.py`.", "", "| field | value |", "|---|---|"]
    lines += [f"| {k} | {json.dumps(v) if isinstance(v, list | dict) else v} |" for k, v in record.items()]
    return "\n".join(lines) + "\n"


def write_dataset(out_dir: Path, isolated: Sequence[dict[str, Any]], groups: Sequence[dict[str, Any]],
                  record: dict[str, Any]) -> list[str]:
    """Write every file of the dataset into ``out_dir``; returns the file names written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_steptime(out_dir / "steptime.csv", isolated)
    write_lucid_single(out_dir / "single_data.csv", isolated)
    files = ["steptime.csv", "single_data.csv"]
    for size, name in ((2, "colocate_info.csv"), (3, "colocate3_info.csv")):
        sized = [g for g in groups if len(g["jobs"]) == size]
        if sized:
            write_lucid_groups(out_dir / name, sized, size)
            files.append(name)
    (out_dir / "groups.json").write_text(json.dumps({"isolated": list(isolated), "groups": list(groups)},
                                                    indent=1) + "\n")
    files += ["groups.json", "measurement.json", "MEASUREMENT.md"]
    full = {**record, "files": files}
    (out_dir / "measurement.json").write_text(json.dumps(full, indent=1) + "\n")
    (out_dir / "MEASUREMENT.md").write_text(_markdown(full))
    return files
