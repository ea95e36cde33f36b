"""GPU profiling harness: real training steps of zoo models, timed, with peak memory.

On a CUDA GPU it runs ``steps`` SGD steps per model after warm-up and records the median step
time and peak allocated memory; on CPU (``require_gpu=False``) it runs the same loop as a smoke
test. Rows use the eval-steptime CSV format (``gpu`` is ``"cpu"`` in smoke runs). Co-located runs
(2-3 processes, time-slicing or MPS) live in :mod:`.colocate` and :mod:`.session`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from dltsched.engine.domain.errors import DltschedError


def _device(require_gpu: bool) -> Any:
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda")
    if require_gpu:
        raise DltschedError("profile: no CUDA GPU found; run on a GPU machine or pass --smoke for a CPU "
                            "check")
    return torch.device("cpu")


@dataclass(frozen=True, slots=True)
class Training:
    """One zoo model with an SGD optimizer and a fixed batch on ``device``, ready to step."""

    model: str
    dataset: str
    module: Any
    optimizer: Any
    inputs: tuple[Any, ...]
    device: Any

    def step(self) -> None:
        """Run one training step: zero the gradients, forward and backward, optimizer step."""
        self.optimizer.zero_grad(set_to_none=True)
        self.module(*self.inputs).backward()
        self.optimizer.step()

    def timed_step_s(self) -> float:
        """Wall time of one step (s), the device synchronized at the end."""
        import torch

        start = time.perf_counter()
        self.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start


def build_training(model: str, dataset: str | None, batch_size: int, device: Any) -> Training:
    """A :class:`Training` of zoo ``model`` (id or alias) on ``dataset`` (default: the model's)."""
    import torch

    from dltsched.engine.domain.catalog import model_catalog
    from dltsched.predictors.zoo.extract import NET_MODULES  # noqa: F401 - registers the builders
    from dltsched.predictors.zoo.nets_base import BUILDERS

    spec = model_catalog().get(model)
    dataset = dataset or spec.default_dataset
    with torch.device(device):
        built = BUILDERS[spec.id][0](dataset)
        inputs = built.make_inputs(batch_size)
    module = built.module.train()
    return Training(spec.id, dataset, module, torch.optim.SGD(module.parameters(), lr=1e-3), inputs, device)


def peak_memory_mib(device: Any) -> float | None:
    """Peak CUDA memory allocated by this process since the last reset (MiB); ``None`` on CPU."""
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None


def profile_model(model: str, dataset: str | None, batch_size: int, steps: int,
                  device: Any) -> dict[str, Any]:
    """Median step time (s) and peak memory (MiB) of ``steps`` training steps of one zoo model."""
    import torch

    training = build_training(model, dataset, batch_size, device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = [training.timed_step_s() for _ in range(steps + 1)]  # the first step warms up
    gpu = torch.cuda.get_device_name().lower() if cuda else "cpu"
    return {"model": training.model, "dataset": training.dataset, "gpu": gpu, "batch_size": batch_size,
            "num_gpus": 1, "step_time_s": statistics.median(times[1:]),
            "peak_memory_mib": peak_memory_mib(device), "amp": 0, "optimizer": "sgd"}


def profile_models(models: tuple[str, ...], *, batch_size: int, steps: int, require_gpu: bool = True,
                   output: str | None = None) -> list[dict[str, Any]]:
    """Profile each model alone on the device; write rows to ``output`` (CSV) when given."""
    import csv
    from pathlib import Path

    device = _device(require_gpu)
    rows = [profile_model(m, None, batch_size, steps, device) for m in models]
    if output:
        with Path(output).open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return rows
