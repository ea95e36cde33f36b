"""Cross-fitted predictors: a job of model M is priced by predictors fitted without any measurement of M.

The simulator's ground truth (:class:`~dltsched.engine.sim.truth.MeasuredTruth`) is Gavel's measured
isolated throughputs and co-located pairs (and Lucid's pairs for models Gavel did not pair). The shipped
predictors are fitted on the same measurements: the step-time factors on Gavel + Zeus + Orion step
times (``calibrate-steptime``), the co-location table on every Gavel pair. Scored against that truth,
they are scored on their training data. This module refits both K times, once per fold of a
:class:`sklearn.model_selection.GroupKFold` split *by model* (every model is out of fold exactly once):

- step time: :func:`~dltsched.predictors.steptime.calibrate.fit` on every step-time row whose model is
  not in the fold (DeepBench's operator micro-benchmarks name no model and stay);
- co-location: the default family, the profile predictor (:class:`~dltsched.predictors.colocation.profiled.
  ProfileColocation`, as ``train_profile_table`` fits the shipped one), fitted on every Gavel pair with no
  model of the fold; it keeps the isolated profiles of the fold's training models only, so a held-out
  model's step time, memory and utilisation (its inputs) are *predicted* by the fold's step-time predictor,
  and no measurement of a held-out model enters its answers;
- memory is the step-time predictor's analytic model (not fitted); freezing is the packaged curve.

:class:`CrossFit` answers each job from the fold that holds its model out; a model in no fold (never
measured) from the shipped predictors, which were fitted on no measurement of it. A co-located group
takes each member's speed from that member's fold. Fitting all folds takes minutes (the step-time fits
dominate), so the folds are built once and kept on disk under ``$DLTSCHED_CACHE`` (default
``~/.cache/dltsched``): ``crossfit/<key>/fold<i>.json``, the key hashing the training data, the folds and the
recipe's names (its co-location family and step-time part included), and the step-time factors apart under
``crossfit/steptime-<key>/``, keyed by the step-time data, the folds and the step-time recipe's name only, so
that a new co-location recipe refits the quick part alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import write_atomically
from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import Predictors, ask_colocated_many, is_order_symmetric

log = logging.getLogger(__name__)

#: folds of the model split (GroupKFold; fewer when there are fewer models)
DEFAULT_FOLDS = 5
#: version of the fitting recipe, part of the cache key: bump it when a fold is fitted differently
#: (``crossfit/1`` fitted the older ensemble table; ``crossfit/2`` the profile predictor, the default family;
#: ``crossfit/3`` the same, its profiles of held-out models predicted with input-pipeline terms learned
#: across the fold's other workloads, ``model.host_model``; ``crossfit/4`` also the profile predictor's pair
#: speed trees)
RECIPE_VERSION = "crossfit/5"  # crossfit/5: the profile predictor with its analytic busy-fraction features
#: version of the step-time part of the recipe, the key of the step-time cache (``steptime/2``: a GPU's
#: compute-group multipliers pulled towards its common scale, ``calibrate._gpu_priors``; ``steptime/3``: a
#: group that one workload alone informs on a GPU holds for that workload only, the others get the GPU's
#: common scale, ``calibrate._single_workload_groups``; ``steptime/4``: the same for a group's inverse
#: efficiency that one workload alone informs on every GPU, ``calibrate._single_workload_efficiency``)
STEPTIME_RECIPE = "steptime/4"
#: the co-location predictor family the folds refit (the default bundle's: ``predictors.colocation.profiled``)
COLOCATION_FAMILY = "profile"
CACHE_ENV = "DLTSCHED_CACHE"
#: Gavel scales the step-time factors are fitted on (as ``predict calibrate-steptime``)
_TRAIN_SCALE = 8


def canonical_model(name: str) -> str:
    """Catalog id of a model name (names that do not resolve stay as given)."""
    from dltsched.engine.domain.catalog import model_catalog

    try:
        return model_catalog().resolve(name)
    except ValueError:
        return name


@dataclass(frozen=True, slots=True)
class TrainingData:
    """Everything the shipped predictors are fitted on: step-time rows, DeepBench kernel efficiencies (no
    model), and co-location samples with their isolated profiles."""

    steptime: tuple[Any, ...]  # predictors.steptime.measurements.Measurement
    kernel_efficiency: Mapping[str, Mapping[str, float]]
    colocation: Any  # predictors.colocation.samples.ColocDataset

    def models(self) -> tuple[str, ...]:
        """Every model some measurement is of, sorted."""
        return tuple(sorted({canonical_model(m.model) for m in self.steptime}
                            | {canonical_model(m) for m in self.colocation.models()}))

    def without(self, models: Sequence[str]) -> TrainingData:
        """The data with every measurement involving one of ``models`` removed (isolated profiles stay: the
        co-location fitter replaces the held-out ones by predictions)."""
        held = set(models)
        steps = tuple(m for m in self.steptime if canonical_model(m.model) not in held)
        coloc = self.colocation.subset(s for s in self.colocation.samples
                                       if not any(canonical_model(m) in held for m in s.models))
        return TrainingData(steps, self.kernel_efficiency, coloc)

    def steptime_digest(self) -> str:
        """sha256 of the step-time part of the data (rows and kernel efficiencies), order-independent."""
        h = hashlib.sha256()
        for line in sorted(repr(m) for m in self.steptime):
            h.update(line.encode())
        h.update(json.dumps(self.kernel_efficiency, sort_keys=True).encode())
        return h.hexdigest()

    def digest(self) -> str:
        """sha256 of the data's content (order-independent), for the cache key."""
        h = hashlib.sha256(self.steptime_digest().encode())
        for line in sorted(repr(s) for s in self.colocation.samples):
            h.update(line.encode())
        for line in sorted(repr(kv) for kv in self.colocation.isolated.items()):
            h.update(line.encode())
        return h.hexdigest()


