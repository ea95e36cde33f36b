"""``dltsched predict ...``, ``dltsched profile`` and ``dltsched bench predict``.

The co-location subcommands live in ``engine/app/cli/colocation.py`` and are imported on use.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from dltsched.engine.app.cli.main import LazyGroup, emit
from dltsched.engine.domain.errors import ValidationError, write_text_file

_COLOCATION = {
    "colocation": "dltsched.engine.app.cli.colocation:colocation",
    "eval-colocation": "dltsched.engine.app.cli.colocation:eval_colocation",
    "train-colocation": "dltsched.engine.app.cli.colocation:train_colocation",
}


def _colocation_commands() -> dict[str, str]:
    import importlib.util

    try:
        found = importlib.util.find_spec("dltsched.engine.app.cli.colocation") is not None
    except ImportError:
        found = False
    return _COLOCATION if found else {}


@click.group(cls=LazyGroup, lazy=_colocation_commands())
def predict() -> None:
    """Step-time, freezing and co-location predictions, calibration and evaluation."""


def _job(model: str, batch_size: int, num_gpus: int, amp: bool, dataset: str | None,
         optimizer: str):  # noqa: ANN202
    from dltsched.engine.domain.model import Job

    return Job(id="cli", model=model, batch_size=batch_size, total_iterations=1.0, num_gpus=num_gpus, amp=amp,
               dataset=dataset, optimizer=optimizer)


@predict.command("step-time")
@click.option("--model", required=True, help="Zoo model id or alias (resnet50, ResNet-50, ...).")
@click.option("--gpu", required=True, help="GPU type id or alias (v100, a100, ...).")
@click.option("--batch-size", type=int, required=True, help="Batch size per GPU.")
@click.option("--num-gpus", type=int, default=1, show_default=True)
@click.option("--num-nodes", type=int, default=1, show_default=True)
@click.option("--amp", is_flag=True, help="Mixed precision (FP16 tensor cores).")
@click.option("--freeze", "freeze_level", type=int, default=0, show_default=True,
              help="Frozen leading blocks.")
@click.option("--dataset", default=None, help="Dataset (default: the model's default).")
@click.option("--optimizer", default="sgd", show_default=True)
@click.option("--scope", type=click.Choice(["iteration", "compute", "fwd_bwd"]), default="iteration",
              show_default=True,
              help="What the step covers: with input pipeline, without, forward+backward only.")
@click.option("--measured", "measured_texts", multiple=True, metavar="GPU:BATCH:SECONDS",
              help="A measured step time of this job on some GPU (repeatable): the prediction "
                   "is scaled from it.")
@click.option("--measured-weight", type=click.FloatRange(0.0, 1.0), default=None,
              help="How much of the --measured steps to take (geometric blend with the prediction; 1: all). "
                   "Default: 0.5 (measurements on the asked GPU itself: 1).")
@click.option("--gpu-model", type=click.Choice(["auto", "groups", "kernels"]), default="auto",
              show_default=True,
              help="GPU time from calibrated work groups, or from every kernel of the graph (kernel model); "
                   "auto: groups on GPUs with fitted step times, kernels on the others.")
@click.option("--json", "as_json", is_flag=True)
def step_time(model: str, gpu: str, batch_size: int, num_gpus: int, num_nodes: int, amp: bool,
              freeze_level: int, dataset: str | None, optimizer: str, scope: str,
              measured_texts: tuple[str, ...], measured_weight: float | None, gpu_model: str,
              as_json: bool) -> None:
    """Predicted time of one training iteration and GPU memory of one worker."""
    from dltsched.predictors.steptime import DeletePopStepTime

    job = _job(model, batch_size, num_gpus, amp, dataset, optimizer)
    predictor = DeletePopStepTime(gpu_model=gpu_model)
    out: dict[str,
              float | str] = {**predictor.breakdown(job, gpu, freeze_level=freeze_level, num_nodes=num_nodes,
                                                         check_memory=True, scope=scope).as_dict(),
                                   "calibration": predictor.calibration_basis(gpu)}
    if measured_texts:
        measured = [_parse_measured(t) for t in measured_texts]
        out["transferred_step_time_s"] = predictor.transfer_s(job, gpu, measured, num_nodes=num_nodes,
                                                              scope=scope, weight=measured_weight)
    emit(out, as_json,
         lambda: click.echo("\n".join(f"{k:>12}: {v:.6g}" if isinstance(v, float) else f"{k:>12}: {v}"
                                                    for k, v in out.items())))


def _parse_measured(text: str) -> tuple[str, int, float]:
    """``GPU:BATCH:SECONDS`` -> (gpu, batch, seconds); one clear line otherwise."""
    parts = text.split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        return parts[0], int(parts[1]), float(parts[2])
    except ValueError:
        raise ValidationError("--measured",
                              f"{text!r} not understood; use GPU:BATCH:SECONDS, e.g. v100:64:0.21") from None


#: Gavel scales used for calibration: 1 fits compute and host terms, 2-8 the communication terms
TRAIN_SCALES = (1, 8)


def _measurements(source: str, data_dir: str | None, scales: tuple[int, int] = (1, 1)):  # noqa: ANN202
    """Measurements of ``source``; Gavel rows with ``scales[0] <= #GPUs <= scales[1]``."""
    from dltsched.predictors.steptime import measurements as ms

    if source == "gavel":
        return [m for m in ms.gavel_measurements(data_dir, max_scale=scales[1]) if m.num_gpus >= scales[0]]
    if source == "zeus":
        return ms.zeus_measurements(data_dir)
    if source == "orion":
        return ms.orion_measurements(data_dir)
    return [*_measurements("gavel", data_dir, scales), *ms.zeus_measurements(data_dir),
            *ms.orion_measurements(data_dir)]


