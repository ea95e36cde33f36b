"""Standard figures (matplotlib, Agg) and ``dltsched plot RESULT.json -o DIR``.

One module per kind of figure: :mod:`.timeline` (JCT CDF, utilisation, Gantt), :mod:`.accuracy` (predicted vs
measured), :mod:`.scaling` (solver scaling); :mod:`.common` holds what they share (matplotlib, the time origin
and unit) and :mod:`.render` turns result files into figures and files (and the ``plot`` command).

Inputs are the JSON the other commands write:

- ``simulate --json --records`` (an object with ``rows``, one per policy, each with ``records``,
  ``utilization`` and ``placements``; a bare dict or list of them is read too), or an experiment's
  ``results.json``: JCT CDF per policy (log axis), utilisation (one panel per policy, raw and smoothed), a
  per-GPU Gantt chart per policy (rows labelled by GPU id and type, co-located jobs in lanes of their GPU's
  row while they overlap, job ids on bars, hatched bars frozen, a long tail on a log axis). Every time axis
  starts at the first arrival of the whole result.
- accuracy results: ``predict eval-steptime --json`` (rows with ``predicted_s``/``measured_s``; a
  leave-one-GPU-out run's rows are held out), ``predict eval-colocation --json`` (rows per ``quantity``:
  speed, memory, utilisation) or plain pairs (JSON list of ``{"predicted", "measured"[, "group",
  "held_out"]}``, or a CSV with those columns): predicted-vs-measured on log axes (one colour per GPU,
  held-out points filled) and the error per GPU and per model, per quantity.
- ``bench solve --json`` (``{"rows": [{"size": "200x256", "backend", "solve_time_s", "objective", "gap"}]}``):
  solve and build time, objective and gap beside each other, per backend.
"""

from __future__ import annotations

from dltsched.engine.app.plots.accuracy import accuracy_rows, plot_error_breakdown, plot_pred_vs_measured
from dltsched.engine.app.plots.common import FORMATS, Result, time_origin_s
from dltsched.engine.app.plots.render import (
    accuracy_figures,
    experiment_figures,
    figures_for,
    gpu_types_of,
    load_result,
    plot,
    render,
    result_kind,
    safe_name,
    save_figures,
    simulation_figures,
)
from dltsched.engine.app.plots.scaling import plot_solve_scaling
from dltsched.engine.app.plots.timeline import plot_gantt, plot_jct_cdf, plot_utilization

__all__ = ["FORMATS", "Result", "accuracy_figures", "accuracy_rows", "experiment_figures", "figures_for",
           "gpu_types_of", "load_result", "plot", "plot_error_breakdown", "plot_gantt", "plot_jct_cdf",
           "plot_pred_vs_measured", "plot_solve_scaling", "plot_utilization", "render",
           "result_kind", "safe_name", "save_figures", "simulation_figures", "time_origin_s"]
