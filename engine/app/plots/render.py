"""Result files to figures: what kind of result a file holds, the standard figures of each kind, writing
them, and ``dltsched plot RESULT.json -o DIR``."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from dltsched.engine.app.plots.accuracy import (
    QUANTITY_LABELS,
    accuracy_rows,
    plot_error_breakdown,
    plot_pred_vs_measured,
)
from dltsched.engine.app.plots.common import FORMATS, Result, pyplot, time_origin_s, time_unit
from dltsched.engine.app.plots.scaling import plot_solve_scaling
from dltsched.engine.app.plots.timeline import plot_gantt, plot_jct_cdf, plot_utilization
from dltsched.engine.domain.errors import ValidationError


def load_result(path: Path) -> Any:
    """A JSON result file, or a CSV as a list of row dicts."""
    if not path.is_file():
        raise ValidationError("RESULT", f"{path} does not exist; give a JSON (or CSV) result file")
    from dltsched.engine.domain.limits import read_limited

    text = read_limited(path, "RESULT").decode("utf-8")
    if path.suffix.lower() == ".csv":
        return list(csv.DictReader(io.StringIO(text, newline="")))
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValidationError("RESULT", f"{path} is not valid JSON ({err})") from None


def result_kind(data: Any) -> str:
    """``simulation`` | ``accuracy`` | ``scaling`` | ``experiment`` for a loaded result; a result whose rows
    are not a list of objects raises :class:`ValidationError` naming the field."""
    if isinstance(data, Mapping) and "runs" in data and "summary" in data:
        return "experiment"
    rows = data["rows"] if isinstance(data, Mapping) and "rows" in data else data
    if isinstance(data, Mapping) and "rows" in data and not isinstance(rows, list):
        raise ValidationError("rows", f"{type(rows).__name__} not understood; a list of result rows")
    if isinstance(rows, list):
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise ValidationError(f"rows[{i}]" if rows is not data else f"[{i}]",
                                      f"{type(row).__name__} not understood; a result row is an object")
    first = rows[0] if isinstance(rows, list) and rows else rows
    if isinstance(first, Mapping):
        if "avg_jct_s" in first or "records" in first:
            return "simulation"
        if "predicted" in first or "predicted_s" in first:
            return "accuracy"
        if "solve_time_s" in first:
            return "scaling"
    raise ValidationError("RESULT", "not a simulate --json, experiment results.json, predict eval-steptime/"
                          "eval-colocation --json, predicted/measured or bench solve --json result")


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")
    jct_s: float
    arrival_s: float


class _Placement(BaseModel):
    model_config = ConfigDict(extra="allow")
    job_id: str
    gpus: list[int] = Field(min_length=1)
    start_s: float
    end_s: float
    freeze_level: int = 0


class _Run(BaseModel):
    """The fields of a simulation result that the figures read (others are let through)."""

    model_config = ConfigDict(extra="allow")
    policy: str = ""
    records: list[_Record] = []
    utilization: list[tuple[float, float]] = []
    placements: list[_Placement] = []
    gpu_util: float | None = None


def check_runs(runs: Sequence[Any], path: str) -> None:
    """Each simulation result in ``runs`` has the fields the figures read, of the right types; else a
    :class:`ValidationError` naming the first wrong field (``rows[0].records``)."""
    for i, run in enumerate(runs):
        try:
            _Run.model_validate(run)
        except pydantic.ValidationError as err:
            first = err.errors()[0]
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
            head = path if path is not None and len(runs) == 1 and path == "" else f"{path}[{i}]"
            raise ValidationError((head + where).lstrip("."),
                                  f"{first['msg']}; plot reads simulate --json --records output") from None


def accuracy_figures(data: Any) -> dict[str, Any]:
    """Predicted vs measured (one colour per GPU) and the error per GPU and per model, for each quantity of
    an accuracy result (step time; co-located speed, memory and utilisation; or plain pairs)."""
    rows, what = accuracy_rows(data)
    quantities = list(dict.fromkeys(r["quantity"] for r in rows))
    figs: dict[str, Any] = {}
    for quantity in quantities:
        mine = [r for r in rows if r["quantity"] == quantity]
        suffix = "" if len(quantities) == 1 else f"_{safe_name(quantity)}"
        label = QUANTITY_LABELS.get(quantity, quantity)
        held = {r["held_out"] for r in mine}
        if held in ({True}, {False}):  # say what the figures are: predictions, or fits to their own data
            label += " (held out)" if held == {True} else " (fitted on these rows: in-sample)"
        coloured = mine if what == "predicted vs measured" else [r | {"group": r["gpu"] or "all"}
                                                                 for r in mine]
        fig = plot_pred_vs_measured(coloured, quantity=QUANTITY_LABELS.get(quantity, quantity))
        fig.axes[0].set_title(f"{what}: {label}", fontsize="medium")
        figs[f"pred_vs_measured{suffix}"] = fig
        if any(r["gpu"] or r["model"] for r in mine):
            figs[f"error_by_gpu_and_model{suffix}"] = plot_error_breakdown(mine, quantity=quantity,
                                                                           title=f"{what}: {label}")
    return figs


def check_simulation_results(results: Sequence[Any], where: str = "RESULT") -> None:
    """The fields the figures read, in the shape ``simulate --json --records`` writes them: ``records`` a list
    of objects with numbers ``jct_s`` and ``arrival_s``, ``utilization`` a list of [time, fraction] pairs,
    ``placements`` a list of objects with ``job_id``, ``gpus`` (integers), ``start_s`` and ``end_s``.

    Raises
    ------
    ValidationError
        Naming the first field out of shape, e.g. ``RESULT: [0].records: 'abc' not understood; ...``.
    """
    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)

    def fail(path: str, value: Any, rule: str) -> ValidationError:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        return ValidationError(where, f"{path}: {shown} not understood; {rule}")

    shapes: dict[str, tuple[str, Callable[[Any], bool]]] = {
        "records": ("a list of objects with numbers jct_s and arrival_s",
                    lambda x: isinstance(x, Mapping) and number(x.get("jct_s"))
                    and number(x.get("arrival_s"))),
        "utilization": ("a list of [time_s, fraction] number pairs",
                        lambda x: isinstance(x, list) and len(x) == 2 and all(map(number, x))),
        "placements": ("a list of objects with job_id, gpus (integers), start_s and end_s",
                       lambda x: isinstance(x, Mapping) and isinstance(x.get("job_id"), str)
                       and number(x.get("start_s")) and number(x.get("end_s"))
                       and isinstance(x.get("gpus"), list) and bool(x["gpus"])
                       and all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 1_000_000
                               for g in x["gpus"])
                       and (x.get("freeze_level") is None or number(x["freeze_level"]))),
    }
    for i, r in enumerate(results):
        prefix = f"[{i}]" if len(results) > 1 else ""
        if not isinstance(r, Mapping):
            raise fail(prefix or "result", r, "each result must be a JSON object")
        if not isinstance(r.get("policy", ""), str):
            raise fail(f"{prefix}.policy".lstrip("."), r["policy"], "must be a string")
        for name, (rule, ok) in shapes.items():
            value = r.get(name)
            if value is None:
                continue
            path = f"{prefix}.{name}".lstrip(".")
            if not isinstance(value, list):
                raise fail(path, value, f"must be {rule}")
            for k, item in enumerate(value):
                if not ok(item):
                    raise fail(f"{path}[{k}]", item, f"{name} must be {rule}")


def simulation_figures(results: Sequence[Result], *, gpu_types: Sequence[str] | None = None,
                       wanted: Sequence[str] = ("jct_cdf", "utilization", "gantt")) -> dict[str, Any]:
    """JCT CDF, utilisation and one Gantt chart per policy, all time axes from one origin."""
    check_simulation_results(results)
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
            figs[f"gantt_{safe_name(str(r['policy']))}"] = plot_gantt(r, gpu_types=gpu_types, t0_s=origin,
                                                                      unit=unit)
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
        if not isinstance(data["runs"], list):
            raise ValidationError("runs", f"{type(data['runs']).__name__} not understood; a list of runs")
        check_runs(data["runs"], "runs")
        return experiment_figures(data["runs"], gpu_types=gpu_types or data.get("gpu_types"))
    rows = data["rows"] if isinstance(data, Mapping) and "rows" in data else data
    if kind == "accuracy":
        return accuracy_figures(data)
    if kind == "scaling":
        return {"solve_scaling": plot_solve_scaling(rows)}
    runs = [rows] if isinstance(rows, Mapping) else list(rows)
    check_runs(runs,
               "rows" if isinstance(data, Mapping) and "rows" in data else "" if isinstance(rows, Mapping)
               else "RESULT")
    figs = simulation_figures(runs, gpu_types=gpu_types)
    if not figs:
        raise ValidationError("RESULT",
                              "has no records, utilisation or placements; run simulate --json --records")
    return figs


def safe_name(name: str) -> str:
    """``name`` with every character but letters, digits, ``-`` and ``_`` replaced by ``_`` (for file
    names)."""
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
    data = load_result(Path(result_path))
    try:
        figs = figures_for(data, gpu_types=types)
    # a shape no check above foresaw: one line
    except (KeyError, TypeError, IndexError, AttributeError) as err:
        raise ValidationError("RESULT",
                              f"{result_path} is malformed ({type(err).__name__}: {str(err)[:120]}); "
                              "give a result file as the commands write it") from None
    return save_figures(figs, Path(out_dir), fmt)


@click.command("plot")
@click.argument("result", metavar="RESULT.json", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default="figures",
              show_default=True)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="png", show_default=True)
@click.option("--instance", "instance", type=click.Path(dir_okay=False),
              help="Instance file the result was simulated on: labels Gantt rows with GPU types.")
@click.option("--json", "as_json", is_flag=True, help="List the written files as JSON.")
def plot(result: str, out_dir: str, fmt: str, instance: str | None, as_json: bool) -> None:
    """Render the standard figures of a simulate / experiment / accuracy / bench-solve result to PNG or
    SVG."""
    from dltsched.engine.app.cli.main import emit

    paths = render(result, out_dir, fmt, instance=instance)
    files = [{"path": str(p), "bytes": p.stat().st_size} for p in paths]
    emit({"files": files}, as_json, lambda: click.echo("\n".join(str(p) for p in paths)))
