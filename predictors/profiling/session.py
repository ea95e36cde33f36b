"""A profiling session: every job alone first, then each co-located group, written as a dataset.

Isolated runs use the same worker processes as groups (a group of one) and never run under MPS,
so a job's normalized speed under ``--sharing mps`` includes MPS's own overhead. The parent
process never creates a CUDA context; only workers do.
"""

from __future__ import annotations

import itertools
import platform
import random
import re
import shlex
import sys
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import DltschedError, ValidationError
from dltsched.predictors.profiling.colocate import GroupRun, ProfiledJob, WorkerPool
from dltsched.predictors.profiling.dataset import write_dataset
from dltsched.predictors.profiling.mps import mps_control_binary, mps_daemon
from dltsched.predictors.profiling.nvml import gpu_info

SHARING_MODES = ("timeslice", "mps")


def sample_groups(jobs: tuple[ProfiledJob, ...], size: int, count: int, seed: int) -> list[tuple[ProfiledJob, ...]]:
    """``count`` distinct groups of ``size`` jobs (repeats allowed) drawn with ``seed``, in sorted order."""
    if size not in (2, 3):
        raise ValidationError("colocate", f"{size} not understood; must be 2 or 3")
    every = list(itertools.combinations_with_replacement(sorted(set(jobs)), size))
    return sorted(random.Random(seed).sample(every, min(count, len(every))))


def catalog_gpu(name: str) -> str:
    """Catalog GPU id of a CUDA device name (``"NVIDIA H100 80GB HBM3"`` -> ``h100``), else the name."""
    from dltsched.engine.domain.catalog import gpu_catalog

    stripped = re.sub(r"^(nvidia|tesla|geforce|quadro)\s+", "", name.strip().lower())
    stripped = re.sub(r"^(tesla|geforce|quadro)\s+", "", stripped)
    first = re.split(r"[\s-]", stripped)[0]
    memory = re.search(r"\d+gb", stripped)
    for candidate in (stripped, f"{first}-{memory.group()}" if memory else first, first):
        try:
            return gpu_catalog().resolve(candidate)
        except ValueError:
            continue
    return stripped


def device_kind(smoke: bool) -> str:
    """``"cpu"`` for smoke runs, else ``"cuda"``; a clear error without a CUDA GPU."""
    if smoke:
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise DltschedError("profile: no CUDA GPU found; run on a GPU machine or pass --smoke for a CPU check")
    return "cuda"


def _isolated_row(group: GroupRun, gpu: str) -> dict[str, Any]:
    run, nv = group.runs[0], group.nvml
    return {"model": run.model, "dataset": run.dataset, "gpu": gpu, "batch_size": run.job.batch_size,
            "num_gpus": 1, "step_time_s": run.step_time_s, "amp": 0, "optimizer": "sgd",
            "peak_memory_mib": run.peak_memory_mib, "gpu_util": nv["gpu_util"], "gmem_used_mib": nv["gmem_used_mib"],
            "gmem_util": nv["gmem_util"],
            "gmem_mib": run.peak_memory_mib if nv["gmem_used_mib"] is None else nv["gmem_used_mib"],
            "step_times_s": list(run.step_times_s)}


def _group_row(group: GroupRun, isolated: dict[ProfiledJob, dict[str, Any]], gpu: str, sharing: str) -> dict[str, Any]:
    jobs = []
    for run in group.runs:
        alone_s = isolated[run.job]["step_time_s"]
        jobs.append({"model": run.model, "dataset": run.dataset, "batch_size": run.job.batch_size, "amp": 0,
                     "step_time_s": run.step_time_s, "isolated_step_time_s": alone_s,
                     "speed": alone_s / run.step_time_s, "peak_memory_mib": run.peak_memory_mib,
                     "step_times_s": list(run.step_times_s)})
    peaks = [r.peak_memory_mib for r in group.runs]
    torch_sum = None if None in peaks else sum(p for p in peaks if p is not None)
    nvml_used = group.nvml["gmem_used_mib"]
    return {"group": "+".join(r.job.label for r in group.runs), "jobs": jobs, "gpu": gpu, "sharing": sharing,
            "gpu_util": group.nvml["gpu_util"], "gmem_util": group.nvml["gmem_util"],
            "gmem": nvml_used if nvml_used is not None else torch_sum, "torch_peak_sum_mib": torch_sum,
            "gmem_source": "nvml" if nvml_used is not None else "torch" if torch_sum is not None else None}


def _record(first: GroupRun, gpu: str, sharing: str, smoke: bool, steps: int, warmup: int) -> dict[str, Any]:
    run = first.runs[0]
    return {"date_utc": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
            "platform": platform.platform(), "command": shlex.join(sys.argv), "device": "cpu" if smoke else "cuda",
            "device_name": run.device_name, "gpu": gpu, **gpu_info(), **run.versions, "sharing": sharing,
            "steps": steps, "warmup": warmup, "smoke": smoke, "nvml": first.nvml["gpu_util"] is not None}


def run_profile(jobs: tuple[ProfiledJob, ...], groups: list[tuple[ProfiledJob, ...]], *, out_dir: str | Path,
                sharing: str = "timeslice", steps: int = 20, warmup: int = 5, smoke: bool = False,
                timeout_s: float = 600.0) -> dict[str, Any]:
    """Profile ``jobs`` and every job of ``groups`` alone, then each group co-located; write the dataset."""
    if sharing not in SHARING_MODES:
        raise ValidationError("sharing", f"'{sharing}' not understood; must be one of {SHARING_MODES}")
    if sharing == "mps" and groups:
        mps_control_binary()
    kind = device_kind(smoke)
    every = sorted(set(jobs) | {j for g in groups for j in g})
    if not every:
        raise ValidationError("profile", "no jobs; give --model or --groups")
    with WorkerPool(1, kind, timeout_s) as pool:
        alone = {job: pool.measure((job,), warmup=warmup, steps=steps) for job in every}
    first = alone[every[0]]
    gpu = "cpu" if smoke else catalog_gpu(first.runs[0].device_name)
    isolated = {job: _isolated_row(run, gpu) for job, run in alone.items()}
    together = []
    if groups:
        with mps_daemon() if sharing == "mps" else nullcontext(), \
                WorkerPool(max(map(len, groups)), kind, timeout_s) as pool:
            together = [pool.measure(g, warmup=warmup, steps=steps) for g in groups]
    rows = [_group_row(g, isolated, gpu, sharing) for g in together]
    record = _record(first, gpu, sharing, smoke, steps, warmup)
    files = write_dataset(Path(out_dir), list(isolated.values()), rows, record)
    return {"out": str(out_dir), "files": files, "record": record, "isolated": list(isolated.values()),
            "groups": rows}
