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


def plot_pred_vs_measured(rows: Sequence[Mapping[str, Any]], *, quantity: str = "value",
                          ax: Any = None) -> Any:
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



#: what each accuracy quantity is called on an axis
QUANTITY_LABELS = {"step_time_s": "step time (s)", "speed": "co-located speed (x alone)",
                   "memory_mib": "memory (MiB)", "gpu_util": "GPU utilisation (%)", "value": "value"}


def accuracy_rows(data: Any) -> tuple[list[dict[str, Any]], str]:
    """The rows of an accuracy result as ``predicted``, ``measured``, ``quantity``, ``gpu``, ``model``,
    ``group`` and ``held_out``, and what the result is. Reads ``predict eval-steptime --json`` (rows with
    ``predicted_s``/``measured_s``; a leave-one-GPU-out run's rows are held out), ``predict eval-colocation
    --json`` (rows with ``quantity``) and plain predicted/measured pairs. A row without numbers raises
    :class:`ValidationError` naming it."""
    rows = data.get("rows") if isinstance(data, Mapping) else data
    if not isinstance(rows, list) or not rows:
        raise ValidationError("rows", "needs a non-empty list of predicted/measured rows")
    steptime = isinstance(rows[0], Mapping) and "predicted_s" in rows[0]
    logo = isinstance(data, Mapping) and "oracle_mape" in data  # eval-steptime --leave-one-gpu-out
    out: list[dict[str, Any]] = []
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ValidationError(f"rows[{i}]", f"{type(r).__name__} not understood; a row is an object")
        keys = ("predicted_s", "measured_s") if steptime else ("predicted", "measured")
        try:
            predicted, measured = float(r[keys[0]]), float(r[keys[1]])
        except (KeyError, TypeError, ValueError):
            raise ValidationError(f"rows[{i}]", f"needs numeric '{keys[0]}' and '{keys[1]}'") from None
        held = True if logo else r.get("held_out")
        out.append({"predicted": predicted, "measured": measured,
                    "quantity": "step_time_s" if steptime else str(r.get("quantity", "value")),
                    "gpu": str(r.get("gpu", "")), "model": str(r.get("model", "")),
                    "group": str(r.get("group", r.get("gpu", "all"))), "held_out": held})
    if steptime:
        what = ("step time, leave-one-GPU-out" if logo
                else "step time (as evaluated: may include fitted-on rows)")
    elif any(r["quantity"] != "value" for r in out):
        what = "co-location"
    else:
        what = "predicted vs measured"
    return out, what


def plot_error_breakdown(rows: Sequence[Mapping[str, Any]], *, quantity: str = "value",
                         title: str = "") -> Any:
    """Mean absolute percentage error per GPU (left) and per model (right), each bar labelled with its row
    count; rows as :func:`accuracy_rows` gives them."""
    by_gpu: dict[str, list[tuple[float, float]]] = defaultdict(list)
    by_model: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        pair = (float(r["predicted"]), float(r["measured"]))
        by_gpu[str(r.get("gpu") or "all")].append(pair)
        by_model[str(r.get("model") or "all")].append(pair)
    plt = pyplot()
    height = max(3.0, 0.28 * max(len(by_gpu), len(by_model)) + 1.2)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, height), constrained_layout=True,
                                      gridspec_kw={"width_ratios": [1, 1.6]})
    for ax, table, name in ((left, by_gpu, "GPU"), (right, by_model, "model")):
        names = sorted(table, key=lambda k: _mape(table[k]))
        errors = [100.0 * _mape(table[k]) for k in names]
        bars = ax.barh(range(len(names)), errors, color="tab:blue" if name == "GPU" else "tab:orange",
                       alpha=0.8)
        ax.set_yticks(range(len(names)), names, fontsize="small")
        for bar, k in zip(bars, names, strict=True):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" n={len(table[k])}", va="center",
                    fontsize="x-small")
        ax.set(xlabel=f"MAPE of {QUANTITY_LABELS.get(quantity, quantity)} (%)", title=f"error per {name}")
        ax.grid(alpha=0.3, axis="x")
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig
