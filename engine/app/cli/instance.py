"""``dltsched instance``: validate, show, convert, generate instances and print the JSON Schema."""

from __future__ import annotations

from typing import Any

import click

from dltsched.engine.app.cli.main import FiniteFloat, emit, json_text
from dltsched.engine.domain.errors import DltschedError, ValidationError, write_text_file
from dltsched.engine.domain.model import Instance
from dltsched.instances.schema import MAX_GPUS_PER_NODE, MAX_JOBS, MAX_NODES, MAX_TIME_S

#: largest seed (numpy generators take seeds below 2**32 everywhere); most GPUs `generate` builds
MAX_SEED = 2**32 - 1
MAX_GENERATED_GPUS = 100_000


def summarize(inst: Instance) -> dict[str, Any]:
    """Counts a person checks first: jobs, GPUs by type, models, arrival span, GPU-hours."""
    models: dict[str, int] = {}
    for j in inst.jobs:
        models[j.model] = models.get(j.model, 0) + 1
    arrivals = [j.arrival_time_s for j in inst.jobs]
    hints = [
        (j.duration_hint_s, j.num_gpus * j.gpu_fraction) for j in inst.jobs if j.duration_hint_s is not None
    ]
    gpu_hours = sum(duration_s * gpus for duration_s, gpus in hints) / 3600.0
    gpu_counts: dict[str, int] = {}
    for j in inst.jobs:
        gpu_counts[str(j.num_gpus)] = gpu_counts.get(str(j.num_gpus), 0) + 1
    return {
        "name": inst.name,
        "num_jobs": len(inst.jobs),
        "num_gpus": inst.cluster.num_gpus,
        "num_nodes": len(inst.cluster.nodes),
        "gpus_by_type": inst.cluster.gpus_by_type(),
        "jobs_by_model": dict(sorted(models.items(), key=lambda kv: -kv[1])),
        "jobs_by_num_gpus": dict(sorted(gpu_counts.items(), key=lambda kv: int(kv[0]))),
        "arrival_span_s": max(arrivals) - min(arrivals),
        "gpu_hours_hint": round(gpu_hours, 3),
        "jobs_with_duration_hint": len(hints),
        "freeze_allowed_jobs": sum(j.freeze_allowed for j in inst.jobs),
        "fractional_gpu_jobs": sum(j.gpu_fraction < 1.0 for j in inst.jobs),
        "metadata": dict(inst.metadata),
    }


def _print_summary(summary: dict[str, Any]) -> None:
    click.echo(
        f"{summary['name']}: {summary['num_jobs']} jobs on {summary['num_gpus']} GPUs "
        f"in {summary['num_nodes']} nodes"
    )
    click.echo("  GPUs by type:   " + ", ".join(f"{k} {v}" for k, v in summary["gpus_by_type"].items()))
    click.echo("  jobs by model:  " + ", ".join(f"{k} {v}" for k, v in summary["jobs_by_model"].items()))
    click.echo("  jobs by #GPUs:  " + ", ".join(f"{k}: {v}" for k, v in summary["jobs_by_num_gpus"].items()))
    click.echo(f"  arrival span:   {summary['arrival_span_s'] / 3600.0:.2f} h")
    click.echo(
        f"  GPU-hours:      {summary['gpu_hours_hint']:.1f} (from {summary['jobs_with_duration_hint']} "
        "duration hints)"
    )
    click.echo(
        f"  freezable jobs: {summary['freeze_allowed_jobs']}; fractional-GPU jobs: "
        f"{summary['fractional_gpu_jobs']}"
    )
    for key in ("generated_by", "converted_by", "dropped_too_large"):
        if key in summary["metadata"]:
            click.echo(f"  {key}: {summary['metadata'][key]}")


def _write(inst: Instance, output: str, as_json: bool, options: dict[str, str]) -> None:
    """Write ``inst`` after checking it as ``instance validate`` would read it back; ``options`` maps the
    first part of a field path (``name``, ``cluster``, ``jobs``) to the option that shaped it, for the
    message."""
    from dltsched.instances.schema import instance_to_dict, load_instance, save_instance

    try:
        load_instance(instance_to_dict(inst))
    except ValidationError as err:
        option = options.get(err.path.split(".")[0].split("[")[0], "the options")
        raise ValidationError(option,
                              f"the instance it makes is not valid ({err}); nothing written") from None
    path = save_instance(inst, output)
    summary = {"output": str(path), **summarize(inst)}

    def human() -> None:
        click.echo(f"wrote {path}")
        _print_summary(summary)

    emit(summary, as_json, human)


