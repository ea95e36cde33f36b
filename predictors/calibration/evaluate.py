"""Cross-validated figures of a GPU's calibration, beside the uncalibrated default and simple rules, on the
same rows.

- **Leave-one-model-out** (``lomo``): for each model, calibrate on every row without it (its isolated runs and
  every group holding it), then predict its jobs alone (step time, memory, utilisation: the job was never
  profiled; a job measured alone in several runs is one row, its runs merged as
  :meth:`~.rows.ProfileData.isolated_by_key` merges them) and its speed in each group that holds it (its own
  profile predicted, its partners' measured); each group's memory and utilisation are scored once per model of
  the group.
- **Leave-one-group-out** (``logo``): for each group, calibrate without it and predict it, every member's
  profile measured (a pair never measured, of jobs profiled alone); with more than :data:`MAX_GROUP_FOLDS`
  groups (Gavel's hundreds of pairs), the groups are held out in that many folds.
- **Leave-one-job-out** (``isolated_lojo``, where a model was profiled at several batch sizes, precisions or
  datasets): calibrate without one job and predict it, its model's other profiles kept (a job never profiled
  whose model was); ``calibrated_no_model_scale`` is the same fold without the model's scale.

Beside them on the same rows: ``default`` (the shipped predictors, never fitted on this GPU: the kernel step
model, its memory model and busy fraction; the shipped co-location model given the same profiles as the
calibration), ``constant`` (the training rows' median; for groups, of groups of the same size),
``per_model_mean`` (the mean of the training rows of the same model; a model with none gets the constant,
counted in ``per_model_fallbacks``), for jobs alone ``per_family_mean`` and ``roofline``
(:data:`ISOLATED_METHODS`), and for groups ``util_share`` (speed ``min(1, 100 / sum of measured
utilisation)``, memory the sum of the measured memories alone, utilisation ``min(100, sum)``; these rules are
handed every member's measurement, the held-out one's too). Utilisation alone also gets each method's mean
absolute error in points and median APE: one reading of 1% decides its MAPE. Step time alone also gets each
method's MAPE weighted by how well the profile pinned the step (``weighted_mape``: weight
``1 / (SPREAD_FLOOR ** 2 + s ** 2)``, ``s`` the relative standard deviation of the job's timed steps; jobs of
a few milliseconds vary most), beside the plain MAPE, where the profiles give their steps.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from dltsched.predictors.calibration.data import GroupRow, IsolatedRow, ProfileData
from dltsched.predictors.calibration.model import GpuCalibration, JobKey, fit_gpu

#: the spread (relative) that every row's error has whatever its measurement: a weight never exceeds
#: ``1 / SPREAD_FLOOR ** 2``, so a job timed very tightly does not decide the weighted figure alone
SPREAD_FLOOR = 0.10


def spread_weight(rel_sd: float | None) -> float | None:
    """Weight of a measurement whose timed steps spread by ``rel_sd`` (module docstring)."""
    return None if rel_sd is None else 1.0 / (SPREAD_FLOOR**2 + rel_sd**2)


def _ape(pred: float, got: float) -> float:
    return 100.0 * abs(pred - got) / abs(got)


def summary(rows: Sequence[dict[str, Any]], methods: Sequence[str],
            what_is_util: bool = False) -> dict[str, Any]:
    """One report row: ``n`` and, for each method, its MAPE over the rows (``<method>_mape``), the MAPE
    weighted by each row's ``weight`` where rows carry one, and for utilisation the mean error in points and
    the median error."""
    out: dict[str, Any] = {"n": len(rows)}
    for m in methods:
        apes = [_ape(r[m], r["measured"]) for r in rows if r.get(m) is not None and r["measured"]]
        out[f"{m}_mape"] = statistics.fmean(apes) if apes else None
        weighted = [(_ape(r[m], r["measured"]), r["weight"]) for r in rows
                    if r.get(m) is not None and r["measured"] and r.get("weight")]
        if weighted and len(weighted) == len(apes):
            out[f"{m}_weighted_mape"] = sum(a * w for a, w in weighted) / sum(w for _, w in weighted)
        if what_is_util:
            aes = [abs(r[m] - r["measured"]) for r in rows if r.get(m) is not None]
            out[f"{m}_mean_abs_points"] = statistics.fmean(aes) if aes else None
            out[f"{m}_median_ape"] = statistics.median(apes) if apes else None
    return out


def _default_step() -> Any:
    from dltsched.predictors.steptime import DeletePopStepTime

    return DeletePopStepTime()


def _engine_job(key: JobKey, optimizer: str = "sgd") -> Any:
    from dltsched.engine.domain.model import Job

    model, dataset, batch, amp = key
    return Job(id=f"{model}:{batch}", model=model, batch_size=batch, total_iterations=1.0, dataset=dataset,
               amp=amp, optimizer=optimizer)


def _family(model: str) -> str:
    from dltsched.engine.domain.catalog import model_catalog

    try:
        return model_catalog().get(model).family
    except (KeyError, ValueError):
        return model


def _family_mean(train: Sequence[IsolatedRow], model: str,
                 value: Callable[[IsolatedRow], float | None]) -> Any:
    got = [v for t in train if _family(t.model) == _family(model) for v in [value(t)] if v is not None]
    return statistics.fmean(got) if got else None


def _isolated_rows(cal: GpuCalibration, rows: Sequence[IsolatedRow],
                   train: Sequence[IsolatedRow]) -> list[dict]:
    from dltsched.engine.domain.catalog import gpu_catalog
    from dltsched.predictors.steptime.opgraph import roofline_step_s

    default = _default_step()
    spec = gpu_catalog().get(cal.gpu)
    out = []
    for r in rows:
        job = _engine_job(r.key, r.optimizer)
        b = default.breakdown(job, cal.gpu, scope=r.scope)
        same = [t for t in train if t.model == r.model]
        base = {"model": r.model, "batch_size": r.batch_size}
        out.append({**base, "what": "step_time_s", "measured": r.step_time_s,
                    "weight": spread_weight(r.step_time_rel_sd),
                    "calibrated": cal.predicted_step_s(r.key, r.scope, optimizer=r.optimizer),
                    "default": b.step_time_s,
                    "constant": statistics.median(t.step_time_s for t in train),
                    "per_model_mean": statistics.fmean(t.step_time_s for t in same) if same else None,
                    "per_family_mean": _family_mean(train, r.model, lambda t: t.step_time_s),
                    "roofline": roofline_step_s(r.model, r.dataset, r.batch_size, spec, r.amp)})
        if r.gmem_mib:
            mem = [t.gmem_mib for t in train if t.gmem_mib]
            out.append({**base, "what": "memory_mib", "measured": r.gmem_mib,
                        "calibrated": cal.memory_mib(r.key)[0], "default": default.memory_mib(job, cal.gpu),
                        "constant": statistics.median(mem) if mem else None, "per_model_mean": None,
                        "per_family_mean": _family_mean(train, r.model, lambda t: t.gmem_mib)})
        if r.gpu_util:
            util = [t.gpu_util for t in train if t.gpu_util is not None]
            out.append({**base, "what": "gpu_util", "measured": r.gpu_util,
                        "calibrated": cal.util_pct(r.key)[0],
                        "default": 100.0 * min(1.0, (b.compute_s + b.memory_s) / b.step_time_s),
                        "constant": statistics.median(util) if util else None, "per_model_mean": None,
                        "per_family_mean": _family_mean(train, r.model, lambda t: t.gpu_util)})
    return out


#: the shipped co-location model per set of known profiles (one per fold of a cross-validation)
_DEFAULT_MEMO: dict[tuple[Any, ...], Any] = {}


def _default_colocation(data: ProfileData, known: dict[JobKey, IsolatedRow]) -> Callable[[GroupRow], Any]:
    """The shipped co-location model's prediction of a group, given the profiles ``known``."""
    from dltsched.predictors.colocation import default_colocation_predictor
    from dltsched.predictors.colocation.features import Group
    from dltsched.predictors.colocation.samples import JobSpec
    from dltsched.predictors.profiles import JobProfile, ProfileKey

    memo_key = (data.gpu, tuple(sorted(known)))
    predictor = _DEFAULT_MEMO.get(memo_key)
    if predictor is None:
        profiles = [JobProfile(ProfileKey(data.gpu, r.model, r.batch_size, r.amp, r.dataset), r.step_time_s,
                               r.gmem_mib, None if r.gpu_util is None else min(100.0, r.gpu_util))
                    for r in known.values()]
        predictor = _DEFAULT_MEMO[memo_key] = default_colocation_predictor(profiles=profiles)

    def predict(g: GroupRow) -> Any:
        group = Group(data.gpu, tuple(JobSpec(m, b, a, d) for m, d, b, a in g.members))
        return predictor.estimate_groups([group])[0].as_group_prediction()

    return predict


