"""One GPU type's calibration: the fitted isolated and group models and the profiles they were fitted on.

Jobs alone are never run under MPS (the profiler measures them without it), so the step-time, memory and
utilisation models of a GPU pool the isolated runs of every sharing mode; the group models are fitted per
sharing mode and a prediction names the mode it assumes.

Precedence, per job: its own measurement on this GPU (``measured``), then the calibrated models
(``calibrated``). Whatever this GPU type's calibration does not cover stays with the default predictors.
A job whose model was profiled at other batch sizes (or precisions, datasets) gets that model's scale: the
geometric mean of measured over calibrated step times of its profiles, shrunk towards 1 by
:data:`MODEL_SCALE_SHRINK` pseudo-profiles at 1 (what the graph misses of that model, the same at any batch).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dltsched.predictors.calibration.groups as grp
import dltsched.predictors.calibration.isolated as iso
import dltsched.predictors.calibration.resources as res
from dltsched.predictors.calibration.data import (
    GroupRow,
    IsolatedRow,
    ProfileData,
    mean_row,
    with_best_utilisation,
)

JobKey = tuple[str, str, int, bool]
#: pseudo-profiles at scale 1 in each model's scale
MODEL_SCALE_SHRINK = 1.0


@dataclass(frozen=True, slots=True)
class SharingFit:
    """The group models of one sharing mode."""

    speed: dict[str, float]
    shared_memory_mib: float
    util_gamma: float
    groups: int = 0

    def to_json(self) -> dict[str, Any]:
        """The fit as the bundle file stores it."""
        return {"speed": self.speed, "shared_memory_mib": self.shared_memory_mib,
                "util_gamma": self.util_gamma, "groups": self.groups}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SharingFit:
        """The fit of a bundle file's entry ``raw`` (the inverse of :meth:`to_json`)."""
        return cls({k: float(raw["speed"][k]) for k in grp.SPEED_TERMS}, float(raw["shared_memory_mib"]),
                   float(raw["util_gamma"]), int(raw.get("groups", 0)))