@click.group()
def instance() -> None:
    """Instance files: validate, show, convert real workloads, generate synthetic ones."""


@instance.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def validate(file: str, as_json: bool) -> None:
    """Check FILE against the format; one line naming the field when it is wrong (exit code 2)."""
    from dltsched.instances.schema import load_instance

    inst = load_instance(file)
    payload = {
        "file": file,
        "valid": True,
        "name": inst.name,
        "num_jobs": len(inst.jobs),
        "num_gpus": inst.cluster.num_gpus,
    }
    emit(
        payload,
        as_json,
        lambda: click.echo(f"{file}: valid ({len(inst.jobs)} jobs, {inst.cluster.num_gpus} GPUs)"),
    )


@instance.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show(file: str, as_json: bool) -> None:
    """Summary of FILE: jobs, GPUs by type, models, arrival span, GPU-hours."""
    from dltsched.instances.schema import load_instance

    summary = summarize(load_instance(file))
    emit(summary, as_json, lambda: _print_summary(summary))


@instance.command()
@click.argument("workload")
@click.option(
    "--data-dir", default=None, help="Shared data folder (default: $DLTSCHED_DATA or ../shared/data)."
)
@click.option("--cluster", default=None, help="Cluster spec, e.g. 'v100:8x8,p100:4x8' (default: per reader).")
@click.option(
    "--max-jobs", type=click.IntRange(1, MAX_JOBS), default=None, help="Keep the first N jobs of the window."
)
@click.option(
    "--start-s", type=FiniteFloat(0.0, 1e10), default=None,
              help="Window start (trace time, s); arrivals re-based to 0."
)
@click.option("--end-s", type=FiniteFloat(0.0, 1e10), default=None, help="Window end (trace time, s).")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
              help="Seed of model assignment.")
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="Instance file to write."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def convert(
    workload: str,
    data_dir: str | None,
    cluster: str | None,
    max_jobs: int | None,
    start_s: float | None,
    end_s: float | None,
    seed: int,
    output: str,
    as_json: bool,
) -> None:
    """Turn a real WORKLOAD (see `dltsched instance workloads`) into an instance file."""
    from dataclasses import replace

    from dltsched.instances.readers import read_workload

    inst = read_workload(
        workload,
        data_dir=data_dir,
        cluster=cluster,
        max_jobs=max_jobs,
        start_s=start_s,
        end_s=end_s,
        seed=seed,
    )
    command = ["dltsched instance convert", workload]
    for flag, value in (
        ("--cluster", cluster),
        ("--max-jobs", max_jobs),
        ("--start-s", start_s),
        ("--end-s", end_s),
        ("--seed", seed),
    ):
        if value is not None:
            command.append(f"{flag} {value:.15g}" if isinstance(value, float) else f"{flag} {value}")
    inst = replace(inst, metadata={**inst.metadata, "converted_by": " ".join([*command, "-o", output])})
    _write(inst, output, as_json, {"cluster": "--cluster"})


@instance.command()
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="Shared data folder (default: $DLTSCHED_DATA).")
@click.option("--names", "names_only", is_flag=True, help="Only the names (fast: reads no trace).")
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable output: an object with one row per workload.")
def workloads(data_dir: str | None, names_only: bool, as_json: bool) -> None:
    """The real workloads `convert` reads, each with its size: jobs, GPUs of its cluster, the days its
    arrivals span and its source file."""
    from dltsched.instances.readers import read_workload, workload_names

    rows: list[dict[str, Any]] = []
    for name in workload_names(data_dir):
        if names_only:
            rows.append({"name": name})
            continue
        try:
            inst = read_workload(name, data_dir=data_dir)
        except (DltschedError, OSError, ValueError) as err:  # listed, not read: say why instead of a size
            rows.append({"name": name, "num_jobs": None, "num_gpus": None, "span_days": None, "source": "",
                         "error": str(err)[:200]})
            continue
        arrivals = [j.arrival_time_s for j in inst.jobs]
        source = inst.metadata.get("source", "")
        rows.append({"name": name, "num_jobs": len(inst.jobs), "num_gpus": inst.cluster.num_gpus,
                     "span_days": (max(arrivals) - min(arrivals)) / 86_400.0 if arrivals else 0.0,
                     "source": str(source).split(" (")[0]})

    def show() -> None:
        if names_only:
            click.echo("\n".join(r["name"] for r in rows))
            return
        from rich import box
        from rich.table import Table

        from dltsched.engine.app.cli.output import console, print_fitted

        print_fitted(console(), lambda: Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                                              header_style="bold"),
                     ("workload", "jobs", "GPUs", "span (days)", "source"),
                     [[r["name"], f"{r['num_jobs']:,}", f"{r['num_gpus']:,}", f"{r['span_days']:.1f}",
                       r["source"]]
                      if r["num_jobs"] is not None
                      else [r["name"], "-", "-", "-", f"not readable: {r['error']}"]
                      for r in rows], right=(1, 2, 3))

    emit({"rows": rows}, as_json, show)


