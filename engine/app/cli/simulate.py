"""``dltsched simulate``: run policies over an instance file or a real workload and compare them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from dltsched.engine.app import vocabulary
from dltsched.engine.app.cli.main import FiniteFloat, emit
from dltsched.engine.app.cli.output import write_output
from dltsched.engine.app.registry import (
    BASELINE_POLICIES,
    PAPER_POLICIES,
    bundle_fields,
    check_predictors,
    make_policy,
    predictors,
    with_calibration,
)
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Instance
from dltsched.engine.sim.metrics import SimulationResult
from dltsched.engine.sim.simulator import SimulationConfig
from dltsched.engine.sim.simulator import simulate as run_simulation
from dltsched.engine.sim.truth import MeasuredTruth

#: largest seed the command line takes (numpy's generators take seeds below 2**32 everywhere)
MAX_SEED = 2**32 - 1
#: most jobs taken from a workload
MAX_JOBS = 1_000_000

#: columns of the comparison table: (result field, header, format)
TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("policy", "policy", "{}"),
    ("num_jobs_finished", "jobs", "{}"),
    ("avg_jct_s", "avg JCT (h)", "h"),
    ("median_jct_s", "median JCT (h)", "h"),
    ("p99_jct_s", "p99 JCT (h)", "h"),
    ("makespan_s", "makespan (h)", "h"),
    ("avg_queueing_s", "avg queue (h)", "h"),
    ("gpu_util", "GPU util", "{:.1%}"),
    ("ftf_mean", "FTF mean", "{:.2f}"),
    ("num_preemptions", "preempt.", "{}"),
    ("num_oom", "OOM", "{}"),
    ("decision_time_mean_s", "decision (ms)", "ms"),
)


def load_instance_or_workload(instance: str | None, workload: str | None, *, data_dir: str | None,
                              cluster: str | None, jobs: int | None, seed: int, gpus: int | None = None,
                              gpu_types: str = "v100,p100,k80", start_s: float | None = None) -> Instance:
    """The instance named by ``--instance FILE`` or ``--workload NAME`` (exactly one of them).

    A workload's cluster is ``cluster`` (a spec such as ``v100:8x8,p100:4x8``), or ``gpus`` GPUs of
    ``gpu_types`` in 8-GPU nodes, or the reader's default."""
    if (instance is None) == (workload is None):
        raise ValidationError("--instance/--workload", "give exactly one of them")
    if instance is not None:
        given = [flag for flag, value in (("--cluster", cluster), ("--jobs", jobs), ("--gpus", gpus),
                                          ("--start-s", start_s)) if value is not None]
        if given:
            raise ValidationError(given[0],
                                  f"applies to --workload only; an --instance file brings its own cluster "
                                  f"and jobs (drop {' and '.join(given)}, or edit the file)")
        from dltsched.instances.schema import load_instance

        return load_instance(Path(instance))
    from dltsched.instances.readers import read_workload

    assert workload is not None
    where: Any = cluster
    if gpus is not None:
        if cluster is not None:
            raise ValidationError("--gpus", "give --gpus or --cluster, not both")
        from dltsched.instances.clusters import mixed_cluster

        where = mixed_cluster(gpus, [t.strip() for t in gpu_types.split(",") if t.strip()], gpus_per_node=8)
    return read_workload(workload, data_dir=data_dir, cluster=where, max_jobs=jobs, seed=seed,
                         start_s=start_s)


#: the rule for ``--option`` with several policies, shown in ``--help`` and the README
OPTION_HELP = ("KEY=VALUE policy option, repeatable (e.g. time_limit_s=2, backend=milp, "
               "round_interval_s=600); values are JSON (numbers, true/false, null, lists) or plain text. "
               "Checked against each policy's option model: a mistyped key or value is an error. With "
               "several policies an option goes to the policies that take it, and is an error only if "
               "none of them does.")


def _reject_constant(name: str) -> Any:
    raise ValidationError("--option", f"{name} not understood; values must be finite numbers")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _reject_constant(text[:40])
    return value