@dataclass(frozen=True, slots=True)
class GpuCalibration:
    """A GPU type's fitted models (see the module docstring) and its measured profiles."""

    gpu: str
    step: dict[str, float]
    memory: dict[str, float]
    util: dict[str, float]
    sharing: dict[str, SharingFit]
    tf32: frozenset[str] = frozenset()
    profiles: dict[JobKey, IsolatedRow] = field(default_factory=dict)
    model_scale: dict[str, float] = field(default_factory=dict)
    busy_step: dict[str, float] = field(default_factory=dict)

    # -- one job ---------------------------------------------------------------------------------------------
    def features(self, key: JobKey, scope: str = "compute", freeze_level: int = 0,
                 optimizer: str = "sgd") -> dict[str, float]:
        """The features of job ``key`` on this GPU type that the step, memory and utilisation models
        read (``scope``, ``freeze_level`` and ``optimizer`` as the job runs)."""
        model, dataset, batch, amp = key
        return iso.job_features(model, dataset, batch, amp, self.gpu, self.tf32, scope, freeze_level,
                                optimizer)

    def predicted_step_s(self, key: JobKey, scope: str = "compute", freeze_level: int = 0,
                         optimizer: str = "sgd", *, model_scale: bool = True) -> float:
        """The calibrated step time (times the model's scale where its profiles give one and
        ``model_scale``)."""
        step = iso.step_seconds(self.step, self.features(key, scope, freeze_level, optimizer), key[2], scope)
        return step * (self.model_scale.get(key[0], 1.0) if model_scale else 1.0)

    def step_s(self, key: JobKey, scope: str = "compute", freeze_level: int = 0,
               optimizer: str = "sgd") -> tuple[float, str]:
        """Step time and its source: the profile where this job was measured at this scope (unfrozen, SGD),
        else the calibrated model."""
        row = self.profiles.get(key)
        if row is not None and row.scope == scope and freeze_level == 0 and optimizer == row.optimizer:
            return row.step_time_s, "measured"
        return self.predicted_step_s(key, scope, freeze_level, optimizer), "calibrated"

    def memory_mib(self, key: JobKey, freeze_level: int = 0, optimizer: str = "sgd") -> tuple[float, str]:
        """GPU memory of job ``key`` (MiB) and its source: the profile where the job was measured
        (unfrozen, same optimizer), else the calibrated model."""
        row = self.profiles.get(key)
        if row is not None and row.gmem_mib is not None and freeze_level == 0 and optimizer == row.optimizer:
            return row.gmem_mib, "measured"
        f = self.features(key, "compute", freeze_level, optimizer)
        return res.memory_mib(self.memory, f), "calibrated"

    def busy(self, key: JobKey) -> float:
        """Share of the job's step alone that its GPU work takes (0..1): GPU seconds as the overlapped step
        form fits them (``busy_step``, where the step model took another form) over the step."""
        f = self.features(key)
        step, _ = self.step_s(key)
        return min(1.0, iso.gpu_seconds(self.busy_step or self.step, f) / step)

    def util_pct(self, key: JobKey) -> tuple[float, str]:
        """GPU utilisation of job ``key`` alone (percent) and its source: the profile where it was
        measured, else the calibrated model."""
        row = self.profiles.get(key)
        if row is not None and row.gpu_util is not None:
            return row.gpu_util, "measured"
        f = self.features(key)
        step, _ = self.step_s(key)
        return res.util_pct(self.util, iso.gpu_seconds(self.step, f), f["launches"], step), "calibrated"

    def member(self, key: JobKey) -> grp.Member:
        """Job ``key`` as a member of a co-located group: its busy share, memory and utilisation alone."""
        return grp.Member(self.busy(key), self.memory_mib(key)[0], self.util_pct(key)[0])

    # -- a group ---------------------------------------------------------------------------------------------
    def sharing_fit(self, sharing: str) -> SharingFit | None:
        """The group models of sharing mode ``sharing``, or ``None`` where the bundle has none."""
        return self.sharing.get(sharing)

    def group(self, keys: Sequence[JobKey], sharing: str = "timeslice") -> dict[str, Any] | None:
        """Speeds, memory (MiB) and utilisation (%) of ``keys`` sharing one GPU by ``sharing`` (``None`` when
        this calibration has no group model of that mode)."""
        fit = self.sharing.get(sharing)
        if fit is None:
            return None
        members = [self.member(k) for k in keys]
        return {"speeds": grp.speeds(fit.speed, members),
                "memory_mib": grp.group_memory_mib(fit.shared_memory_mib, members),
                "gpu_util": grp.group_util_pct(fit.util_gamma, members), "sharing": sharing}

    # -- JSON ------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """This GPU type's entry of the bundle file."""
        return {"step_time": self.step, "memory": self.memory, "utilisation": self.util,
                "utilisation_form": res.util_form(self.util),
                "tf32": sorted(self.tf32),
                "model_scale": dict(sorted(self.model_scale.items())),
                **({"busy_step_time": self.busy_step} if self.busy_step else {}),
                "colocation": {mode: fit.to_json() for mode, fit in sorted(self.sharing.items())},
                "profiles": [{"model": r.model, "dataset": r.dataset, "batch_size": r.batch_size,
                              "amp": r.amp, "scope": r.scope, "step_time_s": r.step_time_s,
                              "gmem_mib": r.gmem_mib, "gpu_util": r.gpu_util,
                              "peak_memory_mib": r.peak_memory_mib, "optimizer": r.optimizer}
                             for r in sorted(self.profiles.values(), key=lambda r: r.key)]}

    @classmethod
    def from_json(cls, gpu: str, raw: dict[str, Any]) -> GpuCalibration:
        """The calibration of GPU type ``gpu`` from its bundle file entry ``raw`` (the inverse of
        :meth:`to_json`)."""
        profiles = {}
        for p in raw.get("profiles", []):
            row = IsolatedRow(p["model"], p["dataset"], int(p["batch_size"]), float(p["step_time_s"]),
                              p.get("scope", "compute"), bool(p.get("amp", False)), p.get("peak_memory_mib"),
                              p.get("gmem_mib"), p.get("gpu_util"), str(p.get("optimizer", "sgd")))
            profiles[row.key] = row
        util = {k: float(v) for k, v in raw["utilisation"].items()}
        # a bundle without the field was written with the power form and reads as written
        form = raw.get("utilisation_form", "power")
        if form not in res.UTIL_FORMS or set(util) != set(res.UTIL_FORMS[form]):
            forms = {f: list(n) for f, n in res.UTIL_FORMS.items()}
            raise ValueError(f"utilisation_form {form!r} of GPU {gpu} with parameters {sorted(util)}: "
                             f"use one of {forms}")
        return cls(gpu, {k: float(v) for k, v in raw["step_time"].items()},
                   {k: float(v) for k, v in raw["memory"].items()},
                   util,
                   {m: SharingFit.from_json(v) for m, v in raw.get("colocation", {}).items()},
                   frozenset(raw.get("tf32", ())), profiles,
                   {k: float(v) for k, v in raw.get("model_scale", {}).items()},
                   {k: float(v) for k, v in raw.get("busy_step_time", {}).items()})


def fit_rows(cal_gpu: str, tf32: frozenset[str], isolated: Iterable[IsolatedRow]) -> list[iso.Row]:
    """The fitting rows of measured jobs alone on one GPU: each job's features under the kernel model
    (``cal_gpu``, the op classes run in TF32) beside its measured step, memory, utilisation and spread."""
    return [iso.Row(r.model, r.batch_size, r.scope,
                    iso.job_features(r.model, r.dataset, r.batch_size, r.amp, cal_gpu, tf32, r.scope,
                                     optimizer=r.optimizer),
                    r.step_time_s, r.gmem_mib, r.gpu_util, r.step_time_rel_sd, bool(r.amp), r.util_window_s)
            for r in isolated]


