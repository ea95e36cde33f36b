"""The caller's own measurements first, predictions only for what is missing.

A scheduler that embeds dltsched usually measures its jobs: isolated throughput per GPU type (Gavel's
throughput matrix, a job's own step-time reports), sometimes the throughput of co-located pairs, peak memory
and GPU utilisation. :func:`measured_predictors` wraps a predictor bundle so that every number the round
builder asks for (the protocols of :mod:`dltsched.engine.domain.predictors`) is the measured one where the
caller has it:

- **step time**: measured isolated seconds per iteration (or samples/s, converted with the job's batch size)
  on the GPU type; for another GPU count or freeze level of a zoo job, the measurement scaled by the
  predictor's ratio; for a job without a zoo model, the measurement as is (one freeze level only).
- **co-location**: a measured group's speeds (normalised, or co-located step times divided by the isolated
  ones); otherwise the predictor's for zoo jobs; for a group with a job of no zoo model, the GPU
  utilisations when all are known (each job at ``min(1, 1 / sum of utilisations)``), else plain time
  slicing (``1 / k`` each: sharing gains nothing, so the solver co-locates such jobs only when GPUs are
  short).
- **memory**: the measured peak; when unknown, ``unknown_memory="trust"`` (and every job without a zoo
  model) trusts the caller: 0 MiB, so memory filters nothing for that job; ``"predict"`` (the default) asks
  the predictor.

:func:`provenance` says per job which of its numbers were measured, predicted, scaled, trusted or assumed;
:func:`dltsched.engine.app.api.solve_round` puts it in ``Plan.provenance``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import MEASURED_ONLY, ClusterState, Job, Plan, resolve_gpu_type
from dltsched.engine.domain.predictors import Predictors

#: the ``unknown_memory`` switch: ask the predictor, or trust the caller (no memory filtering)
MEMORY_MODES = ("predict", "trust")


def _gpu_key(name: str, path: str) -> str:
    try:
        return resolve_gpu_type(name).id
    except ValueError as err:
        raise ValidationError(path, str(err)) from None


def _positive_map(values: Mapping[str, float] | None, path: str, *,
                  at_most: float | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in (values or {}).items():
        where = f"{path}['{key}']"
        if isinstance(value, bool) or not isinstance(value,
                                                     int | float) or not math.isfinite(value) or value <= 0 \
                or (at_most is not None and value > at_most):
            bound = f"in (0, {at_most:g}]" if at_most is not None else "a finite number > 0"
            raise ValidationError(where, f"{value!r} not understood; must be {bound}")
        out["*" if key == "*" else _gpu_key(str(key), where)] = float(value)
    return out


@dataclass(frozen=True, slots=True)
class JobMeasurement:
    """What the caller measured of one job, per GPU type (catalog id or alias; ``"*"``: every type).

    Parameters
    ----------
    step_time_s
        Isolated seconds per iteration on the job's ``num_gpus`` GPUs of the type (one node).
    samples_per_s
        Isolated samples per second instead (``step_time_s = batch_size / samples_per_s``); a type given
        in both uses ``step_time_s``.
    memory_mib
        Peak GPU memory of one worker, MiB.
    utilization
        Fraction of the GPU the job keeps busy alone, in (0, 1]; prices co-location when no group was
        measured.
    """

    step_time_s: Mapping[str, float] = field(default_factory=dict)
    samples_per_s: Mapping[str, float] = field(default_factory=dict)
    memory_mib: Mapping[str, float] = field(default_factory=dict)
    utilization: Mapping[str, float] = field(default_factory=dict)

    def checked(self, path: str) -> JobMeasurement:
        """This measurement with GPU types resolved to catalog ids (raises naming ``path``)."""
        return JobMeasurement(_positive_map(self.step_time_s, f"{path}.step_time_s"),
                              _positive_map(self.samples_per_s, f"{path}.samples_per_s"),
                              _positive_map(self.memory_mib, f"{path}.memory_mib"),
                              _positive_map(self.utilization, f"{path}.utilization", at_most=1.0))

    def step_s(self, job: Job, gpu_type: str) -> float | None:
        """Measured isolated seconds per iteration of ``job`` on ``gpu_type``, if any."""
        for key in (gpu_type, "*"):
            if key in self.step_time_s:
                return self.step_time_s[key]
            if key in self.samples_per_s:
                return job.batch_size / self.samples_per_s[key]
        return None

    def types(self) -> tuple[str, ...]:
        """The GPU types with a measured step time (``"*"`` when every type has one)."""
        return tuple(sorted({*self.step_time_s, *self.samples_per_s}))

    def lookup(self, values: Mapping[str, float], gpu_type: str) -> float | None:
        """The value measured on ``gpu_type``, or the one given for every type (``"*"``).

        Parameters
        ----------
        values
            GPU type -> measured value.
        gpu_type
            A catalog GPU type.

        Returns
        -------
        float or None
            The value; ``None`` when neither the type nor ``"*"`` was measured.
        """
        return values.get(gpu_type, values.get("*"))


@dataclass(frozen=True, slots=True)
class GroupMeasurement:
    """Measured throughput of jobs sharing one GPU of ``gpu_type`` (two or three jobs).

    Give ``speeds`` (each job's co-located throughput / its isolated throughput, in ``job_ids`` order) or
    ``step_time_s`` (each job's seconds per iteration while co-located; divided by its isolated step time,
    measured or predicted). ``memory_mib``: the group's measured memory on one GPU, if known.
    """

    job_ids: tuple[str, ...]
    gpu_type: str
    speeds: tuple[float, ...] | None = None
    step_time_s: tuple[float, ...] | None = None
    memory_mib: float | None = None

    def checked(self, path: str) -> GroupMeasurement:
        """This measurement, validated and normalised (job ids as text, one value per job).

        Parameters
        ----------
        path
            Where the measurement sits in the caller's input, for error messages.

        Returns
        -------
        GroupMeasurement
            The checked measurement.

        Raises
        ------
        ValidationError
            When the job ids are not two or three distinct ids, or not exactly one of ``speeds`` and
            ``step_time_s`` is given with one positive value per job.
        """
        ids = tuple(str(j) for j in self.job_ids)
        if not 2 <= len(ids) <= 3 or len(set(ids)) != len(ids):
            raise ValidationError(f"{path}.job_ids",
                                  f"{list(ids)} not understood; two or three distinct job ids")
        given = [(name, v) for name, v in (("speeds", self.speeds), ("step_time_s", self.step_time_s))
                 if v is not None]
        if len(given) != 1:
            raise ValidationError(path, "give exactly one of speeds or step_time_s")
        name, values = given[0]
        values = tuple(values)
        if len(values) != len(ids) or any(isinstance(v, bool) or not isinstance(v, int | float)
                                          or not math.isfinite(v) or v <= 0 for v in values):
            raise ValidationError(f"{path}.{name}", f"{list(values)} not understood; one number > 0 per job")
        if name == "speeds" and max(values) > 1.5:
            raise ValidationError(f"{path}.speeds", f"{list(values)} not understood; normalised speeds "
                                  "(co-located / isolated throughput), at most 1.5")
        if self.memory_mib is not None and not (math.isfinite(self.memory_mib) and self.memory_mib > 0):
            raise ValidationError(f"{path}.memory_mib", f"{self.memory_mib!r} not understood; must be > 0")
        numbers = tuple(float(v) for v in values)
        return replace(self, job_ids=ids, gpu_type=_gpu_key(self.gpu_type, f"{path}.gpu_type"),
                       speeds=numbers if name == "speeds" else None,
                       step_time_s=numbers if name == "step_time_s" else None)


@dataclass(frozen=True, slots=True)
class Measurements:
    """The caller's measurements for one round.

    Parameters
    ----------
    jobs
        Job id -> :class:`JobMeasurement`.
    groups
        Measured co-located groups.
    unknown_memory
        ``predict`` (default): a zoo job's unmeasured memory is predicted (and options that do not fit are
        dropped); ``trust``: unmeasured memory is not checked (the caller vouches that its jobs fit). Jobs
        without a zoo model are always trusted.
    """

    jobs: Mapping[str, JobMeasurement] = field(default_factory=dict)
    groups: Sequence[GroupMeasurement] = ()
    unknown_memory: str = "predict"

    def checked(self) -> Measurements:
        """These measurements validated, GPU types resolved (raises :class:`ValidationError` naming the
        field)."""
        if self.unknown_memory not in MEMORY_MODES:
            raise ValidationError("measurements.unknown_memory",
                                  f"'{self.unknown_memory}' not understood; one of {', '.join(MEMORY_MODES)}")
        jobs = {}
        for job_id, m in self.jobs.items():
            if not isinstance(m, JobMeasurement):
                raise ValidationError(f"measurements.jobs['{job_id}']", "not a JobMeasurement")
            jobs[str(job_id)] = m.checked(f"measurements.jobs['{job_id}']")
        groups = tuple(g.checked(f"measurements.groups[{i}]") for i, g in enumerate(self.groups))
        return Measurements(jobs, groups, self.unknown_memory)


def prepare_state(state: ClusterState, measurements: Measurements) -> ClusterState:
    """``state`` with every job of no zoo model restricted to the GPU types it was measured on.

    Raises
    ------
    ValidationError
        A job with neither a zoo model nor a measured step time, or measurements naming unknown jobs.
    """
    ids = {s.job.id for s in state.jobs}
    for job_id in measurements.jobs:
        if job_id not in ids:
            raise ValidationError(f"measurements.jobs['{job_id}']", "names no active job of the round")
    for i, g in enumerate(measurements.groups):
        if missing := [j for j in g.job_ids if j not in ids]:
            raise ValidationError(f"measurements.groups[{i}].job_ids",
                                  f"{missing} name no active job of the round")
    changed = []
    for i, s in enumerate(state.jobs):
        if s.job.model != MEASURED_ONLY:
            changed.append(s)
            continue
        m = measurements.jobs.get(s.job.id)
        types = m.types() if m is not None else ()
        if not types:
            raise ValidationError(f"jobs[{i}]",
                                  f"job '{s.job.id}' has no zoo model and no measured step time; "
                                  "give model (a zoo id) or measurements.jobs['<id>'].step_time_s")
        if "*" not in types:
            allowed = tuple(t for t in types if not s.job.gpu_types or t in s.job.gpu_types)
            if not allowed:
                raise ValidationError(f"jobs[{i}].gpu_types",
                                      f"job '{s.job.id}' is measured on {list(types)} only, "
                                      f"none of its allowed types {list(s.job.gpu_types)}")
            job = replace(s.job, gpu_types=allowed)
            assignment = s.assignment
            if assignment is not None and state.cluster.gpu_type_of(assignment.gpus[0]) not in allowed:
                raise ValidationError(f"jobs[{i}]",
                                      f"job '{s.job.id}' runs on "
                                      f"{state.cluster.gpu_type_of(assignment.gpus[0])}"
                                      " but has no measured step time there; add one")
            s = replace(s, job=job)
        changed.append(s)
    if all(a is b for a, b in zip(changed, state.jobs, strict=True)):
        return state
    return replace(state, jobs=tuple(changed), num_running=None, running_jobs=None, running_progress=None)


class _StepTime:
    def __init__(self, base: Predictors | None, measurements: Measurements) -> None:
        self.base, self.m = base, measurements

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        m = self.m.jobs.get(job.id)
        step = m.step_s(job, gpu_type) if m is not None else None
        if job.model == MEASURED_ONLY:
            if step is None:
                raise ValidationError(f"measurements.jobs['{job.id}'].step_time_s",
                                      f"no step time on {gpu_type}")
            return step  # the caller's number for every GPU count, node spread and level it is asked at
        assert self.base is not None
        predicted: float = self.base.step_time.step_time_s(job, gpu_type, num_gpus, freeze_level=freeze_level,
                                                           num_nodes=num_nodes)
        if step is None:
            return predicted
        if num_gpus in (None, job.num_gpus) and freeze_level == 0 and num_nodes == 1:
            return step
        reference: float = self.base.step_time.step_time_s(job, gpu_type, job.num_gpus)
        return step * predicted / reference

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        m = self.m.jobs.get(job.id)
        measured = m.lookup(m.memory_mib, gpu_type) if m is not None else None
        if measured is not None:
            return measured  # at level 0: an upper bound for every freeze level
        if job.model == MEASURED_ONLY or self.m.unknown_memory == "trust":
            return 0.0
        assert self.base is not None
        return float(self.base.step_time.memory_mib(job, gpu_type, freeze_level=freeze_level))


class _Colocation:
    def __init__(self, base: Predictors | None, measurements: Measurements, step: _StepTime) -> None:
        self.base, self.m, self.step = base, measurements, step
        self.groups = {(frozenset(g.job_ids), g.gpu_type): g for g in measurements.groups}

    def measured_group(self, jobs: Sequence[Job], gpu_type: str) -> GroupMeasurement | None:
        return self.groups.get((frozenset(j.id for j in jobs), gpu_type))

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        group = self.measured_group(jobs, gpu_type)
        if group is not None:
            if group.speeds is not None:
                by_id = dict(zip(group.job_ids, group.speeds, strict=True))
                return tuple(by_id[j.id] for j in jobs)
            assert group.step_time_s is not None
            by_id = dict(zip(group.job_ids, group.step_time_s, strict=True))
            return tuple(min(1.5, self.step.step_time_s(j, gpu_type) / by_id[j.id]) for j in jobs)
        if self.base is not None and all(j.model != MEASURED_ONLY for j in jobs):
            return tuple(self.base.colocation.colocated_speeds(jobs, gpu_type))
        utils = [self._utilization(j, gpu_type) for j in jobs]
        if all(u is not None for u in utils):
            share = min(1.0, 1.0 / sum(u for u in utils if u is not None))
            return tuple(share for _ in jobs)
        return tuple(1.0 / len(jobs) for _ in jobs)

    def _utilization(self, job: Job, gpu_type: str) -> float | None:
        m = self.m.jobs.get(job.id)
        return m.lookup(m.utilization, gpu_type) if m is not None else None

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        group = self.measured_group(jobs, gpu_type)
        if group is not None and group.memory_mib is not None:
            return group.memory_mib
        own = sum(self.step.memory_mib(j, gpu_type) for j in jobs)
        if self.base is None or any(j.model == MEASURED_ONLY
                                    for j in jobs) or self.m.unknown_memory == "trust":
            return own  # no overhead known beyond the members' own memory
        predicted = float(self.base.colocation.group_memory_mib(jobs, gpu_type))
        alone = sum(float(self.base.step_time.memory_mib(j, gpu_type)) for j in jobs)
        # the members' (measured or predicted) memory + predicted overhead
        return own + max(0.0, predicted - alone)


class _Freezing:
    def __init__(self, base: Predictors | None) -> None:
        self.base = base

    def num_freeze_levels(self, job: Job) -> int:
        if job.model == MEASURED_ONLY or self.base is None:
            return 1
        return int(self.base.freezing.num_freeze_levels(job))

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float = 0.0) -> float:
        if job.model == MEASURED_ONLY or self.base is None or not freeze_level:
            return 0.0
        return float(self.base.freezing.frozen_penalty(job, freeze_level, start_progress))


def measured_predictors(base: Predictors | None, measurements: Measurements) -> Predictors:
    """A predictor bundle answering from ``measurements`` first and from ``base`` for what is missing.

    Parameters
    ----------
    base
        The predictors for zoo jobs' unmeasured numbers; ``None`` when every job is measured-only.
    measurements
        Checked measurements (:meth:`Measurements.checked`).

    Returns
    -------
    Predictors
        A bundle implementing the step-time, co-location and freezing protocols.
    """
    step = _StepTime(base, measurements)
    return Predictors(step, _Colocation(base, measurements, step), _Freezing(base))  # type: ignore[arg-type]


def provenance(plan: Plan, state: ClusterState, measurements: Measurements) -> dict[str, dict[str, str]]:
    """Per active job, where the plan's numbers for it came from.

    For a placed job, on its GPU type: ``step_time`` (``measured`` | ``predicted`` | ``scaled``: a
    measurement scaled by the predictor to a freeze level), ``memory`` (``measured`` | ``predicted`` |
    ``trusted``) and ``colocation`` (``alone`` | ``measured`` | ``predicted`` | ``utilization`` |
    ``time-sliced``). A queued job's entries say whether it was measured on any type.
    """
    out: dict[str, dict[str, str]] = {}
    placed = plan.by_job()
    groups = plan.colocation_groups()
    jobs = {s.job.id: s.job for s in state.jobs}
    colocation = _Colocation(None, measurements, _StepTime(None, measurements))
    for job_id, job in jobs.items():
        m = measurements.jobs.get(job_id)
        a = placed.get(job_id)
        gpu_type = state.cluster.gpu_type_of(a.gpus[0]) if a is not None else None
        measured_step = m is not None and (m.step_s(job, gpu_type) is not None if gpu_type
                                           else bool(m.types()))
        step = "measured" if measured_step else "predicted"
        if measured_step and a is not None and a.freeze_level and job.model != MEASURED_ONLY:
            step = "scaled"
        has_memory = m is not None and (m.lookup(m.memory_mib, gpu_type) is not None if gpu_type
                                        else bool(m.memory_mib))
        trusted = job.model == MEASURED_ONLY or measurements.unknown_memory == "trust"
        memory = "measured" if has_memory else "trusted" if trusted else "predicted"
        entry = {"step_time": step, "memory": memory, "colocation": "alone"}
        if a is not None and gpu_type is not None:
            entry["gpu_type"] = gpu_type
            partners = sorted({p for g in a.gpus for p in groups.get(g, ()) if p != job_id})
            if partners:
                members = [jobs[p] for p in partners if p in jobs] + [job]
                if colocation.measured_group(members, gpu_type) is not None:
                    entry["colocation"] = "measured"
                elif all(j.model != MEASURED_ONLY for j in members):
                    entry["colocation"] = "predicted"
                elif all(colocation._utilization(j, gpu_type) is not None for j in members):
                    entry["colocation"] = "utilization"
                else:
                    entry["colocation"] = "time-sliced"
        out[job_id] = entry
    return out


def as_measurements(data: Mapping[str, Any] | Measurements | None) -> Measurements | None:
    """``data`` as :class:`Measurements`: already one, ``None``, or plain dicts (``{"jobs": {id: {...}},
    "groups": [{...}], "unknown_memory": ...}``, as JSON gives them)."""
    if data is None or isinstance(data, Measurements):
        return data
    if not isinstance(data, Mapping):
        raise ValidationError("measurements",
                              f"{type(data).__name__} not understood; a Measurements or a dict")
    unknown = set(data) - {"jobs", "groups", "unknown_memory"}
    if unknown:
        raise ValidationError("measurements",
                              f"unknown field(s) {sorted(unknown)}; jobs, groups, unknown_memory")
    jobs = {}
    for job_id, m in (data.get("jobs") or {}).items():
        try:
            jobs[str(job_id)] = m if isinstance(m, JobMeasurement) else JobMeasurement(**m)
        except TypeError as err:
            raise ValidationError(f"measurements.jobs['{job_id}']",
                                  f"not understood ({err}); fields step_time_s, "
                                  "samples_per_s, memory_mib, utilization") from None
    groups = []
    for i, g in enumerate(data.get("groups") or ()):
        try:
            groups.append(g if isinstance(g, GroupMeasurement) else
                          GroupMeasurement(**{**g, "job_ids": tuple(g.get("job_ids", ()))}))
        except (TypeError, AttributeError) as err:
            raise ValidationError(f"measurements.groups[{i}]",
                                  f"not understood ({err}); fields job_ids, gpu_type, "
                                  "speeds | step_time_s, memory_mib") from None
    return Measurements(jobs, tuple(groups), str(data.get("unknown_memory", "predict")))