@predict.command("eval-steptime")
@click.argument("csv_file", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "source", type=click.Choice(["gavel", "zeus", "orion", "all"]), default=None,
              help="Evaluate on a data-folder source instead of a CSV file (orion: GPU time of V100 steps).")
@click.option("--leave-one-gpu-out", is_flag=True, help="Refit without each GPU before testing on it.")
@click.option("--new-jobs", is_flag=True,
              help="With --leave-one-gpu-out: also one-profile transfer with the job's model out of the fit "
                   "(one refit per held-out GPU and model; slow).")
@click.option("--min-scale", type=int, default=1, show_default=True,
              help="--format gavel: fewest GPUs per job.")
@click.option("--max-scale", type=int, default=1, show_default=True,
              help="--format gavel: most GPUs per job.")
@click.option("--data-dir", default=None,
              help="Shared data folder (default: DLTSCHED_DATA or ../shared/data).")
@click.option("--calibration", type=click.Path(dir_okay=False), default=None,
              help="Price the GPU types this calibration bundle covers with it (dltsched "
                   "calibrate); rows say whether a job's own profile in the bundle (measured) or its models "
                   "(calibrated) priced them.")
@click.option("--json", "as_json", is_flag=True)
def eval_steptime(csv_file: str | None, source: str | None, leave_one_gpu_out: bool, new_jobs: bool,
                  min_scale: int, max_scale: int, data_dir: str | None, calibration: str | None,
                  as_json: bool) -> None:
    """MAPE and p90 APE of step-time predictions against measurements (CSV or --format)."""
    from dltsched.predictors.steptime import DeletePopStepTime
    from dltsched.predictors.steptime import calibrate as cal
    from dltsched.predictors.steptime import measurements as ms

    if (csv_file is None) == (source is None):
        raise ValidationError("eval-steptime", "give either a CSV file or --format gavel|zeus|all")
    if new_jobs and not leave_one_gpu_out:
        raise ValidationError("--new-jobs", "only with --leave-one-gpu-out")
    if calibration and leave_one_gpu_out:
        raise ValidationError("--calibration",
                              "not with --leave-one-gpu-out (a bundle is fitted on its own GPU)")
    test = ms.read_csv(csv_file) if csv_file else _measurements(source or "all", data_dir,
                                                                (min_scale, max_scale))
    if calibration:
        from dltsched.engine.app.registry import calibration_bundle
        from dltsched.predictors.calibration.check import steptime_rows

        bundle = calibration_bundle(calibration)
        out = steptime_rows(bundle, test)
        out["in_sample"] = bool(csv_file) and bundle.fitted_on(csv_file)  # the bundle was fitted on this file
    elif leave_one_gpu_out:
        train = _measurements("all", data_dir, TRAIN_SCALES)
        out = cal.leave_one_gpu_out(train, test, ms.deepbench_kernel_efficiency(data_dir), new_jobs=new_jobs)
        # a fold's factors carry no kernel_step block: every held-out GPU is timed by groups (the default's
        # kernel model on a GPU it has never seen: eval-kernel-step)
        out["gpu_model"] = "groups"
    else:
        predictor = DeletePopStepTime()
        ev = cal.evaluate(predictor, test)
        out = {**ev.summary(),
               "rows": [{**r, "gpu_model": predictor.gpu_model_for(r["gpu"])} for r in ev.rows]}

    def text() -> None:
        click.echo(f"n={out['n']} mape={out['mape']:.1f}% p90_ape={out['p90_ape']:.1f}%")
        if "calibration" in out:
            fresh = "-" if out["calibrated_mape"] is None else f"{out['calibrated_mape']:.1f}%"
            click.echo(f"{out['calibration']}: {out['calibrated_n']} rows priced by its models, mape={fresh}"
                       + ("; fitted on this file: in-sample, not a prediction" if out["in_sample"] else ""))
        for name in ("transfer", "transfer_new_jobs"):
            if name in out:
                _echo_transfer(name, out[name])

    emit(out, as_json, text)