def load_training_data(data_dir: str | os.PathLike[str] | None = None) -> TrainingData:
    """The measurements of the shipped fits, read from the data folder."""
    from dltsched.predictors.colocation.samples import read_dataset
    from dltsched.predictors.steptime import measurements as ms

    rows = (*ms.gavel_measurements(data_dir, max_scale=_TRAIN_SCALE), *ms.zeus_measurements(data_dir),
            *ms.orion_measurements(data_dir))
    return TrainingData(rows, ms.deepbench_kernel_efficiency(data_dir), read_dataset("gavel", data_dir))


def model_folds(models: Sequence[str], n_splits: int = DEFAULT_FOLDS,
                weights: Mapping[str, int] | None = None) -> tuple[tuple[str, ...], ...]:
    """Models held out by each fold: :class:`sklearn.model_selection.GroupKFold` over the models, each
    weighted by its number of measurements (``weights``; 1 each by default), at most one fold per model."""
    from sklearn.model_selection import GroupKFold

    models = sorted(set(models))
    if len(models) < 2:
        from dltsched.engine.domain.errors import ValidationError

        raise ValidationError("models", f"{len(models)} model(s); cross-fitting needs at least 2")
    k = max(2, min(n_splits, len(models)))
    rows = [m for m in models for _ in range(max(1, (weights or {}).get(m, 1)))]
    out = []
    for _train, test in GroupKFold(n_splits=k).split(rows, groups=rows):
        out.append(tuple(sorted({rows[i] for i in test})))
    return tuple(sorted(out))


# ---------------------------------------------------------------------------------------- fitting one fold


def fit_steptime_factors(data: TrainingData) -> dict[str, Any]:
    """The step-time factors fitted on ``data`` (as ``predict calibrate-steptime`` does on all of it)."""
    from dltsched.predictors.steptime import calibrate

    return calibrate.fit(list(data.steptime), {g: dict(v) for g, v in data.kernel_efficiency.items()})


def fit_colocation_profile(data: TrainingData, held_out: Sequence[str], step: Any) -> dict[str, Any]:
    """The profile co-location predictor (JSON; the default bundle's family, fitted as ``train_profile_table``
    fits the shipped one) on ``data``'s pairs, keeping the isolated profiles of models not in ``held_out``;
    ``step`` (the fold's step-time predictor) predicts every missing profile value, in fitting and after."""
    from dltsched.predictors.colocation.profiled import ProfileColocation
    from dltsched.predictors.colocation.samples import ColocDataset, without_absent

    held = set(held_out)
    isolated = {k: p for k, p in data.colocation.isolated.items() if canonical_model(k[1].model) not in held}
    train = ColocDataset(data.colocation.samples, isolated, data.colocation.name)
    model = ProfileColocation(seed=0, step_time=step).fit(train)
    model.profiles = isolated
    model.record = {"family": COLOCATION_FAMILY, "held_out": sorted(held),
                    "samples": len(without_absent(train)), "profiles": len(isolated), "alpha": model.alpha}
    return model.to_json()


