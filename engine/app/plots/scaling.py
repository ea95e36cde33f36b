"""Solver scaling of ``bench solve --json`` rows: solve and build time, objective and gap per backend."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from dltsched.engine.app.plots.common import pyplot
from dltsched.engine.domain.errors import ValidationError


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
            raise ValidationError(f"rows[{i}]",
                                  "needs 'size' (JOBSxGPUS) or 'num_jobs', and 'solve_time_s'") from None
    fig, (t_ax, o_ax, g_ax) = pyplot().subplots(1, 3, figsize=(14.0, 4.2), sharex=True,
                                                constrained_layout=True)
    for backend, points in sorted(series.items()):
        points.sort()
        jobs = [p[0] for p in points]
        line = t_ax.plot(jobs, [p[1] for p in points], marker="o", label=f"{backend} solve")
        colour = line[0].get_color()
        if any(p[2] > 0 for p in points):
            t_ax.plot(jobs, [p[2] for p in points], linestyle="--", color=colour, label=f"{backend} build")
        objective = [(p[0], p[3]) for p in points if p[3] is not None]
        o_ax.plot([x for x, _ in objective], [y for _, y in objective], marker="o", color=colour,
                  label=backend)
        gaps = [(p[0], 100.0 * p[4]) for p in points if p[4] is not None]
        g_ax.plot([x for x, _ in gaps], [y for _, y in gaps], marker="o", color=colour, label=backend)
    t_ax.set(xlabel="jobs in the round (log scale)", ylabel="time (s, log scale)",
             title="solve and build time")
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

