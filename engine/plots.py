"""Standard figures (matplotlib, Agg) and ``dltsched plot RESULT.json -o DIR``.

Inputs are the JSON the other commands write:

- ``simulate --json --records`` (one dict or a list of per-policy dicts with ``records``, ``utilization``
  and ``placements``): JCT CDF per policy, utilisation over time, a per-GPU Gantt chart per policy
  (co-located jobs share a GPU row; hatched bars are frozen, labelled ``f<level>``).
- pairs of predicted and measured values (JSON list of ``{"predicted", "measured"[, "group"]}``, or a CSV
  with those columns): predicted-vs-measured scatter.
- ``bench solve --json`` (``{"rows": [{"size": "200x256", "backend", "solve_time_s", ...}]}``): solve time
  vs size per backend.
"""

from __future__ import annotations

import csv
import json
import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from dltsched.engine.errors import ValidationError

FORMATS = ("png", "svg")
Result = Mapping[str, Any]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _axes(ax: Any, size: tuple[float, float] = (6.4, 4.0)) -> tuple[Any, Any]:
    if ax is not None:
        return ax.figure, ax
    fig, new = _pyplot().subplots(figsize=size, constrained_layout=True)
    return fig, new


def plot_jct_cdf(results: Sequence[Result], ax: Any = None) -> Any:
    """Empirical CDF of job completion time (hours), one line per policy."""
    fig, ax = _axes(ax)
    for r in results:
        jct_h = sorted(rec["jct_s"] / 3600.0 for rec in r.get("records", ()))
        if jct_h:
            ax.step(jct_h, [(i + 1) / len(jct_h) for i in range(len(jct_h))], where="post",
                    label=f"{r['policy']} (avg {sum(jct_h) / len(jct_h):.2f} h)")
    ax.set(xlabel="job completion time (h)", ylabel="fraction of jobs", title="JCT CDF", ylim=(0, 1.02))
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def plot_utilization(results: Sequence[Result], ax: Any = None) -> Any:
    """Fraction of GPUs busy over time (hours), one line per policy."""
    fig, ax = _axes(ax)
    for r in results:
        trace = r.get("utilization") or []
        if trace:
            t0 = trace[0][0]
            ax.step([(t - t0) / 3600.0 for t, _ in trace], [u for _, u in trace], where="post",
                    label=f"{r['policy']} (mean {r.get('gpu_util', float('nan')):.0%})")
    ax.set(xlabel="time since first arrival (h)", ylabel="GPUs busy (fraction)", title="GPU utilisation",
           ylim=(0, 1.05))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def _lanes(intervals: list[Mapping[str, Any]]) -> dict[int, int]:
    """Interval index -> lane within its GPU row, so that co-located (overlapping) jobs do not cover each other."""
    lane_of: dict[int, int] = {}
    ends: list[float] = []
    for i in sorted(range(len(intervals)), key=lambda i: intervals[i]["start_s"]):
        lane = next((k for k, end in enumerate(ends) if end <= intervals[i]["start_s"] + 1e-9), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = intervals[i]["end_s"]
        lane_of[i] = lane
    return lane_of


def plot_gantt(result: Result, *, max_gpus: int = 32, ax: Any = None) -> Any:
    """Per-GPU Gantt chart of ``result["placements"]``: a bar per job and GPU, coloured by job; jobs that
    share a GPU stack inside its row; hatched bars run with frozen layers (``f<level>``)."""
    placements = result.get("placements") or []
    if not placements:
        raise ValidationError("placements", f"policy '{result.get('policy')}' has no placement intervals; "
                              "run simulate with --records")
    by_gpu: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for p in placements:
        for g in p["gpus"]:
            if g < max_gpus:
                by_gpu[g].append(p)
    t0 = min(p["start_s"] for p in placements)
    cmap = _pyplot().get_cmap("tab20")
    fig, ax = _axes(ax, (10.0, max(3.0, 0.28 * len(by_gpu) + 1.5)))
    for g, intervals in sorted(by_gpu.items()):
        lanes = _lanes(intervals)
        depth = max(lanes.values()) + 1
        for i, p in enumerate(intervals):
            height = 0.8 / depth
            y = g - 0.4 + lanes[i] * height
            level = int(p.get("freeze_level", 0))
            ax.broken_barh([((p["start_s"] - t0) / 3600.0, (p["end_s"] - p["start_s"]) / 3600.0)], (y, height),
                           facecolors=cmap(zlib.crc32(p["job_id"].encode()) % 20), edgecolor="black", linewidth=0.2,
                           hatch="///" if level else None)
    ax.set(xlabel="time since first start (h)", ylabel="GPU", title=f"{result.get('policy', '')}: placements per GPU "
           "(stacked = co-located, hatched = frozen layers)")
    ax.set_ylim(-0.6, max(by_gpu) + 0.6 if by_gpu else 0.6)
    ax.invert_yaxis()
    return fig


def _mape(pairs: Sequence[tuple[float, float]]) -> float:
    errs = [abs(p - m) / abs(m) for p, m in pairs if m]
    return sum(errs) / len(errs) if errs else float("nan")


def plot_pred_vs_measured(rows: Sequence[Mapping[str, Any]], *, quantity: str = "value", ax: Any = None) -> Any:
    """Predicted vs measured scatter with the y = x line; MAPE per ``group`` in the legend."""
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for i, r in enumerate(rows):
        try:
            groups[str(r.get("group", "all"))].append((float(r["predicted"]), float(r["measured"])))
        except (KeyError, TypeError, ValueError):
            raise ValidationError(f"rows[{i}]", "needs numeric 'predicted' and 'measured'") from None
    if not groups:
        raise ValidationError("rows", "empty; give at least one predicted/measured pair")
    fig, ax = _axes(ax, (5.0, 5.0))
    for name, pairs in sorted(groups.items()):
        ax.scatter([m for _, m in pairs], [p for p, _ in pairs], s=12, alpha=0.7,
                   label=f"{name} (MAPE {_mape(pairs):.1%}, n={len(pairs)})")
    values = [v for pairs in groups.values() for pair in pairs for v in pair]
    lo, hi = min(values), max(values)
    ax.plot([lo, hi], [lo, hi], color="grey", linestyle="--", linewidth=1)
    ax.set(xlabel=f"measured {quantity}", ylabel=f"predicted {quantity}", title="predicted vs measured")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def _size_jobs(row: Mapping[str, Any]) -> float:
    if "num_jobs" in row:
        return float(row["num_jobs"])
    return float(str(row["size"]).lower().split("x")[0])


def plot_solve_scaling(rows: Sequence[Mapping[str, Any]], ax: Any = None) -> Any:
    """Solve time vs number of jobs, one line per backend (log-log); build time dashed."""
    series: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for i, r in enumerate(rows):
        try:
            series[str(r.get("backend", "?"))].append(
                (_size_jobs(r), float(r["solve_time_s"]), float(r.get("build_time_s") or 0.0)))
        except (KeyError, ValueError, TypeError):
            raise ValidationError(f"rows[{i}]", "needs 'size' (JOBSxGPUS) or 'num_jobs', and 'solve_time_s'") from None
    fig, ax = _axes(ax)
    for backend, points in sorted(series.items()):
        points.sort()
        line = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{backend} solve")
        ax.plot([p[0] for p in points], [p[2] for p in points], linestyle="--", color=line[0].get_color(),
                label=f"{backend} build")
    ax.set(xlabel="jobs in the round", ylabel="time (s)", title="solve time vs size")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    return fig


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
    """``simulation`` | ``accuracy`` | ``scaling`` for a loaded result."""
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
    raise ValidationError("RESULT", "not a simulate --json, predicted/measured or bench solve --json result")


def figures_for(data: Any) -> dict[str, Any]:
    """Figure name -> matplotlib figure for every standard figure the result supports."""
    kind = result_kind(data)
    rows = data["rows"] if isinstance(data, Mapping) and "rows" in data else data
    if kind == "accuracy":
        return {"pred_vs_measured": plot_pred_vs_measured(rows)}
    if kind == "scaling":
        return {"solve_scaling": plot_solve_scaling(rows)}
    results = [data] if isinstance(data, Mapping) else list(data)
    figs: dict[str, Any] = {}
    if any(r.get("records") for r in results):
        figs["jct_cdf"] = plot_jct_cdf(results)
    if any(r.get("utilization") for r in results):
        figs["utilization"] = plot_utilization(results)
    for r in results:
        if r.get("placements"):
            figs[f"gantt_{_safe(str(r['policy']))}"] = plot_gantt(r)
    if not figs:
        raise ValidationError("RESULT", "has no records, utilisation or placements; run simulate --json --records")
    return figs


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def save_figures(figs: Mapping[str, Any], out_dir: Path, fmt: str = "png") -> list[Path]:
    """Write each figure as ``out_dir/<name>.<fmt>`` and close it; returns the paths."""
    if fmt not in FORMATS:
        raise ValidationError("--format", f"'{fmt}' not understood; one of {', '.join(FORMATS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    plt = _pyplot()
    for name, fig in figs.items():
        path = out_dir / f"{name}.{fmt}"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def render(result_path: str | Path, out_dir: str | Path, fmt: str = "png") -> list[Path]:
    """Render every standard figure of a result file into ``out_dir``."""
    return save_figures(figures_for(load_result(Path(result_path))), Path(out_dir), fmt)


@click.command("plot")
@click.argument("result", metavar="RESULT.json", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default="figures", show_default=True)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="png", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="List the written files as JSON.")
def plot(result: str, out_dir: str, fmt: str, as_json: bool) -> None:
    """Render the standard figures of a simulate / accuracy / bench-solve result to PNG or SVG."""
    from dltsched.engine.cli import emit

    paths = render(result, out_dir, fmt)
    files = [{"path": str(p), "bytes": p.stat().st_size} for p in paths]
    emit({"files": files}, as_json, lambda: click.echo("\n".join(str(p) for p in paths)))


__all__ = ["figures_for", "plot_gantt", "plot_jct_cdf", "plot_pred_vs_measured", "plot_solve_scaling",
           "plot_utilization", "render", "save_figures"]