@dataclass(frozen=True, slots=True)
class Recipe:
    """How one fold is fitted: step-time factors from the fold's data, then a co-location predictor (JSON:
    a profile model, or a ``ColocationTable``) from the fold's data, the held-out models and the fold's
    step-time predictor. ``name`` enters the fold cache's key, ``steptime_name`` the step-time cache's."""

    name: str = RECIPE_VERSION
    steptime: Callable[[TrainingData], dict[str, Any]] = fit_steptime_factors
    colocation: Callable[[TrainingData, Sequence[str], Any], dict[str, Any]] = fit_colocation_profile
    steptime_name: str = STEPTIME_RECIPE


# ---------------------------------------------------------------------------------------- the bundle


@dataclass(frozen=True, slots=True)
class Fold:
    """One fold: the models it holds out and the predictors fitted without them."""

    held_out: tuple[str, ...]
    factors: dict[str, Any]
    table: dict[str, Any]  # the co-location predictor's JSON: a profile model, or a ``ColocationTable``

    def step_time(self) -> Any:
        """The fold's step-time predictor (its fitted factors).

        Returns
        -------
        DeletePopStepTime
            The predictor.
        """
        from dltsched.predictors.steptime import DeletePopStepTime

        return DeletePopStepTime(factors=self.factors)

    def colocation(self, step: Any) -> Any:
        """The fold's co-location predictor, predicting missing profiles with ``step`` (never the full
        fit)."""
        from dltsched.predictors.colocation.baselines import AnalyticContention
        from dltsched.predictors.colocation.profiled import FORMAT, ProfileColocation
        from dltsched.predictors.colocation.table import ColocationTable

        if self.table.get("format") == FORMAT:
            model = ProfileColocation.from_json(self.table)
            model.step_time = step
            return model
        table = ColocationTable.from_json(self.table)
        table.analytic = AnalyticContention(step_time=step)
        return table

    def to_json(self) -> dict[str, Any]:
        """The fold as plain JSON data.

        Returns
        -------
        dict[str, Any]
            Held-out models, step-time factors and the co-location predictor's JSON.
        """
        return {"held_out": list(self.held_out), "factors": self.factors, "table": self.table}


class CrossFitStepTime:
    """Step time and memory of a job from the fold that holds its model out (``StepTimePredictor``)."""

    def __init__(self, by_model: Mapping[str, Any], fallback: Any) -> None:
        self._by_model, self._fallback = dict(by_model), fallback

    def for_model(self, model: str) -> Any:
        """The step-time predictor of the fold that held ``model`` out (the fallback for a model in no
        fold)."""
        return self._by_model.get(canonical_model(model), self._fallback)

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        """Seconds per iteration, from the fold holding the model out (the
        :class:`~dltsched.engine.domain.predictors.StepTimePredictor` protocol)."""
        return float(self.for_model(job.model).step_time_s(job, gpu_type, num_gpus, freeze_level=freeze_level,
                                                           num_nodes=num_nodes))

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        """Peak GPU memory of one worker, MiB, from the fold holding the model out (the
        :class:`~dltsched.engine.domain.predictors.StepTimePredictor` protocol)."""
        return float(self.for_model(job.model).memory_mib(job, gpu_type, freeze_level=freeze_level))


