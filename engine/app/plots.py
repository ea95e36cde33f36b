"""Standard figures (matplotlib, Agg) and ``dltsched plot RESULT.json -o DIR``.

Inputs are the JSON the other commands write:

- ``simulate --json --records`` (one dict or a list of per-policy dicts with ``records``, ``utilization``
  and ``placements``), or an experiment's ``results.json``: JCT CDF per policy (log axis), utilisation
  (one panel per policy, raw and smoothed), a per-GPU Gantt chart per policy (rows labelled by GPU id and
  type, co-located jobs in lanes of their GPU's row while they overlap, job ids on bars, hatched bars
  frozen, a long tail on a log axis). Every time axis starts at the first arrival of the whole result.
- pairs of predicted and measured values (JSON list of ``{"predicted", "measured"[, "group",
  "held_out"]}``, or a CSV with those columns): predicted-vs-measured on log axes, held-out points filled.
- ``bench solve --json`` (``{"rows": [{"size": "200x256", "backend", "solve_time_s", "objective", "gap"}]}``):
  solve and build time, objective and gap beside each other, per backend.
"""

from __future__ import annotations

import csv
import json
import math
import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from dltsched.engine.domain.errors import ValidationError

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


def time_origin_s(results: Sequence[Result]) -> float:
    """The one time origin of every time axis: the first arrival over all ``results`` (else the first
    utilisation sample or placement start), so that figures of different policies line up."""
    starts = [rec["arrival_s"] for r in results for rec in r.get("records", ())]
    starts += [trace[0][0] for r in results if (trace := r.get("utilization"))]
    starts += [p["start_s"] for r in results for p in r.get("placements", ())]
    return min(starts, default=0.0)


def plot_jct_cdf(results: Sequence[Result], ax: Any = None) -> Any:
    """Empirical CDF of job completion time (hours, log axis), one line per policy."""
    fig, ax = _axes(ax)
    for r in results:
        jct_h = sorted(rec["jct_s"] / 3600.0 for rec in r.get("records", ()))
        if jct_h:
            ax.step(jct_h, [(i + 1) / len(jct_h) for i in range(len(jct_h))], where="post",
                    label=f"{r['policy']} (avg {sum(jct_h) / len(jct_h):.2f} h)")
    ax.set(xlabel="job completion time (h, log scale)", ylabel="fraction of jobs", title="JCT CDF", ylim=(0, 1.02))
    ax.set_xscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    return fig


def _smoothed(times: Sequence[float], values: Sequence[float], window: float) -> tuple[list[float], list[float]]:
    """Time-weighted moving average of a step function (value held until the next sample) over
    ``window``, sampled on 200 points."""
    import numpy as np

    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    if len(t) < 2 or window <= 0:
        return list(t), list(v)
    area = np.concatenate([[0.0], np.cumsum(v[:-1] * np.diff(t))])  # integral of the step function up to t[i]

    def integral(x: Any) -> Any:
        i = np.clip(np.searchsorted(t, x, side="right") - 1, 0, len(t) - 1)
        return area[i] + v[i] * (x - t[i])

    grid = np.linspace(t[0], t[-1], 200)
    lo, hi = np.maximum(grid - window / 2, t[0]), np.minimum(grid + window / 2, t[-1])
    return list(grid), list((integral(hi) - integral(lo)) / np.maximum(hi - lo, 1e-12))


