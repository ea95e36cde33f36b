"""Catalog-based analytic predictors: the fallback when no trained predictor is available.

Step time is a roofline over the model catalog's coarse per-sample figures:
compute = 3 x forward FLOPs x batch / (efficiency x peak), memory traffic = activations read and
written twice, a fixed per-iteration overhead, and a ring all-reduce of the gradients for
data-parallel jobs. Co-located jobs share compute in proportion to their demand
(``speed_i = 1 / (1 + sum_{j != i} share_j)`` with shares from the roofline's GPU occupancy).
These are deliberately simple; ``dltsched.predictors`` holds the calibrated ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job

_MIB = 1024.0 * 1024.0


def _specs(job: Job, gpu_type: str):  # noqa: ANN202 - small private helper
    from dltsched.engine.domain.catalog import gpu_spec, model_spec

    try:
        gpu = gpu_spec(gpu_type)
    except ValueError as err:
        raise ValidationError("gpu_type", str(err)) from None
    model = model_spec(job.model)
    return gpu, model, model.dataset(job.dataset)


@dataclass(frozen=True, slots=True)
class AnalyticStepTime:
    """Roofline step-time and memory estimate from catalog values (see module docstring)."""

    compute_efficiency: float = 0.35
    memory_efficiency: float = 0.6
    overhead_s: float = 0.004
    workspace_mib: float = 600.0

    def _frozen_fraction(self, job: Job, freeze_level: int) -> float:
        from dltsched.engine.domain.catalog import model_spec

        layers = model_spec(job.model).layers
        if not 0 <= freeze_level < layers:
            raise ValidationError("freeze_level",
                                  f"{freeze_level} not understood; must be in [0, "
                                  f"{layers - 1}] for {job.model}")
        return freeze_level / layers

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        """Seconds per iteration: roofline compute plus communication (the
        :class:`~dltsched.engine.domain.predictors.StepTimePredictor` protocol)."""
        gpu, model, data = _specs(job, gpu_type)
        n = job.num_gpus if num_gpus is None else num_gpus
        frozen = self._frozen_fraction(job, freeze_level)
        peak = (gpu.fp16_tensor_tflops if job.amp else gpu.fp32_tflops) * 1e12
        # forward 1x, backward 2x (weight + input gradients); the frozen prefix skips its backward
        flops = data.fwd_gflops * 1e9 * job.batch_size * (1.0 + 2.0 * (1.0 - frozen))
        compute = flops / (self.compute_efficiency * peak)
        act_bytes = data.activation_mib * _MIB * job.batch_size * (0.5 if job.amp else 1.0)
        memory = (act_bytes * (2.0 + 2.0 * (1.0 - frozen))
                  / (self.memory_efficiency * gpu.memory_bandwidth_gbs * 1e9))
        step = max(compute, memory) + 0.3 * min(compute, memory) + self.overhead_s
        if n > 1:
            grad_bytes = model.params_m * 1e6 * 4.0 * (1.0 - frozen)
            link_gbs = gpu.intra_node_bandwidth_gbs if num_nodes <= 1 else 100.0 / 8.0
            allreduce = 2.0 * (n - 1) / n * grad_bytes / (link_gbs * 1e9) + 1e-4 * n
            step += 0.5 * allreduce  # half hidden behind the backward pass
        return step

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        """Peak GPU memory of one worker, MiB: weights, gradients, optimizer state, activations (the
        :class:`~dltsched.engine.domain.predictors.StepTimePredictor` protocol)."""
        _gpu, model, data = _specs(job, gpu_type)
        frozen = self._frozen_fraction(job, freeze_level)
        params = model.params_m * 1e6
        weights = params * 4.0
        trainable = params * (1.0 - frozen)
        grads_and_state = trainable * (4.0 + job.bytes_per_param)
        acts = data.activation_mib * _MIB * job.batch_size * (0.5 if job.amp else 1.0) * (1.0 - 0.8 * frozen)
        return (weights + grads_and_state + acts) / _MIB + self.workspace_mib


@dataclass(frozen=True, slots=True)
class AnalyticColocation:
    """Proportional-share contention model for jobs sharing one GPU (see module docstring)."""

    step_time: AnalyticStepTime = AnalyticStepTime()
    share_floor: float = 0.15

    def gpu_share(self, job: Job, gpu_type: str) -> float:
        """Busy fraction of the GPU when the job runs alone: compute time over total step time."""
        gpu, _model, data = _specs(job, gpu_type)
        step = self.step_time.step_time_s(job, gpu_type, 1)
        peak = (gpu.fp16_tensor_tflops if job.amp else gpu.fp32_tflops) * 1e12
        busy = 3.0 * data.fwd_gflops * 1e9 * job.batch_size / (self.step_time.compute_efficiency * peak)
        return min(1.0, max(self.share_floor, busy / step))

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """Co-located speeds relative to running alone, from the partners' GPU shares (the
        :class:`~dltsched.engine.domain.predictors.ColocationPredictor` protocol)."""
        shares = [self.gpu_share(j, gpu_type) for j in jobs]
        total = sum(shares)
        return tuple(1.0 / (1.0 + (total - s)) for s in shares)

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        """The group's GPU memory, MiB: the members' memory summed (the
        :class:`~dltsched.engine.domain.predictors.ColocationPredictor` protocol)."""
        return sum(self.step_time.memory_mib(j, gpu_type) for j in jobs)


@dataclass(frozen=True, slots=True)
class AnalyticFreezing:
    """Freeze levels = the model's catalog blocks; penalty grows with the frozen fraction and
    shrinks the later freezing starts: ``penalty = a * f**2 * (1 - start_progress)``."""

    a: float = 0.5

    def num_freeze_levels(self, job: Job) -> int:
        """Freeze levels of the job: the model's layer count (the
        :class:`~dltsched.engine.domain.predictors.FreezingPredictor` protocol)."""
        from dltsched.engine.domain.catalog import model_spec

        return model_spec(job.model).layers

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float = 0.0) -> float:
        """Accuracy penalty in [0, 1) of the freeze level: ``a`` x squared frozen fraction x progress to come
        (the :class:`~dltsched.engine.domain.predictors.FreezingPredictor` protocol)."""
        frac = freeze_level / self.num_freeze_levels(job)
        return self.a * frac * frac * (1.0 - min(max(start_progress, 0.0), 1.0))
