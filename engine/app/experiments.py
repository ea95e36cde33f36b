"""Experiments as files: ``dltsched experiment run EXP.toml`` and ``dltsched experiment show EXP.toml``.

One TOML file says everything a comparison needs, so that it can be re-run and reviewed:

```toml
name = "tiny-two-policies"
policies = ["fifo", "optimizing"]
seeds = [0, 1]
predictors = "default"          # predictor bundle the policies see
calibration = "h200.json"       # optional: a calibration bundle on top (dltsched calibrate), relative to this
file memory = "reject"               # or "oom"

[workload]                      # exactly one of: instance, generate, trace
instance = "../examples/tiny-6jobs-4gpus.json"   # relative to this file

[options.optimizing]            # per-policy options (optimizing family only)
backend = "cpsat"
time_limit_s = 1

[outputs]
dir = "results/tiny"            # relative to the working directory; `-o DIR` overrides
figures = ["jct_cdf", "utilization", "gantt"]
```

A generated workload is ``[workload.generate]`` with the fields of ``instances.generator.GeneratorSpec``
(``num_jobs``, ``num_gpus``, ``cluster`` ...; its seed is the run's seed); a trace window is ``trace =
"philly"`` with ``start_s``, ``jobs`` and ``gpus`` (or ``cluster``). For generated and trace workloads
every seed re-draws the workload, as ``bench simulate`` does; an instance file is the same for every seed.

Runs go through :func:`dltsched.engine.app.cli.simulate.run_policies` (the code of ``dltsched simulate``), one
(policy, seed) at a time. Outputs in the output folder: ``summary.csv`` (one row per policy: mean and 95%
t-interval half-width of each metric over seeds, as ``bench simulate``), ``runs.csv`` (one row per policy
and seed), ``records.csv`` (one row per finished job), ``results.json`` (the experiment file, its hash, the
predictor bundle and package versions, every run with its records) and the figures of ``dltsched plot``
(Gantt charts for the first seed).
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import json
import math
import statistics
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import click
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from dltsched.engine.app.vocabulary import OPTIMIZING_POLICIES, expand_policies, parse_policy
from dltsched.engine.domain.errors import ValidationError

FigureName = Literal["jct_cdf", "utilization", "gantt"]
FIGURES: tuple[FigureName, ...] = ("jct_cdf", "utilization", "gantt")
#: metrics of the summary table (means and 95% intervals over seeds)
SUMMARY_METRICS = ("avg_jct_s", "median_jct_s", "p99_jct_s", "makespan_s", "makespan_bound_s", "makespan_gap",
                   "avg_queueing_s", "gpu_util",
                   "ftf_mean", "num_preemptions", "decision_time_mean_s")
RUN_COLUMNS = ("policy", "seed", "num_jobs", "num_jobs_finished", *SUMMARY_METRICS, "wall_time_s", "truth",
               "truth_sources")
RECORD_COLUMNS = ("policy", "seed", "job_id", "arrival_s", "first_start_s", "finish_s", "jct_s", "queueing_s",
                  "num_gpus", "preemptions", "attained_gpu_s", "weight")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _generator_fields() -> tuple[str, ...]:
    from dltsched.instances.generator import GeneratorSpec

    return tuple(f.name for f in fields(GeneratorSpec) if f.name != "seed")


def _finetune_fields() -> tuple[str, ...]:
    import inspect

    from dltsched.instances.finetune import finetune_mix

    return tuple(n for n in inspect.signature(finetune_mix).parameters if n not in ("seed", "data_dir"))


class Workload(_Strict):
    """Exactly one of ``instance`` (file), ``generate`` (generator fields) or ``trace`` (a real workload)."""

    instance: str | None = None
    generate: dict[str, Any] | None = None
    trace: str | None = None
    finetune: dict[str, Any] | None = None
    start_s: float | None = Field(None, ge=0)
    jobs: int | None = Field(None, ge=1)
    gpus: int | None = Field(None, ge=1)
    gpu_types: str = "v100,p100,k80"
    cluster: str | None = None
    data_dir: str | None = None

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> Workload:
        given = [k for k in ("instance", "generate", "trace", "finetune") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of instance, generate, trace, finetune (got "
                             f"{', '.join(given) or 'none'})")
        if self.finetune is not None:
            allowed = _finetune_fields()
            for key in self.finetune:
                if key not in allowed:
                    raise ValueError(f"finetune.{key}: unknown key; allowed: {', '.join(allowed)}")
        if self.generate is not None:
            allowed = _generator_fields()
            for key in self.generate:
                if key not in allowed:
                    raise ValueError(f"generate.{key}: unknown key; allowed: {', '.join(allowed)}")
        if self.trace is None and any(getattr(self, k) is not None
                                      for k in ("start_s", "jobs", "gpus", "cluster")):
            raise ValueError("start_s, jobs, gpus and cluster belong to a trace workload; "
                             "a generated one takes them inside [workload.generate]")
        return self


class Outputs(_Strict):
    """Where an experiment writes its results and which of them.

    Parameters
    ----------
    dir
        Output folder; ``None``: ``results/<name>``.
    tables
        Whether to write the comparison tables.
    records_csv
        Whether to write one CSV row per finished job.
    figures
        Figures to draw.
    format
        Image format of the figures.
    """

    dir: str | None = None
    tables: bool = True
    records_csv: bool = True
    figures: tuple[FigureName, ...] = FIGURES
    format: Literal["png", "svg"] = "png"


class Variant(_Strict):
    """A labelled policy configuration: ``policy`` with ``options``; ``type_blind`` predicts every GPU type at
    the mean over the cluster's types (:func:`dltsched.engine.app.ablation.type_blind`)."""

    policy: str = "optimizing"
    options: dict[str, Any] = Field(default_factory=dict)
    type_blind: bool = False

    @pydantic.field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        """A name the vocabulary understands (``simulate --policy``'s), kept as written."""
        parse_policy(value, "")
        return value