def plot_utilization(results: Sequence[Result], *, t0_s: float | None = None, smooth_fraction: float = 0.03,
                     unit: str | None = None) -> Any:
    """Fraction of GPUs busy over time: one panel per policy (shared axes, one time origin), the raw
    step trace light and its moving average (window ``smooth_fraction`` of the longest run) dark; time in
    ``unit`` (``min`` or ``h``; default: minutes for runs under 3 hours)."""
    runs = [r for r in results if r.get("utilization")]
    if not runs:
        raise ValidationError("utilization", "no utilisation trace; run simulate with --records")
    origin = time_origin_s(runs) if t0_s is None else t0_s
    span_s = max(r["utilization"][-1][0] - origin for r in runs)
    unit, per_s = _time_unit(span_s, unit)
    fig, axes = _pyplot().subplots(len(runs), 1, figsize=(8.0, 1.0 + 1.5 * len(runs)), sharex=True, sharey=True,
                                   squeeze=False, constrained_layout=True)
    cmap = _pyplot().get_cmap("tab10")
    for i, (r, ax) in enumerate(zip(runs, axes[:, 0], strict=True)):
        times = [(t - origin) / per_s for t, _ in r["utilization"]]
        values = [u for _, u in r["utilization"]]
        ax.step(times, values, where="post", color=cmap(i % 10), alpha=0.3, linewidth=0.8, label="busy GPUs")
        ax.plot(*_smoothed(times, values, smooth_fraction * span_s / per_s), color=cmap(i % 10), linewidth=1.8,
                label=f"moving average ({_duration(smooth_fraction * span_s)})")
        mean = r.get("gpu_util")
        ax.set_title(f"{r['policy']}" + (f": mean {mean:.0%} of GPUs busy until its last job ends"
                                         if mean is not None else ""), fontsize="medium", loc="left")
        ax.set(ylabel="busy (fraction)", ylim=(0, 1.05))
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize="small", loc="upper right")
    axes[-1, 0].set_xlabel(f"time since first arrival ({unit})")
    fig.suptitle("GPU utilisation")
    return fig


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else (f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h")


def _time_unit(span_s: float, unit: str | None = None) -> tuple[str, float]:
    """(``unit``, seconds per unit): ``unit`` when given, else minutes for spans under 3 hours, else hours."""
    units = {"min": 60.0, "h": 3600.0}
    if unit is None:
        unit = "min" if span_s < 3 * 3600.0 else "h"
    if unit not in units:
        raise ValidationError("unit", f"'{unit}' not understood; one of {', '.join(units)}")
    return unit, units[unit]


def _lanes(intervals: Sequence[Mapping[str, Any]]) -> dict[int, tuple[int, int]]:
    """Interval index -> (lane, lanes) within its GPU row: intervals that overlap in time (co-located
    jobs) share the row in lanes; an interval alone on its GPU gets the whole row."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i]["start_s"], intervals[i]["end_s"]))
    out: dict[int, tuple[int, int]] = {}
    cluster: list[int] = []
    ends: list[float] = []  # lane -> end of its last interval, within the current cluster
    cluster_end = -math.inf

    def close() -> None:
        for i in cluster:
            out[i] = (out[i][0], len(ends))

    for i in order:
        start, end = intervals[i]["start_s"], intervals[i]["end_s"]
        if start >= cluster_end - 1e-9:  # a new cluster of overlapping intervals
            close()
            cluster, ends, cluster_end = [], [], end
        lane = next((k for k, e in enumerate(ends) if e <= start + 1e-9), len(ends))
        if lane == len(ends):
            ends.append(end)
        ends[lane] = end
        cluster.append(i)
        out[i] = (lane, 0)
        cluster_end = max(cluster_end, end)
    close()
    return out


def _tail_start(placements: Sequence[Mapping[str, Any]], origin: float, per_s: float) -> float | None:
    """Where a long tail starts: the time by which 90% of the placement intervals have ended, when the
    last one ends more than 1.5 times later; else ``None`` (a linear axis reads fine)."""
    ends = sorted((p["end_s"] - origin) / per_s for p in placements)
    t90 = ends[int(0.9 * (len(ends) - 1))]
    return t90 if t90 > 0 and ends[-1] > 1.5 * t90 else None


def plot_gantt(result: Result, *, max_gpus: int = 32, gpu_types: Sequence[str] | None = None,
               t0_s: float | None = None, unit: str | None = None, ax: Any = None) -> Any:
    """Per-GPU Gantt chart of ``result["placements"]``: one row per GPU, labelled with its id and type
    (``gpu_types[g]``, or ``result["gpu_types"]``); a bar per job, labelled with the job id where it fits;
    a set of overlapping bars (co-located jobs) shares its GPU's row in lanes; hatched bars run with frozen
    layers. A long tail (the last jobs ending far after most) is drawn on a log time axis beyond the
    point where 90% of the bars have ended. Time in ``unit`` (``min`` or ``h``; default: minutes for
    schedules under 3 hours)."""
    placements = result.get("placements") or []
    if not placements:
        raise ValidationError("placements", f"policy '{result.get('policy')}' has no placement intervals; "
                              "run simulate with --records")
    types = list(gpu_types if gpu_types is not None else result.get("gpu_types") or [])
    by_gpu: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for p in placements:
        for g in p["gpus"]:
            if g < max_gpus:
                by_gpu[g].append(p)
    num_gpus = max(len(types), max(g for p in placements for g in p["gpus"]) + 1)
    rows = list(range(min(num_gpus, max_gpus)))
    origin = time_origin_s([result]) if t0_s is None else t0_s
    cmap = _pyplot().get_cmap("tab20")
    fig, ax = _axes(ax, (11.0, max(3.0, 0.34 * len(rows) + 1.6)))
    unit, per_s = _time_unit(max(p["end_s"] for p in placements) - origin, unit)
    end_t = max((p["end_s"] - origin) / per_s for p in placements)
    tail_t = _tail_start(placements, origin, per_s)
    if tail_t is not None:
        _tail_axis(ax, tail_t, end_t * 1.02)
    ax.set_xlim(0, end_t * 1.02)
    fig.canvas.draw()
    width_pt = ax.get_window_extent().width * 72.0 / fig.dpi
    x_lo, x_ti = (ax.transData.transform((x, 0))[0] for x in (0.0, end_t * 1.02))
    pt_per_px = width_pt / max(x_ti - x_lo, 1.0)
    bars: dict[bool, tuple[list[Any], list[Any]]] = {False: ([], []), True: ([], [])}  # frozen -> verts, colours
    labels: list[tuple[float, float, float, str, float, bool]] = []  # start, stop, y, text, size, frozen
    for row, g in enumerate(rows):
        if row % 2:
            ax.axhspan(row - 0.5, row + 0.5, color="0.94", zorder=0)
        intervals = by_gpu.get(g, [])
        lanes = _lanes(intervals)
        for i, p in enumerate(intervals):
            lane, depth = lanes[i]
            height = 0.84 / depth
            y = row - 0.42 + lane * height
            start_t, stop_t = (p["start_s"] - origin) / per_s, (p["end_s"] - origin) / per_s
            level = int(p.get("freeze_level", 0))
            verts, colours = bars[bool(level)]
            verts.append([(start_t, y), (stop_t, y), (stop_t, y + height), (start_t, y + height)])
            colours.append(cmap(zlib.crc32(p["job_id"].encode()) % 20))
            labels.append((start_t, stop_t, y + height / 2, str(p["job_id"]) + (f" f{level}" if level else ""),
                           min(7.0, 0.8 * height * 0.34 * 72.0 * 0.8), bool(level)))
    from matplotlib.collections import PolyCollection

    for frozen, (verts, colours) in bars.items():  # one collection per kind: thousands of bars stay fast
        if verts:
            ax.add_collection(PolyCollection(verts, facecolors=colours, edgecolors="black", linewidths=0.3,
                                             hatch="///" if frozen else None, zorder=2))
    if labels:
        import numpy as np

        ends = np.array([(lo, hi) for lo, hi, *_ in labels], dtype=float)
        pix = ax.transData.transform(np.column_stack([ends.ravel(), np.zeros(ends.size)]))[:, 0].reshape(-1, 2)
        mids = ax.transData.inverted().transform(np.column_stack([pix.mean(axis=1), np.zeros(len(pix))]))[:, 0]
        for (_lo, _hi, y, text, size, frozen), (px0, px1), mid in zip(labels, pix, mids, strict=True):
            if abs(px1 - px0) * pt_per_px > 0.62 * size * len(text) + 2:  # the job id fits on its bar
                ax.text(mid, y, text, ha="center", va="center", fontsize=size, zorder=3, clip_on=True,
                        bbox={"facecolor": "white", "alpha": 0.7, "pad": 0.6, "linewidth": 0} if frozen else None)
    ax.set_yticks(rows, [f"GPU {g}" + (f" · {types[g]}" if g < len(types) else "") for g in rows],
                  fontsize="small")
    for row in range(1, len(rows)):
        if len(types) > rows[row] and types[rows[row]] != types[rows[row - 1]]:
            ax.axhline(row - 0.5, color="black", linewidth=0.8)
    shown = "" if len(rows) == num_gpus else f" (first {len(rows)} of {num_gpus} GPUs)"
    ax.set(xlabel=f"time since first arrival ({unit})" + (f"; log scale after {tail_t:.0f} {unit}" if tail_t and tail_t >= 100 else f"; log scale after {tail_t:.3g} {unit}" if tail_t else ""),
           ylabel="GPU · type", title=f"{result.get('policy', '')}: jobs per GPU{shown}\n"
           "lanes = co-located jobs, hatched = frozen layers (f<level>)")
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(axis="x", alpha=0.3)
    return fig


def _tail_axis(ax: Any, linear_until: float, end: float) -> None:
    """A time axis linear up to ``linear_until`` (about 3/4 of the width) and logarithmic after it,
    with ticks at round values on both parts and a dotted line where the scale changes."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator

    ax.set_xscale("symlog", linthresh=linear_until, linscale=max(0.2, 3.0 * math.log10(end / linear_until)))
    ticks = [t for t in MaxNLocator(nbins=8).tick_values(0.0, linear_until) if 0.0 <= t <= linear_until]
    decade = 10 ** math.floor(math.log10(linear_until))
    ticks += [m * d for d in (decade, 10 * decade, 100 * decade) for m in (1, 1.5, 2, 3, 5, 7)
              if 1.15 * linear_until < m * d <= end]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.axvline(linear_until, color="grey", linestyle=":", linewidth=1)


def _mape(pairs: Sequence[tuple[float, float]]) -> float:
    errs = [abs(p - m) / abs(m) for p, m in pairs if m]
    return sum(errs) / len(errs) if errs else float("nan")


def _held_out(value: Any) -> bool | None:
    """``True``/``False`` from a ``held_out`` field (bool, 1/0, true/false, yes/no); ``None`` when absent."""
    if value is None or value == "":
        return None
    return str(value).strip().lower() in ("1", "true", "yes", "held_out", "held-out", "test")


def plot_pred_vs_measured(rows: Sequence[Mapping[str, Any]], *, quantity: str = "value", ax: Any = None) -> Any:
    """Predicted vs measured on log axes (linear when a value is <= 0) with y = x and a +-20% band; one
    colour per ``group``. Rows whose ``held_out`` is true (predictions for data the predictor was not
    fitted on) are filled markers, rows fitted on are hollow; rows without the field make no claim
    either way (filled, no qualifier in the legend). The legend gives each set's MAPE."""
    groups: dict[str, dict[bool | None, list[tuple[float, float]]]] = defaultdict(
        lambda: {True: [], False: [], None: []})
    for i, r in enumerate(rows):
        try:
            pair = (float(r["predicted"]), float(r["measured"]))
        except (KeyError, TypeError, ValueError):
            raise ValidationError(f"rows[{i}]", "needs numeric 'predicted' and 'measured'") from None
        groups[str(r.get("group", "all"))][_held_out(r.get("held_out"))].append(pair)
    if not groups:
        raise ValidationError("rows", "empty; give at least one predicted/measured pair")
    values = [v for g in groups.values() for pairs in g.values() for pair in pairs for v in pair]
    log = min(values) > 0
    marked = any(parts[True] or parts[False] for parts in groups.values())
    fig, ax = _axes(ax, (6.0, 6.0))
    cmap = _pyplot().get_cmap("tab10")
    for k, (name, parts) in enumerate(sorted(groups.items())):
        colour = cmap(k % 10)
        for held in (True, False, None):
            pairs = parts[held]
            if pairs:
                what = {True: ", held out", False: ", fitted on", None: ""}[held]
                ax.scatter([m for _, m in pairs], [p for p, _ in pairs], s=18, alpha=0.8,
                           facecolors="none" if held is False else colour, edgecolors=colour, linewidths=1.0,
                           label=f"{name}{what}: MAPE {_mape(pairs):.1%} (n={len(pairs)})")
    lo, hi = min(values), max(values)
    ax.plot([lo, hi], [lo, hi], color="grey", linestyle="--", linewidth=1, label="y = x")
    ax.fill_between([lo, hi], [0.8 * lo, 0.8 * hi], [1.2 * lo, 1.2 * hi], color="grey", alpha=0.12,
                    label="within 20%")
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    scale = " (log scale)" if log else ""
    ax.set(xlabel=f"measured {quantity}{scale}", ylabel=f"predicted {quantity}{scale}",
           title="predicted vs measured" + (" (filled = held out, hollow = fitted on)" if marked else ""))
    ax.set_aspect("equal", adjustable="datalim")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="x-small")
    return fig