class CrossFitColocation:
    """Each member's co-located speed from the table of the fold that holds the member's model out
    (``ColocationPredictor``); a group's memory is the largest of its members' tables' answers."""

    def __init__(self, by_model: Mapping[str, Any], fallback: Any,
                 record: Mapping[str, Any] | None = None) -> None:
        self._by_model, self._fallback = dict(by_model), fallback
        #: what the bundle is (:meth:`CrossFit.record`), for result files
        self.record = dict(record or {})

    def for_model(self, model: str) -> Any:
        """The co-location predictor of the fold that held ``model`` out (the fallback for a model in no
        fold)."""
        return self._by_model.get(canonical_model(model), self._fallback)

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """Co-located speeds relative to running alone, each from its model's fold (the
        :class:`~dltsched.engine.domain.predictors.ColocationPredictor` protocol)."""
        group = tuple(jobs)
        answers: dict[int, tuple[float, ...]] = {}
        out = []
        for i, job in enumerate(group):
            table = self.for_model(job.model)
            if id(table) not in answers:
                answers[id(table)] = tuple(table.colocated_speeds(group, gpu_type))
            out.append(answers[id(table)][i])
        return tuple(out)

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        """The group's GPU memory, MiB: the largest of the folds' answers (the
        :class:`~dltsched.engine.domain.predictors.ColocationPredictor` protocol)."""
        tables = {id(t): t for t in (self.for_model(j.model) for j in jobs)}
        return max(float(t.group_memory_mib(jobs, gpu_type)) for t in tables.values())

    def order_symmetric(self) -> bool:
        """Whether a pair's answers the other way round are the same numbers, the speeds swapped: when every
        fold's predictor says so (each member's speed comes from its own fold; the memory is the largest)."""
        tables = {id(t): t for t in (*self._by_model.values(), self._fallback)}
        return all(is_order_symmetric(t) for t in tables.values())

    def colocated_many(self, groups: Sequence[tuple[Sequence[Job], str]]
                       ) -> list[tuple[tuple[float, ...], float]]:
        """Per (jobs, GPU type): :meth:`colocated_speeds` and :meth:`group_memory_mib`, each fold asked once
        for all the groups it answers (``colocated_many`` where the fold's predictor has it)."""
        by_name: dict[str, Any] = {}  # each model's fold, looked up once
        for jobs, _ in groups:
            for j in jobs:
                if j.model not in by_name:
                    by_name[j.model] = self.for_model(j.model)
        members = [[by_name[j.model] for j in jobs] for jobs, _ in groups]
        asked: dict[int, tuple[Any, list[int]]] = {}
        for i, tables in enumerate(members):
            for t in {id(t): t for t in tables}.values():
                asked.setdefault(id(t), (t, []))[1].append(i)
        answers: dict[tuple[int, int], tuple[tuple[float, ...], float]] = {}
        for table, which in asked.values():
            got = ask_colocated_many(table, [groups[i] for i in which])
            for i, answer in zip(which, got, strict=True):
                answers[(id(table), i)] = answer
        out = []
        for i, tables in enumerate(members):
            speeds = tuple(answers[(id(t), i)][0][k] for k, t in enumerate(tables))
            memory = max(float(answers[(id(t), i)][1]) for t in {id(t): t for t in tables}.values())
            out.append((speeds, memory))
        return out


@dataclass(slots=True)
class CrossFit:
    """The folds of one training set, and the bundle built from them."""

    folds: tuple[Fold, ...]
    key: str
    models: tuple[str, ...]
    recipe: str = RECIPE_VERSION
    _bundle: Predictors | None = field(default=None, repr=False)

    def fold_of(self, model: str) -> Fold | None:
        """The fold that holds ``model`` out (``None``: a model no measurement is of)."""
        name = canonical_model(model)
        return next((f for f in self.folds if name in f.held_out), None)

    def predictors(self) -> Predictors:
        """The cross-fitted bundle (built once)."""
        if self._bundle is None:
            from dltsched.predictors import default_predictors
            from dltsched.predictors.freezing import IceFrogFreezing

            shipped = default_predictors()
            steps, tables = {}, {}
            for fold in self.folds:
                step = fold.step_time()
                table = fold.colocation(step)
                for model in fold.held_out:
                    steps[model], tables[model] = step, table
            step_time = CrossFitStepTime(steps, shipped.step_time)
            self._bundle = Predictors(step_time,
                                      CrossFitColocation(tables, shipped.colocation, self.record()),
                                      IceFrogFreezing(step_time))  # type: ignore[arg-type]
        return self._bundle

    def colocation_family(self) -> str:
        """``profile`` when every fold refits the profile predictor (the default's family), else ``table``."""
        from dltsched.predictors.colocation.profiled import FORMAT

        return COLOCATION_FAMILY if all(f.table.get("format") == FORMAT for f in self.folds) else "table"

    def record(self) -> dict[str, Any]:
        """What the bundle is: its key, folds, recipe and co-location family (JSON-ready)."""
        return {"bundle": "crossfit", "key": self.key, "folds": [list(f.held_out) for f in self.folds],
                "recipe": self.recipe, "colocation": self.colocation_family()}