def _group_rows(cal: GpuCalibration, data: ProfileData, groups: Sequence[GroupRow], train: Sequence[GroupRow],
                known: dict[JobKey, IsolatedRow], score_member: Callable[[JobKey], bool],
                fold: str) -> list[dict]:
    default = _default_colocation(data, known)
    measured = data.isolated_by_key()
    out = []
    for g in groups:
        all_speeds = [s for t in train if len(t.members) == len(g.members) for s in t.speeds]
        pred = cal.group(g.members, data.sharing)
        if pred is None:
            continue
        engine = default(g)
        utils = [measured[k].gpu_util if k in measured else None for k in g.members]
        mems = [measured[k].gmem_mib if k in measured else None for k in g.members]
        share = None if None in utils else min(1.0, 100.0 / max(sum(u or 0.0 for u in utils), 1e-9))
        label = "+".join(f"{m}:{b}" for m, _d, b, _a in g.members)
        for i, key in enumerate(g.members):
            if not score_member(key):
                continue
            same = [s for t in train for k, s in zip(t.members, t.speeds, strict=True) if k[0] == key[0]]
            out.append({"group": label, "fold": fold, "model": key[0], "what": "speed",
                        "measured": g.speeds[i], "calibrated": pred["speeds"][i], "default": engine.speeds[i],
                        "constant": statistics.median(all_speeds) if all_speeds else None,
                        "per_model_mean": statistics.fmean(same) if same else None, "util_share": share})
        if g.gmem_mib:
            train_mem = [t.gmem_mib for t in train if t.gmem_mib and len(t.members) == len(g.members)]
            out.append({"group": label, "fold": fold, "what": "memory_mib", "measured": g.gmem_mib,
                        "calibrated": pred["memory_mib"], "default": engine.memory_mib,
                        "constant": statistics.median(train_mem) if train_mem else None,
                        "per_model_mean": None,
                        "util_share": None if None in mems else sum(m or 0.0 for m in mems)})
        if g.gpu_util:
            train_util = [t.gpu_util for t in train if t.gpu_util is not None]
            out.append({"group": label, "fold": fold, "what": "gpu_util", "measured": g.gpu_util,
                        "calibrated": pred["gpu_util"], "default": engine.gpu_util,
                        "constant": statistics.median(train_util) if train_util else None,
                        "per_model_mean": None,
                        "util_share": None if None in utils else min(100.0, sum(u or 0.0 for u in utils))})
    return out