class Experiment(_Strict):
    """A validated experiment file."""

    name: str = Field(min_length=1)
    description: str = ""
    workload: Workload
    policies: tuple[str, ...] = ()
    seeds: tuple[int, ...] = Field((0,), min_length=1)
    predictors: str = "default"
    calibration: str | None = None
    memory: Literal["reject", "oom"] = "reject"
    prediction_error: float = Field(0.0, ge=0)
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    variants: dict[str, Variant] = Field(default_factory=dict)
    ablation: bool = False
    truth: tuple[str, ...] = ()
    truth_sharing: Literal["timeslice", "mps"] | None = None
    arrivals: Literal["trace", "batch"] = "trace"
    profile_on_arrival_s: float | None = Field(None, ge=0, le=1e6)
    #: with ``profile_on_arrival_s``: also measure every job on one GPU of each type (Gavel, Sia)
    profile_every_type: bool = False
    outputs: Outputs = Outputs()

    @pydantic.field_validator("profile_every_type")
    @classmethod
    def _every_type(cls, value: bool, info: pydantic.ValidationInfo) -> bool:
        if value and info.data.get("profile_on_arrival_s") is None:
            raise ValueError("needs profile_on_arrival_s, the seconds of profiling per GPU type")
        return value

    @pydantic.field_validator("policies")
    @classmethod
    def _policy_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Groups expanded and names in their canonical form (the vocabulary ``simulate --policy`` takes)."""
        return tuple(choice.name for choice in expand_policies(value, ""))

    def labels(self) -> list[str]:
        """Every run label in table order: the policies, the variants, then the ablation's."""
        from dltsched.engine.app.ablation import ablation_variants

        extra = list(ablation_variants(self.options.get("optimizing", {}))) if self.ablation else []
        return [*self.policies, *self.variants, *extra]

    @pydantic.model_validator(mode="after")
    def _options_for_listed_policies(self) -> Experiment:
        if self.ablation and "optimizing" not in self.policies:
            raise ValueError("ablation: compares against the optimizing policy; list it in policies")
        if not self.policies and not self.variants:
            raise ValueError("policies: give at least one policy or variant")
        labels = self.labels()
        if len(set(labels)) != len(labels):
            raise ValueError(f"variants: labels repeat a policy or an ablation label ({', '.join(labels)})")
        for policy in self.options:
            if policy not in self.policies:
                raise ValueError(f"options.{policy}: not in policies ({', '.join(self.policies)})")
            if parse_policy(policy).policy not in OPTIMIZING_POLICIES:
                raise ValueError(f"options.{policy}: only the optimizing policies take options")
        if len(set(self.seeds)) != len(self.seeds) or len(set(self.policies)) != len(self.policies):
            raise ValueError("policies and seeds must not repeat")
        return self


