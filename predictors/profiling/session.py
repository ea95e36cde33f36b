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
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import DltschedError, ValidationError
from dltsched.predictors.profiling.colocate import (
    UTIL_SAMPLES,
    UTIL_WINDOW_S,
    GroupRun,
    ProfiledJob,
    WorkerPool,
    WorkerTimeout,
)
from dltsched.predictors.profiling.dataset import write_dataset
from dltsched.predictors.profiling.mps import mps_control_binary, mps_daemon
from dltsched.predictors.profiling.nvml import gpu_info
from dltsched.predictors.profiling.precision import MAX_STEPS, StoppingRule

#: what a profiled step covers: synthetic inputs already on the device, so no input pipeline
#: (``steptime.csv``'s ``scope`` column; see :data:`dltsched.predictors.steptime.model.SCOPES`)
PROFILE_SCOPE = "compute"


def typed_command(argv: list[str] | None = None) -> str:
    """The command as the user typed it: ``dltsched`` and the arguments after the program name (not the
    absolute path of the entry script or of ``main.py``)."""
    return shlex.join(["dltsched", *(sys.argv[1:] if argv is None else argv)])

SHARING_MODES = ("timeslice", "mps")


def sample_groups(jobs: tuple[ProfiledJob, ...], size: int, count: int,
                  seed: int) -> list[tuple[ProfiledJob, ...]]:
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
        raise DltschedError("profile: no CUDA GPU found; run on a GPU machine or pass --smoke for a CPU "
                            "check")
    return "cuda"


def _window(run: Any) -> dict[str, Any]:
    """A run's window: steps timed, the median's 95% interval (s; ``None`` below 6 steps) and why it
    stopped."""
    ci = run.interval
    finite = ci.low_s == ci.low_s  # nan below the fewest steps for an interval
    return {"n": ci.n, "step_time_ci95_low_s": ci.low_s if finite else None,
            "step_time_ci95_high_s": ci.high_s if finite else None, "stop": run.stop}


def _util(nv: dict[str, Any]) -> dict[str, Any]:
    """Where the utilisation reading comes from: ``util_source`` (``nvml_samples`` or ``polled``), the
    readings it rests on (``util_samples``) and the seconds they cover (``util_window_s``)."""
    return {k: nv.get(k) for k in ("util_source", "util_samples", "util_window_s")}


def _isolated_row(group: GroupRun, gpu: str) -> dict[str, Any]:
    run, nv = group.runs[0], group.nvml
    return {"model": run.model, "dataset": run.dataset, "gpu": gpu, "batch_size": run.job.batch_size,
            "num_gpus": 1, "step_time_s": run.step_time_s, "amp": 0, "optimizer": "sgd",
            "peak_memory_mib": run.peak_memory_mib, "gpu_util": nv["gpu_util"],
            "gmem_used_mib": nv["gmem_used_mib"], "scope": PROFILE_SCOPE, **_window(run), **_util(nv),
            "gmem_util": nv["gmem_util"],
            "gmem_mib": run.peak_memory_mib if nv["gmem_used_mib"] is None else nv["gmem_used_mib"],
            "step_times_s": list(run.step_times_s)}


def _group_row(group: GroupRun, isolated: dict[ProfiledJob, dict[str, Any]], gpu: str,
               sharing: str) -> dict[str, Any]:
    jobs = []
    for run in group.runs:
        alone_s = isolated[run.job]["step_time_s"]
        jobs.append({"model": run.model, "dataset": run.dataset, "batch_size": run.job.batch_size, "amp": 0,
                     "step_time_s": run.step_time_s, "isolated_step_time_s": alone_s,
                     "speed": alone_s / run.step_time_s, "peak_memory_mib": run.peak_memory_mib,
                     **_window(run), "step_times_s": list(run.step_times_s)})
    peaks = [r.peak_memory_mib for r in group.runs]
    torch_sum = None if None in peaks else sum(p for p in peaks if p is not None)
    nvml_used = group.nvml["gmem_used_mib"]
    return {"group": "+".join(r.job.label for r in group.runs), "jobs": jobs, "gpu": gpu, "sharing": sharing,
            "gpu_util": group.nvml["gpu_util"], **_util(group.nvml), "gmem_util": group.nvml["gmem_util"],
            "gmem": nvml_used if nvml_used is not None else torch_sum, "torch_peak_sum_mib": torch_sum,
            "gmem_source": "nvml" if nvml_used is not None else "torch" if torch_sum is not None else None}


def _record(first: GroupRun, gpu: str, sharing: str, smoke: bool, rule: StoppingRule, warmup: int,
            command: str | None, util_window_s: float = UTIL_WINDOW_S,
            util_samples: int = UTIL_SAMPLES) -> dict[str, Any]:
    run = first.runs[0]
    return {"date_utc": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
            "platform": platform.platform(), "command": command or typed_command(),
            "device": "cpu" if smoke else "cuda",
            "device_name": run.device_name, "gpu": gpu, **gpu_info(), **run.versions, "sharing": sharing,
            "scope": PROFILE_SCOPE, "steps": rule.min_steps, "precision": rule.precision,
            "min_window_s": rule.min_window_s, "max_window_s": rule.max_window_s, "warmup": warmup,
            "smoke": smoke, "nvml": first.nvml["gpu_util"] is not None,
            "util_min_window_s": min(util_window_s, rule.max_window_s), "util_min_samples": util_samples}


def run_profile(jobs: tuple[ProfiledJob, ...], groups: list[tuple[ProfiledJob, ...]], *, out_dir: str | Path,
                sharing: str = "timeslice", steps: int = 20, warmup: int = 5, smoke: bool = False,
                timeout_s: float = 600.0, budget_s: float | None = None, precision: float | None = 0.02,
                max_window_s: float = 30.0, min_window_s: float = 0.5,
                command: str | None = None, util_window_s: float = UTIL_WINDOW_S,
                util_samples: int = UTIL_SAMPLES) -> dict[str, Any]:
    """Profile ``jobs`` and every job of ``groups`` alone, then each group co-located; write the dataset.

    Each job's window is at least ``steps`` timed steps and ``min_window_s`` seconds, then runs until its
    median step time is within ``precision`` at 95% (``None``: exactly ``steps``) or ``max_window_s``
    seconds (:class:`~.precision.StoppingRule`). Utilisation rests on a window of at least ``util_window_s``
    seconds holding ``util_samples`` whole NVML sample periods: the jobs time their steps on past the rule's
    stop until then, never past ``max_window_s`` (:meth:`.colocate.WorkerPool.measure`). ``command``: the
    command line to record (default: this process's arguments after ``dltsched``).

    The dataset is rewritten after every measurement, so a run stopped part-way leaves what it
    measured. A measurement whose worker fails (out of memory, say) is recorded under ``failed`` and
    skipped, with every group holding a job that failed alone; a worker that stops answering
    (``--timeout``) or a spent ``budget_s`` ends the session early, recorded under ``stopped``.
    """
    if sharing not in SHARING_MODES:
        raise ValidationError("sharing", f"'{sharing}' not understood; must be one of {SHARING_MODES}")
    if sharing == "mps" and groups:
        mps_control_binary()
    kind = device_kind(smoke)
    every = sorted(set(jobs) | {j for g in groups for j in g})
    if not every:
        raise ValidationError("profile", "no jobs; give --model, --job or --groups")
    rule = StoppingRule(min_steps=steps, precision=precision, min_window_s=min_window_s,
                        max_window_s=max_window_s, max_steps=max(steps, MAX_STEPS))
    session = ProfileSession(Path(out_dir), sharing, smoke, rule, warmup,
                             None if budget_s is None else time.monotonic() + budget_s, command,
                             util_window_s, util_samples)
    with WorkerPool(1, kind, timeout_s) as pool:
        for job in every:
            if (run := session.measure(pool, (job,))) is not None:
                session.isolated[job] = _isolated_row(run, session.gpu_of(run))
                session.write()
    if not session.isolated:
        reason = "; ".join(f["error"] for f in session.failed) or session.stopped or "nothing measured"
        raise DltschedError(f"profile: no job could be measured alone: {reason}")
    runnable = [g for g in groups if all(j in session.isolated for j in g)]
    for group in groups:
        if group not in runnable and session.stopped is None:
            session.failed.append({"group": "+".join(j.label for j in group),
                                   "error": "skipped: a member failed alone"})
    if runnable and session.stopped is None:
        with mps_daemon() if sharing == "mps" else nullcontext(), \
                WorkerPool(max(map(len, runnable)), kind, timeout_s) as pool:
            for group in runnable:
                if (run := session.measure(pool, group)) is not None:
                    session.groups.append(_group_row(run, session.isolated, session.gpu or "", sharing))
                    session.write()
    files = session.write()
    return {"out": str(out_dir), "files": files, "record": session.record(),
            "isolated": list(session.isolated.values()), "groups": session.groups, "failed": session.failed,
            "stopped": session.stopped}


