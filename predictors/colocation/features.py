"""Torch-free features of GPUs, job types and groups, shared by the baselines and the graph model.

GPU features come from the GPU catalog (Lucid's unrecorded GPU maps to its proxy plus a flag).
Job features come from the model catalog and, where present, the job's isolated profile on that
GPU (log step time, memory, utilisation); a missing profile value is NaN plus a "missing" flag.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from dltsched.engine.domain.catalog import gpu_spec, model_spec
from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.colocation.samples import (
    LUCID_GPU,
    LUCID_PROXY_GPU,
    ColocSample,
    IsolatedProfile,
    JobSpec,
)

GPU_FEATURES = ("log_fp32_tflops", "log_fp16_tflops", "log_bandwidth_gbs", "log_memory_gib", "sm_count_100",
                "gpu_unrecorded")
JOB_FEATURES = ("log_batch", "amp", "log_params_m", "log_gflops_step", "log_act_mib_step", "layers_10",
                "log_iso_step_s", "iso_memory_gib", "iso_util", "iso_missing")


@dataclass(frozen=True, slots=True)
class Group:
    """Jobs sharing one GPU, without labels."""

    gpu: str
    jobs: tuple[JobSpec, ...]


def group_of(sample: ColocSample) -> Group:
    """The group (GPU type and job types) that ``sample`` measured.

    Parameters
    ----------
    sample
        A measured co-location.

    Returns
    -------
    Group
        Its group.
    """
    return Group(sample.gpu, sample.jobs)


def resolve_gpu(gpu: str) -> str:
    """Canonical GPU id (``"lucid"`` stays); unknown names raise with close matches."""
    if gpu == LUCID_GPU:
        return gpu
    try:
        return gpu_spec(gpu).id
    except ValueError as err:
        raise ValidationError("gpu", str(err)) from None


@cache
def gpu_features(gpu: str) -> tuple[float, ...]:
    """A GPU type's features: log FP32 and FP16 tensor TFLOPS, log bandwidth (GB/s), log memory (GiB), SMs /
    100, and whether it is Lucid's unrecorded GPU.
    """
    spec = gpu_spec(LUCID_PROXY_GPU if gpu == LUCID_GPU else gpu)
    return (math.log(spec.fp32_tflops), math.log(spec.fp16_tensor_tflops),
            math.log(spec.memory_bandwidth_gbs), math.log(spec.memory_gib), spec.sm_count / 100.0,
            1.0 if gpu == LUCID_GPU else 0.0)


def job_features(job: JobSpec, profile: IsolatedProfile | None) -> tuple[float, ...]:
    """A job type's features: batch, precision, model size and work (logs), layers, and its isolated profile's
    step time, memory and utilisation where there is one (0 where not).

    Parameters
    ----------
    job
        The job type.
    profile
        Its isolated profile on the GPU; ``None`` when none was measured.

    Returns
    -------
    tuple[float, ...]
        The features.
    """
    spec = model_spec(job.model)
    data = spec.dataset(job.dataset)
    half = 0.5 if job.amp else 1.0
    p = profile or IsolatedProfile()
    return (
        math.log(job.batch_size), float(job.amp), math.log(spec.params_m),
            math.log(data.fwd_gflops * job.batch_size),
        math.log(data.activation_mib * job.batch_size * half), spec.layers / 10.0,
        math.log(p.step_time_s) if p.step_time_s else 0.0,
        p.memory_mib / 1024.0 if p.memory_mib else 0.0,
        p.gpu_util / 100.0 if p.gpu_util is not None else 0.0,
        0.0 if p.step_time_s else 1.0,
    )


def profile_of(isolated: Mapping[tuple[str, JobSpec], IsolatedProfile], gpu: str,
               job: JobSpec) -> IsolatedProfile | None:
    """The isolated profile of ``job`` on ``gpu``, if measured.

    Parameters
    ----------
    isolated
        (GPU, job type) -> isolated profile.
    gpu
        The GPU type.
    job
        The job type.

    Returns
    -------
    IsolatedProfile or None
        The profile; ``None`` when not measured.
    """
    return isolated.get((gpu, job))


#: GPUs whose isolated step times describe a job's compute/memory character (Gavel profiles all three);
#: the ratios are taken to the last one, so they describe the job and not the target GPU
REFERENCE_GPUS = ("k80", "p100", "v100")
PAIR_FEATURES = ("log_iso_throughput",
                 *(f"log_step_{g}_over_{REFERENCE_GPUS[-1]}" for g in REFERENCE_GPUS[:-1]),
                 "cross_gpu_missing")


def pair_features(gpu: str, job: JobSpec,
                  isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> list[float]:
    """Isolated-profile features beyond :func:`job_features` (see :data:`PAIR_FEATURES`).

    The ratios of the job's isolated step times across the reference GPUs say how compute- or
    bandwidth-bound it is (a profiler measures them before the job is packed); being independent of
    the target GPU, they carry leave-one-GPU-out transfer. Missing values are 0 plus a flag.
    """
    own = profile_of(isolated, gpu, job)
    throughput = math.log(job.batch_size / own.step_time_s) if own is not None and own.step_time_s else 0.0
    steps = [profile_of(isolated, ref, job) for ref in REFERENCE_GPUS]
    if any(p is None or not p.step_time_s for p in steps):
        return [throughput, *([0.0] * (len(REFERENCE_GPUS) - 1)), 1.0]
    logs = [math.log(p.step_time_s) for p in steps]  # type: ignore[union-attr,arg-type]
    return [throughput, *(v - logs[-1] for v in logs[:-1]), 0.0]


def _contention(own: IsolatedProfile | None, others: list[IsolatedProfile | None]) -> list[float]:
    """Time-slicing prior from isolated utilisation: log min(1, 100 / total util), total util / 100, flag."""
    utils = [p.gpu_util if p is not None else None for p in (own, *others)]
    if any(u is None for u in utils):
        return [0.0, 0.0, 1.0]
    total = max(1.0, float(sum(utils)))  # type: ignore[arg-type]
    return [math.log(min(1.0, 100.0 / total)), total / 100.0, 0.0]


#: index in a :func:`pair_rows` row of the time-slicing prior ``log min(1, 100 / total isolated util)``
CONTENTION_LOG_SPEED = -4


def contention_log_speeds(group: Group,
                          isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> list[float]:
    """Per job, the time-slicing prior ``log min(1, 100 / total isolated util)`` (0 where a util is
    unmeasured)."""
    profiles = [profile_of(isolated, group.gpu, j) for j in group.jobs]
    return [_contention(p, [q for n, q in enumerate(profiles) if n != i])[0] for i, p in enumerate(profiles)]


def union_util(group: Group, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> float | None:
    """GPU utilisation (%) if the jobs' isolated busy periods were independent: ``100 (1 - prod(1 - u_i /
    100))``; ``None`` where any isolated utilisation is unmeasured."""
    utils = [profile_of(isolated, group.gpu, j) for j in group.jobs]
    if any(u is None or u.gpu_util is None for u in utils):
        return None
    return 100.0 * (1.0 - math.prod(1.0 - min(100.0, u.gpu_util) / 100.0
                                    for u in utils))  # type: ignore[union-attr]


def pair_rows(group: Group, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> list[list[float]]:
    """One row per job: GPU features, own job + pair features, the sum of the other jobs' features,
    own minus others' log isolated step time, a same-model flag, the utilisation contention prior, group
    size."""
    own = [[*job_features(j, profile_of(isolated, group.gpu, j)), *pair_features(group.gpu, j, isolated)]
           for j in group.jobs]
    return pair_rows_from(group, own, [profile_of(isolated, group.gpu, j) for j in group.jobs])


def pair_rows_from(group: Group, own: Sequence[Sequence[float]],
                   profiles: Sequence[IsolatedProfile | None]) -> list[list[float]]:
    """:func:`pair_rows` from each member's own features (:func:`job_features` then :func:`pair_features`) and
    its profile on the group's GPU, for callers that keep the per-job part between groups."""
    step = JOB_FEATURES.index("log_iso_step_s")
    gpu = gpu_features(group.gpu)
    rows = []
    for i, feats in enumerate(own):
        rest = [o for n, o in enumerate(own) if n != i]
        others = [sum(o[k] for o in rest) for k in range(len(feats))]
        same = float(any(j.model == group.jobs[i].model for n, j in enumerate(group.jobs) if n != i))
        rows.append([*gpu, *feats, *others, feats[step] - others[step] / len(rest), same,
                     *_contention(profiles[i], [p for n, p in enumerate(profiles) if n != i]),
                     float(len(group.jobs))])
    return rows


