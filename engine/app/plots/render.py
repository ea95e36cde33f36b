"""Result files to figures: what kind of result a file holds, the standard figures of each kind, writing
them, and ``dltsched plot RESULT.json -o DIR``."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from dltsched.engine.app.plots.accuracy import plot_pred_vs_measured
from dltsched.engine.app.plots.common import FORMATS, Result, pyplot, time_origin_s, time_unit
from dltsched.engine.app.plots.scaling import plot_solve_scaling
from dltsched.engine.app.plots.timeline import plot_gantt, plot_jct_cdf, plot_utilization
from dltsched.engine.domain.errors import ValidationError


def load_result(path: Path) -> Any:
    """A JSON result file, or a CSV as a list of row dicts."""
    if not path.is_file():
        raise ValidationError("RESULT", f"{path} does not exist; give a JSON (or CSV) result file")
    if path.suffix.lower() == ".csv":
        with path.open(newline="") as fh:
            return list(csv.DictReader(fh))
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValidationError("RESULT", f"{path} is not valid JSON ({err})") from None


def result_kind(data: Any) -> str:
    """``simulation`` | ``accuracy`` | ``scaling`` | ``experiment`` for a loaded result."""
    if isinstance(data, Mapping) and "runs" in data and "summary" in data:
        return "experiment"
    if isinstance(data, Mapping) and "rows" in data:
        data = data["rows"]
    first = data[0] if isinstance(data, list) and data else data
    if isinstance(first, Mapping):
        if "avg_jct_s" in first or "records" in first:
            return "simulation"
        if "predicted" in first and "measured" in first:
            return "accuracy"
        if "solve_time_s" in first:
            return "scaling"
    raise ValidationError("RESULT", "not a simulate --json, experiment results.json, predicted/measured or "
                          "bench solve --json result")


def simulation_figures(results: Sequence[Result], *, gpu_types: Sequence[str] | None = None,
                       wanted: Sequence[str] = ("jct_cdf", "utilization", "gantt")) -> dict[str, Any]:
    """JCT CDF, utilisation and one Gantt chart per policy, all time axes from one origin."""
    origin = time_origin_s(results)
    ends = [p["end_s"] for r in results for p in r.get("placements", ())]
    ends += [r["utilization"][-1][0] for r in results if r.get("utilization")]
    unit, _ = time_unit(max(ends, default=origin) - origin)
    figs: dict[str, Any] = {}
    if "jct_cdf" in wanted and any(r.get("records") for r in results):
        figs["jct_cdf"] = plot_jct_cdf(results)
    if "utilization" in wanted and any(r.get("utilization") for r in results):
        figs["utilization"] = plot_utilization(results, t0_s=origin, unit=unit)
    for r in results:
        if "gantt" in wanted and r.get("placements"):
            figs[f"gantt_{safe_name(str(r['policy']))}"] = plot_gantt(r, gpu_types=gpu_types, t0_s=origin, unit=unit)
    return figs


def experiment_figures(runs: Sequence[Result], *, gpu_types: Sequence[str] | None = None,
                       wanted: Sequence[str] = ("jct_cdf", "utilization", "gantt")) -> dict[str, Any]:
    """Figures of runs of several policies and seeds (``policy`` and ``seed`` in each): the JCT CDF pools
    every seed's jobs per policy; utilisation and Gantt charts show the first seed."""
    if not runs:
        raise ValidationError("runs", "empty; the experiment has no runs")
    first = [r for r in runs if r["seed"] == runs[0]["seed"]]
    figs = simulation_figures(first, gpu_types=gpu_types, wanted=[w for w in wanted if w != "jct_cdf"])
    if "jct_cdf" in wanted:
        pooled: dict[str, list[Any]] = defaultdict(list)
        for r in runs:
            pooled[str(r["policy"])].extend(r.get("records", ()))
        figs["jct_cdf"] = plot_jct_cdf([{"policy": p, "records": recs} for p, recs in pooled.items()])
    return figs


def figures_for(data: Any, *, gpu_types: Sequence[str] | None = None) -> dict[str, Any]:
    """Figure name -> matplotlib figure for every standard figure the result supports. ``gpu_types``
    (GPU index -> type) labels Gantt rows; an experiment's results.json carries its own."""
    kind = result_kind(data)
    if kind == "experiment":
        return experiment_figures(data["runs"], gpu_types=gpu_types or data.get("gpu_types"))
    rows = data["rows"] if isinstance(data, Mapping) and "rows" in data else data
    if kind == "accuracy":
        return {"pred_vs_measured": plot_pred_vs_measured(rows)}
    if kind == "scaling":
        return {"solve_scaling": plot_solve_scaling(rows)}
    figs = simulation_figures([rows] if isinstance(rows, Mapping) else list(rows), gpu_types=gpu_types)
    if not figs:
        raise ValidationError("RESULT", "has no records, utilisation or placements; run simulate --json --records")
    return figs


def safe_name(name: str) -> str:
    """``name`` with every character but letters, digits, ``-`` and ``_`` replaced by ``_`` (for file names)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def save_figures(figs: Mapping[str, Any], out_dir: Path, fmt: str = "png") -> list[Path]:
    """Write each figure as ``out_dir/<name>.<fmt>`` and close it; returns the paths."""
    if fmt not in FORMATS:
        raise ValidationError("--format", f"'{fmt}' not understood; one of {', '.join(FORMATS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    plt = pyplot()
    for name, fig in figs.items():
        path = out_dir / f"{name}.{fmt}"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def gpu_types_of(instance_path: str | Path) -> list[str]:
    """GPU index -> GPU type of the cluster of an instance file."""
    from dltsched.engine.app.api import load_instance_file

    cluster = load_instance_file(instance_path).cluster
    return [cluster.gpu_type_of(g) for g in range(cluster.num_gpus)]


def render(result_path: str | Path, out_dir: str | Path, fmt: str = "png", *,
           instance: str | Path | None = None) -> list[Path]:
    """Render every standard figure of a result file into ``out_dir``; ``instance`` (the instance file
    the result was simulated on) labels Gantt rows with GPU types."""
    types = gpu_types_of(instance) if instance is not None else None
    return save_figures(figures_for(load_result(Path(result_path)), gpu_types=types), Path(out_dir), fmt)


@click.command("plot")
@click.argument("result", metavar="RESULT.json", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default="figures", show_default=True)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="png", show_default=True)
@click.option("--instance", "instance", type=click.Path(dir_okay=False),
              help="Instance file the result was simulated on: labels Gantt rows with GPU types.")
@click.option("--json", "as_json", is_flag=True, help="List the written files as JSON.")
def plot(result: str, out_dir: str, fmt: str, instance: str | None, as_json: bool) -> None:
    """Render the standard figures of a simulate / experiment / accuracy / bench-solve result to PNG or SVG."""
    from dltsched.engine.app.cli.main import emit

    paths = render(result, out_dir, fmt, instance=instance)
    files = [{"path": str(p), "bytes": p.stat().st_size} for p in paths]
    emit({"files": files}, as_json, lambda: click.echo("\n".join(str(p) for p in paths)))