METHODS = ("calibrated", "default", "constant", "per_model_mean")
#: the isolated rows' extra rules: the mean of the same family's training rows (the constant where the
#: family has none), and for step time the plain roofline (the graph's kernels at the spec sheet's peak,
#: nothing fitted)
ISOLATED_METHODS = (*METHODS, "per_family_mean", "roofline")


def _lojo_rows(datasets: Sequence[ProfileData], data: ProfileData) -> list[dict[str, Any]]:
    """Leave-one-job-out rows of ``data``'s jobs whose model has other jobs profiled (module docstring)."""
    keys: dict[str, set[JobKey]] = {}
    for d in datasets:
        for r in d.isolated:
            keys.setdefault(r.model, set()).add(r.key)
    out: list[dict[str, Any]] = []
    for r in data.isolated_by_key().values():
        if len(keys[r.model]) < 2:
            continue
        fold = fit_gpu(datasets, without_jobs=frozenset({r.key}), with_groups=False)
        train = [t for d in datasets for t in d.isolated if t.key != r.key]
        rows = _isolated_rows(fold, [r], train)
        rows[0]["calibrated_no_model_scale"] = fold.predicted_step_s(r.key, r.scope, optimizer=r.optimizer,
                                                                        model_scale=False)
        out += rows
    return out