def group_row(group: Group, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> list[float]:
    """One row per group: GPU features, summed and max job features, group size."""
    own = [job_features(j, profile_of(isolated, group.gpu, j)) for j in group.jobs]
    sums = [sum(o[k] for o in own) for k in range(len(JOB_FEATURES))]
    maxes = [max(o[k] for o in own) for k in range(len(JOB_FEATURES))]
    return [*gpu_features(group.gpu), *sums, *maxes, float(len(group.jobs))]


def summed_isolated_memory_mib(group: Group,
                               isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> float | None:
    """Sum of the jobs' isolated memory, or ``None`` when any is unmeasured."""
    mems = [profile_of(isolated, group.gpu, j) for j in group.jobs]
    if any(m is None or m.memory_mib is None for m in mems):
        return None
    return float(sum(m.memory_mib for m in mems))  # type: ignore[union-attr,misc]


def summed_isolated_util(group: Group,
                         isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> float | None:
    """Sum of the jobs' isolated GPU utilisation capped at 100, or ``None`` when any is unmeasured."""
    utils = [profile_of(isolated, group.gpu, j) for j in group.jobs]
    if any(u is None or u.gpu_util is None for u in utils):
        return None
    return min(100.0, float(sum(u.gpu_util for u in utils)))  # type: ignore[union-attr,misc]


def check_group(group: Group, max_jobs: int) -> None:
    """Clear errors for groups a predictor cannot handle."""
    if not 2 <= len(group.jobs) <= max_jobs:
        raise ValidationError("jobs", f"{len(group.jobs)} job(s) not understood; this predictor handles "
                                      f"2..{max_jobs}")

