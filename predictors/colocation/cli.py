"""Click commands ``colocation``, ``eval-colocation`` and ``train-colocation`` (mounted under ``dltsched predict``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dltsched.engine.cli import emit
from dltsched.engine.errors import ValidationError

_TABLE_HELP = "Co-location table JSON (default: the shipped one) or an E-GGAT .safetensors checkpoint."


def _load_predictor(path: str | None) -> Any:
    from dltsched.predictors.colocation.table import ColocationTable, default_table

    if path is None:
        return default_table()
    if path.endswith(".safetensors"):
        from dltsched.predictors.colocation.train import EggatPredictor

        return EggatPredictor.load(path)
    return ColocationTable.load(path)


@click.command("colocation")
@click.option("--gpu", required=True, help="GPU type (catalog id or alias; 'lucid' for a Lucid-trained model).")
@click.option("--job", "jobs", multiple=True, required=True, help="MODEL:BATCH[:amp], once per co-located job.")
@click.option("--model", "model_path", default=None, help=_TABLE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def colocation(gpu: str, jobs: tuple[str, ...], model_path: str | None, as_json: bool) -> None:
    """Predict each job's speed and step time, and the group's memory and GPU utilisation."""
    from dltsched.predictors.colocation.baselines import as_job, default_step_time
    from dltsched.predictors.colocation.features import Group, resolve_gpu
    from dltsched.predictors.colocation.samples import LUCID_GPU, LUCID_PROXY_GPU, ColocDataset
    from dltsched.predictors.colocation.table import parse_job

    specs = tuple(parse_job(j) for j in jobs)
    gpu_id = resolve_gpu(gpu)
    predictor = _load_predictor(model_path)
    pred = predictor.predict([Group(gpu_id, specs)], ColocDataset((), {}))[0]
    step = default_step_time()
    real_gpu = LUCID_PROXY_GPU if gpu_id == LUCID_GPU else gpu_id
    rows = [{"job": s.label, "speed": round(v, 4),
             "step_time_s": step.step_time_s(as_job(s, i), real_gpu, 1) / v}
            for i, (s, v) in enumerate(zip(specs, pred.speeds, strict=True))]
    payload = {"gpu": gpu_id, "jobs": rows, "memory_mib": pred.memory_mib, "gpu_util": pred.gpu_util,
               "fallbacks": dict(getattr(predictor, "fallbacks", {}))}
    emit(payload, as_json, lambda: _print_prediction(payload))


def _print_prediction(payload: dict[str, Any]) -> None:
    for row in payload["jobs"]:
        click.echo(f"{row['job']:<28} speed {row['speed']:.3f}  step {row['step_time_s'] * 1e3:.1f} ms")
    click.echo(f"group memory {payload['memory_mib']:.0f} MiB, GPU util {payload['gpu_util'] or float('nan'):.1f}%")


@click.command("eval-colocation")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["gavel", "lucid"]), required=True)
@click.option("--gpu", default=None, help="Only the pairs on this GPU (gavel).")
@click.option("--model", "model_path", default=None, help=_TABLE_HELP)
@click.option("--json", "as_json", is_flag=True)
def eval_colocation(file: str, fmt: str, gpu: str | None, model_path: str | None, as_json: bool) -> None:
    """Evaluate a trained predictor against every measured pair of FILE."""
    from dltsched.predictors.colocation.features import resolve_gpu
    from dltsched.predictors.colocation.metrics import evaluate
    from dltsched.predictors.colocation.samples import read_gavel_samples, read_lucid_samples

    data = read_gavel_samples(file) if fmt == "gavel" else read_lucid_samples(file)
    if gpu is not None:
        gpu_id = resolve_gpu(gpu)
        data = data.subset(s for s in data.samples if s.gpu == gpu_id)
        if not len(data):
            raise ValidationError("gpu", f"'{gpu}' has no measured pairs in {file}")
    scores = evaluate(_load_predictor(model_path), data)
    emit(scores, as_json, lambda: click.echo(
        f"n={scores['n']} speed_mape={scores['speed_mape']} memory_mape={scores['memory_mape']} "
        f"util_mape={scores['util_mape']}"))


@click.command("train-colocation")
@click.option("--data", "dataset", type=click.Choice(["gavel", "lucid"]), default="gavel")
@click.option("--data-dir", default=None, help="Shared data folder (default: found automatically).")
@click.option("--out", "out_dir", default=".", type=click.Path(file_okay=False), help="Output folder.")
@click.option("--epochs", type=int, default=None, help="E-GGAT epochs (default: the cross-validation setting).")
@click.option("--seed", default=0, show_default=True)
@click.option("--max-jobs", default=3, show_default=True, help="Largest group the exported table covers.")
@click.option("--cv", "cv_splits", multiple=True, type=click.Choice(["model", "gpu", "random"]),
              help="Also cross-validate E-GGAT, its ensemble with GBT and the baselines on these split kinds (slow).")
@click.option("--json", "as_json", is_flag=True)
def train_colocation(dataset: str, data_dir: str | None, out_dir: str, epochs: int | None, seed: int, max_jobs: int,
                     cv_splits: tuple[str, ...], as_json: bool) -> None:
    """Train E-GGAT and GBT from the data folder; write the E-GGAT checkpoint and the ensemble's table
    (with a record of data, seed and cross-validated figures)."""
    from dltsched.predictors.colocation.experiments import (
        compare,
        cv_eggat,
        predictor_factories,
        read_dataset,
        train_default,
    )

    figures: dict[str, Any] = {}
    if cv_splits:
        data = read_dataset(dataset, data_dir)
        factories = predictor_factories(seed)
        if epochs:
            factories["eggat"] = lambda: cv_eggat(seed, epochs=epochs)
        for kind in cv_splits:
            result = compare(data, kind, list(factories), seed, factories=factories)
            figures[kind] = {name: {k: v for k, v in r.items() if k != "per_fold"} for name, r in result.items()}
    record = train_default(Path(out_dir), data_dir, dataset, epochs, seed, max_jobs, figures)
    emit(record, as_json)