def _error_line(err: pydantic.ValidationError) -> ValidationError:
    """The first problem as one line; an unknown key (often the cause of a "missing" one) comes first."""
    errors = err.errors()
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    path = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        model = _model_at(tuple(str(p) for p in first["loc"][:-1]))
        allowed = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(first["loc"][-1]), allowed, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return ValidationError(path, f"unknown key; {hint}allowed: {', '.join(allowed)}")
    if first["type"] == "missing":
        return ValidationError(path, "missing; this key is required")
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "value_error":
        return ValidationError(path, message)
    return ValidationError(path, f"{first.get('input')!r} not understood; {message}")


def _model_at(loc: tuple[str, ...]) -> type[BaseModel] | None:
    models: dict[tuple[str, ...], type[BaseModel]] = {(): Experiment, ("workload",): Workload,
                                                      ("outputs",): Outputs}
    if len(loc) == 2 and loc[0] == "variants":
        return Variant
    return models.get(loc)


@dataclass(frozen=True, slots=True)
class LoadedExperiment:
    """An experiment, the file it came from and the file's SHA-256."""

    spec: Experiment
    path: Path
    sha256: str

    def instance_path(self) -> Path | None:
        """The workload's instance file, relative paths resolved against the experiment file's folder.

        Returns
        -------
        Path or None
            The instance's path; ``None`` when the workload is generated rather than read.
        """
        if self.spec.workload.instance is None:
            return None
        path = Path(self.spec.workload.instance)
        return path if path.is_absolute() else (self.path.parent / path).resolve()

    def out_dir(self, override: str | Path | None = None) -> Path:
        """The folder results go to (not created): ``override`` (from the command line), else the
        experiment's ``outputs.dir``, else ``results/<name>``."""
        return Path(override or self.spec.outputs.dir or Path("results") / self.spec.name)

    def predictor_set(self) -> str:
        """The bundle the policies see: ``predictors`` with ``calibration`` (relative to this file) on top."""
        from dltsched.engine.app.registry import check_predictors, with_calibration

        cal = self.spec.calibration
        if self.spec.predictors == "exact":  # the truth itself (exact predictions), no bundle to calibrate
            return "exact"
        if cal is not None and not Path(cal).is_absolute():
            cal = str((self.path.parent / cal).resolve())
        return check_predictors(with_calibration(self.spec.predictors, cal))

    def runs(self) -> list[tuple[str, int]]:
        """(label, seed) in the order they run: seeds outer, so every policy sees the same workload draw."""
        return [(p, s) for s in self.spec.seeds for p in self.spec.labels()]

    def truth_dirs(self, required: bool = True) -> tuple[str, ...]:
        """The ``truth`` datasets: absolute, else relative to this file, else to the shared data folder
        (``required=False``: an entry left for a data folder that is not found is skipped, not an error)."""
        out = []
        for entry in self.spec.truth:
            path = Path(entry)
            if not path.is_absolute() and not (self.path.parent / path).is_dir():
                from dltsched.instances.datadir import find_data_dir

                base = find_data_dir(self.spec.workload.data_dir, required=False)
                if base is None and not required:
                    continue
                path = (Path(base) / path) if base is not None else self.path.parent / path
            elif not path.is_absolute():
                path = self.path.parent / path
            if not path.is_dir():
                raise ValidationError("truth",
                                      f"{entry} is not a folder (absolute, relative to the experiment "
                                      "file, or to the shared data folder)")
            out.append(str(path.resolve()))
        return tuple(out)

    def entries(self) -> dict[str, tuple[str, dict[str, Any], bool]]:
        """label -> (policy, options, type_blind) for every label."""
        from dltsched.engine.app.ablation import ablation_variants

        s = self.spec
        out = {p: (p, dict(s.options.get(p, {})), False) for p in s.policies}
        out |= {label: (v.policy, dict(v.options), v.type_blind) for label, v in s.variants.items()}
        if s.ablation:
            out |= ablation_variants(s.options.get("optimizing", {}))
        return out