class ProfileSession:
    """What one ``run_profile`` call has measured so far, written out after every measurement."""

    def __init__(self, out_dir: Path, sharing: str, smoke: bool, steps: int | StoppingRule, warmup: int,
                 deadline: float | None, command: str | None = None, util_window_s: float = UTIL_WINDOW_S,
                 util_samples: int = UTIL_SAMPLES) -> None:
        self.rule = steps if isinstance(steps,
                                        StoppingRule) else StoppingRule(min_steps=steps, precision=None)
        self.out_dir, self.sharing, self.smoke, self.warmup = out_dir, sharing, smoke, warmup
        self.deadline, self.command, self.util_window_s = deadline, command, util_window_s
        self.util_samples = util_samples
        self.isolated: dict[ProfiledJob, dict[str, Any]] = {}
        self.groups: list[dict[str, Any]] = []
        self.failed: list[dict[str, str]] = []
        self.stopped: str | None = None
        self.first: GroupRun | None = None
        self.gpu: str | None = None

    def gpu_of(self, run: GroupRun) -> str:
        """The session's GPU type, taken from the first run's device (``cpu`` for a smoke run).

        Parameters
        ----------
        run
            A measured group run.

        Returns
        -------
        str
            A catalog GPU type.
        """
        if self.gpu is None:
            self.first = run
            self.gpu = "cpu" if self.smoke else catalog_gpu(run.runs[0].device_name)
        return self.gpu

    def measure(self, pool: WorkerPool, group: tuple[ProfiledJob, ...]) -> GroupRun | None:
        """One measurement, or ``None`` when it failed, timed out or the budget is spent (recorded)."""
        label = "+".join(j.label for j in group)
        if self.stopped is not None:
            return None
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.stopped = f"budget spent before {label}"
            return None
        try:
            return pool.measure(group, warmup=self.warmup, steps=self.rule, util_window_s=self.util_window_s,
                                util_samples=self.util_samples)
        except WorkerTimeout as err:
            self.stopped = f"{label}: {err}"
        except DltschedError as err:
            self.failed.append({"group": label, "error": str(err)})
        return None

    def record(self) -> dict[str, Any]:
        """The dataset's record: how, where and with which command it was measured, and what failed or
        stopped.

        Returns
        -------
        dict[str, Any]
            The record; empty before the first measurement.
        """
        if self.first is None:
            return {}
        return {**_record(self.first, self.gpu or "", self.sharing, self.smoke, self.rule, self.warmup,
                          self.command, self.util_window_s, self.util_samples),
                "failed": self.failed, "stopped": self.stopped}

    def write(self) -> list[str]:
        """Write what was measured so far as a dataset.

        Returns
        -------
        list[str]
            The file names written; empty before the first measurement.
        """
        if self.first is None:
            return []
        return write_dataset(self.out_dir, list(self.isolated.values()), self.groups, self.record())
