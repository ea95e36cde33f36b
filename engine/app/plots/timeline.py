"""Figures over time of simulation results: the JCT CDF, GPU utilisation per policy and the per-GPU Gantt
chart (rows labelled by GPU id and type, co-located jobs in lanes, a long tail on a log axis)."""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from dltsched.engine.app.plots.common import (
    Result,
    duration_label,
    figure_axes,
    pyplot,
    time_origin_s,
    time_unit,
)
from dltsched.engine.domain.errors import ValidationError


def plot_jct_cdf(results: Sequence[Result], ax: Any = None) -> Any:
    """Empirical CDF of job completion time (hours, log axis), one line per policy."""
    fig, ax = figure_axes(ax)
    for r in results:
        jct_h = sorted(rec["jct_s"] / 3600.0 for rec in r.get("records", ()))
        if jct_h:
            ax.step(jct_h, [(i + 1) / len(jct_h) for i in range(len(jct_h))], where="post",
                    label=f"{r['policy']} (avg {sum(jct_h) / len(jct_h):.2f} h)")
    ax.set(xlabel="job completion time (h, log scale)", ylabel="fraction of jobs", title="JCT CDF",
           ylim=(0, 1.02))
    ax.set_xscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    return fig


def _smoothed(times: Sequence[float], values: Sequence[float],
              window: float) -> tuple[list[float], list[float]]:
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
    unit, per_s = time_unit(span_s, unit)
    fig, axes = pyplot().subplots(len(runs), 1, figsize=(8.0, 1.0 + 1.5 * len(runs)), sharex=True,
                                  sharey=True,
                                   squeeze=False, constrained_layout=True)
    cmap = pyplot().get_cmap("tab10")
    for i, (r, ax) in enumerate(zip(runs, axes[:, 0], strict=True)):
        times = [(t - origin) / per_s for t, _ in r["utilization"]]
        values = [u for _, u in r["utilization"]]
        ax.step(times, values, where="post", color=cmap(i % 10), alpha=0.3, linewidth=0.8, label="busy GPUs")
        ax.plot(*_smoothed(times, values, smooth_fraction * span_s / per_s), color=cmap(i % 10),
                linewidth=1.8, label=f"moving average ({duration_label(smooth_fraction * span_s)})")
        mean = r.get("gpu_util")
        ax.set_title(f"{r['policy']}" + (f": mean {mean:.0%} of GPUs busy until its last job ends"
                                         if mean is not None else ""), fontsize="medium", loc="left")
        ax.set(ylabel="busy (fraction)", ylim=(0, 1.05))
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize="small", loc="upper right")
    axes[-1, 0].set_xlabel(f"time since first arrival ({unit})")
    fig.suptitle("GPU utilisation")
    return fig



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
    cmap = pyplot().get_cmap("tab20")
    fig, ax = figure_axes(ax, (11.0, max(3.0, 0.34 * len(rows) + 1.6)))
    unit, per_s = time_unit(max(p["end_s"] for p in placements) - origin, unit)
    end_t = max((p["end_s"] - origin) / per_s for p in placements)
    tail_t = _tail_start(placements, origin, per_s)
    if tail_t is not None:
        _tail_axis(ax, tail_t, end_t * 1.02)
    ax.set_xlim(0, end_t * 1.02)
    fig.canvas.draw()
    width_pt = ax.get_window_extent().width * 72.0 / fig.dpi
    x_lo, x_ti = (ax.transData.transform((x, 0))[0] for x in (0.0, end_t * 1.02))
    pt_per_px = width_pt / max(x_ti - x_lo, 1.0)
    # frozen -> verts, colours
    bars: dict[bool, tuple[list[Any], list[Any]]] = {False: ([], []), True: ([], [])}
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
            labels.append((start_t, stop_t, y + height / 2,
                           str(p["job_id"]) + (f" f{level}" if level else ""),
                           min(7.0, 0.8 * height * 0.34 * 72.0 * 0.8), bool(level)))
    from matplotlib.collections import PolyCollection

    for frozen, (verts, colours) in bars.items():  # one collection per kind: thousands of bars stay fast
        if verts:
            ax.add_collection(PolyCollection(verts, facecolors=colours, edgecolors="black", linewidths=0.3,
                                             hatch="///" if frozen else None, zorder=2))
    if labels:
        import numpy as np

        ends = np.array([(lo, hi) for lo, hi, *_ in labels], dtype=float)
        pix = ax.transData.transform(np.column_stack([ends.ravel(),
                                                      np.zeros(ends.size)]))[:, 0].reshape(-1, 2)
        mids = ax.transData.inverted().transform(np.column_stack([pix.mean(axis=1),
                                                                  np.zeros(len(pix))]))[:, 0]
        for (_lo, _hi, y, text, size, frozen), (px0, px1), mid in zip(labels, pix, mids, strict=True):
            if abs(px1 - px0) * pt_per_px > 0.62 * size * len(text) + 2:  # the job id fits on its bar
                ax.text(mid, y, text, ha="center", va="center", fontsize=size, zorder=3, clip_on=True,
                        bbox={"facecolor": "white", "alpha": 0.7, "pad": 0.6, "linewidth": 0} if frozen
                        else None)
    ax.set_yticks(rows, [f"GPU {g}" + (f" · {types[g]}" if g < len(types) else "") for g in rows],
                  fontsize="small")
    for row in range(1, len(rows)):
        if len(types) > rows[row] and types[rows[row]] != types[rows[row - 1]]:
            ax.axhline(row - 0.5, color="black", linewidth=0.8)
    shown = "" if len(rows) == num_gpus else f" (first {len(rows)} of {num_gpus} GPUs)"
    ax.set(xlabel=f"time since first arrival ({unit})" + (f"; log scale after {tail_t:.0f} {unit}" if tail_t
                                                          and tail_t >= 100
                                                          else f"; log scale after {tail_t:.3g} {unit}"
                                                          if tail_t else ""),
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

