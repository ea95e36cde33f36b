"""Ground truth from ``dltsched profile --out`` datasets: a cluster of a modern GPU simulated on its
measurements.

:class:`ProfileTruth` reads one or more profile datasets (``steptime.csv``, ``colocate_info.csv``,
``colocate3_info.csv``, ``measurement.json``; layout in :mod:`dltsched.predictors.profiling.dataset`) and
answers for the GPU types they measured; every other GPU type is answered by ``base`` (by default
:class:`~dltsched.engine.sim.truth.MeasuredTruth`, Gavel's measurements), so a mixed cluster of H200s and
older GPUs runs each type on its own truth.

* **Isolated step time and memory.** A job whose model (and dataset) was measured alone on the GPU takes the
  measured step time and peak memory (the median of repeats over all datasets given, whatever their sharing
  mode: a job alone does not share). At another batch size, GPU count, node count or freeze level the
  measurement is scaled by the ratio of ``base``'s fallback model between the two (as
  :class:`~dltsched.engine.sim.truth.MeasuredTruth` anchors Gavel's). A model never measured on the GPU takes
  the fallback model times the median measured/fallback ratio of the models that were (the GPU's own
  correction).
* **Co-location** (one sharing mode, ``timeslice`` or ``mps``, chosen explicitly or the only mode measured).
  A group whose models were measured together in that mode takes the measured speeds (nearest batch sizes,
  same models). Otherwise, the *utilisation model*: ``speed_i = 1 / (1 + sum_{j != i} c u_j)``, with
  ``u_j`` job j's measured GPU utilisation alone (NVML, 0..1; readings under 5%, a failed sample, and models
  never measured take the fallback model's compute share) and ``c`` the slope fitted through the origin on
  every measured group of the mode (``1/speed_i - 1`` against the partners' summed utilisation; ``c = 0.93``
  time-sliced and ``0.20`` under MPS on the shared H200 data; :meth:`ProfileTruth.record` gives ``c`` and the
  model's error on the measured groups). Groups of three with every pair measured
  compose them as :class:`~dltsched.engine.sim.truth.MeasuredTruth` does. :meth:`ProfileTruth.record` says
  how many group look-ups each source answered, so a result shows how much of its truth was modelled.

Cross-fitting: the default predictor bundles are fitted on none of these measurements, so a simulation with
this truth and those bundles prices every job out of sample. A calibration fitted on the same dataset is not.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.engine.sim.truth import GroundTruth, MeasuredTruth

Sharing = Literal["timeslice", "mps"]
SHARING_MODES: tuple[str, ...] = ("timeslice", "mps")
#: NVML utilisation readings below this share are taken as failed samples (a 2 ms job read as 1% busy)
MIN_UTILIZATION = 0.05


@dataclass(frozen=True, slots=True)
class _Alone:
    step_time_s: float
    memory_mib: float
    utilization: float | None


@dataclass(frozen=True, slots=True)
class _Group:
    """Measured speeds of (model, batch) members on one GPU type in one sharing mode."""

    members: tuple[tuple[str, int], ...]
    speeds: tuple[float, ...]


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _sharing_of(folder: Path) -> str:
    path = folder / "measurement.json"
    if path.exists():
        try:
            return str(json.loads(path.read_text()).get("sharing") or "timeslice")
        except json.JSONDecodeError:
            raise ValidationError("--truth", f"{path} is not valid JSON; is {folder} a `dltsched profile` "
                                  "dataset?") from None
    return "timeslice"


@dataclass(slots=True)
class ProfileTruth:
    """Measured truth for the GPU types of profile datasets, ``base`` for the others (see module
    docstring)."""

    dirs: Sequence[str | Path]
    sharing: Sharing | None = None
    base: GroundTruth = field(default_factory=MeasuredTruth)
    _alone: dict[tuple[str, str, int], _Alone] = field(default_factory=dict)  # (gpu, model, batch)
    # (gpu, sorted models)
    _groups: dict[tuple[str, tuple[str, ...]], list[_Group]] = field(default_factory=dict)
    _slope: dict[str, float] = field(default_factory=dict)
    _correction: dict[str, float] = field(default_factory=dict)
    _used: Counter[str] = field(default_factory=Counter)
    _cache: dict[tuple[object, ...], Any] = field(default_factory=dict)
    _fit_error: dict[str, float] = field(default_factory=dict)
    _loo_error: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        folders = [Path(d) for d in self.dirs]
        if not folders:
            raise ValidationError("--truth", "no dataset given; pass a folder written by "
                                  "`dltsched profile --out`")
        alone: dict[tuple[str, str, int], list[tuple[float, float | None, float | None]]] = {}
        groups: list[tuple[str, str, _Group]] = []
        for folder in folders:
            if not (folder / "steptime.csv").is_file():
                raise ValidationError("--truth", f"{folder} has no steptime.csv; pass a folder written by "
                                      "`dltsched profile --out`")
            mode = _sharing_of(folder)
            for row in _rows(folder / "steptime.csv"):
                step = _float(row.get("step_time_s"))
                if step is None or step <= 0 or row.get("amp", "0") not in ("0", "False", "false", ""):
                    continue
                if int(_float(row.get("num_gpus")) or 1) != 1:
                    continue
                util = _float(row.get("gpu_util"))
                key = (row["gpu"].lower(), row["model"], int(float(row["batch_size"])))
                alone.setdefault(key, []).append((step, _float(row.get("peak_memory_mib")),
                                                  None if util is None else util / 100.0))
            for name in ("colocate_info.csv", "colocate3_info.csv"):
                if (folder / name).is_file():
                    groups += [g for row in _rows(folder / name) if (g := _group_row(row, mode)) is not None]
        for key, runs in alone.items():
            mems = [m for _, m, _ in runs if m is not None]
            utils = [u for _, _, u in runs if u is not None and u >= MIN_UTILIZATION]
            self._alone[key] = _Alone(statistics.median(s for s, _, _ in runs),
                                      statistics.median(mems) if mems else math.nan,
                                      statistics.median(utils) if utils else None)
        modes = sorted({mode for _, mode, _ in groups})
        if self.sharing is None:
            if len(modes) > 1:
                raise ValidationError("--truth-sharing",
                                      f"the datasets measured groups in {' and '.join(modes)}; "
                                      "choose one with --truth-sharing timeslice|mps")
            self.sharing = modes[0] if modes else "timeslice"  # type: ignore[assignment]
        if self.sharing not in SHARING_MODES:
            raise ValidationError("--truth-sharing",
                                  f"{self.sharing!r} not understood; one of timeslice, mps")
        for gpu, mode, group in groups:
            if mode == self.sharing:
                self._groups.setdefault((gpu, tuple(sorted(m for m, _ in group.members))), []).append(group)
        if not self._alone:
            raise ValidationError("--truth",
                                  f"{', '.join(map(str, folders))}: no isolated step time measured")
        for gpu in self.gpu_types:
            self._fit(gpu)

    # -- fitting the GPU's own corrections ----------------------------------------------------------

    def _fit(self, gpu: str) -> None:
        fallback = self._fallback()
        ratios = [a.step_time_s / fallback.step_time_s(Job("x", model, batch, 1.0), gpu, 1)
                  for (g, model, batch), a in self._alone.items() if g == gpu]
        self._correction[gpu] = statistics.median(ratios) if ratios else 1.0
        # per measured group: (partners' utilisation, 1/speed - 1)
        points: list[list[tuple[float, float]]] = []
        for (g, _), found in self._groups.items():
            if g != gpu:
                continue
            for group in found:
                utils = [self._utilization_of(model, batch, gpu) for model, batch in group.members]
                points.append([(sum(u for k, u in enumerate(utils) if k != i), 1.0 / s - 1.0)
                               for i, s in enumerate(group.speeds)])
        self._slope[gpu] = _slope([p for group in points for p in group])
        if points:
            self._fit_error[gpu] = statistics.fmean(_error(self._slope[gpu], p)
                                                    for group in points for p in group)
        if len(points) > 1:  # each group predicted by the slope fitted on the others
            self._loo_error[gpu] = statistics.fmean(
                _error(_slope([p for k, other in enumerate(points) if k != i for p in other]), p)
                for i, group in enumerate(points) for p in group)

    def _fallback(self) -> Any:
        fallback = getattr(self.base, "fallback", None)
        if fallback is None:
            from dltsched.predictors.analytic import AnalyticStepTime

            fallback = AnalyticStepTime(compute_efficiency=0.30, memory_efficiency=0.55)
        return fallback

    # -- what the GPU types and sources are -----------------------------------------------------------

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """GPU types the datasets measured."""
        return tuple(sorted({g for g, _, _ in self._alone}))

    @property
    def kind(self) -> str:
        """``"measured"``: the datasets' GPU types run on their measurements (the others on ``base``'s)."""
        return "measured"

    @property
    def sources(self) -> tuple[str, ...]:
        """``profile:<folder name>[:<sharing>]`` for each dataset, then the sources of ``base``."""
        own = tuple(f"profile:{Path(d).name}" + (f":{self.sharing}" if self.sharing else "")
                    for d in self.dirs)
        return own + tuple(getattr(self.base, "sources", ()))

    def covers(self, gpu_type: str) -> bool:
        """Whether the datasets measured ``gpu_type`` (case-insensitive), so that this truth answers for it.

        Parameters
        ----------
        gpu_type
            GPU type name, e.g. ``"h200"``.

        Returns
        -------
        bool
            ``True`` when the measurements answer for ``gpu_type``; ``False`` when ``base`` does.
        """
        return gpu_type.lower() in self._correction

    def record(self) -> dict[str, Any]:
        """What this truth is and how many distinct groups each source answered (``measured``,
        ``pairwise``: composed from measured pairs, ``utilization_model``) or a step time (``step_measured``,
        ``step_scaled``: measured model at another batch/count, ``step_corrected``: an unmeasured model)."""
        return {"kind": "profile", "dirs": [str(d) for d in self.dirs], "sharing": self.sharing,
                "gpu_types": list(self.gpu_types), "alone_measured": len(self._alone),
                "groups_measured": sum(len(v) for v in self._groups.values()),
                "utilization_slope": {g: round(s, 4) for g, s in self._slope.items()},
                "utilization_model_fit_mape": {g: round(e, 4) for g, e in self._fit_error.items()},
                "utilization_model_leave_one_group_out_mape": {g: round(e, 4)
                                                               for g, e in self._loo_error.items()},
                "step_correction": {g: round(c, 4) for g, c in self._correction.items()},
                "lookups": dict(sorted(self._used.items()))}

    # -- isolated step time and memory --------------------------------------------------------------

    def _nearest_alone(self, job: Job, gpu: str) -> tuple[int, _Alone] | None:
        batches = [(b, a) for (g, m, b), a in self._alone.items() if g == gpu and m == job.model]
        if not batches:
            return None
        return min(batches, key=lambda ba: (abs(math.log(ba[0] / job.batch_size)), ba[0]))

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1,
                    freeze_level: int = 0) -> float:
        """Seconds per iteration: measured, scaled from a measured run, or corrected (module docstring)."""
        gpu = gpu_type.lower()
        if not self.covers(gpu):
            return self.base.step_time_s(job, gpu_type, num_gpus, num_nodes, freeze_level)
        key = ("step", job.model, job.dataset, job.batch_size, job.amp, gpu, num_gpus, num_nodes,
               freeze_level)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._step(job, gpu, num_gpus, num_nodes, freeze_level)
            self._cache[key] = hit
        return float(hit)

    def _step(self, job: Job, gpu: str, num_gpus: int, num_nodes: int, freeze_level: int) -> float:
        fallback = self._fallback()
        modelled = fallback.step_time_s(job, gpu, num_gpus, freeze_level=freeze_level, num_nodes=num_nodes)
        near = self._nearest_alone(job, gpu) if not job.amp else None
        if near is None:
            self._used["step_corrected"] += 1
            return modelled * self._correction[gpu]
        batch, alone = near
        anchor = replace_batch(job, batch)
        exact = batch == job.batch_size and num_gpus == 1 and num_nodes == 1 and freeze_level == 0
        self._used["step_measured" if exact else "step_scaled"] += 1
        return alone.step_time_s * modelled / fallback.step_time_s(anchor, gpu, 1)

    def memory_mib(self, job: Job, gpu_type: str, freeze_level: int = 0) -> float:
        """Peak memory of ``job`` on one GPU in MiB: measured and scaled, else the fallback model's."""
        gpu = gpu_type.lower()
        if not self.covers(gpu):
            return self.base.memory_mib(job, gpu_type, freeze_level)
        fallback = self._fallback()
        modelled = fallback.memory_mib(job, gpu, freeze_level=freeze_level)
        near = self._nearest_alone(job, gpu) if not job.amp else None
        if near is None or not math.isfinite(near[1].memory_mib):
            return float(modelled)
        batch, alone = near
        return float(alone.memory_mib * modelled / fallback.memory_mib(replace_batch(job, batch), gpu))

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float) -> float:
        """Share of progress lost to freezing (0..1): ``base``'s penalty, which no profile measures."""
        return self.base.frozen_penalty(job, freeze_level, start_progress)  # type: ignore[attr-defined,no-any-return]

    # -- co-location --------------------------------------------------------------------------------

    def _utilization_of(self, model: str, batch: int, gpu: str) -> float:
        alone = self._alone.get((gpu, model, batch))
        if alone is not None and alone.utilization is not None:
            return min(1.0, alone.utilization)
        near = self._nearest_alone(Job("x", model, batch, 1.0), gpu)
        if near is not None and near[1].utilization is not None:
            return min(1.0, near[1].utilization)
        from dltsched.predictors.analytic import AnalyticColocation

        return float(AnalyticColocation(self._fallback()).gpu_share(Job("x", model, batch, 1.0), gpu))

    def gpu_utilization(self, job: Job, gpu_type: str) -> float:
        """Share of the GPU's time the job keeps it busy alone (measured where it was)."""
        gpu = gpu_type.lower()
        if not self.covers(gpu):
            return float(self.base.gpu_utilization(job, gpu_type))  # type: ignore[attr-defined]
        return self._utilization_of(job.model, job.batch_size, gpu)

    def _measured_group(self, models: Sequence[tuple[str, int]], gpu: str) -> tuple[float, ...] | None:
        found = self._groups.get((gpu, tuple(sorted(m for m, _ in models))))
        if not found:
            return None
        best: tuple[float, tuple[float, ...]] | None = None
        for group in found:
            # match members to the group's (same models), nearest batch sizes; try both orders for twins
            pool = list(enumerate(group.members))
            speeds: list[float] = []
            distance = 0.0
            for model, batch in models:
                options = [(abs(math.log(b / batch)), k) for k, (m, b) in pool if m == model]
                d, k = min(options)
                distance += d
                speeds.append(group.speeds[k])
                pool = [(i, mb) for i, mb in pool if i != k]
            if best is None or distance < best[0]:
                best = (distance, tuple(speeds))
        return None if best is None else best[1]

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """Speed of each of ``jobs`` sharing one GPU, relative to alone: measured, pairwise or modelled."""
        gpu = gpu_type.lower()
        if not self.covers(gpu):
            return self.base.colocated_speeds(jobs, gpu_type)
        if len(jobs) == 1:
            return (1.0,)
        members = [(j.model, j.batch_size) for j in jobs]
        key = ("group", gpu, tuple(members))
        hit = self._cache.get(key)
        if hit is not None:
            return hit[1]  # type: ignore[no-any-return]
        measured = None if any(j.amp for j in jobs) else self._measured_group(members, gpu)
        if measured is not None:
            source, speeds = "measured", measured
        else:
            n = len(jobs)
            pair: dict[tuple[int, int], float] = {}
            for i in range(n):
                for k in range(n):
                    measured_pair = (self._measured_group([members[i], members[k]], gpu)
                                     if i != k and n > 2 else None)
                    if measured_pair is not None:
                        pair[(i, k)] = measured_pair[0]
            if n > 2 and len(pair) == n * (n - 1):
                slow = [sum(1.0 / pair[(i, k)] - 1.0 for k in range(n) if k != i) for i in range(n)]
                source, speeds = "pairwise", tuple(1.0 / (1.0 + max(s, -0.5)) for s in slow)
            else:
                utils = [self._utilization_of(m, b, gpu) for m, b in members]
                c = self._slope[gpu]
                source = "utilization_model"
                speeds = tuple(1.0 / (1.0 + c * sum(u for k, u in enumerate(utils) if k != i))
                               for i in range(len(jobs)))
        self._cache[key] = (source, speeds)
        self._used[source] += 1
        return speeds


