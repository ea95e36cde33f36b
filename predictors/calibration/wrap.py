"""A predictor bundle with a calibration on top: GPU types the calibration covers use it, the others the base.

For a covered GPU type (:meth:`CalibrationBundle.for_gpu`):

- **step time** = the job's profile in the bundle (scope ``compute``, unfrozen, SGD) or the calibrated step
  model, plus the base's all-reduce time for a data-parallel job (a one-GPU profile cannot see it). A step is
  priced at the profiles' scope, with the inputs already on the GPU: no input pipeline is added, since the
  base's input terms describe other setups' host machines, not the calibrated GPU's;
- **memory** = the profile's NVML memory, else the calibrated memory model (the whole GPU's used memory while
  the job runs: CUDA context included);
- **co-location** = the calibrated group models of the bundle's sharing mode (``timeslice`` unless asked
  otherwise; a covered GPU without that mode's groups keeps the base's co-location).

Every other GPU type is predicted by the base bundle, unchanged. ``sources`` say which: ``measured`` or
``calibrated`` on a covered GPU, else the base's own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from dltsched.engine.domain.model import Job
from dltsched.predictors.calibration.bundle import CalibrationBundle

#: remembered predictions per wrapper (cleared when full)
_MEMO_SIZE = 100_000


def _key(job: Job) -> tuple[str, str, int, bool]:
    from dltsched.predictors.zoo.graphs import resolve

    model, dataset = resolve(job.model, job.dataset)
    return model, dataset, int(job.batch_size), bool(job.amp)


class CalibratedStepTime:
    """``StepTimePredictor``: the calibration for covered GPU types, ``base`` for the rest (module
    docstring)."""

    def __init__(self, base: Any, bundle: CalibrationBundle) -> None:
        self.base, self.bundle = base, bundle
        self._memo: dict[tuple[Any, ...], float] = {}  # a scheduler asks the same jobs round after round

    def __getattr__(self, name: str) -> Any:  # the base's other methods (breakdown, knows, ...) for callers
        return getattr(self.__dict__["base"], name)

    def _comm_s(self, job: Job, gpu_type: str, num_gpus: int | None, freeze_level: int, num_nodes: int,
                scope: str) -> float:
        """The base's all-reduce time of a data-parallel job (what a one-GPU profile cannot see)."""
        breakdown = getattr(self.base, "breakdown", None)
        n = job.num_gpus if num_gpus is None else num_gpus
        if breakdown is None or n <= 1 or scope == "fwd_bwd":
            return 0.0
        return float(breakdown(job, gpu_type, num_gpus, freeze_level=freeze_level, num_nodes=num_nodes,
                               scope="compute").comm_s)

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *, freeze_level: int = 0,
                    num_nodes: int = 1, scope: str = "iteration") -> float:
        """Seconds per step: the calibration's for a covered GPU type, the base predictor's else."""
        cal = self.bundle.for_gpu(gpu_type)
        if cal is None:
            if scope == "iteration":
                return float(self.base.step_time_s(job, gpu_type, num_gpus, freeze_level=freeze_level,
                                                   num_nodes=num_nodes))
            return float(self.base.step_time_s(job, gpu_type, num_gpus, freeze_level=freeze_level,
                                               num_nodes=num_nodes, scope=scope))
        memo_key = (job.model, job.dataset, job.batch_size, job.amp, job.optimizer, job.num_gpus, gpu_type,
                    num_gpus, freeze_level, num_nodes, scope)
        hit = self._memo.get(memo_key)
        if hit is None:
            inner = "fwd_bwd" if scope == "fwd_bwd" else "compute"
            step, _source = cal.step_s(_key(job), inner, freeze_level, job.optimizer.lower())
            hit = step + self._comm_s(job, gpu_type, num_gpus, freeze_level, num_nodes, scope)
            if len(self._memo) >= _MEMO_SIZE:
                self._memo.clear()
            self._memo[memo_key] = hit
        return hit

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        """GPU memory (MiB): the calibration's for a covered GPU type, the base predictor's else."""
        cal = self.bundle.for_gpu(gpu_type)
        if cal is None:
            return float(self.base.memory_mib(job, gpu_type, freeze_level=freeze_level))
        return cal.memory_mib(_key(job), freeze_level, job.optimizer.lower())[0]

    def step_time_source(self, job: Job, gpu_type: str) -> str:
        """``measured`` or ``calibrated`` on a covered GPU type, else ``default``."""
        cal = self.bundle.for_gpu(gpu_type)
        return "default" if cal is None else cal.step_s(_key(job))[1]


