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
    ("decision_time_mean_s", "decision (ms)", "ms"),
)


def load_instance_or_workload(instance: str | None, workload: str | None, *, data_dir: str | None,
                              cluster: str | None, jobs: int | None, seed: int) -> Instance:
    """The instance named by ``--instance FILE`` or ``--workload NAME`` (exactly one of them)."""
    if (instance is None) == (workload is None):
        raise ValidationError("--instance/--workload", "give exactly one of them")
    if instance is not None:
        from dltsched.instances.schema import load_instance

        return load_instance(Path(instance))
    from dltsched.instances.readers import read_workload

    assert workload is not None
    return read_workload(workload, data_dir=data_dir, cluster=cluster, max_jobs=jobs, seed=seed)


def run_policies(inst: Instance, names: list[str], *, seed: int = 0, predictor_set: str = "default",
                 memory: str = "reject", data_dir: str | None = None, quiet: bool = True) -> list[SimulationResult]:
    """Simulate each policy in ``names`` on ``inst`` with the same ground truth and seed."""
    preds = predictors(predictor_set)
    truth = MeasuredTruth(data_dir=data_dir)
    config = SimulationConfig(seed=seed, memory=memory)  # type: ignore[arg-type]
    results = []
    for name in names:
        policy = make_policy(name, predictors=preds)
        results.append(run_simulation(inst, policy, truth=truth, config=config))
    return results


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
@click.option("--memory", type=click.Choice(["reject", "oom"]), default="reject", show_default=True,
              help="Plans that overfill GPU memory: reject them, or let the job crash out of memory.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--records", is_flag=True, help="Include per-job records and the utilisation trace in --json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write the JSON result to this file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def simulate(instance_path: str | None, workload: str | None, data_dir: str | None, cluster: str | None,
             jobs: int | None, policies: tuple[str, ...], predictor_set: str, memory: str, seed: int,
             records: bool, output: str | None, as_json: bool) -> None:
    """Simulate policies on an instance and compare their metrics."""
    names: list[str] = []
    groups = {"baselines": list(BASELINE_POLICIES), "papers": list(PAPER_POLICIES),
              "all": [*BASELINE_POLICIES, *PAPER_POLICIES, "optimizing"]}
    for p in policies:
        names.extend(groups.get(p, [p]))
    for n in names:
        if n.lower() not in policy_names():
            make_policy(n)  # raises with the close matches
    inst = load_instance_or_workload(instance_path, workload, data_dir=data_dir, cluster=cluster, jobs=jobs, seed=seed)
    results = run_policies(inst, names, seed=seed, predictor_set=predictor_set, memory=memory, data_dir=data_dir)
    payload: Any = [r.to_dict(records=records, utilization=records) for r in results]
    if len(payload) == 1 and len(policies) == 1 and policies[0] not in groups:
        payload = payload[0]
    if output:
        Path(output).write_text(json.dumps(payload, indent=2))
    title = f"{inst.name}: {len(inst.jobs)} jobs on {inst.cluster.num_gpus} GPUs {inst.cluster.gpus_by_type()}"
    emit(payload, as_json, lambda: print_table(results, title))
