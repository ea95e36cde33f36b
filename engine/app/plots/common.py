"""What every figure shares: matplotlib (Agg) loaded on first use, the figure/axes helper, the one time
origin and the time unit of every time axis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dltsched.engine.domain.errors import ValidationError

FORMATS = ("png", "svg")
Result = Mapping[str, Any]


def pyplot() -> Any:
    """``matplotlib.pyplot`` with the Agg backend (loaded on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_axes(ax: Any, size: tuple[float, float] = (6.4, 4.0)) -> tuple[Any, Any]:
    """(figure, axes): those of ``ax``, or a new figure of ``size`` inches when ``ax`` is ``None``."""
    if ax is not None:
        return ax.figure, ax
    fig, new = pyplot().subplots(figsize=size, constrained_layout=True)
    return fig, new


def time_origin_s(results: Sequence[Result]) -> float:
    """The one time origin of every time axis: the first arrival over all ``results`` (else the first
    utilisation sample or placement start), so that figures of different policies line up."""
    starts = [rec["arrival_s"] for r in results for rec in r.get("records", ())]
    starts += [trace[0][0] for r in results if (trace := r.get("utilization"))]
    starts += [p["start_s"] for r in results for p in r.get("placements", ())]
    return min(starts, default=0.0)



def duration_label(seconds: float) -> str:
    """``seconds`` in s, min or h, whichever reads best."""
    return f"{seconds:.0f} s" if seconds < 60 else (f"{seconds / 60:.0f} min" if seconds < 7200
                                                    else f"{seconds / 3600:.1f} h")


def time_unit(span_s: float, unit: str | None = None) -> tuple[str, float]:
    """(``unit``, seconds per unit): ``unit`` when given, else minutes for spans under 3 hours, else hours."""
    units = {"min": 60.0, "h": 3600.0}
    if unit is None:
        unit = "min" if span_s < 3 * 3600.0 else "h"
    if unit not in units:
        raise ValidationError("unit", f"'{unit}' not understood; one of {', '.join(units)}")
    return unit, units[unit]
