"""Ground truth for the simulator: how fast jobs *really* run, kept apart from what policies predict.

:class:`MeasuredTruth` uses real measurements wherever they exist and a documented model elsewhere:

* **Isolated step time.** Gavel's measured steps/s (``gavel/simulation_throughputs.json``) for the job's
  model, batch size, GPU type and GPU count (1/2/4/8, consolidated or spread over nodes); Gavel counts
  the steps of every worker, so a data-parallel iteration on n GPUs takes n / throughput. A batch size
  between measured ones is interpolated linearly in step time; outside, extrapolated from the two nearest.
  A model not measured at this GPU count or type is anchored to its nearest measurement - the same GPU
  type at the closest measured GPU count first, then other types - scaled by the ratio of the fallback
  model's step times (so a 4-GPU A3C job runs near Gavel's 1-GPU A3C speed, not at the roofline's). Anything
  else uses the fallback model: :class:`~dltsched.predictors.analytic.AnalyticStepTime` with *different*
  efficiencies than the predictor default (compute 0.30, memory 0.55) times a deterministic per-(model, GPU)
  factor drawn from a log-normal (sigma 0.15) keyed by a hash of the names, standing in for what no
  roofline captures. It is not the predictor policies use.
* **Co-location.** Gavel's measured pairs (K80, P100) for the two jobs' models at the nearest measured
  batch sizes; else Lucid's measured pairs (``lucid/colocate_info.csv``, 11 models, batch 32-128, with and
  without AMP; its GPU is unrecorded, so they apply to every GPU type; speeds above 1, measurement noise,
  are capped at 1). Lucid's data is non-commercial: it is read locally at run time, never shipped.
  Without a measurement: ``speed_i = 1 / (1 + overhead + sum_{j != i} d_j)``, with ``d_j`` the
  other jobs' GPU demand from the fallback model (compute-time share of the step), ``overhead`` = 0.05
  for time-slicing. Groups of three compose pairwise slowdowns: ``1/speed_i - 1 = sum_j (1/s_ij - 1)``.
* **Memory.** The analytic memory model.
* **Frozen penalty.** :class:`~dltsched.predictors.freezing.published.PublishedFreezing`:
  ``a f**1.5 (1 - s)**2`` with constants per model family calibrated on FreezeOut, Egeria and AutoFreeze
  (numbers and sources in that module). A penalty ``p`` costs that fraction of each iteration's progress:
  useful rate x (1 - p).

Gavel's table comes from the data folder when it has one, else from the copy the package carries, so the
truth is measured on a bare install too; Lucid's pairs only ever come from a data folder.
:attr:`MeasuredTruth.kind` (``measured`` or ``analytic``) and :attr:`MeasuredTruth.sources` name what a
run used, and every simulation result carries them. Without any measurement (``use_measurements=False``, or
the table unreadable) everything uses the fallback model; the unplanned case logs one warning per process.
"""

from __future__ import annotations

import bisect
import csv
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dltsched.engine.domain.hashing import hash_normal
from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import FreezingPredictor
from dltsched.engine.domain.protocols import (
    GroundTruth as GroundTruth,  # re-exported: the simulator imports it here
)
from dltsched.predictors.analytic import AnalyticColocation, AnalyticStepTime

log = logging.getLogger(__name__)

_MEASURED_GPUS = ("k80", "p100", "v100")
#: fallbacks already warned about (one warning per process and reason)
_WARNED: set[str] = set()


def _noise(model: str, gpu_type: str, sigma: float = 0.15) -> float:
    return math.exp(sigma * hash_normal(f"{model}|{gpu_type}"))


def _published_freezing() -> FreezingPredictor:
    from dltsched.predictors.freezing.published import PublishedFreezing

    return PublishedFreezing()


