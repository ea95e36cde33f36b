"""The step-time fit chosen by nested leave-one-model-out, and the figure that choice honestly earns.

A *variant* is a host form of :data:`~.isolated.STEP_FORMS` fitted with :class:`~.isolated.StepFitOptions`.
Choosing the variant with the lowest leave-one-model-out error over the very rows that then score it
flatters the choice, the more so the more variants were tried. The honest figure is nested: each model is
held out (outer fold); the variant is chosen by leave-one-model-out over the other models alone (inner
folds), fitted on them and made to predict the held-out model. :func:`~.isolated.fit_step` makes that
choice among :data:`~.isolated.STEP_FORMS` at their default options, so the calibration's own
leave-one-model-out figure is nested over the forms; :func:`searched_variants` are all the variants tried
while the forms were developed, and the nested figure over them is what the search itself is worth.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import product

import numpy as np

from dltsched.predictors.calibration.isolated import (
    DEFAULT_FIT,
    STEP_FORMS,
    Row,
    StepFitOptions,
    _columns,
    _step_array,
    fit_step_form,
)

Variant = tuple[str, StepFitOptions]


def default_variants() -> list[Variant]:
    """What :func:`~.isolated.fit_step` chooses among: every form at the default options."""
    return [(form, DEFAULT_FIT) for form in STEP_FORMS]


def searched_variants() -> list[Variant]:
    """Every variant tried while the step forms were developed on the H200 profiles: each form with
    relative or log residuals, unweighted or weighted by the spread of the timed steps, at three prior
    weights; the per-launch form also at two other launch priors."""
    out: list[Variant] = []
    for form, log_space, floor, weight in product(STEP_FORMS, (False, True), (None, 0.03), (0.1, 0.3, 1.0)):
        out.append((form, StepFitOptions(weight, log_space=log_space, spread_floor=floor)))
    for launch_us, log_space, weight in product((1.0, 10.0), (False, True), (0.1, 0.3, 1.0)):
        out.append(("ops_and_launches", StepFitOptions(weight, launch_us, log_space)))
    return out


def _apes(params: dict[str, float], rows: Sequence[Row]) -> list[float]:
    cols = _columns(rows)
    return [float(a) for a in 100.0 * np.abs(_step_array(params, cols) / cols["step"] - 1.0)]


def lomo_apes(rows: Sequence[Row], variant: Variant,
              scored: Sequence[Row] | None = None) -> dict[str, list[float]]:
    """Per model, the absolute percentage errors of its rows in ``scored`` (default: ``rows``) predicted by
    ``variant`` fitted on the rows of every other model."""
    scored = rows if scored is None else scored
    out: dict[str, list[float]] = {}
    for model in sorted({r.model for r in scored}):
        held = [r for r in scored if r.model == model]
        params = fit_step_form([r for r in rows if r.model != model], variant[0], variant[1])
        out[model] = _apes(params, held)
    return out


def lomo_mape(rows: Sequence[Row], variant: Variant, scored: Sequence[Row] | None = None) -> float:
    """Leave-one-model-out MAPE (%) of ``variant`` over the rows ``scored`` (default: ``rows``)."""
    return statistics.fmean(a for apes in lomo_apes(rows, variant, scored).values() for a in apes)


def choose(rows: Sequence[Row], variants: Sequence[Variant]) -> Variant:
    """The variant with the lowest leave-one-model-out MAPE over ``rows`` (the first of equals)."""
    return min(variants, key=lambda v: lomo_mape(rows, v))


Apes = dict[str, list[float]]


def nested_lomo_apes(rows: Sequence[Row], variants: Sequence[Variant],
                     scored: Sequence[Row] | None = None) -> tuple[Apes, dict[str, Variant]]:
    """Per model of ``scored`` (default: ``rows``), the absolute percentage errors of its rows when the
    variant is chosen (:func:`choose`) and fitted on the other models' rows alone; and the variant each
    outer fold chose (module docstring)."""
    scored = rows if scored is None else scored
    apes: Apes = {}
    picks: dict[str, Variant] = {}
    for model in sorted({r.model for r in scored}):
        train = [r for r in rows if r.model != model]
        picks[model] = choose(train, variants)
        apes[model] = _apes(fit_step_form(train, *picks[model]), [r for r in scored if r.model == model])
    return apes, picks


def describe(variant: Variant) -> str:
    """A variant in one short line."""
    form, opt = variant
    parts = [form, "log" if opt.log_space else "relative", f"prior {opt.prior_weight:g}"]
    if STEP_FORMS[form][2]:
        parts.append(f"launch prior {opt.launch_prior_us:g} us")
    if opt.spread_floor is not None:
        parts.append(f"weighted (floor {opt.spread_floor:g})")
    return ", ".join(parts)


__all__ = ["Variant", "choose", "default_variants", "describe", "lomo_apes", "lomo_mape", "nested_lomo_apes",
           "searched_variants"]