def load_experiment(path: str | Path) -> LoadedExperiment:
    """Read and validate an experiment TOML file; bad content raises one-line :class:`ValidationError`."""
    path = Path(path)
    if not path.is_file():
        raise ValidationError("EXP.toml",
                              f"{path} " + ("is not a regular file" if path.exists() else "does not exist"))
    from dltsched.engine.domain.limits import read_limited

    raw = read_limited(path, "EXP.toml")
    try:
        data = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValidationError("EXP.toml", f"{path} is not valid TOML ({err})") from None
    try:
        spec = Experiment.model_validate(data)
    except pydantic.ValidationError as err:
        raise _error_line(err) from None
    loaded = LoadedExperiment(spec, path, hashlib.sha256(raw).hexdigest())
    loaded.truth_dirs(required=False)  # a missing dataset fails before anything runs
    inst = loaded.instance_path()
    if inst is not None and not inst.is_file():
        raise ValidationError("workload.instance",
                              f"{inst} does not exist (paths are relative to the experiment file)")
    return loaded


def load_workload(exp: LoadedExperiment, seed: int) -> Any:
    """The instance of ``seed``: the file, a generated instance, or a trace window."""
    inst = _workload(exp, seed)
    if exp.spec.arrivals == "batch":
        from dltsched.engine.sim.workload import batch_arrivals

        inst = batch_arrivals(inst)
    return inst


def _workload(exp: LoadedExperiment, seed: int) -> Any:
    w = exp.spec.workload
    if w.finetune is not None:
        from dltsched.instances.finetune import finetune_mix

        try:
            return finetune_mix(**w.finetune, seed=seed, data_dir=w.data_dir)
        except (TypeError, ValidationError) as err:
            if isinstance(err, ValidationError):
                raise err.under("workload.finetune") from None
            raise ValidationError("workload.finetune", str(err)) from None
    if w.generate is not None:
        from dltsched.instances.generator import GeneratorSpec, generate_instance

        args = {k: tuple(v) if isinstance(v, list) else v for k, v in w.generate.items()}
        try:
            return generate_instance(GeneratorSpec(**args, seed=seed), data_dir=w.data_dir)
        except ValidationError as err:
            raise err.under("workload.generate") from None
    from dltsched.engine.app.cli.simulate import load_instance_or_workload

    inst = exp.instance_path()
    return load_instance_or_workload(str(inst) if inst else None, w.trace, data_dir=w.data_dir,
                                     cluster=w.cluster, jobs=w.jobs, seed=seed, gpus=w.gpus,
                                     gpu_types=w.gpu_types, start_s=w.start_s)