def parse_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` policy options; values are read as JSON when they parse (numbers, lists, true/false,
    null), else text. NaN and infinities are refused; a key given twice is an error."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValidationError("--option",
                                  f"{pair[:60]!r} not understood; use KEY=VALUE, e.g. time_limit_s=1")
        if key in out:
            raise ValidationError(f"option {key[:60]}", "given twice; give each option once")
        try:
            parsed = json.loads(value, parse_constant=_reject_constant, parse_float=_finite_float)
        except json.JSONDecodeError:
            parsed = value
        except RecursionError:
            raise ValidationError(f"option {key[:60]}", "value nested too deeply") from None
        except ValueError:  # a NaN or infinity, or an integer too long to read
            raise ValidationError(f"--option {key[:60]}",
                                  f"{value[:40]!r} not understood; values must be finite "
                                  "numbers (at most about 1.8e308, 4300 digits)") from None
        out[key] = tuple(parsed) if isinstance(parsed, list) else parsed
    return out


def parse_faults(text: str | None) -> Any:
    """``MTBF_S:MTTR_S:CHECKPOINT_INTERVAL_S`` as a :class:`~dltsched.engine.sim.faults.FaultConfig`
    (``None``: none)."""
    if text is None:
        return None
    from dltsched.engine.sim.faults import FaultConfig

    parts = text.split(":")
    try:
        values = [float(x) for x in parts]
    except ValueError:
        values = []
    if len(values) != 3 or not all(math.isfinite(v) and v > 0 for v in values):
        raise ValidationError("--faults", f"'{text}' not understood; MTBF_S:MTTR_S:CHECKPOINT_INTERVAL_S, "
                              "e.g. 14400:900:600")
    return FaultConfig(*values)


def run_policies(inst: Instance, names: list[str], *, seed: int = 0, predictor_set: str = "default",
                 memory: str = "oom", data_dir: str | None = None, prediction_error: float = 0.0,
                 options: dict[str, Any] | None = None, faults: Any = None, checkpoint: str | None = None,
                 checkpoint_every: int | None = None, checkpoint_overhead: float = 0.03,
                 lengths: str = "known", length_error: float = 0.5,
                 profile_s: float | None = None, profile_noise: float = 0.03,
                 freeze_penalty_scale: float | None = None, max_wall_s: float | None = None,
                 truth_dirs: tuple[str, ...] = (), truth_sharing: str | None = None,
                 truth: Any = None) -> list[SimulationResult]:
    """Simulate each policy in ``names`` on ``inst`` with the same ground truth and seed. Each policy gets
    the ``options`` it takes (see :func:`~dltsched.engine.app.vocabulary.options_by_name`); all are checked
    before any simulation runs, so a bad option fails at once. With ``checkpoint`` (one policy only) the run
    saves its state there every ``checkpoint_every`` rounds (``None``: as often as ``checkpoint_overhead``, a
    share of the run's wall-clock time, allows) and continues from it when it exists. ``lengths``,
    ``length_error``, ``profile_s``/``profile_noise`` (profiling on arrival) and ``freeze_penalty_scale`` are
    the settings of :func:`simulation_setup`. ``truth_dirs``: profile datasets whose GPU types take their
    ground truth from them (:func:`make_truth`); ``truth``: a ground truth built by the caller instead."""
    from dltsched.predictors.noise import with_prediction_error

    if checkpoint is not None and len(names) != 1:
        raise ValidationError("--checkpoint", f"holds one run; give exactly one --policy (got {len(names)})")
    per_policy = vocabulary.options_by_name(names, options or {}, "--policy")
    preds = with_prediction_error(predictors(predictor_set, data_dir), prediction_error, seed)
    truth = truth if truth is not None else make_truth(data_dir, truth_dirs, truth_sharing)
    preds, config = simulation_setup(preds, seed=seed, memory=memory, faults=faults, lengths=lengths,
                                     length_error=length_error, profile_s=profile_s,
                                     profile_noise=profile_noise, freeze_penalty_scale=freeze_penalty_scale,
                                     max_wall_s=max_wall_s)
    results = []
    for name in names:
        choice = vocabulary.parse_policy(name, "--policy")
        policy = make_policy(choice.policy, predictors=preds, **per_policy[name])
        if choice.name != choice.policy:
            policy.name = choice.name  # results carry the name the policy was asked for (dltsched:milp)
        if checkpoint is None:
            results.append(run_simulation(inst, policy, truth=truth, config=config))
            continue
        from dltsched.engine.sim.checkpoint import CheckpointStore
        from dltsched.engine.sim.simulator import Simulator

        store = CheckpointStore(checkpoint, checkpoint_every, max_overhead=checkpoint_overhead)
        results.append(Simulator(inst, policy, truth, config, store=store).run(resume=True))
    return results


def make_truth(data_dir: str | None, truth_dirs: tuple[str, ...] = (), sharing: str | None = None) -> Any:
    """The ground truth: Gavel's measurements (:class:`MeasuredTruth`), and for the GPU types that
    ``truth_dirs`` (``dltsched profile --out`` datasets) measured, those measurements in ``sharing`` mode
    (:class:`~dltsched.engine.sim.profile_truth.ProfileTruth`)."""
    base = MeasuredTruth(data_dir=data_dir)
    if not truth_dirs:
        return base
    from dltsched.engine.sim.profile_truth import ProfileTruth

    return ProfileTruth(truth_dirs, sharing, base)  # type: ignore[arg-type]


def simulation_setup(preds: Any, *, seed: int = 0, memory: str = "oom", faults: Any = None,
                     lengths: str = "known", length_error: float = 0.5, profile_s: float | None = None,
                     profile_noise: float = 0.03, freeze_penalty_scale: float | None = None,
                     max_wall_s: float | None = None, profile_all_types: bool = False) -> tuple[Any, Any]:
    """The policies' predictor bundle and the simulation settings for these options.

    ``lengths``: what policies are told of job lengths (:mod:`dltsched.engine.sim.lengths`). ``profile_s``:
    profile each job on arrival for that many seconds per GPU type (:mod:`dltsched.engine.sim.profiling`; the
    bundle is wrapped to use the profiles; ``profile_all_types``: on one GPU of every type besides).
    ``freeze_penalty_scale``: policies predict frozen penalties this many times the ground truth's (a mismatch
    sweep; ``None``: the bundle's own freezing predictor)."""
    from dltsched.engine.sim.config import ProfilingConfig

    profiling = None
    if profile_s is not None:
        from dltsched.engine.domain.profiled import profiled

        profiling = ProfilingConfig(profile_s, profile_noise, profile_all_types)
        preds = profiled(preds)
    if freeze_penalty_scale is not None:
        from dataclasses import replace

        from dltsched.predictors.freezing import ScaledFreezing

        preds = replace(preds, freezing=ScaledFreezing(preds.freezing, freeze_penalty_scale))
    config = SimulationConfig(seed=seed, memory=memory, faults=faults,
                              lengths=lengths,  # type: ignore[arg-type]
                              length_error=length_error, profiling=profiling, max_wall_s=max_wall_s)
    return preds, config


def expand_policies(policies: tuple[str, ...] | list[str]) -> list[str]:
    """Policy names with the groups ``baselines``, ``papers`` and ``all`` expanded, each in its canonical
    form (:mod:`dltsched.engine.app.vocabulary`); a name not understood raises with the close matches."""
    return [choice.name for choice in vocabulary.expand_policies(policies, "--policy")]


def truth_label(results: list[Any]) -> str:
    """The ground truth the results ran on, for a table title: ``measured (gavel:packaged)`` or
    ``analytic``."""
    if not results:
        return "none"
    first = results[0]
    return f"{first.truth} ({', '.join(first.truth_sources)})" if first.truth_sources else first.truth


def truth_footer(predictor_set: str, results: list[Any]) -> str:
    """One line under the table: what the predictors were fitted on, beside what drove the truth."""
    measured = bool(results) and results[0].truth == "measured"
    if not measured:
        return ("ground truth: the analytic fallback model (no measured throughputs were "
                "read); predictors and truth share no data")
    if predictor_set in ("default", "default+eggat"):
        return (f"predictors '{predictor_set}' are fitted on Gavel's measurements, which also "
                "drive the measured ground truth (in-sample); --predictors crossfit prices each job with "
                "predictors fitted without its model")
    return f"ground truth: measured ({', '.join(results[0].truth_sources)})"


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if fmt == "h":
        return f"{value / 3600.0:.2f}"
    if fmt == "ms":
        return f"{value * 1000.0:.2f}"
    return fmt.format(value)


#: result fields by importance: at a narrow terminal the table leaves out the columns last here first
TABLE_PRIORITY: tuple[str, ...] = ("policy", "avg_jct_s", "predictors", "avg_jct_s_ci95", "makespan_s",
                                   "p99_jct_s", "gpu_util", "num_jobs_finished", "avg_queueing_s",
                                   "decision_time_mean_s", "num_preemptions", "ftf_mean", "predictors_fit",
                                   "median_jct_s", "num_oom")


def print_table(results: list[Any], title: str,
                columns: tuple[tuple[str, str, str], ...] = TABLE_COLUMNS) -> list[str]:
    """The comparison table, one row per result, fitted to the terminal's width (headers wrap; when that is
    not enough the least important columns, :data:`TABLE_PRIORITY`, are left out and named). Returns the
    headers left out."""
    from rich import box
    from rich.table import Table

    from dltsched.engine.app.cli.output import console, print_fitted

    fields = [f for f, _h, _fmt in columns]
    rank = {f: i for i, f in enumerate(TABLE_PRIORITY)}
    priority = sorted(range(len(fields)), key=lambda i: (rank.get(fields[i], len(rank)), i))
    rows = [[_cell(getattr(r, f), fmt) for f, _h, fmt in columns] for r in results]
    out = console()
    return print_fitted(out,
                        lambda: Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                                                header_style="bold"),
                        [h for _f, h, _fmt in columns], rows, priority=priority,
                        right=[i for i, f in enumerate(fields)
                               if f not in ("policy", "predictors", "predictors_fit")])


@click.command("simulate")
@click.option("--instance", "instance_path", type=click.Path(dir_okay=False), help="Instance JSON file.")
@click.option("--workload",
              help="A real workload instead (e.g. philly, gavel, muri:trace1); see `instance convert`.")
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="Shared data folder (default: $DLTSCHED_DATA).")
@click.option("--cluster", help="Cluster for --workload, e.g. 'v100:8x8,p100:4x8'.")
@click.option("--jobs", type=click.IntRange(1, MAX_JOBS), help="Use the first N jobs of --workload.")
@click.option("--policy", "policies", multiple=True, default=("all",), show_default=True,
              help=f"Policy name, repeatable; 'baselines' = {', '.join(BASELINE_POLICIES)}; 'papers' = "
                   f"{', '.join(PAPER_POLICIES)}; 'all' = both and 'optimizing'.")
@click.option("--predictors", "predictor_set", default="default", show_default=True,
              help="Predictor bundle the policies use: default (fitted on the truth's "
                   "measurements: in-sample), crossfit (each job priced by predictors fitted without its "
                   "model) or analytic.")
@click.option("--calibration", type=click.Path(dir_okay=False), default=None,
              help="A calibration bundle (dltsched calibrate): the GPU types it covers are priced by it "
                   "(CAL.json:mps: co-location under MPS).")
@click.option("--memory", type=click.Choice(["oom", "reject"]), default="oom", show_default=True,
              help="A job that does not fit in GPU memory: crash it out of memory, re-queue it and learn its "
                   "measured peak (oom), or reject the plan as an error (reject, a strict check).")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True)
@click.option("--prediction-error", type=FiniteFloat(0.0, 10.0), default=0.0, show_default=True,
              help="Multiply predictions by exp(E*z), z~N(0,1) per job: 0.2 = predictions about 20%% off.")
@click.option("--option", "options", multiple=True, help=OPTION_HELP)
@click.option("--faults",
              help="Node failures MTBF_S:MTTR_S:CHECKPOINT_INTERVAL_S (seeded), e.g. 14400:900:600.")
@click.option("--checkpoint", type=click.Path(dir_okay=False),
              help="Save the run here (see --checkpoint-every); continue from it when it exists "
                   "(one policy).")
@click.option("--checkpoint-every", type=click.IntRange(min=1, max=10**9), default=None,
              help="Save every N rounds, whatever it costs (default: as often as "
                   "--checkpoint-overhead allows).")
@click.option("--checkpoint-overhead", type=FiniteFloat(0.0, 1.0, min_open=True), default=0.03,
              show_default=True,
              help="Without --checkpoint-every: the share of the run's wall-clock time checkpoint "
                   "writes may take.")
@click.option("--lengths", type=click.Choice(["known", "unknown", "estimate"]), default="known",
              show_default=True,
              help="What policies are told of job lengths: the truth (known), nothing but attained service "
                   "(unknown, Tiresias' setting), or a user's estimate off by exp(E*z) (estimate).")
@click.option("--length-error", type=FiniteFloat(0.0, 5.0), default=0.5, show_default=True,
              help="E of --lengths estimate: 0.5 = a third of the estimates more than 1.65x off.")
@click.option("--profile-on-arrival", "profile_s", type=FiniteFloat(0.0, 1e6),
              help="Profile jobs: after this many seconds on a GPU type (or in a co-located "
                   "group) their measured step time, memory and speeds replace the predictions.")
@click.option("--profile-noise", type=FiniteFloat(0.0, 1.0), default=0.03, show_default=True,
              help="Measurement noise of profiles (log-normal sigma).")
@click.option("--freeze-penalty-scale", type=FiniteFloat(0.0, 100.0),
              help="Policies predict frozen penalties this many times the ground truth's (mismatch sweep).")
@click.option("--arrivals", type=click.Choice(["trace", "batch"]), default="trace", show_default=True,
              help="Job arrivals: as in the instance (trace) or every job at time 0 (batch, for makespan).")
@click.option("--max-wall-s", type=FiniteFloat(0.0, 1e9, min_open=True),
              help="Stop a simulation that runs longer than this many wall-clock seconds (default: the "
                   "max_sim_wall_s cap, 6 h, or DLTSCHED_MAX_SIM_WALL_S).")
@click.option("--truth", "truth_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A `dltsched profile --out` dataset (repeatable): its GPU types run on its measurements.")
@click.option("--truth-sharing", type=click.Choice(["timeslice", "mps"]),
              help="Sharing mode of the --truth co-location measurements (default: the one measured).")
@click.option("--records", is_flag=True, help="Include per-job records and the utilisation trace in --json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the JSON result to this file; stdout then gets the table (or with --json "
                   "a one-line JSON summary), not the result.")
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable output: an object with the run's settings and "
              "its rows, one per policy (the same shape for one policy or many).")
def simulate(instance_path: str | None, workload: str | None, data_dir: str | None, cluster: str | None,
             jobs: int | None, policies: tuple[str, ...], predictor_set: str, calibration: str | None,
             memory: str, seed: int,
             prediction_error: float, options: tuple[str, ...], faults: str | None, checkpoint: str | None,
             checkpoint_every: int | None, checkpoint_overhead: float, lengths: str, length_error: float,
             profile_s: float | None, profile_noise: float, freeze_penalty_scale: float | None, arrivals: str,
             max_wall_s: float | None, truth_dirs: tuple[str, ...], truth_sharing: str | None, records: bool,
             output: str | None, as_json: bool) -> None:
    """Simulate policies on an instance and compare their metrics."""
    names = expand_policies(policies)
    opts = parse_options(options)
    vocabulary.options_by_name(names, opts, "--policy")  # a bad option fails before the instance is read
    predictor_set = check_predictors(with_calibration(predictor_set, calibration))
    inst = load_instance_or_workload(instance_path, workload, data_dir=data_dir, cluster=cluster, jobs=jobs,
                                     seed=seed)
    if arrivals == "batch":
        from dltsched.engine.sim.workload import batch_arrivals

        inst = batch_arrivals(inst)
    truth = make_truth(data_dir, truth_dirs, truth_sharing)
    results = run_policies(inst, names, seed=seed, predictor_set=predictor_set, memory=memory,
                           data_dir=data_dir, prediction_error=prediction_error, options=opts,
                           faults=parse_faults(faults), checkpoint=checkpoint,
                           checkpoint_every=checkpoint_every, checkpoint_overhead=checkpoint_overhead,
                           lengths=lengths, length_error=length_error, profile_s=profile_s,
                           profile_noise=profile_noise, freeze_penalty_scale=freeze_penalty_scale,
                           max_wall_s=max_wall_s, truth=truth)
    bundle = bundle_fields(predictor_set) | ({"truth": truth.record()} if truth_dirs else {})
    types = ", ".join(f"{t} {n}" for t, n in inst.cluster.gpus_by_type().items())
    truth_name = truth_label(results)
    payload = {"instance": inst.name, "num_jobs": len(inst.jobs), "num_gpus": inst.cluster.num_gpus,
               "gpus_by_type": inst.cluster.gpus_by_type(), "seed": seed, "truth": truth_name, **bundle,
               "rows": [r.to_dict(records=records, utilization=records) | bundle for r in results]}
    title = (f"{inst.name}: {len(inst.jobs)} jobs on {inst.cluster.num_gpus} GPUs ({types}), "
             f"predictors {predictor_set}, truth {truth_name}")

    def show() -> None:
        from dltsched.engine.app.cli.output import console

        print_table(results, title)
        console().print(truth_footer(predictor_set, results), highlight=False)

    if output:
        write_output(output, payload, as_json, show, "simulation results")
        return
    emit(payload, as_json, show)
