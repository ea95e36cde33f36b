"""IceFrog-style layer freezing: layer-aware throughput, memory, frozen penalty, effective progress.

Freeze level k freezes the first k blocks of the model's operator graph (0 .. num_layers - 1).
Step time and memory come from the DeletePop predictor, which skips the frozen prefix's backward
and optimizer update and drops its gradients, optimizer state and stored activations. The frozen
penalty is the parametric model of ``penalty.json`` (parameters and sources documented there).
Effective progress = throughput ratio to level 0 x (1 - penalty).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.predictors.steptime import DeletePopStepTime


@cache
def penalty_parameters() -> dict[str, Any]:
    """The shipped penalty model (``penalty.json``)."""
    return json.loads(resources.files("dltsched.predictors.freezing").joinpath("penalty.json").read_text())


@dataclass(frozen=True, slots=True)
class FreezeRow:
    """One freeze level of a job on one GPU type."""

    freeze_level: int
    step_time_s: float
    memory_mib: float
    penalty: float
    effective_progress: float


@dataclass(frozen=True, slots=True)
class IceFrogFreezing:
    """Freezing predictor; implements ``FreezingPredictor`` and adds :meth:`freeze_table`."""

    step_time: DeletePopStepTime = field(default_factory=DeletePopStepTime)
    parameters: dict[str, Any] = field(default_factory=penalty_parameters)

    def num_freeze_levels(self, job: Job) -> int:
        """Freeze levels of the job: the layers of its graph (the
        :class:`~dltsched.engine.domain.predictors.FreezingPredictor` protocol)."""
        from dltsched.predictors.zoo.graphs import graph_record

        return int(graph_record(job.model, job.dataset)["num_layers"])

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float = 0.0) -> float:
        """Accuracy penalty in [0, 1) of the freeze level, by IceFrog's layer-aware model (the
        :class:`~dltsched.engine.domain.predictors.FreezingPredictor` protocol).

        Raises
        ------
        ValidationError
            When ``freeze_level`` or ``start_progress`` is out of range.
        """
        from dltsched.engine.domain.catalog import model_spec

        levels = self.num_freeze_levels(job)
        if not isinstance(freeze_level, int) or not 0 <= freeze_level < levels:
            raise ValidationError("freeze_level",
                                  f"{freeze_level!r} not understood; must be in [0, {levels - 1}] "
                                                  f"for {job.model}")
        if not 0.0 <= start_progress <= 1.0:
            raise ValidationError("start_progress", f"{start_progress!r} not understood; must be in [0, 1]")
        fams = self.parameters["families"]
        par = fams.get(model_spec(job.model).family, fams["default"])
        frac = freeze_level / levels
        penalty = par["a"] * frac ** par["p"] * (1.0 - start_progress) ** par["q"]
        return min(penalty, float(self.parameters["max_penalty"]))

    def freeze_table(self, job: Job, gpu_type: str, start_progress: float = 0.0) -> tuple[FreezeRow, ...]:
        """Step time, memory, penalty and effective progress (relative to level 0) per freeze level."""
        base = self.step_time.step_time_s(job, gpu_type)
        rows = []
        for k in range(self.num_freeze_levels(job)):
            step = self.step_time.step_time_s(job, gpu_type, freeze_level=k)
            penalty = self.frozen_penalty(job, k, start_progress)
            rows.append(FreezeRow(k, step, self.step_time.memory_mib(job, gpu_type, freeze_level=k), penalty,
                                  base / step * (1.0 - penalty)))
        return tuple(rows)