def _echo_transfer(name: str, summary: dict) -> None:
    """One line per rule of a one-profile transfer summary (``transfer.summarize``)."""
    from dltsched.predictors.steptime.transfer import RULES

    for key, v in {"all": summary, **summary["per_source"], **summary["per_held_out_gpu"]}.items():
        rules = " ".join(f"{r}={v[r]:.1f}%" for r in RULES if v.get(r) is not None)
        click.echo(f"{name} {key:>14}: n={v['n']} {rules}")


@predict.command("calibrate-steptime")
@click.option("--data-dir", default=None,
              help="Shared data folder (default: DLTSCHED_DATA or ../shared/data).")
@click.option("--hold-out-gpu", default=None, help="Fit without this GPU's measurements.")
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Where to write the factors (required unless --overwrite-packaged).")
@click.option("--overwrite-packaged", is_flag=True,
              help="Write the package's own factors.json (what the default predictors load) "
                   "instead of --output.")
@click.option("--json", "as_json", is_flag=True)
def calibrate_steptime(data_dir: str | None, hold_out_gpu: str | None, output: str | None,
                       overwrite_packaged: bool, as_json: bool) -> None:
    """Fit the efficiency, host and communication factors on Gavel + Zeus + Orion (+ DeepBench) and write them
    to --output (or, with --overwrite-packaged, over the packaged factors.json)."""
    import json

    from dltsched.predictors.steptime import calibrate as cal
    from dltsched.predictors.steptime import measurements as ms
    from dltsched.predictors.steptime.model import factors_path, gpu_spec_checked, load_factors

    _check_writer(output, overwrite_packaged, "the fitted factors", "factors.json")
    rows = _measurements("all", data_dir, TRAIN_SCALES)
    if hold_out_gpu:
        held = gpu_spec_checked(hold_out_gpu).id
        rows = [m for m in rows if gpu_spec_checked(m.gpu).id != held]
    factors = cal.fit(rows, ms.deepbench_kernel_efficiency(data_dir))
    # the kernel step model's block (what gpu_model="auto" times unfitted GPUs with) is fitted apart
    # (fit-kernel-step); kept from the packaged factors unless a GPU is held out, which it has seen
    packaged = load_factors()
    if not hold_out_gpu and "kernel_step" in packaged:
        factors["kernel_step"] = packaged["kernel_step"]
    path = Path(output) if output else factors_path()
    write_text_file(path, json.dumps(factors, indent=1, allow_nan=False) + "\n", option="--output")
    load_factors.cache_clear()
    out = {"output": str(path), "num_measurements": factors["num_measurements"],
           "fitted_on": factors["fitted_on"],
           "kernel_step": "kept" if "kernel_step" in factors else "none (every GPU timed by groups)"}
    emit(out, as_json)


@predict.command("convert-steptime")
@click.argument("source", type=click.Choice(["gavel", "zeus", "neusight"]))
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--data-dir", default=None)
@click.option("--max-scale", type=int, default=8, show_default=True, help="Gavel: largest #GPUs kept.")
@click.option("--json", "as_json", is_flag=True)
def convert_steptime(source: str, output: str, data_dir: str | None, max_scale: int, as_json: bool) -> None:
    """Write Gavel, Zeus or NeuSight (training labels, scope fwd_bwd) measurements as an eval-steptime CSV."""
    from dltsched.predictors.steptime import measurements as ms

    if source == "neusight":
        from dltsched.predictors.steptime import neusight as ns

        emit({"output": output, "rows": ns.write_labels_csv(ns.read_labels(data_dir, train=True), output)},
             as_json)
        return

    rows = ms.gavel_measurements(data_dir,
                                 max_scale=max_scale) if source == "gavel" else ms.zeus_measurements(
        data_dir)
    out = {"output": output, "rows": ms.write_csv(rows, output)}
    emit(out, as_json)