class CalibratedColocation:
    """``ColocationPredictor``: the calibrated group models of ``sharing`` for covered GPU types, ``base``
    else."""

    def __init__(self, base: Any, bundle: CalibrationBundle, sharing: str = "timeslice") -> None:
        self.base, self.bundle, self.sharing = base, bundle, sharing
        self.inner = base  # the wrappers' chain (policies look for ``colocation_sources`` through it)
        self._memo: dict[tuple[Any, ...], dict[str, Any] | None] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["base"], name)

    def _group(self, jobs: Sequence[Job], gpu_type: str) -> dict[str, Any] | None:
        memo_key = (gpu_type, *((j.model, j.dataset, j.batch_size, j.amp) for j in jobs))
        if memo_key in self._memo:
            return self._memo[memo_key]
        cal = self.bundle.for_gpu(gpu_type)
        got = None if cal is None else cal.group([_key(j) for j in jobs], self.sharing)
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        self._memo[memo_key] = got
        return got

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """Each job's speed in the group relative to alone: the calibrated group model's for a group the
        calibration covers, the base predictor's else."""
        got = self._group(jobs, gpu_type)
        return tuple(self.base.colocated_speeds(jobs, gpu_type)) if got is None else tuple(got["speeds"])

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        """The group's GPU memory (MiB): calibrated for a group the calibration covers, the base's else."""
        got = self._group(jobs, gpu_type)
        return float(self.base.group_memory_mib(jobs, gpu_type)) if got is None else float(got["memory_mib"])

    def group_util_pct(self, jobs: Sequence[Job], gpu_type: str) -> float | None:
        """The group's GPU utilisation (percent) for a group the calibration covers; ``None`` else."""
        got = self._group(jobs, gpu_type)
        return None if got is None else float(got["gpu_util"])

    def colocation_sources(self, jobs: Sequence[Job], gpu_type: str) -> tuple[str, ...]:
        """Per job: ``measured`` (its profile is in the bundle) or ``calibrated`` (predicted by the calibrated
        models: not a fallback to an unfitted model) on a covered GPU type; else the base's sources."""
        cal = self.bundle.for_gpu(gpu_type)
        if cal is None or cal.sharing_fit(self.sharing) is None:
            sources = getattr(self.base, "colocation_sources", None)
            return tuple(sources(jobs, gpu_type)) if sources is not None else ()
        return tuple(cal.step_s(_key(j))[1] for j in jobs)


def calibrated_predictors(base: Any, bundle: CalibrationBundle | str | os.PathLike[str],
                          sharing: str = "timeslice") -> Any:
    """``base`` (a ``Predictors`` bundle) with ``bundle`` (or the path of one) on top; see the module
    docstring."""
    from dltsched.engine.domain.predictors import Predictors

    cal = bundle if isinstance(bundle, CalibrationBundle) else CalibrationBundle.load(bundle)
    return Predictors(CalibratedStepTime(base.step_time, cal),
                      CalibratedColocation(base.colocation, cal, sharing),
                      base.freezing)


def find_calibrated(step_time: Any) -> CalibratedStepTime | None:
    """The :class:`CalibratedStepTime` inside ``step_time`` (through wrappers' ``base``), or ``None``."""
    seen = step_time
    for _ in range(8):
        if isinstance(seen, CalibratedStepTime):
            return seen
        seen = getattr(seen, "base", None)
        if seen is None:
            return None
    return None


def calibration_provenance(predictors: Any, plan: Any, state: Any) -> dict[str, dict[str, str]]:
    """Per placed job of ``plan``, what priced it: ``calibration`` is the bundle's label with ``measured`` or
    ``calibrated`` on a GPU type it covers, ``not covered (<type>)`` on another (priced by the bundle
    underneath); empty when ``predictors`` carry no calibration."""
    cal = find_calibrated(getattr(predictors, "step_time", None))
    if cal is None:
        return {}
    jobs = {s.job.id: s.job for s in state.jobs}
    out: dict[str, dict[str, str]] = {}
    for a in plan.assignments:
        if a.job_id not in jobs or not a.gpus:
            continue
        gpu_type = state.cluster.gpu_type_of(a.gpus[0])
        source = cal.step_time_source(jobs[a.job_id], gpu_type)
        out[a.job_id] = {"calibration": f"{cal.bundle.label}: {source}" if source != "default"
                         else f"{cal.bundle.label}: not covered ({gpu_type})"}
    return out
