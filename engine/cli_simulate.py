"""``dltsched simulate``: run policies over an instance file or a real workload and compare them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from dltsched.engine.cli import emit
from dltsched.engine.domain import Instance
from dltsched.engine.errors import ValidationError
from dltsched.engine.metrics import SimulationResult
from dltsched.engine.registry import (
    BASELINE_POLICIES,
    PAPER_POLICIES,
    make_policy,
    policy_names,
    predictors,
)
from dltsched.engine.simulator import SimulationConfig
from dltsched.engine.simulator import simulate as run_simulation
from dltsched.engine.truth import MeasuredTruth

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
    return read_workload(workload, data_dir=data_dir, cluster=where, max_jobs=jobs, seed=seed, start_s=start_s)


def parse_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` policy options; values are read as JSON when they parse (numbers, lists), else text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValidationError("--option", f"'{pair}' not understood; use KEY=VALUE, e.g. time_limit_s=1")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
        if isinstance(out[key], list):
            out[key] = tuple(out[key])
    return out


def run_policies(inst: Instance, names: list[str], *, seed: int = 0, predictor_set: str = "default",
                 memory: str = "oom", data_dir: str | None = None, prediction_error: float = 0.0,
                 options: dict[str, Any] | None = None, faults: Any = None) -> list[SimulationResult]:
    """Simulate each policy in ``names`` on ``inst`` with the same ground truth and seed. ``options``
    go to the policies that take them (the optimizing family)."""
    from dltsched.engine.noise import with_prediction_error

    preds = with_prediction_error(predictors(predictor_set), prediction_error, seed)
    truth = MeasuredTruth(data_dir=data_dir)
    config = SimulationConfig(seed=seed, memory=memory, faults=faults)  # type: ignore[arg-type]
    results = []
    for name in names:
        extra = options if options and name.startswith("optimizing") else {}
        policy = make_policy(name, predictors=preds, **extra)
        results.append(run_simulation(inst, policy, truth=truth, config=config))
    return results


def expand_policies(policies: tuple[str, ...]) -> list[str]:
    """Policy names with the groups ``baselines``, ``papers`` and ``all`` expanded; unknown names raise."""
    groups = {"baselines": list(BASELINE_POLICIES), "papers": list(PAPER_POLICIES),
              "all": [*BASELINE_POLICIES, *PAPER_POLICIES, "optimizing"]}
    names: list[str] = []
    for p in policies:
        names.extend(groups.get(p, [p]))
    for n in names:
        if n.lower() not in policy_names():
            make_policy(n)  # raises with the close matches
    return names


def _cell(value: Any, fmt: str) -> str:
    if fmt == "h":
        return f"{value / 3600.0:.2f}"
    if fmt == "ms":
        return f"{value * 1000.0:.2f}"
    return fmt.format(value)


def print_table(results: list[SimulationResult], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for _field, header, _fmt in TABLE_COLUMNS:
        table.add_column(header, justify="left" if _field == "policy" else "right")
    for r in results:
        table.add_row(*(_cell(getattr(r, f), fmt) for f, _h, fmt in TABLE_COLUMNS))
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)


@click.command("simulate")
@click.option("--instance", "instance_path", type=click.Path(dir_okay=False), help="Instance JSON file.")
@click.option("--workload", help="A real workload instead (e.g. philly, gavel, muri:trace1); see `instance convert`.")
@click.option("--data-dir", type=click.Path(file_okay=False), help="Shared data folder (default: $DLTSCHED_DATA).")
@click.option("--cluster", help="Cluster for --workload, e.g. 'v100:8x8,p100:4x8'.")
@click.option("--jobs", type=click.IntRange(min=1), help="Use the first N jobs of --workload.")
@click.option("--policy", "policies", multiple=True, default=("all",), show_default=True,
              help=f"Policy name, repeatable; 'baselines' = {', '.join(BASELINE_POLICIES)}; 'papers' = "
                   f"{', '.join(PAPER_POLICIES)}; 'all' = both and 'optimizing'.")
@click.option("--predictors", "predictor_set", default="default", show_default=True,
              help="Predictor bundle the policies use (default | analytic).")
@click.option("--memory", type=click.Choice(["oom", "reject"]), default="oom", show_default=True,
              help="A job that does not fit in GPU memory: crash it out of memory, re-queue it and learn its "
                   "measured peak (oom), or reject the plan as an error (reject, a strict check).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--prediction-error", type=float, default=0.0, show_default=True,
              help="Multiply predictions by exp(E*z), z~N(0,1) per job: 0.2 = predictions about 20%% off.")
@click.option("--option", "options", multiple=True, help="KEY=VALUE for the optimizing policies, e.g. backend=milp.")
@click.option("--records", is_flag=True, help="Include per-job records and the utilisation trace in --json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write the JSON result to this file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def simulate(instance_path: str | None, workload: str | None, data_dir: str | None, cluster: str | None,
             jobs: int | None, policies: tuple[str, ...], predictor_set: str, memory: str, seed: int,
             prediction_error: float, options: tuple[str, ...], records: bool, output: str | None,
             as_json: bool) -> None:
    """Simulate policies on an instance and compare their metrics."""
    names = expand_policies(policies)
    inst = load_instance_or_workload(instance_path, workload, data_dir=data_dir, cluster=cluster, jobs=jobs, seed=seed)
    results = run_policies(inst, names, seed=seed, predictor_set=predictor_set, memory=memory, data_dir=data_dir,
                           prediction_error=prediction_error, options=parse_options(options))
    payload: Any = [r.to_dict(records=records, utilization=records) for r in results]
    if len(payload) == 1 and len(policies) == 1 and policies[0] not in ("all", "baselines", "papers"):
        payload = payload[0]
    if output:
        Path(output).write_text(json.dumps(payload, indent=2))
    title = f"{inst.name}: {len(inst.jobs)} jobs on {inst.cluster.num_gpus} GPUs {inst.cluster.gpus_by_type()}"
    emit(payload, as_json, lambda: print_table(results, title))