def _check_writer(output: str | None, overwrite_packaged: bool, what: str, packaged: str) -> None:
    """A fitting command writes --output, or the package's own file only when told so explicitly."""
    if (output is None) == (not overwrite_packaged):
        raise ValidationError("--output", f"give --output FILE for {what}, or --overwrite-packaged to "
                              f"replace the package's {packaged} (not both)")


@predict.command("fit-kernels")
@click.option("--data-dir", default=None,
              help="Shared data folder (default: DLTSCHED_DATA or ../shared/data).")
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Where to write the kernel model (required unless --overwrite-packaged).")
@click.option("--overwrite-packaged", is_flag=True,
              help="Write the package's own kernel_model.json (what the predictors load) instead of "
                   "--output.")
@click.option("--json", "as_json", is_flag=True)
def fit_kernels(data_dir: str | None, output: str | None, overwrite_packaged: bool, as_json: bool) -> None:
    """Fit the per-op-class kernel model on NeuSight's kernel latencies (all five GPUs) and write it to
    --output (or, with --overwrite-packaged, over the packaged kernel_model.json)."""
    import json

    from dltsched.predictors.steptime import kernels as kn

    _check_writer(output, overwrite_packaged, "the kernel model", "kernel_model.json")

    from dltsched.predictors.steptime import neusight as ns

    gpus = kn.neusight_gpus(data_dir)
    samples = kn.neusight_kernels(data_dir)
    model = kn.fit(samples, {g.id: g for g in gpus.values()}, extra=ns.trace_kernel_samples(data_dir))
    path = Path(output) if output else kn.kernel_model_path()
    path.write_text(json.dumps(model.to_json(), separators=(",", ":")) + "\n")
    kn.load_kernel_model.cache_clear()
    emit({"output": str(path), "kernels": len(samples), "fitted_on": list(model.fitted_on)}, as_json)


@predict.command("eval-kernels")
@click.option("--data-dir", default=None,
              help="Shared data folder (default: DLTSCHED_DATA or ../shared/data).")
@click.option("--op-class", "op_classes", multiple=True, help="Only these op classes (repeatable).")
@click.option("--json", "as_json", is_flag=True)
def eval_kernels(data_dir: str | None, op_classes: tuple[str, ...], as_json: bool) -> None:
    """Leave-one-GPU-out on NeuSight's kernels (per op class, beside the plain roofline and one fitted
    efficiency per class) and on NeuSight's iteration labels (sum of predicted op times)."""
    from dltsched.predictors.steptime import kernels as kn
    from dltsched.predictors.steptime import neusight as ns

    unknown = sorted(set(op_classes) - set(kn.OP_CLASSES))
    if unknown:
        raise ValidationError("--op-class", f"{unknown} not understood; one of {', '.join(kn.OP_CLASSES)}")
    gpus = {g.id: g for g in kn.neusight_gpus(data_dir).values()}
    samples = kn.neusight_kernels(data_dir, op_classes or tuple(kn.OP_CLASSES))
    models: dict[str, kn.KernelModel] = {}
    out: dict[str, object] = {"kernels": kn.leave_one_gpu_out(samples, gpus, models,
                                                             extra=ns.trace_kernel_samples(data_dir))}
    if not op_classes:
        out["labels"] = ns.evaluate_labels(ns.read_labels(data_dir), models, gpus)

    def text() -> None:
        for cls, v in out["kernels"].items():  # type: ignore[attr-defined]
            click.echo(f"{cls:>12}: n={v['n']} mape={v['mape']:.1f}% p90={v['p90_ape']:.1f}% "
                       f"roofline={v['roofline_mape']:.1f}% roofline/eff={v['efficiency_mape']:.1f}%")
        for name, v in out.get("labels", {}).items():  # type: ignore[attr-defined]
            if name not in ("rows", "per_gpu"):
                click.echo(f"labels {name:>9}: n={v['n']} mape={v['mape']:.1f}% bodies={v['body_mape']:.1f}% "
                           f"roofline={v['roofline_mape']:.1f}% "
                           f"traced-sum={v['traced_sum_mape']:.1f}%")

    emit(out, as_json, text)


def _kernel_step_rows(data_dir: str | None, files: tuple[str, ...]) -> list:  # noqa: ANN202
    """Gavel (1 GPU), Zeus and NeuSight's training labels, or the rows of ``files``."""
    from dltsched.predictors.steptime import measurements as ms

    if files:
        return [m for f in files for m in ms.read_csv(f)]
    from dltsched.predictors.steptime import neusight as ns

    labels = [ms.Measurement(lb.model, lb.gpu, lb.batch, 1, lb.e2e_s, scope="fwd_bwd", source="neusight",
                             seq_len=lb.seq_len) for lb in ns.read_labels(data_dir, train=True)]
    return ms.gavel_measurements(data_dir) + ms.zeus_measurements(data_dir) + labels