GROUP_METHODS = (*METHODS, "util_share")
#: most calibrations per sharing mode in leave-one-group-out: more groups than this are held out in as many
#: folds (group ``i`` in fold ``i mod MAX_GROUP_FOLDS``), each still never measured when it is predicted
MAX_GROUP_FOLDS = 30


def _by_what(rows: Sequence[dict[str, Any]], methods: Sequence[str]) -> dict[str, Any]:
    out = {}
    for what in sorted({r["what"] for r in rows}):
        sub = [r for r in rows if r["what"] == what]
        fallback = sum(1 for r in sub if r.get("per_model_mean") is None)
        for r in sub:
            if r.get("per_model_mean") is None:
                r["per_model_mean"] = r["constant"]
            if "per_family_mean" in r and r["per_family_mean"] is None:
                r["per_family_mean"] = r["constant"]
        out[what] = {**summary(sub, [m for m in methods if any(r.get(m) is not None for r in sub)],
                                what == "gpu_util"), "per_model_fallbacks": fallback}
    return out


def cross_validate(datasets: Sequence[ProfileData], *, with_rows: bool = False) -> dict[str, Any]:
    """Leave-one-model-out and leave-one-group-out figures of one GPU's ``datasets`` (module docstring), per
    sharing mode. The shipped co-location model's warnings about the profiles each fold hides are muted."""
    quiet = logging.getLogger("dltsched.predictors.colocation.profiled")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return _cross_validate(datasets, with_rows)
    finally:
        quiet.setLevel(level)
        _DEFAULT_MEMO.clear()


def _cross_validate(datasets: Sequence[ProfileData], with_rows: bool) -> dict[str, Any]:
    models = sorted({r.model for d in datasets for r in d.isolated} | {m for d in datasets for g in d.groups
                                                                       for m in g.models})
    folds = {m: fit_gpu(datasets, without_models=frozenset({m})) for m in models}
    out: dict[str, Any] = {}
    for data in datasets:
        iso_rows: list[dict[str, Any]] = []
        lomo_rows: list[dict[str, Any]] = []
        for m in models:
            cal = folds[m]
            train_iso = [r for d in datasets for r in d.isolated if r.model != m]
            iso_rows += _isolated_rows(cal, [r for r in data.isolated_by_key().values() if r.model == m],
                                       train_iso)
            held = [g for g in data.groups if m in g.models]
            if not held:
                continue
            known = {k: r for k, r in data.isolated_by_key().items() if r.model != m}
            train = [g for g in data.groups if m not in g.models]
            lomo_rows += _group_rows(cal, data, held, train, known, lambda k, m=m: k[0] == m, m)
        logo_rows: list[dict[str, Any]] = []
        k = min(len(data.groups), MAX_GROUP_FOLDS)
        for i in range(k):
            held = list(data.groups[i::k])
            cal = fit_gpu(datasets, without_groups=held)
            train = [t for t in data.groups if t not in held]
            logo_rows += _group_rows(cal, data, held, train, data.isolated_by_key(), lambda _k: True, "group")
        lojo_rows = _lojo_rows(datasets, data)
        figures = {"isolated_lomo": _by_what(iso_rows, ISOLATED_METHODS),
                   "groups_lomo": _by_what(lomo_rows, GROUP_METHODS),
                   "groups_logo": _by_what(logo_rows, GROUP_METHODS), "models": len(models)}
        if lojo_rows:
            figures["isolated_lojo"] = _by_what(lojo_rows, (*ISOLATED_METHODS, "calibrated_no_model_scale"))
        if with_rows:
            figures["rows"] = {"isolated_lomo": iso_rows, "groups_lomo": lomo_rows, "groups_logo": logo_rows,
                               "isolated_lojo": lojo_rows}
        out[data.sharing] = figures
    return out


__all__ = ["GROUP_METHODS", "ISOLATED_METHODS", "METHODS", "SPREAD_FLOOR", "cross_validate", "spread_weight"]
