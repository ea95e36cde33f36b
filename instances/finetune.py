"""An LLM fine-tuning mix: many small one-GPU jobs (BERT, GPT-2, Transformer, LSTM LM) arriving as a Poisson
stream.

Each job picks one of :data:`FINETUNE_JOB_TYPES` uniformly, among those whose memory (by the registered ground
truth, on ``reference_gpu``) fits the cluster's largest GPU (the batch sizes of the shared H200 profile where
it measured the model, so a cluster of H200s runs most of them on measured step times), a duration log-uniform
in ``[min_duration_s, max_duration_s]`` on ``reference_gpu`` (converted to iterations with the registered
ground truth's step time there, as :mod:`dltsched.instances.generator` does) and one GPU (two for
``two_gpu_fraction`` of them, where a GPU type has two). A third allow freezing within a 1-5% accuracy budget.
Same arguments and seed, same instance.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from dltsched.engine.domain.catalog import gpu_spec
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Instance, Job
from dltsched.instances.clusters import parse_cluster_spec
from dltsched.instances.reference import reference_step_time

#: (model, batch size, optimizer): fine-tuning jobs of the model zoo
FINETUNE_JOB_TYPES: tuple[tuple[str, int, str], ...] = (
    ("bert_base", 32, "adam"), ("bert_base", 16, "adam"), ("gpt2", 8, "adam"), ("gpt2", 4, "adam"),
    ("transformer", 64, "adam"), ("lstm_lm", 20, "sgd"),
)


def finetune_mix(num_jobs: int = 100, cluster: str = "h200:2x8", *, seed: int = 0,
                 arrival_rate_per_h: float = 60.0, min_duration_s: float = 600.0,
                 max_duration_s: float = 3 * 3600.0, two_gpu_fraction: float = 0.1,
                 reference_gpu: str = "v100", data_dir: str | None = None) -> Instance:
    """The mix (module docstring) on ``cluster``.

    Parameters
    ----------
    num_jobs
        Jobs to generate.
    cluster
        A cluster spec such as ``h200:2x8``.
    seed
        The random seed (same arguments and seed, same instance).
    arrival_rate_per_h
        Mean arrivals per hour (Poisson).
    min_duration_s, max_duration_s
        The range of durations on ``reference_gpu`` (log-uniform).
    two_gpu_fraction
        Share of jobs that ask for two GPUs.
    reference_gpu
        The GPU type durations are measured on.
    data_dir
        The data folder with the reference step times (default: found automatically).

    Returns
    -------
    Instance
        The instance.

    Raises
    ------
    ValidationError
        When a number is out of range (one line naming it).
    """
    if not 1 <= num_jobs <= 1_000_000:
        raise ValidationError("num_jobs", f"{num_jobs!r} not understood; 1..1000000")
    if not (math.isfinite(arrival_rate_per_h) and arrival_rate_per_h > 0):
        raise ValidationError("arrival_rate_per_h", f"{arrival_rate_per_h!r} not understood; a rate > 0")
    if not 0 < min_duration_s <= max_duration_s < math.inf:
        raise ValidationError("min_duration_s", "need 0 < min_duration_s <= max_duration_s")
    if not 0 <= two_gpu_fraction <= 1:
        raise ValidationError("two_gpu_fraction", f"{two_gpu_fraction!r} not understood; in [0, 1]")
    where = parse_cluster_spec(cluster)
    largest = max(where.gpus_by_type().values())
    step_time = reference_step_time(data_dir)
    roomiest_mib = max(gpu_spec(t).memory_mib for t in where.gpus_by_type())
    kinds = [k for k in FINETUNE_JOB_TYPES
             if step_time.truth.memory_mib(Job("x", k[0], k[1], 1.0, optimizer=k[2]),
                                           reference_gpu) <= roomiest_mib]
    if not kinds:
        raise ValidationError("cluster",
                              f"{cluster}: no fine-tuning job fits its GPUs' memory; add larger GPUs")
    rng = random.Random(seed)
    jobs = []
    arrival_s = 0.0
    for k in range(num_jobs):
        if k:
            arrival_s += rng.expovariate(arrival_rate_per_h / 3600.0)
        model, batch, optimizer = rng.choice(kinds)
        num_gpus = 2 if rng.random() < two_gpu_fraction and largest >= 2 else 1
        duration_s = 10.0 ** rng.uniform(math.log10(min_duration_s), math.log10(max_duration_s))
        freeze = rng.random() < 1 / 3
        draft = Job(f"ft{k}", model, batch, 1.0, num_gpus=num_gpus, optimizer=optimizer)
        step_s = step_time.step_time_s(draft, reference_gpu, num_gpus)
        jobs.append(replace(draft, total_iterations=float(max(1, round(duration_s / step_s))),
                            arrival_time_s=round(arrival_s, 1), freeze_allowed=freeze,
                            accuracy_budget=round(rng.uniform(0.01, 0.05), 3) if freeze else 0.0,
                            duration_hint_s=round(duration_s, 1)))
    name = f"finetune-{num_jobs}jobs-{where.num_gpus}gpus-seed{seed}"
    meta = {"source": "dltsched.instances.finetune (LLM fine-tuning mix)",
            "arrival_rate_per_h": arrival_rate_per_h, "min_duration_s": min_duration_s,
            "max_duration_s": max_duration_s, "reference_gpu": reference_gpu}
    return Instance(name, where, tuple(jobs), metadata=meta)


__all__ = ["FINETUNE_JOB_TYPES", "finetune_mix"]