def describe(exp: LoadedExperiment, out_dir: str | Path | None = None) -> dict[str, Any]:
    """What ``run`` would do, without running anything."""
    s, w = exp.spec, exp.spec.workload
    workload: dict[str, Any]
    if w.instance is not None:
        workload = {"instance": str(exp.instance_path())}
    elif w.generate is not None:
        workload = {"generate": dict(w.generate), "redrawn_per_seed": True}
    elif w.finetune is not None:
        workload = {"finetune": dict(w.finetune), "redrawn_per_seed": True}
    else:
        workload = {"trace": w.trace, "start_s": w.start_s, "jobs": w.jobs, "gpus": w.gpus,
                    "cluster": w.cluster, "redrawn_per_seed": True}
    out = exp.out_dir(out_dir)
    files = ["results.json", "runs.csv"] + (["summary.csv"] if s.outputs.tables else []) + \
        (["records.csv"] if s.outputs.records_csv else [])
    for fig in s.outputs.figures:
        names = [f"gantt_{p}" for p in s.labels()] if fig == "gantt" else [fig]
        files += [f"{n}.{s.outputs.format}" for n in names]
    return {"name": s.name, "file": str(exp.path), "sha256": exp.sha256, "workload": workload,
            "policies": s.labels(), "seeds": list(s.seeds), "predictors": s.predictors, "memory": s.memory,
            "truth": list(s.truth), "truth_sharing": s.truth_sharing, "arrivals": s.arrivals,
            "profile_on_arrival_s": s.profile_on_arrival_s, "profile_every_type": s.profile_every_type,
            "prediction_error": s.prediction_error, "options": s.options,
            "runs": [{"policy": p, "seed": seed} for p, seed in exp.runs()],
            "outputs": {"dir": str(out), "files": files}}


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("dltsched", "ortools", "highspy", "pyomo", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _bundle(name: str) -> dict[str, Any]:
    """The bundle's name, the class of each part and, where the bundle keeps one (``crossfit``: key, folds,
    recipe and co-location family), its record."""
    from dltsched.engine.app.registry import bundle_fields, predictors

    if name == "exact":
        return {"name": "exact",
                "fit": "the ground truth itself (exact predictions; not a prediction result)"}
    preds = predictors(name)
    out: dict[str, Any] = {"name": name, **{part: f"{type(getattr(preds, part)).__module__}."
                                                  f"{type(getattr(preds, part)).__name__}"
                                            for part in ("step_time", "colocation", "freezing")}}
    if "calibration" in (fields := bundle_fields(name)):
        out["calibration"] = fields["calibration"]
    record = getattr(preds.colocation, "record", None)
    if isinstance(record, dict) and record.get("bundle"):
        out["record"] = record
    return out


def summarize_runs(runs: Sequence[dict[str, Any]], policies: Sequence[str]) -> list[dict[str, Any]]:
    """One row per policy: mean and 95% t-interval half-width of each summary metric over its seeds."""
    from dltsched.engine.app.cli.bench import _ci95

    rows = []
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        row: dict[str, Any] = {"policy": policy, "seeds": len(mine),
                               "num_jobs_finished": min(r["num_jobs_finished"] for r in mine),
                               "truth": mine[0].get("truth", ""),
                               "truth_sources": list(mine[0].get("truth_sources", ()))}
        for m in SUMMARY_METRICS:
            values = [float(r[m]) for r in mine if r[m] is not None]
            row[m] = statistics.fmean(values) if values else math.nan
            row[f"{m}_ci95"] = _ci95(values) if values else math.nan
        rows.append(row)
    return rows


def _write_csv(path: Path, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def run_experiment(exp: LoadedExperiment, out_dir: str | Path | None = None, *,
                   progress: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    """Run every (policy, seed) of ``exp``, write the outputs and return ``results.json``'s content.
    ``progress(label, done)`` is called before (``done=0``) and after (``done=1``) each run."""
    from dltsched.engine.app.cli.simulate import make_truth

    s = exp.spec
    out = exp.out_dir(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    gpu_types: list[str] = []
    truth = make_truth(s.workload.data_dir, exp.truth_dirs(), s.truth_sharing)
    entries = exp.entries()
    for seed in s.seeds:
        inst = load_workload(exp, seed)
        gpu_types = gpu_types or [inst.cluster.gpu_type_of(g) for g in range(inst.cluster.num_gpus)]
        for label in s.labels():
            if progress:
                progress(f"{label} seed {seed}", 0)
            res = _run_one(exp, inst, entries[label], seed, truth)
            runs.append(res.to_dict(records=True, utilization=True) | {"policy": label, "seed": seed})
            if progress:
                progress(f"{label} seed {seed}", 1)
    summary = summarize_runs(runs, s.labels())
    payload = {"experiment": describe(exp, out) | {"spec": s.model_dump(mode="json")},
               "predictors": _bundle(exp.predictor_set()), "versions": _versions(), "gpu_types": gpu_types,
               "truth": truth.record() if hasattr(truth, "record")
               else {"kind": truth.kind, "sources": list(truth.sources),
                                                                         "gpu_types": "all"},
               "summary": summary, "runs": runs}
    if "optimizing" in s.labels() and len(s.labels()) > 1:
        from dltsched.engine.app.ablation import ABLATION_TABLE, paired_changes

        ablation = paired_changes(runs, [label for label in s.labels() if label != "optimizing"])
        payload["ablation"] = ablation
        _write_csv(out / "ablation.csv", ABLATION_TABLE, ablation)
    (out / "results.json").write_text(json.dumps(payload, indent=1, default=_json_value))
    _write_csv(out / "runs.csv", RUN_COLUMNS,
               [r | {"truth_sources": ";".join(r["truth_sources"])} for r in runs])
    if s.outputs.tables:
        _write_csv(out / "summary.csv", ["policy", "seeds", "num_jobs_finished",
                                         *(c for m in SUMMARY_METRICS for c in (m, f"{m}_ci95")), "truth",
                                         "truth_sources"],
                   [r | {"truth_sources": ";".join(r["truth_sources"])} for r in summary])
    if s.outputs.records_csv:
        _write_csv(out / "records.csv", RECORD_COLUMNS,
                   [rec | {"policy": r["policy"], "seed": r["seed"],
                           "queueing_s": rec["first_start_s"] - rec["arrival_s"]}
                    for r in runs for rec in r["records"]])
    payload["files"] = ([str(p) for p in sorted(out.iterdir())]
                        + [str(p) for p in _figures(exp, runs, gpu_types, out)])
    return payload


def _run_one(exp: LoadedExperiment, inst: Any, entry: tuple[str, dict[str, Any], bool], seed: int,
             truth: Any) -> Any:
    """One simulation of ``entry`` (policy, options, type-blind) on ``inst`` with ``truth``: the bundle of the
    experiment (``exact``: the truth itself), its prediction error, then the simulation settings."""
    from dltsched.engine.app.cli.simulate import simulation_setup
    from dltsched.engine.app.registry import make_policy, predictors
    from dltsched.engine.sim.simulator import simulate
    from dltsched.predictors.noise import with_prediction_error

    s = exp.spec
    policy, options, blind = entry
    if s.predictors == "exact":
        from dltsched.engine.sim.exact import exact_predictors

        preds = exact_predictors(truth)
    else:
        preds = predictors(exp.predictor_set(), s.workload.data_dir)
    preds = with_prediction_error(preds, s.prediction_error, seed)
    if blind:
        from dltsched.engine.app.ablation import type_blind

        preds = type_blind(preds, [inst.cluster.gpu_type_of(g) for g in range(inst.cluster.num_gpus)])
    preds, config = simulation_setup(preds, seed=seed, memory=s.memory, profile_s=s.profile_on_arrival_s,
                                     profile_all_types=s.profile_every_type)
    opts = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    return simulate(inst, make_policy(policy, predictors=preds, **opts), truth=truth, config=config)


def _json_value(obj: Any) -> Any:
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _figures(exp: LoadedExperiment, runs: Sequence[dict[str, Any]], gpu_types: Sequence[str],
             out: Path) -> list[Path]:
    from dltsched.engine.app import plots

    if not exp.spec.outputs.figures:
        return []
    figs = plots.experiment_figures(runs, gpu_types=gpu_types, wanted=exp.spec.outputs.figures)
    return plots.save_figures(figs, out, exp.spec.outputs.format)


#: how the summary table shows each metric: (header, scale, decimals); times get the unit of the table
_DISPLAY = {"gpu_util": ("GPU util (%)", 100.0, 1), "makespan_gap": ("makespan gap (%)", 100.0, 1),
            "ftf_mean": ("FTF mean", 1.0, 2), "num_preemptions": ("preemptions", 1.0, 1),
            "decision_time_mean_s": ("decision (ms)", 1000.0, 1)}


def _display(metric: str, unit: str) -> tuple[str, float, int]:
    if metric in _DISPLAY:
        return _DISPLAY[metric]
    label = f"{metric.removesuffix('_s').replace('_', ' ')} ({unit})"
    return label, 1.0 / (60.0 if unit == "min" else 3600.0), 2


def print_summary(summary: Sequence[dict[str, Any]], title: str) -> None:
    """The summary as a rich table: mean ± 95% half-width per metric."""
    from rich.console import Console
    from rich.table import Table

    longest_s = max((row["makespan_s"] for row in summary if math.isfinite(row["makespan_s"])), default=0.0)
    unit = "min" if longest_s < 3 * 3600.0 else "h"
    shown = {m: _display(m, unit) for m in SUMMARY_METRICS}
    table = Table(title=title)
    table.add_column("policy")
    table.add_column("jobs", justify="right")
    for header, _scale, _decimals in shown.values():
        table.add_column(header, justify="right")
    for row in summary:
        cells = []
        for m, (_header, scale, decimals) in shown.items():
            mean, half = row[m], row[f"{m}_ci95"]
            cells.append(f"{mean * scale:.{decimals}f} ± {half * scale:.{decimals}f}" if math.isfinite(mean)
                         else "-")
        table.add_row(row["policy"], str(row["num_jobs_finished"]), *cells)
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    console.print(table)


@click.group("experiment")
def experiment() -> None:
    """Experiments as files: workload, cluster, policies, seeds, options and outputs in one TOML file."""


@experiment.command("show")
@click.argument("exp_file", metavar="EXP.toml", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder (overrides outputs.dir).")
@click.option("--json", "as_json", is_flag=True)
def show(exp_file: str, out_dir: str | None, as_json: bool) -> None:
    """Print what `experiment run` would run (runs, seeds, outputs) without running it."""
    from dltsched.engine.app.cli.main import emit

    info = describe(load_experiment(exp_file), out_dir)

    def human() -> None:
        click.echo(f"experiment {info['name']} ({info['file']}, sha256 {info['sha256'][:12]})")
        click.echo(f"workload: {json.dumps(info['workload'])}")
        click.echo(f"predictors: {info['predictors']}, memory: {info['memory']}, "
                   f"prediction error: {info['prediction_error']}")
        if info["truth"]:
            sharing = info["truth_sharing"] or "sharing as measured"
            click.echo(f"truth: {', '.join(info['truth'])} ({sharing})")
        for policy, opts in info["options"].items():
            click.echo(f"options for {policy}: {json.dumps(opts)}")
        policies = ", ".join(info["policies"])
        click.echo(f"{len(info['runs'])} runs: policies {policies} x seeds {info['seeds']}")
        click.echo(f"outputs in {info['outputs']['dir']}: {', '.join(info['outputs']['files'])}")

    emit(info, as_json, human)


@experiment.command("run")
@click.argument("exp_files", metavar="EXP.toml...", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder (overrides outputs.dir; with several files, one sub-folder per "
                   "experiment name).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary rows and written files as JSON.")
@click.pass_context
def run(ctx: click.Context, exp_files: tuple[str, ...], out_dir: str | None, as_json: bool) -> None:
    """Run every policy and seed of each EXP.toml; write tables, per-job CSV, results.json and figures (and
    ablation.csv: each variant's change against the optimizing policy, seed by seed; with several files and
    -o, OUT/ablation.csv holds every experiment's rows)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from dltsched.engine.app.cli.main import emit

    exps = [load_experiment(f) for f in exp_files]  # every file is checked before anything runs
    quiet = bool((ctx.find_root().obj or {}).get("quiet")) or as_json
    payloads = []
    for exp in exps:
        where = Path(out_dir) / exp.spec.name if out_dir and len(exps) > 1 else out_dir
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), disable=quiet, transient=True) as bar:
            task = bar.add_task(f"experiment {exp.spec.name}", total=len(exp.runs()))

            def step(label: str, done: int, name: str = exp.spec.name, task: Any = task,
                     bar: Any = bar) -> None:
                bar.update(task, advance=done, description=f"experiment {name}: {label}")

            payloads.append(run_experiment(exp, where, progress=step))
    combined = [{"experiment": e.spec.name} | row for e, p in zip(exps, payloads, strict=True)
                for row in p.get("ablation", [])]
    if out_dir and len(exps) > 1 and combined:
        from dltsched.engine.app.ablation import ABLATION_TABLE

        _write_csv(Path(out_dir) / "ablation.csv", ("experiment", *ABLATION_TABLE), combined)

    def human() -> None:
        for exp, payload in zip(exps, payloads, strict=True):
            print_summary(payload["summary"], f"{exp.spec.name}: mean ± 95% interval over seeds "
                          f"{list(exp.spec.seeds)} (predictors: {exp.spec.predictors})")
            if payload.get("ablation"):
                print_ablation(payload["ablation"], f"{exp.spec.name}: change against optimizing, same seed")
            click.echo("\n".join(payload["files"]))

    shown = [{"name": e.spec.name, "summary": p["summary"], "ablation": p.get("ablation"),
              "predictors": p["predictors"], "truth": p["truth"], "files": p["files"]}
             for e, p in zip(exps, payloads, strict=True)]
    emit(shown[0] if len(shown) == 1 else shown, as_json, human)


def print_ablation(rows: Sequence[dict[str, Any]], title: str) -> None:
    """The ablation rows as a rich table: change of average JCT and makespan, mean ± 95% interval."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for header in ("variant", "seeds", "avg JCT change (%)", "makespan change (%)"):
        table.add_column(header, justify="left" if header == "variant" else "right")
    for row in rows:
        cells = [f"{100 * row[m]:+.1f} ± {100 * row[m + '_ci95']:.1f}" if math.isfinite(row[m]) else "-"
                 for m in ("avg_jct_s_change", "makespan_s_change")]
        table.add_row(row["policy"], str(row["seeds"]), *cells)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)


__all__ = ["Experiment", "LoadedExperiment", "describe", "load_experiment", "run_experiment",
           "summarize_runs"]