@predict.command("fit-kernel-step")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--data-dir", default=None,
              help="Shared data folder (default: DLTSCHED_DATA or ../shared/data).")
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Where to write the factors with the fitted kernel_step block (required unless "
                   "--overwrite-packaged).")
@click.option("--overwrite-packaged", is_flag=True, help="Add the block to the package's own factors.json.")
@click.option("--json", "as_json", is_flag=True)
def fit_kernel_step(files: tuple[str, ...], data_dir: str | None, output: str | None,
                    overwrite_packaged: bool, as_json: bool) -> None:
    """Fit the kernel step model's host terms (gpu_model='kernels') on Gavel, Zeus and NeuSight's training
    labels, or on eval-steptime CSV FILES, and write the factors with that block."""
    import json

    from dltsched.predictors.steptime.kernel_logo import fit_kernel_step as fit
    from dltsched.predictors.steptime.model import factors_path, load_factors

    _check_writer(output, overwrite_packaged, "the factors", "factors.json")
    params = fit(_kernel_step_rows(data_dir, files))
    factors = dict(load_factors(), kernel_step=params)
    path = Path(output) if output else factors_path()
    write_text_file(path, json.dumps(factors, indent=1) + "\n", option="--output")
    load_factors.cache_clear()
    emit({"output": str(path), "kernel": params["kernel"], "optimizer": params["optimizer"],
          "dispatch_us": params["dispatch_us"], "fixed_s": params["fixed_s"],
          "fitted_on": params["fitted_on"]},
         as_json)


@predict.command("eval-kernel-step")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--data-dir", default=None,
              help="Shared data folder (default: DLTSCHED_DATA or ../shared/data).")
@click.option("--rows", "with_rows", is_flag=True, help="Include every row's prediction in --json output.")
@click.option("--new-jobs", is_flag=True,
              help="Also one-profile transfer with the job's model out of the step-model fit (one fit "
                   "per GPU and model).")
@click.option("--json", "as_json", is_flag=True)
def eval_kernel_step(files: tuple[str, ...], data_dir: str | None, with_rows: bool, new_jobs: bool,
                     as_json: bool) -> None:
    """Leave-one-GPU-out of the kernel step model (gpu_model='kernels') on Gavel, Zeus and NeuSight's training
    labels (or on eval-steptime CSV FILES), beside roofline, constant and per-model mean on the same rows,
    and one-profile transfer. Each held-out GPU's kernels also leave the kernel model's fit."""
    from dltsched.predictors.steptime import kernel_logo as kl

    out = kl.leave_one_gpu_out(_kernel_step_rows(data_dir, files), kl.held_out_kernel_models(data_dir),
                               new_jobs=new_jobs)
    if not with_rows:
        out.pop("rows")

    def text() -> None:
        def pct(x: float | None) -> str:
            return "-" if x is None else f"{x:.1f}%"

        def line(name: str, v: dict) -> None:
            click.echo(f"{name:>16}: n={v['n']} mape={pct(v['mape'])} oracle-scale={pct(v['oracle_mape'])} "
                       f"roofline={pct(v['roofline_mape'])} "
                       f"constant={pct(v['constant_mape'])} per-model-mean={pct(v['per_model_mean_mape'])}")

        line("all", out["all"])
        for name, v in out["per_source"].items():
            line(name, v)
        for name, v in out["per_gpu"].items():
            line(f"held out {name}", v)
        for name in ("transfer", "transfer_new_jobs"):
            if name in out:
                _echo_transfer(name, out[name])

    emit(out, as_json, text)


@predict.command("freeze-table")
@click.option("--model", required=True)
@click.option("--gpu", required=True)
@click.option("--batch-size", type=int, required=True)
@click.option("--dataset", default=None)
@click.option("--start-progress", type=float, default=0.0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def freeze_table(model: str, gpu: str, batch_size: int, dataset: str | None, start_progress: float,
                 as_json: bool) -> None:
    """Per freeze level: step time, memory, frozen penalty and effective progress."""
    from dataclasses import asdict

    from dltsched.predictors.freezing import IceFrogFreezing

    rows = [asdict(r)
            for r in IceFrogFreezing().freeze_table(_job(model, batch_size, 1, False, dataset, "sgd"),
                                                               gpu, start_progress)]
    emit({"rows": rows}, as_json,
         lambda: click.echo("\n".join("  ".join(f"{k}={v:.4g}" for k, v in r.items()) for r in rows)))


@predict.command("build-graphs")
@click.option("--model", "models", multiple=True, help="Only these models (default: all).")
@click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--overwrite-packaged", is_flag=True,
              help="Required: the graphs are package data and are rewritten.")
