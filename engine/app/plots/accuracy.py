"""Predicted vs measured: log axes, y = x with a +-20% band, held-out points filled and fitted-on hollow."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from dltsched.engine.app.plots.common import figure_axes, pyplot
from dltsched.engine.domain.errors import ValidationError


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
    fig, ax = figure_axes(ax, (6.0, 6.0))
    cmap = pyplot().get_cmap("tab10")
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