def steptime_fold_errors(step_time: Any, rows: Sequence[Any], in_sample: Any | None = None,
                         gpus: tuple[str, str] = ("v100", "k80")) -> dict[str, Any]:
    """Out-of-fold step-time accuracy on measured rows (``Measurement``), beside rules on the same rows.

    ``step_time``: a :class:`CrossFitStepTime` (each row priced by the fold that holds its model out) or
    any ``DeletePopStepTime``; each row is predicted with its own setup's host terms where fitted
    (``calibrate.evaluate``). Beside it: ``in_sample`` (e.g. the shipped fit), the plain roofline (the
    graph's kernels at the spec peak and bandwidth, nothing fitted) and ``constant``, the median measured
    step of the same setup and GPU over the *other* models' rows (what a cluster knows of a new model
    without a predictor). MAPE (%) per source and per model, and per model the geometric mean over batch
    sizes of the predicted / measured speed-up of ``gpus[0]`` over ``gpus[1]`` (type affinity).
    """
    import numpy as np

    from dltsched.predictors.steptime.calibrate import evaluate, job_of, roofline_s

    def model_predictor(p: Any, model: str) -> Any:
        return p.for_model(model) if isinstance(p, CrossFitStepTime) else p

    named = {"crossfit": step_time, **({"in_sample": in_sample} if in_sample is not None else {})}
    apes: dict[str, list[tuple[str, str, float]]] = {k: [] for k in (*named, "roofline", "constant")}
    for m in rows:
        model = canonical_model(m.model)
        for name, p in named.items():
            apes[name].append((m.source, model, evaluate(model_predictor(p, model), [m]).mape))
        apes["roofline"].append((m.source, model, abs(roofline_s(m) / m.step_time_s - 1.0) * 100.0))
        others = [o.step_time_s for o in rows if o.source == m.source and o.gpu == m.gpu
                  and canonical_model(o.model) != model]
        if others:
            apes["constant"].append((m.source, model,
                                     abs(float(np.median(others)) / m.step_time_s - 1.0) * 100.0))
    out: dict[str, Any] = {}
    for name, values in apes.items():
        out[name] = {"n": len(values), "mape": float(np.mean([v for *_k, v in values])),
                     "per_source": {s: float(np.mean([v for src, _m, v in values if src == s]))
                                    for s in sorted({src for src, _m, _v in values})},
                     "per_model": {mo: float(np.mean([v for _s, m_, v in values if m_ == mo]))
                                   for mo in sorted({m_ for _s, m_, _v in values})}}
    speedup: dict[str, dict[str, float]] = {}
    fast, slow = gpus
    by_shape: dict[tuple[Any, ...], dict[str, Any]] = {}
    for m in rows:
        by_shape.setdefault((m.source, canonical_model(m.model), m.dataset, m.batch_size, m.amp),
                            {})[m.gpu] = m
    for (_src, model, *_rest), pair in sorted(by_shape.items(), key=lambda kv: repr(kv[0])):
        if fast not in pair or slow not in pair:
            continue
        measured = pair[slow].step_time_s / pair[fast].step_time_s
        entry = speedup.setdefault(model,
                                   {"measured": [], **{k: [] for k in named}})  # type: ignore[dict-item]
        entry["measured"].append(measured)  # type: ignore[attr-defined]
        for name, p in named.items():
            pred = model_predictor(p, model)
            ratio = pred.step_time_s(job_of(pair[slow]), slow,
                                     1) / pred.step_time_s(job_of(pair[fast]), fast, 1)
            entry[name].append(ratio / measured)  # type: ignore[attr-defined]
    out["speedup"] = {model: {k: float(np.exp(np.mean(np.log(v)))) for k, v in entry.items()}
                      for model, entry in speedup.items()}
    return out