@click.option("--json", "as_json", is_flag=True)
def build_graphs(models: tuple[str, ...], workers: int, overwrite_packaged: bool, as_json: bool) -> None:
    """Re-extract the zoo's operator graphs with torch.export (meta device) and rewrite the packaged JSON
    files (needs --overwrite-packaged)."""
    if not overwrite_packaged:
        raise ValidationError("--overwrite-packaged", "build-graphs rewrites the package's graph files; add "
                              "--overwrite-packaged to do so")
    from dltsched.engine.domain.catalog import model_catalog
    from dltsched.predictors.zoo.extract import build_all_graphs

    ids = tuple(model_catalog().resolve(m) for m in models)
    emit({"written": build_all_graphs(ids, workers)}, as_json)


def time_predictions(pairs: int = 10_000) -> dict[str, float]:
    """Time ``pairs`` (job, GPU) step-time predictions from the cached graphs: cycling over the zoo's
    (job, GPU) pairs as a scheduler's rounds do (``seconds``), and as many distinct pairs
    (``distinct_seconds``: a new batch size each, so no remembered prediction is reused)."""
    from dataclasses import replace

    from dltsched.engine.domain.model import Job
    from dltsched.predictors.steptime import DeletePopStepTime
    from dltsched.predictors.zoo import zoo_models

    predictor = DeletePopStepTime()
    gpus = ("k80", "p100", "v100", "t4", "a100-40gb", "h100")
    jobs = [Job(id=m, model=m, batch_size=8 + 8 * i, total_iterations=1.0)
            for i, m in enumerate(zoo_models())]
    work = [(jobs[i % len(jobs)], gpus[i % len(gpus)]) for i in range(pairs)]
    for job, gpu in work[: len(jobs) * len(gpus)]:
        predictor.step_time_s(job, gpu)  # warm the graph caches
    start = time.perf_counter()
    for job, gpu in work:
        predictor.step_time_s(job, gpu)
    elapsed = time.perf_counter() - start
    # distinct pairs (every batch size new): no remembered prediction helps
    distinct = [(replace(jobs[i % len(jobs)], batch_size=100_000 + i), gpus[i % len(gpus)])
                for i in range(pairs)]
    start = time.perf_counter()
    for job, gpu in distinct:
        predictor.step_time_s(job, gpu)
    distinct_s = time.perf_counter() - start
    from dltsched.predictors.colocation.profile_train import time_profile_colocation

    out = ({"pairs": pairs, "seconds": elapsed, "pairs_per_s": pairs / elapsed,
            "distinct_seconds": distinct_s}
           | time_colocation(pairs)
           | time_profile_colocation(pairs))
    # the engine's co-location path (the profile model; with the E-GGAT in numpy, bundle default+eggat)
    # against the table lookups of the same run
    for path in ("profile", "profile_eggat"):
        out[f"{path}_per_call_over_table"] = out[f"{path}_per_call_seconds"] / out["colocation_seconds"]
    return out


def time_colocation(groups: int = 10_000) -> dict[str, float]:
    """Time ``groups`` co-location predictions (each job's speed and the group's memory) from the older
    shipped ensemble table (:func:`~dltsched.predictors.colocation.default_table`), cycling over its 2-job
    entries."""
    from dltsched.engine.domain.model import Job
    from dltsched.predictors.colocation import default_table

    table = default_table()
    work = []
    for key in sorted(table.entries):
        gpu, *members = key.split("|")
        if len(members) == 2:
            jobs = [Job(id=f"{m}-{i}", model=m.split(":")[0], batch_size=int(m.split(":")[1]),
                        total_iterations=1.0, amp=m.endswith(":amp")) for i, m in enumerate(members)]
            work.append((jobs, gpu))
    if not work:
        raise ValueError("the shipped co-location table has no 2-job entries to time")
    start = time.perf_counter()
    for i in range(groups):
        jobs, gpu = work[i % len(work)]
        table.colocated_speeds(jobs, gpu)
        table.group_memory_mib(jobs, gpu)
    elapsed = time.perf_counter() - start
    return {"colocation_groups": groups, "colocation_seconds": elapsed,
            "colocation_groups_per_s": groups / elapsed}


