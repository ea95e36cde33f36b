"""Seeded synthetic instances, shaped like Gavel's Philly-derived workloads.

The rule, all draws from one ``random.Random(seed)`` in job order (same spec, same JSON):

- cluster: :func:`~dltsched.instances.clusters.mixed_cluster` (GPU types dealt round-robin over
  nodes of ``gpus_per_node``), unless a spec string is given;
- arrivals: Poisson with ``arrival_rate_per_h`` (exponential gaps); the first job arrives at 0;
- model: one of Gavel's 26 job types (7 models x batch sizes), uniformly - the ones the
  simulator's ground truth has measurements for;
- GPUs: 1 / 2 / 4 / 8 with probabilities 0.70 / 0.10 / 0.12 / 0.08 (Philly: mostly 1), capped at the
  largest number of GPUs of one type in the cluster;
- duration: log-uniform in ``[min_duration_s, max_duration_s / 4]`` with probability 0.8, else in
  ``[max_duration_s / 4, max_duration_s]`` (Gavel's two-class heavy tail, rescaled);
  ``total_iterations = duration / step time on reference_gpu`` at the job's GPU count, the step time
  from :func:`~dltsched.instances.reference.reference_step_time` (the simulator's ground truth:
  Gavel's measurements, the data folder's or the package's copy; metadata says which);
- freezing: a fraction ``freeze_fraction`` of jobs allows it, with an accuracy budget uniform in
  [0.01, 0.05].
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, replace

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Cluster, Instance, Job
from dltsched.instances.clusters import DEFAULT_GPU_TYPES, mixed_cluster, parse_cluster_spec
from dltsched.instances.readers.gavel_throughputs import GavelJobType, parse_job_type
from dltsched.instances.reference import ReferenceStepTime, reference_step_time

#: Gavel's job types (``gavel/simulation_throughputs.json``), the generator's model mix
GAVEL_JOB_TYPES: tuple[str, ...] = (
    *(f"ResNet-18 (batch size {b})" for b in (16, 32, 64, 128, 256)),
    *(f"ResNet-50 (batch size {b})" for b in (16, 32, 64, 128)),
    *(f"Transformer (batch size {b})" for b in (16, 32, 64, 128, 256)),
    *(f"LM (batch size {b})" for b in (5, 10, 20, 40, 80)),
    *(f"Recommendation (batch size {b})" for b in (512, 1024, 2048, 4096, 8192)),
    "A3C",
    "CycleGAN",
)
#: optimizer of each Gavel workload's training script
OPTIMIZER_OF_MODEL: dict[str, str] = {
    "resnet18": "momentum",
    "resnet50": "momentum",
    "transformer": "adam",
    "lstm_lm": "sgd",
    "recoder": "adam",
    "a3c": "adam",
    "cyclegan": "adam",
}
GPU_COUNT_WEIGHTS: tuple[tuple[int, float], ...] = ((1, 0.70), (2, 0.10), (4, 0.12), (8, 0.08))
LONG_JOB_PROBABILITY = 0.2
_CLUSTER_SHAPE_FIELDS = ("num_gpus", "gpu_types", "gpus_per_node")


@dataclass(frozen=True, slots=True)
class GeneratorSpec:
    """What to generate; the defaults make a small Gavel-like mixed workload.

    Parameters
    ----------
    num_jobs
        Jobs to generate.
    num_gpus
        GPUs of the mixed cluster.
    gpu_types
        Its GPU types, dealt round-robin over the nodes.
    gpus_per_node
        GPUs per node.
    cluster
        A cluster spec (``"v100:8x8,p100:4x8"``) instead of the mixed cluster's shape fields.
    seed
        The random seed (same spec and seed, same instance).
    arrival_rate_per_h
        Mean arrivals per hour (Poisson).
    min_duration_s, max_duration_s
        The range of the jobs' durations on the reference GPU (log-uniform, with a share of long jobs in
        the top quarter; see the module docstring).
    freeze_fraction
        Share of jobs that allow layer freezing.
    reference_gpu
        The GPU type durations are measured on.
    name
        The instance's name (default: from the sizes and seed).

    Raises
    ------
    ValidationError
        When a field is out of range (one line naming it).
    """

    num_jobs: int = 60
    num_gpus: int = 16
    gpu_types: tuple[str, ...] = DEFAULT_GPU_TYPES
    gpus_per_node: int = 4
    cluster: str | None = None
    seed: int = 0
    arrival_rate_per_h: float = 30.0
    min_duration_s: float = 300.0
    max_duration_s: float = 4 * 3600.0
    freeze_fraction: float = 0.3
    reference_gpu: str = "v100"
    name: str | None = None

    def __post_init__(self) -> None:
        for field_name in ("num_jobs", "num_gpus", "gpus_per_node"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValidationError(field_name, f"{value!r} not understood; must be an integer >= 1")
        for field_name in ("arrival_rate_per_h", "min_duration_s"):
            if not getattr(self, field_name) > 0:
                raise ValidationError(
                    field_name, f"{getattr(self, field_name)!r} not understood; must be > 0"
                )
        if not self.max_duration_s >= 4 * self.min_duration_s:
            raise ValidationError(
                "max_duration_s",
                f"{self.max_duration_s!r} not understood; "
                f"must be >= 4 x min_duration_s ({4 * self.min_duration_s:g})",
            )
        if not 0.0 <= self.freeze_fraction <= 1.0:
            raise ValidationError(
                "freeze_fraction", f"{self.freeze_fraction!r} not understood; must be in [0, 1]"
            )

    def command(self) -> str:
        """The ``dltsched instance generate`` command line that reproduces this spec.

        Returns
        -------
        str
            The command.
        """
        flags = {
            "num_jobs": "--jobs",
            "num_gpus": "--gpus",
            "gpu_types": "--gpu-types",
            "gpus_per_node": "--gpus-per-node",
            "cluster": "--cluster",
            "seed": "--seed",
            "arrival_rate_per_h": "--arrival-rate",
            "min_duration_s": "--min-duration-s",
            "max_duration_s": "--max-duration-s",
            "freeze_fraction": "--freeze-fraction",
            "reference_gpu": "--reference-gpu",
            "name": "--name",
        }
        parts = ["dltsched instance generate"]
        for field_name, flag in flags.items():
            value = getattr(self, field_name)
            if value is None or (self.cluster is not None and field_name in _CLUSTER_SHAPE_FIELDS):
                continue
            text = (
                ",".join(value)
                if isinstance(value, tuple)
                else f"{value:.15g}"
                if isinstance(value, float)
                else str(value)
            )
            parts.append(f"{flag} {text}")
        return " ".join(parts)


def _cluster(spec: GeneratorSpec) -> Cluster:
    if spec.cluster is not None:
        return parse_cluster_spec(spec.cluster)
    return mixed_cluster(spec.num_gpus, spec.gpu_types, spec.gpus_per_node)


def _gpu_count(rng: random.Random, largest: int) -> int:
    counts, weights = zip(*GPU_COUNT_WEIGHTS, strict=True)
    n = rng.choices(counts, weights)[0]
    while n > largest:
        n //= 2
    return n


def _duration_s(rng: random.Random, spec: GeneratorSpec) -> float:
    split = spec.max_duration_s / 4.0
    lo, hi = (
        (split, spec.max_duration_s) if rng.random() < LONG_JOB_PROBABILITY else (spec.min_duration_s, split)
    )
    return 10.0 ** rng.uniform(math.log10(lo), math.log10(hi))


def _job(
    k: int,
    rng: random.Random,
    spec: GeneratorSpec,
    arrival_s: float,
    largest: int,
    step_time: ReferenceStepTime,
) -> Job:
    jt: GavelJobType = parse_job_type(rng.choice(GAVEL_JOB_TYPES))
    num_gpus = _gpu_count(rng, largest)
    duration_s = round(_duration_s(rng, spec), 1)
    freeze = rng.random() < spec.freeze_fraction
    budget = round(rng.uniform(0.01, 0.05), 3) if freeze else 0.0
    draft = Job(f"j{k}", jt.model, jt.batch_size, 1.0, num_gpus=num_gpus, dataset=jt.dataset)
    step_s = step_time.step_time_s(draft, spec.reference_gpu, num_gpus)
    return replace(
        draft,
        total_iterations=float(max(1, round(duration_s / step_s))),
        arrival_time_s=arrival_s,
        optimizer=OPTIMIZER_OF_MODEL.get(jt.model, "sgd"),
        freeze_allowed=freeze,
        accuracy_budget=budget,
        duration_hint_s=duration_s,
    )


def generate_instance(spec: GeneratorSpec | None = None, *, data_dir: str | None = None) -> Instance:
    """A seeded synthetic instance (see module docstring); metadata records the command.

    Parameters
    ----------
    spec
        What to generate (default: ``GeneratorSpec()``).
    data_dir
        The data folder with the reference step times (default: found automatically; none: the fallback).

    Returns
    -------
    Instance
        The instance.
    """
    spec = spec or GeneratorSpec()
    cluster = _cluster(spec)
    largest = max(cluster.gpus_by_type().values())
    rng = random.Random(spec.seed)
    step_time = reference_step_time(data_dir)
    arrival_s = 0.0
    jobs = []
    for k in range(spec.num_jobs):
        if k:
            arrival_s += rng.expovariate(spec.arrival_rate_per_h / 3600.0)
        jobs.append(_job(k, rng, spec, round(arrival_s, 1), largest, step_time))
    name = spec.name or f"synthetic-{spec.num_jobs}jobs-{cluster.num_gpus}gpus-seed{spec.seed}"
    metadata = {
        "source": "dltsched.instances.generator",
        "generated_by": spec.command(),
        "step_times": step_time.source,
        "generator": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items()},
    }
    return Instance(name, cluster, tuple(jobs), metadata)
