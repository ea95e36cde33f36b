"""Click commands ``colocation``, ``eval-colocation`` and ``train-colocation`` (mounted under ``dltsched
predict``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dltsched.engine.app.cli.main import emit
from dltsched.engine.domain.errors import ValidationError

_TABLE_HELP = ("A profile model's table_profile_*.json (default: the shipped one, the engine's co-location "
               "predictor), an ensemble co-location table JSON, or an E-GGAT .safetensors checkpoint.")
_EGGAT_HELP = ("--eggat: the profile model with the E-GGAT its file names blended into its "
               "speeds (the shipped one: the Gavel-trained network, run in numpy, at weight 1/2); "
               "--no-eggat: without it. Default: the shipped model without it (the engine's default), a "
               "--model file as written.")


def _load_predictor(path: str | None, eggat: bool | None = None) -> Any:
    predictor = _read_predictor(path, bool(eggat))
    if eggat is not None and not hasattr(predictor, "without_eggat"):
        raise ValidationError("eggat", f"'{path}' is not a profile model; --eggat/--no-eggat apply to "
                                       "table_profile_*.json files")
    if eggat is False:
        predictor = predictor.without_eggat()
    elif eggat and predictor.eggat is None:
        raise ValidationError("eggat",
                              f"'{path}' names no E-GGAT; train one with train-colocation --eggat-weight")
    return predictor


def _read_predictor(path: str | None, eggat: bool = False) -> Any:
    import json

    from dltsched.predictors.colocation import default_colocation_predictor
    from dltsched.predictors.colocation.profiled import FORMAT, FORMAT_1, ProfileColocation
    from dltsched.predictors.colocation.table import ColocationTable

    if path is None:
        return default_colocation_predictor(eggat=eggat)
    if path.endswith(".safetensors"):  # an E-GGAT checkpoint, run in numpy (no torch)
        from dltsched.predictors.colocation.egat_numpy import NumpyEggat

        return NumpyEggat.load(path)
    try:
        from dltsched.engine.domain.limits import read_limited

        raw = json.loads(read_limited(path, "model"))
    except (OSError, ValueError) as err:
        raise ValidationError("model", f"'{path}' not readable as JSON ({err})") from None
    if isinstance(raw, dict) and raw.get("format") in (FORMAT, FORMAT_1):
        return ProfileColocation.from_json(raw, Path(path).parent)
    return ColocationTable.from_json(raw)


@click.command("colocation")
@click.option("--gpu", required=True,
              help="GPU type (catalog id or alias; 'lucid' for a Lucid-trained model).")
@click.option("--job", "jobs", multiple=True, required=True,
              help="MODEL:BATCH[:amp], once per co-located job.")
@click.option("--model", "model_path", default=None, help=_TABLE_HELP)
@click.option("--eggat/--no-eggat", "eggat", default=None, help=_EGGAT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def colocation(gpu: str, jobs: tuple[str, ...], model_path: str | None, eggat: bool | None,
               as_json: bool) -> None:
    """Predict each job's speed and step time, and the group's memory and GPU utilisation."""
    from dltsched.predictors.colocation.baselines import as_job, default_step_time
    from dltsched.predictors.colocation.features import Group, resolve_gpu
    from dltsched.predictors.colocation.samples import LUCID_GPU, LUCID_PROXY_GPU, ColocDataset
    from dltsched.predictors.colocation.table import parse_job

    specs = tuple(parse_job(j) for j in jobs)
    gpu_id = resolve_gpu(gpu)
    predictor = _load_predictor(model_path, eggat)
    profiles = getattr(predictor, "profiles", {})  # a profile model predicts from the profiles it carries
    pred = predictor.predict([Group(gpu_id, specs)], ColocDataset((), profiles))[0]
    step = default_step_time()
    real_gpu = LUCID_PROXY_GPU if gpu_id == LUCID_GPU else gpu_id
    rows = [{"job": s.label, "speed": round(v, 4),
             "step_time_s": step.step_time_s(as_job(s, i), real_gpu, 1) / v}
            for i, (s, v) in enumerate(zip(specs, pred.speeds, strict=True))]
    if hasattr(predictor, "estimate_groups"):  # the profile model: where each job's profile came from
        sources = predictor.estimate_groups([Group(gpu_id, specs)])[0].sources
        for row, source in zip(rows, sources, strict=True):
            row["profile"] = source
    payload = {"gpu": gpu_id, "jobs": rows, "memory_mib": pred.memory_mib, "gpu_util": pred.gpu_util,
               "fallbacks": dict(getattr(predictor, "fallbacks", {}))}
    emit(payload, as_json, lambda: _print_prediction(payload))


def _print_prediction(payload: dict[str, Any]) -> None:
    for row in payload["jobs"]:
        source = f"  profile {row['profile']}" if "profile" in row else ""
        click.echo(f"{row['job']:<28} speed {row['speed']:.3f}  step "
                   f"{row['step_time_s'] * 1e3:.1f} ms{source}")
    click.echo(f"group memory {payload['memory_mib']:.0f} MiB, GPU util "
               f"{payload['gpu_util'] or float('nan'):.1f}%")


@click.command("eval-colocation")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["gavel", "lucid"]), required=True,
              help="gavel: Gavel's throughputs JSON; lucid: Lucid's layout (colocate_info.csv, "
                   "or the profiling harness's colocate3_info.csv; single_data.csv beside it; a gpu "
                   "column keys the GPU).")
@click.option("--gpu", default=None, help="Only the groups on this GPU.")
@click.option("--model", "model_path", default=None, help=_TABLE_HELP)
@click.option("--rules", is_flag=True,
              help="Also score the naive rules on the same rows: util_share (speed min(1, 100 / "
                   "sum of isolated util), memory = sum of isolated memory, util min(100, sum)), and the "
                   "constant and per-model-mean rules fitted on the Gavel pairs the shipped model is trained "
                   "on (needs the shared data folder).")
@click.option("--data-dir", default=None,
              help="Shared data folder for --rules (default: found automatically).")
@click.option("--eggat/--no-eggat", "eggat", default=None, help=_EGGAT_HELP)
@click.option("--calibration", type=click.Path(dir_okay=False), default=None,
              help="Price the groups on GPU types this calibration bundle covers with it "
                   "(dltsched calibrate), each under its own sharing mode; the others with the model.")
@click.option("--json", "as_json", is_flag=True)
def eval_colocation(file: str, fmt: str, gpu: str | None, model_path: str | None, rules: bool,
                    data_dir: str | None, eggat: bool | None, calibration: str | None, as_json: bool) -> None:
    """Evaluate a trained predictor against every measured group of FILE (pairs or triples)."""
    from dltsched.predictors.colocation.features import group_of, resolve_gpu
    from dltsched.predictors.colocation.metrics import evaluate
    from dltsched.predictors.colocation.samples import read_gavel_samples, read_lucid_samples

    data = read_gavel_samples(file) if fmt == "gavel" else read_lucid_samples(file)
    if gpu is not None:
        gpu_id = resolve_gpu(gpu)
        data = data.subset(s for s in data.samples if s.gpu == gpu_id)
        if not len(data):
            raise ValidationError("gpu", f"'{gpu}' has no measured groups in {file}")
    predictor = _load_predictor(model_path, eggat)
    if calibration:
        from dltsched.engine.app.registry import calibration_bundle
        from dltsched.predictors.calibration.check import CalibratedGroupPredictor

        bundle = calibration_bundle(calibration)
        predictor = CalibratedGroupPredictor(bundle, predictor,
                                             {(s.gpu, s.jobs): s.sharing for s in data.samples})
    preds = predictor.predict([group_of(s) for s in data.samples], data)
    scores = evaluate(_Predicted(preds), data)  # scored on the predictions made once, as the rows below
    if calibration:
        scores["calibration"] = bundle.label
        scores["in_sample"] = bundle.fitted_on(file)  # fitted on these groups: not predictions
    scores["fallbacks"] = dict(getattr(predictor, "fallbacks", {}))
    scores["gpus"] = list(data.gpus())
    scores["group_sizes"] = sorted({len(s.jobs) for s in data.samples})
    # time-slicing and MPS are different regimes
    scores["sharing"] = sorted({s.sharing for s in data.samples})
    trained_on = getattr(predictor, "record", {}).get("data")
    if trained_on is not None:
        scores["trained_on"] = trained_on  # the same data: in-sample figures, not predictions
    if rules:
        scores["rules"] = _rule_scores(data, data_dir)
    held_out = None if trained_on is None else trained_on != fmt  # trained on another source: out of sample
    scores["rows"] = accuracy_rows(data.samples, preds, held_out)
    emit(scores, as_json, lambda: _print_scores(scores))


class _Predicted:
    """Predictions already made, served to :func:`~dltsched.predictors.colocation.metrics.evaluate`."""

    def __init__(self, preds: list[Any]) -> None:
        self.preds = preds

    def predict(self, groups: Any, data: Any) -> list[Any]:
        return self.preds


def accuracy_rows(samples: Any, preds: Any, held_out: bool | None) -> list[dict[str, Any]]:
    """One row per predicted number: each job's speed, and each group's memory and GPU utilisation, with
    ``predicted``, ``measured``, ``quantity``, ``gpu``, ``model`` (the job's, or ``+``-joined for the group),
    ``group`` and ``held_out`` (``None``: no claim). ``dltsched plot`` draws them."""
    rows: list[dict[str, Any]] = []
    for sample, pred in zip(samples, preds, strict=True):
        group = "+".join(j.label for j in sample.jobs)
        base = {"gpu": sample.gpu, "group": group, "held_out": held_out}
        for job, predicted, measured in zip(sample.jobs, pred.speeds, sample.speeds, strict=True):
            rows.append({"quantity": "speed", "model": job.model, "predicted": predicted,
                         "measured": measured} | base)
        models = "+".join(sorted({j.model for j in sample.jobs}))
        for quantity, predicted, measured in (("memory_mib", pred.memory_mib, sample.memory_mib),
                                              ("gpu_util", pred.gpu_util, sample.gpu_util)):
            if predicted is not None and measured is not None:
                rows.append({"quantity": quantity, "model": models, "predicted": predicted,
                             "measured": measured}
                            | base)
    return rows


def _rule_scores(data: Any, data_dir: str | None) -> dict[str, Any]:
    """The naive rules' scores on ``data`` (see ``--rules``); the fitted ones on Gavel's pairs."""
    from dltsched.predictors.colocation.baselines import ConstantBaseline, PerModelMeanBaseline, UtilShareRule
    from dltsched.predictors.colocation.metrics import evaluate
    from dltsched.predictors.colocation.samples import read_gavel_samples, without_absent

    out: dict[str, Any] = {"util_share": evaluate(UtilShareRule(), data)}
    try:
        gavel = without_absent(read_gavel_samples(data_dir=data_dir))
    except (OSError, ValidationError) as err:
        out["fitted_rules"] = f"not scored: Gavel's pairs not found ({err})"
        return out
    for name, rule in (("constant", ConstantBaseline()), ("per_model_mean", PerModelMeanBaseline())):
        out[name] = evaluate(rule.fit(gavel), data)
    return out


def _print_scores(scores: dict[str, Any]) -> None:
    def line(name: str, s: dict[str, Any]) -> str:
        def pct(v: float | None) -> str:
            return f"{v:.2f}%" if v is not None else "-"

        return (f"{name:<16} n={s['n']} speed {pct(s['speed_mape'])}  memory {pct(s['memory_mape'])}  "
                f"util {pct(s['util_mape'])}")

    click.echo(line("predictor", scores))
    if "calibration" in scores:
        click.echo(f"calibration {scores['calibration']}"
                   + (": fitted on these groups (in-sample, not a prediction)" if scores["in_sample"]
                      else ""))
    for name, s in scores.get("rules", {}).items():
        click.echo(line(name, s) if isinstance(s, dict) else f"{name}: {s}")
    if scores["fallbacks"]:
        click.echo(f"fallbacks: {scores['fallbacks']}")


@click.command("train-colocation")
@click.option("--data", "dataset", type=click.Choice(["gavel", "lucid"]), default="gavel")
@click.option("--predictor", "kind", type=click.Choice(["profile", "ensemble"]), default="profile",
              show_default=True,
              help="profile: physics base + trees over isolated profiles (table_profile_<data>.json); "
                   "ensemble: E-GGAT + GBT tabulated (needs torch).")
@click.option("--data-dir", default=None, help="Shared data folder (default: found automatically).")
@click.option("--out", "out_dir", default=".", type=click.Path(file_okay=False), help="Output folder.")
@click.option("--epochs", type=int, default=None,
              help="E-GGAT epochs (default: the cross-validation setting).")
@click.option("--seed", default=0, show_default=True)
@click.option("--max-jobs", default=3, show_default=True, help="Largest group the exported table covers.")
@click.option("--cv", "cv_splits", multiple=True, type=click.Choice(["model", "gpu", "random"]),
              help="Also cross-validate E-GGAT, its ensemble with GBT and the baselines on these "
                   "split kinds (slow).")
@click.option("--eggat-weight", default="off", show_default=True,
              help="profile: also fit the E-GGAT (needs torch), write eggat_<data>.safetensors "
                   "beside the table and blend its log speed in at this weight (0..1), or 'inner' (chosen by "
                   "leave-one-model-out inside the training data); with --cv, the E-GGAT alone and the blend "
                   "are scored on the same folds.")
@click.option("--json", "as_json", is_flag=True)
def train_colocation(dataset: str, kind: str, data_dir: str | None, out_dir: str, epochs: int | None,
                     seed: int, max_jobs: int, cv_splits: tuple[str, ...], eggat_weight: str,
                     as_json: bool) -> None:
    """Train a co-location predictor from the data folder and write it into OUT with a record of data, seed
    and cross-validated figures (--cv: the predictor beside the rules on the same folds)."""
    from dltsched.predictors.colocation.experiments import (
        compare,
        cv_eggat,
        predictor_factories,
        read_dataset,
        train_default,
    )
    from dltsched.predictors.colocation.profile_train import train_profile_table

    weight = _eggat_weight(eggat_weight, kind)
    figures: dict[str, Any] = {}
    if cv_splits:
        data = read_dataset(dataset, data_dir)
        factories = predictor_factories(seed)
        if epochs:
            factories["eggat"] = lambda: cv_eggat(seed, epochs=epochs)
        if kind == "profile":
            names = ["shipped_table", "constant", "per_model_mean", "util_share", "gbt", "profile_base",
                     "profile"]
            if weight != "off":
                from dltsched.predictors.colocation.train import EggatConfig, ProfileWithEggat

                config = EggatConfig(seed=seed, **({"epochs": epochs} if epochs else {}))
                factories["profile+eggat"] = lambda: ProfileWithEggat(weight,
                                                                      config)  # type: ignore[arg-type]
                names += ["eggat", "profile+eggat"]
            factories = {n: factories[n] for n in names}
        for split in cv_splits:
            result = compare(data, split, list(factories), seed, factories=factories)
            figures[split] = result
    if kind == "profile":
        record = train_profile_table(Path(out_dir), dataset, data_dir, seed, figures, weight)
    else:
        record = train_default(Path(out_dir), data_dir, dataset, epochs, seed, max_jobs, figures)
    emit(record, as_json)


def _eggat_weight(text: str, kind: str) -> float | None | str:
    """``--eggat-weight``: ``"off"``, ``None`` (``inner``) or a weight in [0, 1]."""
    if text == "off":
        return "off"
    if kind != "profile":
        raise ValidationError("eggat-weight", "applies to --predictor profile only")
    if text == "inner":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise ValidationError("eggat-weight",
                              f"'{text}' not understood; a weight in [0, 1], 'inner' or 'off'")
    return value