def _size_jobs(row: Mapping[str, Any]) -> float:
    if "num_jobs" in row:
        return float(row["num_jobs"])
    return float(str(row["size"]).lower().split("x")[0])


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _log_jobs_axis(ax: Any) -> None:
    """A log x axis labelled at 1, 2 and 5 times powers of ten, in plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_solve_scaling(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Three panels over the number of jobs in the round, one line per backend: solve time (solid) and
    build time (dashed) on log axes; the objective reached; the relative gap at the end (%)."""
    series: dict[str, list[tuple[float, float, float, float | None, float | None]]] = defaultdict(list)
    for i, r in enumerate(rows):
        try:
            series[str(r.get("backend", "?"))].append(
                (_size_jobs(r), float(r["solve_time_s"]), float(r.get("build_time_s") or 0.0),
                 _number(r.get("objective")), _number(r.get("gap"))))
        except (KeyError, ValueError, TypeError):
            raise ValidationError(f"rows[{i}]", "needs 'size' (JOBSxGPUS) or 'num_jobs', and 'solve_time_s'") from None
    fig, (t_ax, o_ax, g_ax) = _pyplot().subplots(1, 3, figsize=(14.0, 4.2), sharex=True, constrained_layout=True)
    for backend, points in sorted(series.items()):
        points.sort()
        jobs = [p[0] for p in points]
        line = t_ax.plot(jobs, [p[1] for p in points], marker="o", label=f"{backend} solve")
        colour = line[0].get_color()
        if any(p[2] > 0 for p in points):
            t_ax.plot(jobs, [p[2] for p in points], linestyle="--", color=colour, label=f"{backend} build")
        objective = [(p[0], p[3]) for p in points if p[3] is not None]
        o_ax.plot([x for x, _ in objective], [y for _, y in objective], marker="o", color=colour, label=backend)
        gaps = [(p[0], 100.0 * p[4]) for p in points if p[4] is not None]
        g_ax.plot([x for x, _ in gaps], [y for _, y in gaps], marker="o", color=colour, label=backend)
    t_ax.set(xlabel="jobs in the round (log scale)", ylabel="time (s, log scale)", title="solve and build time")
    t_ax.set_yscale("log")
    o_ax.set(xlabel="jobs in the round (log scale)", ylabel="objective", title="objective reached")
    g_ax.set(xlabel="jobs in the round (log scale)", ylabel="relative gap (%)", title="gap at the end")
    g_ax.set_ylim(bottom=0)
    for ax, what in ((t_ax, "time"), (o_ax, "objective"), (g_ax, "gap")):
        _log_jobs_axis(ax)
        ax.grid(alpha=0.3, which="both")
        if any(len(line.get_xdata()) for line in ax.get_lines()):
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, f"no {what} in the rows", transform=ax.transAxes, ha="center", color="grey")
    fig.suptitle("solver scaling")
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
    unit, _ = _time_unit(max(ends, default=origin) - origin)
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
    figs = simulation_figures([data] if isinstance(data, Mapping) else list(data), gpu_types=gpu_types)
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
    plt = _pyplot()
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


__all__ = ["figures_for", "plot_gantt", "plot_jct_cdf", "plot_pred_vs_measured", "plot_solve_scaling",
           "plot_utilization", "render", "safe_name", "save_figures", "simulation_figures", "time_origin_s"]