@dataclass(slots=True)
class MeasuredTruth:
    """Measured rates where they exist, a documented fallback elsewhere (see module docstring)."""

    data_dir: str | None = None
    use_measurements: bool = True
    fallback: AnalyticStepTime = AnalyticStepTime(compute_efficiency=0.30, memory_efficiency=0.55)
    freezing: FreezingPredictor = field(default_factory=_published_freezing)
    timeslice_overhead: float = 0.05
    #: (gpu, model, dataset, scale, consolidated) -> sorted [(batch, step_time_s)]
    _isolated: dict[tuple[str, str, str | None, int, bool],
                    list[tuple[int, float]]] = field(default_factory=dict)
    #: (gpu, model a, batch a, model b, batch b) -> (speed a, speed b), normalized
    _pairs: dict[tuple[str, str, int, str, int], tuple[float, float]] = field(default_factory=dict)
    _pair_batches: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    #: (model a, batch a, amp a, model b, batch b, amp b) -> speed of a, from Lucid (any GPU type)
    _lucid: dict[tuple[str, int, bool, str, int, bool], float] = field(default_factory=dict)
    _lucid_batches: dict[str, list[int]] = field(default_factory=dict)
    _cache: dict[tuple[object, ...], float] = field(default_factory=dict)
    #: the measurements loaded, e.g. ``("gavel:packaged",)`` or ``("gavel", "lucid")``
    sources: tuple[str, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        if self.use_measurements:
            self._load()
            if not self._isolated and "no-table" not in _WARNED:
                _WARNED.add("no-table")
                log.warning("ground truth: Gavel's measured throughputs could not be read; every rate comes "
                            "from the analytic fallback model (truth 'analytic')")

    @property
    def kind(self) -> str:
        """``"measured"`` when measured rates were loaded, else ``"analytic"`` (the fallback model alone)."""
        return "measured" if self._isolated else "analytic"

    def _load(self) -> None:
        from dltsched.instances.datadir import find_data_dir
        from dltsched.instances.readers.gavel_throughputs import read_gavel_throughputs, throughputs_file

        base = find_data_dir(self.data_dir, required=False)
        path, origin = throughputs_file(base)
        if not path.is_file():
            return
        table = read_gavel_throughputs(path)
        self.sources = ("gavel",) if origin == "data folder" else ("gavel:packaged",)
        for (gpu, jt, scale, consolidated), steps_per_s in table.isolated.items():
            key = (gpu, jt.model, jt.dataset, scale, consolidated)
            # a scale-n throughput counts the steps of all n workers: one iteration takes n / throughput
            self._isolated.setdefault(key, []).append((jt.batch_size, scale / steps_per_s))
        for rows in self._isolated.values():
            rows.sort()
        for (gpu, a, b), (ta, tb) in table.pairs.items():
            iso_a = table.isolated.get((gpu, a, 1, True))
            iso_b = table.isolated.get((gpu, b, 1, True))
            if not iso_a or not iso_b:
                continue
            self._pairs[(gpu, a.model, a.batch_size, b.model, b.batch_size)] = (ta / iso_a, tb / iso_b)
            for m, bs in ((a.model, a.batch_size), (b.model, b.batch_size)):
                batches = self._pair_batches.setdefault((gpu, m), [])
                if bs not in batches:
                    bisect.insort(batches, bs)
        if base is not None:
            self._load_lucid(base)

    def _load_lucid(self, base: Path) -> None:
        from dltsched.engine.domain.catalog import model_catalog

        path = base / "lucid" / "colocate_info.csv"
        if not path.exists():
            return
        resolve = model_catalog().resolve
        with path.open(newline="") as fh:
            for row in csv.DictReader(fh):
                a, b = resolve(row["model1"]), resolve(row["model2"])
                ba, bb = int(row["batchsize1"]), int(row["batchsize2"])
                amp_a, amp_b = row["amp1"] == "1", row["amp2"] == "1"
                sa, sb = min(1.0, float(row["speed1"])), min(1.0, float(row["speed2"]))
                self._lucid[(a, ba, amp_a, b, bb, amp_b)] = sa
                self._lucid[(b, bb, amp_b, a, ba, amp_a)] = sb
                for m, bs in ((a, ba), (b, bb)):
                    batches = self._lucid_batches.setdefault(m, [])
                    if bs not in batches:
                        bisect.insort(batches, bs)
        self.sources = (*self.sources, "lucid")

    # -- isolated step time -------------------------------------------------------------------------

    def _dataset(self, job: Job) -> str:
        from dltsched.engine.domain.catalog import model_spec

        return job.dataset or model_spec(job.model).default_dataset

    def _measured(self, job: Job, gpu: str, scale: int, consolidated: bool) -> float | None:
        rows = self._isolated.get((gpu, job.model, self._dataset(job), scale, consolidated))
        if not rows:
            return None
        if len(rows) == 1:
            return rows[0][1] * job.batch_size / rows[0][0]
        batches = [b for b, _ in rows]
        i = min(max(bisect.bisect_left(batches, job.batch_size), 1), len(rows) - 1)
        (b0, t0), (b1, t1) = rows[i - 1], rows[i]
        t = t0 + (t1 - t0) * (job.batch_size - b0) / (b1 - b0)
        return max(t, 0.25 * min(t0, t1))

    def _anchor(self, job: Job, gpu_type: str, num_gpus: int,
                consolidated: bool) -> tuple[float, str, int] | None:
        """The nearest measurement of the job's model and batch: (step time, GPU type, GPU count); the
        same type at the closest measured count (consolidated) first, then the other types."""
        scales = (1, 2, 4, 8)
        order = sorted(scales, key=lambda n: (abs(math.log(n / num_gpus)), n))
        types = [gpu_type] * (gpu_type in _MEASURED_GPUS) + [t for t in _MEASURED_GPUS if t != gpu_type]
        for other in types:
            counts = order if other == gpu_type else [num_gpus, *(n for n in order if n != num_gpus)]
            for count in counts:
                m = self._measured(job, other, count, consolidated if count == num_gpus else True)
                if m is not None:
                    return m, other, count
        return None

    def _fallback_step(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int,
                       freeze_level: int) -> float:
        base = self.fallback.step_time_s(job, gpu_type, num_gpus, freeze_level=freeze_level,
                                         num_nodes=num_nodes)
        return base * _noise(job.model, gpu_type)

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1,
                    freeze_level: int = 0) -> float:
        """Seconds per iteration: Gavel's measurement, anchored to one, or the fallback model."""
        key = ("step", job.model, job.dataset, job.batch_size, job.amp, job.optimizer, gpu_type, num_gpus,
               num_nodes, freeze_level)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        value = self._step_time(job, gpu_type, num_gpus, num_nodes, freeze_level)
        self._cache[key] = value
        return value

    def _step_time(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int, freeze_level: int) -> float:
        fallback = self._fallback_step(job, gpu_type, num_gpus, num_nodes, freeze_level)
        if not self._isolated or job.amp:
            return fallback
        consolidated = num_nodes <= 1
        measured = (self._measured(job, gpu_type, num_gpus, consolidated)
                    if gpu_type in _MEASURED_GPUS else None)
        if measured is None:
            # the same model measured at another GPU count or on another type: scale by the fallback's ratio
            anchor = self._anchor(job, gpu_type, num_gpus, consolidated)
            if anchor is None:
                return fallback
            m, other, count = anchor
            nodes = num_nodes if count == num_gpus else 1  # an anchor at another count ran in one node
            measured = m * fallback / self._fallback_step(job, other, count, nodes, freeze_level)
        if freeze_level:
            unfrozen = self._fallback_step(job, gpu_type, num_gpus, num_nodes, 0)
            measured *= fallback / unfrozen
        return measured

    # -- co-location --------------------------------------------------------------------------------

    def _demand(self, job: Job, gpu_type: str) -> float:
        key = ("demand", job.model, job.dataset, job.batch_size, job.amp, gpu_type)
        hit = self._cache.get(key)
        if hit is None:
            hit = AnalyticColocation(self.fallback).gpu_share(job, gpu_type)
            self._cache[key] = hit
        return hit

    def _pair_speed(self, a: Job, b: Job, gpu_type: str) -> float:
        """Normalized speed of ``a`` when sharing one GPU with ``b``."""
        if not (a.amp or b.amp) and self._pairs:
            ba = self._nearest_batch(gpu_type, a.model, a.batch_size)
            bb = self._nearest_batch(gpu_type, b.model, b.batch_size)
            if ba is not None and bb is not None:
                hit = self._pairs.get((gpu_type, a.model, ba, b.model, bb))
                if hit is not None:
                    return hit[0]
        if self._lucid:
            la, lb = self._nearest(self._lucid_batches.get(a.model), a.batch_size), \
                self._nearest(self._lucid_batches.get(b.model), b.batch_size)
            if la is not None and lb is not None:
                speed = self._lucid.get((a.model, la, a.amp, b.model, lb, b.amp))
                if speed is not None:
                    return speed
        return 1.0 / (1.0 + self.timeslice_overhead + self._demand(b, gpu_type))

    def _nearest_batch(self, gpu: str, model: str, batch: int) -> int | None:
        return self._nearest(self._pair_batches.get((gpu, model)), batch)

    @staticmethod
    def _nearest(batches: list[int] | None, batch: int) -> int | None:
        if not batches:
            return None
        return min(batches, key=lambda b: (abs(math.log(b / batch)), b))

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """Speed of each of ``jobs`` sharing one GPU, relative to alone, composed from pairwise slowdowns."""
        if len(jobs) == 1:
            return (1.0,)
        out = []
        for i, a in enumerate(jobs):
            slowdown = sum(1.0 / self._pair_speed(a, b, gpu_type) - 1.0 for k, b in enumerate(jobs) if k != i)
            out.append(1.0 / (1.0 + max(slowdown, -0.5)))
        return tuple(out)

    def gpu_utilization(self, job: Job, gpu_type: str) -> float:
        """Share of the GPU's time the job keeps it busy alone (the fallback model's compute share); what a
        profile measures as utilisation."""
        return self._demand(job, gpu_type)

    # -- memory and accuracy ------------------------------------------------------------------------

    def memory_mib(self, job: Job, gpu_type: str, freeze_level: int = 0) -> float:
        """Memory of ``job`` on one GPU in MiB, from the analytic memory model."""
        return self.fallback.memory_mib(job, gpu_type, freeze_level=freeze_level)

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float) -> float:
        """Share of progress lost to freezing (0..1), from ``freezing``; 0 at level 0."""
        return self.freezing.frozen_penalty(job, freeze_level, start_progress) if freeze_level else 0.0