@instance.command()
@click.option("--jobs", "num_jobs", type=click.IntRange(1, MAX_JOBS), default=60, show_default=True,
              help="Number of jobs.")
@click.option("--gpus", "num_gpus", type=click.IntRange(1, MAX_GENERATED_GPUS), default=16, show_default=True,
              help="Number of GPUs in all.")
@click.option("--gpu-types", default="v100,p100,k80", show_default=True, help="GPU types, dealt over nodes.")
@click.option("--gpus-per-node", type=click.IntRange(1, MAX_GPUS_PER_NODE), default=4, show_default=True)
@click.option("--cluster", default=None, help="Cluster spec instead of --gpus/--gpu-types, e.g. 'v100:2x4'.")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True)
@click.option(
    "--arrival-rate", type=FiniteFloat(0.0, 1e6, min_open=True), default=30.0, show_default=True,
    help="Poisson arrivals per hour."
)
@click.option("--min-duration-s", type=FiniteFloat(1.0, MAX_TIME_S), default=300.0, show_default=True)
@click.option("--max-duration-s", type=FiniteFloat(1.0, MAX_TIME_S), default=14400.0, show_default=True)
@click.option(
    "--freeze-fraction",
    type=FiniteFloat(0.0, 1.0),
    default=0.3,
    show_default=True,
    help="Fraction of jobs that allow layer freezing.",
)
@click.option("--reference-gpu", default="v100", show_default=True, help="GPU type durations refer to.")
@click.option("--name", default=None, help="Instance name (default: derived from the spec).")
@click.option("--data-dir", default=None, help="Shared data folder for measured step times.")
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="Instance file to write."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def generate(
    num_jobs: int,
    num_gpus: int,
    gpu_types: str,
    gpus_per_node: int,
    cluster: str | None,
    seed: int,
    arrival_rate: float,
    min_duration_s: float,
    max_duration_s: float,
    freeze_fraction: float,
    reference_gpu: str,
    name: str | None,
    data_dir: str | None,
    output: str,
    as_json: bool,
) -> None:
    """A seeded synthetic instance (Gavel's job types, Philly-like GPU counts, Poisson arrivals)."""
    from dataclasses import replace

    from dltsched.instances.generator import GeneratorSpec, generate_instance

    if cluster is None and -(-num_gpus // gpus_per_node) > MAX_NODES:
        raise ValidationError("--gpus",
                              f"{num_gpus} GPUs in {gpus_per_node}-GPU nodes is more than {MAX_NODES} "
                              "nodes; use larger --gpus-per-node")
    if min_duration_s > max_duration_s:
        raise ValidationError("--min-duration-s",
                              f"{min_duration_s:g} is above --max-duration-s {max_duration_s:g}")

    spec = GeneratorSpec(
        num_jobs=num_jobs,
        num_gpus=num_gpus,
        gpu_types=tuple(t.strip() for t in gpu_types.split(",") if t.strip()),
        gpus_per_node=gpus_per_node,
        cluster=cluster,
        seed=seed,
        arrival_rate_per_h=arrival_rate,
        min_duration_s=min_duration_s,
        max_duration_s=max_duration_s,
        freeze_fraction=freeze_fraction,
        reference_gpu=reference_gpu,
        name=name,
    )
    inst = generate_instance(spec, data_dir=data_dir)
    inst = replace(inst, metadata={**inst.metadata, "generated_by": f"{spec.command()} -o {output}"})
    _write(inst, output, as_json, {"name": "--name",
                                   "cluster": "--cluster" if cluster
                                   else "--gpus/--gpus-per-node/--gpu-types"})


@instance.command()
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False), help="Write to a file.")
@click.option(
    "--json", "as_json", is_flag=True, help="Accepted for uniformity; the schema is JSON either way."
)
def schema(output: str | None, as_json: bool) -> None:
    """Print the JSON Schema of the instance format (version 1)."""
    from dltsched.instances.schema import json_schema

    text = json_text(json_schema()) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        write_text_file(output, text, option="--output")
