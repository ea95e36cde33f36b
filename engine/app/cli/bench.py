"""``dltsched bench``: benchmarks that report numbers (simulation speed here; solve and predict mounted)."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import click

from dltsched.engine.app.cli.main import FiniteFloat, LazyGroup, emit
from dltsched.engine.app.cli.simulate import (
    MAX_JOBS,
    MAX_SEED,
    OPTION_HELP,
    TABLE_COLUMNS,
    expand_policies,
    load_instance_or_workload,
    make_truth,
    parse_options,
    run_policies,
    truth_label,
)
from dltsched.engine.app.registry import (
    bundle_fields,
    check_predictors,
    default_bench_predictors,
    with_calibration,
)
from dltsched.engine.app.vocabulary import options_by_name

_BENCH_COMMANDS = {
    "solve": "dltsched.engine.app.cli.solve:bench_solve",
    "predict": "dltsched.engine.app.cli.predict:bench_predict",
    "service": "dltsched.engine.app.service.bench:bench_service",
    "windows": "dltsched.engine.app.cli.bench_windows:bench_windows",
}


@click.group("bench", cls=LazyGroup, lazy=_BENCH_COMMANDS)
def bench() -> None:
    """Benchmarks: simulation, solver and predictor speed."""


#: metrics aggregated over seeds (mean and 95% confidence half-width)
_METRICS = ("avg_jct_s", "median_jct_s", "p99_jct_s", "makespan_s", "gpu_util", "avg_queueing_s", "ftf_mean",
            "num_preemptions", "num_rounds", "decision_time_mean_s", "decision_time_p50_s",
            "decision_time_p90_s", "decision_time_p99_s", "decision_time_max_s", "simulate_s")


#: the policy whose simulation wall time every other policy's is divided by, when it is in the run
RATIO_BASELINE = "tiresias"

#: the bench table: the comparison table with the predictor bundle and what it was fitted on after the policy
BENCH_COLUMNS = (TABLE_COLUMNS[0], ("predictors", "bundle", "{}"), ("predictors_fit", "fitted", "{}"),
                 *TABLE_COLUMNS[1:3], ("avg_jct_s_ci95", "± 95% (h)", "h"), *TABLE_COLUMNS[3:])


def _ci95(values: list[float]) -> float:
    """Half-width of the 95% t-interval of the mean (0 for a single value)."""
    n = len(values)
    if n < 2:
        return 0.0
    from scipy import stats

    return float(stats.t.ppf(0.975, n - 1) * statistics.stdev(values) / math.sqrt(n))


@bench.command("simulate")
@click.option("--instance", "instance_path", type=click.Path(dir_okay=False), help="Instance JSON file.")
@click.option("--workload", help="A real workload (philly, gavel, muri:trace1, sia:saturn/<file>, ...).")
@click.option("--data-dir", type=click.Path(file_okay=False))
@click.option("--jobs", type=click.IntRange(1, MAX_JOBS),
              help="First N jobs of --workload (after --start-s).")
@click.option("--start-s", type=FiniteFloat(0.0, 1e10),
              help="Window start in the trace, seconds from its first arrival.")
@click.option("--gpus", type=click.IntRange(1, 100_000),
              help="Cluster of G GPUs of --gpu-types in 8-GPU nodes.")
@click.option("--gpu-types", default="v100,p100,k80", show_default=True,
              help="Types dealt round-robin over nodes.")
@click.option("--cluster", help="Cluster spec instead of --gpus, e.g. 'v100:8x8,p100:4x8,k80:4x8'.")
@click.option("--policy", "policies", multiple=True, default=("all",), show_default=True,
              help="Policy, repeatable; groups: baselines, papers, all.")
@click.option("--seed", "seeds", multiple=True, type=click.IntRange(0, MAX_SEED), default=(0,),
              show_default=True,
              help="Seed, repeatable: each seed re-draws the trace's model assignment and the simulation.")
@click.option("--predictors", "predictor_sets", multiple=True,
              help="Predictor bundle, repeatable: each gets its own rows (e.g. --predictors "
                   "default --predictors crossfit: in-sample beside cross-fitted). Default: crossfit when "
                   "the ground truth comes from measurements (a data folder is found), else default.")
@click.option("--calibration", type=click.Path(dir_okay=False), default=None,
              help="A calibration bundle (dltsched calibrate) on top of every --predictors "
                   "bundle; a bundle named NAME@CAL.json gets one of its own.")
@click.option("--prediction-error", type=FiniteFloat(0.0, 10.0), default=0.0, show_default=True)
@click.option("--option", "options", multiple=True, help=OPTION_HELP)
@click.option("--truth", "truth_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A `dltsched profile --out` dataset (repeatable): its GPU types run on its measurements.")
@click.option("--truth-sharing", type=click.Choice(["timeslice", "mps"]),
              help="Sharing mode of the --truth co-location measurements (default: the one measured).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def bench_simulate(ctx: click.Context, instance_path: str | None, workload: str | None, data_dir: str | None,
                   jobs: int | None, start_s: float | None, gpus: int | None, gpu_types: str,
                   cluster: str | None, policies: tuple[str, ...], seeds: tuple[int, ...],
                   predictor_sets: tuple[str, ...], calibration: str | None, prediction_error: float,
                   options: tuple[str, ...], truth_dirs: tuple[str, ...], truth_sharing: str | None,
                   as_json: bool) -> None:
    """Every policy on the same workload and cluster: one row per predictor bundle and policy, means and 95%
    CIs over seeds; each row names its bundle and whether it is fitted on the truth's measurements."""
    names = expand_policies(policies)
    opts = parse_options(options)
    # a bad option fails before any run; each policy gets its own
    per_policy_options = options_by_name(names, opts, "--policy")
    bundles = list(dict.fromkeys(check_predictors(p)
                                 for p in predictor_sets)) or [default_bench_predictors(data_dir)]
    bundles = list(dict.fromkeys(check_predictors(with_calibration(b, calibration)) for b in bundles))
    per_policy: dict[tuple[str, str], list[dict[str, Any]]] = {(b, n): [] for b in bundles for n in names}
    info: dict[str, Any] = {}
    truth_name = "none"
    truth = make_truth(data_dir, truth_dirs, truth_sharing)
    for seed in seeds:
        t0 = time.perf_counter()
        inst = load_instance_or_workload(instance_path, workload, data_dir=data_dir, cluster=cluster,
                                         jobs=jobs, seed=seed, gpus=gpus, gpu_types=gpu_types,
                                         start_s=start_s)
        info = {"num_jobs": len(inst.jobs), "num_gpus": inst.cluster.num_gpus,
                "gpus_by_type": inst.cluster.gpus_by_type(), "load_s": round(time.perf_counter() - t0, 3)}
        for bundle in bundles:
            for name in names:
                t1 = time.perf_counter()
                (res,) = run_policies(inst, [name], seed=seed, predictor_set=bundle, memory="oom",
                                      data_dir=data_dir, prediction_error=prediction_error,
                                      options=per_policy_options[name], truth=truth)
                run = res.to_dict() | {"simulate_s": time.perf_counter() - t1}
                truth_name = truth_label([res])
                per_policy[(bundle, name)].append(run)
                if not (ctx.obj or {}).get("quiet") and not as_json:
                    click.echo(f"seed {seed} {bundle} {name}: {run['simulate_s']:.1f} s", err=True)
    rows: list[dict[str, Any]] = []
    for (bundle, name), runs in per_policy.items():
        row: dict[str, Any] = {"policy": runs[0]["policy"], **bundle_fields(bundle), "seeds": list(seeds),
                               **info,
                               "truth": runs[0]["truth"], "truth_sources": list(runs[0]["truth_sources"]),
                               **({"truth": truth.record()} if truth_dirs else {}),
                               "num_jobs_finished": min(r["num_jobs_finished"] for r in runs),
                               "prediction_error": prediction_error}
        for m in _METRICS:
            values = [float(r[m]) if r[m] is not None else math.nan for r in runs]
            row[m] = statistics.fmean(values)
            row[f"{m}_ci95"] = _ci95(values)
        baseline = per_policy.get((bundle, RATIO_BASELINE))
        if baseline and name != RATIO_BASELINE:  # the same seeds in the same run: a ratio of like with like
            mine = statistics.fmean(r["simulate_s"] for r in runs)
            theirs = statistics.fmean(r["simulate_s"] for r in baseline)
            row[f"simulate_s_vs_{RATIO_BASELINE}"] = mine / max(1e-9, theirs)
        rows.append(row)

    def human() -> None:
        from dltsched.engine.app.cli.simulate import print_table

        types = ", ".join(f"{t} {n}" for t, n in (info.get("gpus_by_type") or {}).items())
        print_table([_Row(r) for r in rows], f"{workload or instance_path}: {info.get('num_jobs')} jobs on "
                    f"{info.get('num_gpus')} GPUs ({types}), seeds {', '.join(map(str, seeds))}, "
                    f"truth {truth_name}", BENCH_COLUMNS)
        for r in rows:
            if f"simulate_s_vs_{RATIO_BASELINE}" in r:
                click.echo(f"{r['policy']}: simulation wall time {r['simulate_s']:.1f} s, "
                           f"{r[f'simulate_s_vs_{RATIO_BASELINE}']:.2f}x {RATIO_BASELINE}'s in the same run")

    emit({"workload": workload or instance_path, "seeds": list(seeds), **info, "truth": truth_name,
          "rows": rows}, as_json, human)


class _Row:
    """Attribute access to a bench row, for the shared table printer."""

    def __init__(self, row: dict[str, Any]) -> None:
        self._row = row

    def __getattr__(self, name: str) -> Any:
        return self._row.get(name, float("nan"))