def cache_root() -> Path:
    """Where fitted folds are kept: ``$DLTSCHED_CACHE`` or ``~/.cache/dltsched``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "dltsched")


def _write_json(path: Path, payload: Any) -> None:
    write_atomically(path, json.dumps(payload, separators=(",", ":"), allow_nan=False).encode())


def build_crossfit(data: TrainingData, n_splits: int = DEFAULT_FOLDS, *, recipe: Recipe | None = None,
                   cache_dir: str | os.PathLike[str] | None = None,
                   fit_missing: bool = True) -> CrossFit | None:
    """Fit every fold of ``data`` (or read it from ``cache_dir``/``crossfit/<key>``, default
    :func:`cache_root`; a fold fitted is written there at once, so an interrupted build resumes).
    With ``fit_missing=False``, ``None`` when some fold is not in the cache (nothing is fitted)."""
    recipe = recipe or Recipe()
    weights: dict[str, int] = {}
    for m in data.steptime:
        weights[canonical_model(m.model)] = weights.get(canonical_model(m.model), 0) + 1
    for s in data.colocation.samples:
        for m in set(s.models):
            weights[canonical_model(m)] = weights.get(canonical_model(m), 0) + 1
    splits = model_folds(data.models(), n_splits, weights)
    split_list = [list(s) for s in splits]
    key = hashlib.sha256(json.dumps([data.digest(), recipe.name, recipe.steptime_name, split_list]).encode()
                         ).hexdigest()[:20]
    step_key = hashlib.sha256(json.dumps([data.steptime_digest(), recipe.steptime_name, split_list]).encode()
                              ).hexdigest()[:20]
    where = Path(cache_dir) if cache_dir is not None else cache_root()
    folder, step_folder = where / "crossfit" / key, where / "crossfit" / f"steptime-{step_key}"
    folds = []
    for i, held in enumerate(splits):
        path = folder / f"fold{i}.json"
        raw = _read_json(path)
        if raw is not None and tuple(raw["held_out"]) == held:
            folds.append(Fold(held, raw["factors"], raw["table"]))
            continue
        if not fit_missing:
            return None
        log.info("cross-fitting fold %d/%d (without %s)", i + 1, len(splits), ", ".join(held))
        train = data.without(held)
        step_path = step_folder / f"fold{i}.json"
        cached = _read_json(step_path)
        if cached is not None and tuple(cached["held_out"]) == held:
            factors = cached["factors"]
        else:
            factors = recipe.steptime(train)
            _write_json(step_path, {"held_out": list(held), "factors": factors})
        from dltsched.predictors.steptime import DeletePopStepTime

        table = recipe.colocation(train, held, DeletePopStepTime(factors=factors))
        fold = Fold(held, factors, table)
        _write_json(path, fold.to_json())
        folds.append(fold)
    _write_json(folder / "folds.json", {"key": key, "recipe": recipe.name, "steptime_key": step_key,
                                        "folds": split_list})
    return CrossFit(tuple(folds), key, data.models(), recipe.name)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


@cache
def _crossfit_for(data_dir: str | None, n_splits: int) -> CrossFit:
    built = build_crossfit(load_training_data(data_dir), n_splits)
    assert built is not None
    return built


def crossfit(data_dir: str | os.PathLike[str] | None = None, n_splits: int = DEFAULT_FOLDS) -> CrossFit:
    """The folds of the data folder's measurements (built once per process, cached on disk)."""
    from dltsched.instances.datadir import find_data_dir

    base = find_data_dir(data_dir)
    return _crossfit_for(str(base), n_splits)


def cached_crossfit(data_dir: str | os.PathLike[str] | None = None,
                    n_splits: int = DEFAULT_FOLDS) -> CrossFit | None:
    """The folds when every one is in the disk cache already, else ``None`` (fits nothing: for notebooks and
    tests that must stay fast)."""
    from dltsched.instances.datadir import find_data_dir

    base = find_data_dir(data_dir, required=False)
    if base is None:
        return None
    return build_crossfit(load_training_data(base), n_splits, fit_missing=False)


def crossfit_predictors(data_dir: str | os.PathLike[str] | None = None) -> Predictors:
    """The ``crossfit`` bundle: each job priced by predictors fitted without its model (module docstring)."""
    return crossfit(data_dir).predictors()


__all__ = ["CrossFit", "Fold", "Recipe", "TrainingData", "build_crossfit", "cached_crossfit", "crossfit",
           "crossfit_predictors",
           "load_training_data", "model_folds", "steptime_fold_errors"]