def fitted_and_scored_rows(datasets: Iterable[Any], sharing: str) -> tuple[list[iso.Row], list[iso.Row]]:
    """The rows a calibration fits on (the jobs alone of every dataset, each on its own GPU, one row per run;
    a job's utilisation from its best readings on its GPU, whatever the sharing mode they were taken under:
    :func:`with_best_utilisation`) and the rows its report scores (one per job of the datasets measured
    under ``sharing``, its runs merged: :meth:`ProfileData.isolated_by_key`)."""
    datasets = list(datasets)
    best: dict[int, IsolatedRow] = {}
    for gpu in {d.gpu for d in datasets}:
        raw = [r for d in datasets if d.gpu == gpu for r in d.isolated]
        best.update((id(r), b) for r, b in zip(raw, with_best_utilisation(raw), strict=True))

    def rows(d: Any) -> list[iso.Row]:
        return fit_rows(d.gpu, d.tf32, [best[id(r)] for r in d.isolated])

    fitted = [r for d in datasets for r in rows(d)]
    scored = [r for d in datasets if d.sharing == sharing
              for r in fit_rows(d.gpu, d.tf32, d.isolated_by_key().values())]
    return fitted, scored


def _model_scales(step: dict[str, float], rows: Sequence[iso.Row]) -> dict[str, float]:
    logs: dict[str, list[float]] = {}
    for r in rows:
        predicted = iso.step_seconds(step, r.features, r.batch, r.scope)
        logs.setdefault(r.model, []).append(math.log(r.step_time_s / predicted))
    return {m: math.exp(sum(v) / (len(v) + MODEL_SCALE_SHRINK)) for m, v in sorted(logs.items())}


def fit_gpu(datasets: Sequence[ProfileData], *, without_models: frozenset[str] = frozenset(),
            without_groups: Iterable[GroupRow] = (), without_jobs: frozenset[JobKey] = frozenset(),
            with_groups: bool = True) -> GpuCalibration:
    """Fit one GPU type's calibration on ``datasets`` (all of that GPU), leaving out every row of
    ``without_models`` (isolated and any group holding one), the groups ``without_groups`` and the jobs
    ``without_jobs`` (their isolated runs and groups); ``with_groups=False``: jobs alone only."""
    gpu = datasets[0].gpu
    tf32 = frozenset().union(*(d.tf32 for d in datasets))
    skip = set(without_groups)
    isolated = list(with_best_utilisation([r for d in datasets for r in d.isolated
                                           if r.model not in without_models and r.key not in without_jobs]))
    rows = fit_rows(gpu, tf32, isolated)
    step = iso.fit_step(rows)
    busy_step = iso.fit_step_form(rows, "overlap") if step.get("host_ops") else {}
    scales = _model_scales(step, rows)
    memory = res.fit_memory(rows)
    util = res.fit_util(rows, step)
    profiles: dict[JobKey, list[IsolatedRow]] = {}
    for r in isolated:
        profiles.setdefault(r.key, []).append(r)
    merged = {k: mean_row(v) for k, v in profiles.items()}
    partial = GpuCalibration(gpu, step, memory, util, {}, tf32, merged, scales, busy_step)
    sharing: dict[str, SharingFit] = {}
    for mode in sorted({d.sharing for d in datasets} if with_groups else (), key=lambda m: m != "timeslice"):
        # each mode's groups are normalized by that run's own isolated profiles
        mode_data = [d for d in datasets if d.sharing == mode]
        own = {k: r for d in mode_data for k, r in d.isolated_by_key().items()
               if r.model not in without_models and k not in without_jobs}
        cal = GpuCalibration(gpu, step, memory, util, {}, tf32, {**merged, **own}, scales, busy_step)
        groups = [g for d in mode_data for g in d.groups if not (g.models & without_models) and g not in skip
                  and not set(g.members) & without_jobs]
        members = [[cal.member(k) for k in g.members] for g in groups]
        prior = sharing["timeslice"].speed if "timeslice" in sharing else None
        speed = grp.fit_speed([(m, g.speeds) for m, g in zip(members, groups, strict=True)], prior,
                              prior_weight=0.05 if prior is None else 1.0)
        shared = grp.fit_shared_memory([(m, g.gmem_mib) for m, g in zip(members, groups, strict=True)
                                        if g.gmem_mib is not None])
        gamma = grp.fit_group_util([(m, g.gpu_util) for m, g in zip(members, groups, strict=True)
                                    if g.gpu_util is not None])
        sharing[mode] = SharingFit(speed, shared, gamma, len(groups))
    return GpuCalibration(partial.gpu, step, memory, util, sharing, tf32, merged, scales, busy_step)