def _slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope through the origin of ``1/speed - 1`` on the partners' utilisation (>= 0)."""
    denominator = sum(x * x for x, _ in points)
    return max(sum(x * y for x, y in points) / denominator, 0.0) if denominator > 0 else 1.0


def _error(slope: float, point: tuple[float, float]) -> float:
    """Relative error of the utilisation model's speed at ``point`` = (utilisation, 1/speed - 1)."""
    x, y = point
    return abs(1.0 / (1.0 + slope * x) - 1.0 / (1.0 + y)) * (1.0 + y)


def replace_batch(job: Job, batch_size: int) -> Job:
    """``job`` at another batch size (one GPU, no freezing: the anchor of a measured run)."""
    return Job(job.id, job.model, batch_size, 1.0, dataset=job.dataset, amp=job.amp, optimizer=job.optimizer)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _group_row(row: dict[str, str], folder_mode: str) -> tuple[str, str, _Group] | None:
    members, speeds = [], []
    for i in (1, 2, 3):
        model, speed = row.get(f"model{i}"), _float(row.get(f"speed{i}"))
        if not model:
            break
        if speed is None or speed <= 0 or row.get(f"amp{i}", "0") not in ("0", ""):
            return None
        members.append((model, int(float(row[f"batchsize{i}"]))))
        speeds.append(min(speed, 1.0))
    if len(members) < 2 or not row.get("gpu"):
        return None
    mode = row.get("sharing") or folder_mode
    return row["gpu"].lower(), mode, _Group(tuple(members), tuple(speeds))


__all__ = ["SHARING_MODES", "ProfileTruth", "replace_batch"]