@click.command("predict")
@click.option("--pairs", type=int, default=10_000, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def bench_predict(pairs: int, as_json: bool) -> None:
    """Time step-time predictions of (job, GPU) pairs from the cached graphs, and as many co-located
    groups' predictions from the shipped co-location table."""
    out = time_predictions(pairs)
    emit(out, as_json, lambda: click.echo(
        f"{out['pairs']} step-time predictions in {out['seconds']:.3f} s ({out['pairs_per_s']:.0f} pairs/s; "
        f"{out['distinct_seconds']:.3f} s for as many distinct pairs); "
        f"{out['colocation_groups']} co-location predictions in {out['colocation_seconds']:.3f} "
        "s; profile model: "
        f"{out['profile_batch_seconds']:.3f} s in one batch, {out['profile_per_call_seconds']:.3f} s "
        "one call a group "
        f"({out['profile_per_call_over_table']:.1f}x the table; with the E-GGAT "
        f"{out['profile_eggat_per_call_seconds']:.3f} s, {out['profile_eggat_per_call_over_table']:.1f}x)"))


@click.command("profile")
@click.option("--model", "models", multiple=True,
              help="Zoo models profiled alone at --batch-size and sampled into groups by --colocate (ignored "
                   "with --groups; default resnet18 when neither --job nor --groups is given).")
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--steps", type=click.IntRange(1, None), default=20, show_default=True,
              help="Fewest timed steps (steady window) per job; the window then runs on until --precision.")
@click.option("--precision", type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True), default=0.02,
              show_default=True, help="Time each job until its median step time is within this relative "
                                      "half-width at 95% (0.02: +-2%), or --max-window seconds.")
@click.option("--max-window", "max_window_s", type=click.FloatRange(0.1, None), default=30.0,
              show_default=True,
              help="Most seconds one job's timed window may take (the time cap of --precision).")
@click.option("--warmup", type=int, default=5, show_default=True,
              help="Untimed steps before the start barrier.")
@click.option("--colocate", type=click.IntRange(2, 3), default=None,
              help="Co-locate 2 or 3 jobs per GPU; groups sampled from --model unless --groups is given.")
@click.option("--groups", "group_texts", multiple=True,
              help="A co-located group, e.g. resnet18:64+lstm_lm:20 (repeatable; 2 or 3 jobs each).")
@click.option("--job", "job_texts", multiple=True,
              help="An isolated job as model:batch_size, e.g. resnet50:64 (repeatable; with --out, "
                   "beside --model at --batch-size).")
@click.option("--num-groups", type=int, default=6, show_default=True, help="Groups sampled by --colocate.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--sharing", type=click.Choice(["timeslice", "mps"]), default="timeslice", show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Dataset folder (step-time CSV, Lucid-format co-location CSVs, MEASUREMENT.md).")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True,
              help="Seconds to wait for a group's workers.")
@click.option("--budget", "budget_s", type=click.FloatRange(min=1.0), default=None,
              help="Seconds of measuring after which no new measurement starts (what was measured is kept).")
@click.option("--smoke", is_flag=True,
              help="Tiny CPU run (batch 2, 3 steps, 1 warm-up) to check the harness.")
@click.option("--plan", "plan_only", is_flag=True,
              help="Print the jobs and groups that would teach calibration most within --budget "
                   "seconds (from the zoo, or from --job/--groups/--model when given) and run "
                   "nothing; no GPU needed.")
@click.option("--gpu", "plan_gpu", default="h200", show_default=True,
              help="--plan: the GPU type to plan for (its memory bounds the groups; its speed the "
                   "time estimates).")
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Without --out: CSV in eval-steptime format of in-process isolated runs.")
@click.option("--json", "as_json", is_flag=True)
def profile(models: tuple[str, ...], batch_size: int, steps: int, precision: float, max_window_s: float,
            warmup: int, colocate: int | None, group_texts: tuple[str, ...], job_texts: tuple[str, ...],
            num_groups: int, seed: int, sharing: str, out_dir: str | None, timeout_s: float,
            budget_s: float | None, smoke: bool, plan_only: bool, plan_gpu: str, output: str | None,
            as_json: bool) -> None:
    """Run real training steps of zoo models alone or co-located (CUDA GPU; CPU with --smoke)."""
    if plan_only:
        from dltsched.predictors.calibration.plan import plan_profile, plan_text

        plan = plan_profile(plan_gpu, budget_s or 600.0, models=models, jobs=job_texts, groups=group_texts,
                            sharing=sharing, steps=steps, max_window_s=max_window_s)
        emit(plan, as_json, lambda: click.echo(plan_text(plan)))
        return
    models = models or (() if job_texts or group_texts else ("resnet18",))
    if out_dir is None and (colocate or group_texts or job_texts):
        raise ValidationError("profile", "--colocate/--groups/--job need --out DIR for the dataset")
    if out_dir is None:
        from dltsched.predictors.profiling.harness import profile_models

        rows = profile_models(models, batch_size=2 if smoke else batch_size, steps=2 if smoke else steps,
                              require_gpu=not smoke, output=output)
        emit({"rows": rows}, as_json, lambda: _print_profiles(rows, output))
        return
    out = _profile_dataset(models, batch_size, steps, warmup, colocate, group_texts, job_texts, num_groups,
                           seed, sharing, out_dir, timeout_s, budget_s, smoke, precision, max_window_s)
    emit(out, as_json, lambda: click.echo(
        f"{len(out['isolated'])} isolated, {len(out['groups'])} groups -> {out['out']}: "
        f"{', '.join(out['files'])}"
        + "".join(f"\nfailed {f['group']}: {f['error']}" for f in out["failed"])
        + (f"\nstopped early: {out['stopped']}" if out["stopped"] else "")))


def _print_profiles(rows: list[dict[str, Any]], output: str | None) -> None:
    """Isolated profiles for people: one row per model with its step time and peak memory."""
    from rich import box
    from rich.table import Table

    from dltsched.engine.app.cli.output import console, print_fitted

    def number(value: Any, fmt: str) -> str:
        return "-" if value is None else fmt.format(value)

    print_fitted(console(), lambda: Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                                          header_style="bold"),
                 ("model", "dataset", "device", "batch", "GPUs", "step time (ms)", "peak memory (MiB)",
                  "optimizer", "amp"),
                 [[str(r["model"]), str(r.get("dataset") or "-"), str(r["gpu"]), str(r["batch_size"]),
                   str(r["num_gpus"]), number(r["step_time_s"] and r["step_time_s"] * 1000, "{:.1f}"),
                   number(r.get("peak_memory_mib"), "{:,.0f}"), str(r.get("optimizer", "")),
                   "yes" if r.get("amp") else "no"] for r in rows],
                 priority=(0, 5, 2, 3, 6, 1, 4, 7, 8), right=(3, 4, 5, 6))
    if output:
        click.echo(f"wrote {len(rows)} row{'s' if len(rows) != 1 else ''} to {output}")


def _profile_dataset(models: tuple[str, ...], batch_size: int, steps: int, warmup: int, colocate: int | None,
                     group_texts: tuple[str, ...], job_texts: tuple[str, ...], num_groups: int, seed: int,
                     sharing: str, out_dir: str, timeout_s: float, budget_s: float | None, smoke: bool,
                     precision: float | None = 0.02, max_window_s: float = 30.0) -> dict:
    """``profile --out``: isolated runs of --model and --job, then the given or sampled groups
    (session.run_profile)."""
    from dataclasses import replace

    from dltsched.predictors.profiling.colocate import ProfiledJob, parse_group
    from dltsched.predictors.profiling.session import run_profile, sample_groups

    bs = 2 if smoke else batch_size
    explicit = tuple(replace(j, batch_size=2) if smoke else j for text in job_texts
                     for j in parse_group(text))
    jobs = tuple(ProfiledJob(m, bs) for m in models) + explicit
    groups = [parse_group(t) for t in group_texts] or (sample_groups(jobs, colocate, num_groups, seed)
                                                      if colocate else [])
    if smoke:
        groups = [tuple(replace(j, batch_size=2) for j in g) for g in groups]
        steps, warmup = min(steps, 3), min(warmup, 1)
    from dltsched.engine.domain.catalog import UnknownNameError, model_catalog

    for job in (*jobs, *(j for g in groups for j in g)):
        try:
            model_catalog().get(job.model)
        except UnknownNameError as err:
            raise ValidationError("model", f"{err}; give a zoo model id") from None
    bad = [g for g in groups if len(g) not in (2, 3) or (colocate and len(g) != colocate)]
    if bad:
        raise ValidationError("groups", f"{'+'.join(j.label for j in bad[0])} has {len(bad[0])} jobs; "
                                        f"must be {colocate or '2 or 3'}")
    isolated = jobs if not group_texts else explicit
    from dltsched.predictors.profiling.session import typed_command

    argv = (click.get_current_context().find_root().obj or {}).get("argv")
    return run_profile(isolated, groups, out_dir=out_dir, sharing=sharing, steps=steps, warmup=warmup,
                       smoke=smoke, timeout_s=timeout_s, budget_s=budget_s,
                       precision=None if smoke else precision, max_window_s=max_window_s,
                       command=typed_command(argv) if argv is not None else None)
