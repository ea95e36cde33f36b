"""The step-time fit chosen by nested leave-one-model-out, and the figure that choice honestly earns.

A *variant* is a host form of :data:`~.isolated.STEP_FORMS` fitted with :class:`~.isolated.StepFitOptions`.
Choosing the variant with the lowest leave-one-model-out error over the very rows that then score it
flatters the choice, the more so the more variants were tried. The honest figure is nested: each model is
held out (outer fold); the variant is chosen by leave-one-model-out over the other models alone (inner
folds), fitted on them and made to predict the held-out model. :func:`~.isolated.fit_step` makes that
choice among :data:`~.isolated.STEP_FORMS` at their default options, so the calibration's own
leave-one-model-out figure is nested over the forms; :func:`searched_variants` are all the variants tried
while the forms were developed, and the nested figure over them is what the search itself is worth, under
either rule of choosing (:func:`rules`): the lowest leave-one-model-out error, or what the calibration fits
kept unless another variant beats it by more than one standard error (:func:`~.nested.kept_within_se`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from itertools import product

import numpy as np

import dltsched.predictors.calibration.nested as nested
from dltsched.predictors.calibration.isolated import (
    DEFAULT_FIT,
    KEPT_FORM,
    MIN_MODELS_TO_CHOOSE,
    STEP_FORMS,
    Row,
    StepFitOptions,
    _columns,
    _step_array,
    default_step_params,
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


def _fit(rows: Sequence[Row], variant: Variant) -> dict[str, float]:
    return fit_step_form(rows, variant[0], variant[1])


def lomo_apes(rows: Sequence[Row], variant: Variant,
              scored: Sequence[Row] | None = None) -> dict[str, list[float]]:
    """Per model, the absolute percentage errors of its rows in ``scored`` (default: ``rows``) predicted by
    ``variant`` fitted on the rows of every other model."""
    return nested.lomo_apes(rows, variant, _fit, _apes, scored)


def lomo_mape(rows: Sequence[Row], variant: Variant, scored: Sequence[Row] | None = None) -> float:
    """Leave-one-model-out MAPE (%) of ``variant`` over the rows ``scored`` (default: ``rows``)."""
    return statistics.fmean(a for apes in lomo_apes(rows, variant, scored).values() for a in apes)


def choose(rows: Sequence[Row], variants: Sequence[Variant], rule: nested.Rule = nested.best) -> Variant:
    """The variant ``rule`` takes from the leave-one-model-out errors over ``rows`` (default: the lowest MAPE,
    the first of equals)."""
    return nested.choose(rows, variants, _fit, _apes, rule)


Apes = nested.Apes


def nested_lomo_apes(rows: Sequence[Row], variants: Sequence[Variant],
                     scored: Sequence[Row] | None = None) -> tuple[Apes, dict[str, Variant]]:
    """Per model of ``scored`` (default: ``rows``), the absolute percentage errors of its rows when the
    variant is chosen (:func:`choose`) and fitted on the other models' rows alone; and the variant each
    outer fold chose (module docstring)."""
    return nested.nested_lomo_apes(rows, variants, _fit, _apes, scored)


def kept_unless_beaten(variants: Sequence[Variant], k: float = 1.0) -> nested.Rule:
    """The rule that takes what the calibration fits (the form of :func:`default_variants` that
    :func:`~.isolated.choose_step_form` takes; the first variant where none is among ``variants``) unless
    another of ``variants`` beats it by more than ``k`` standard errors of their paired per-model difference
    (:func:`~.nested.kept_within_se`). Over :func:`default_variants` alone it is the calibration's choice."""
    forms = {v[0]: i for i, v in enumerate(variants) if v in default_variants()}
    # the calibration's order: the form it keeps first (isolated.choose_step_form)
    order = [forms[f] for f in dict.fromkeys([KEPT_FORM, *STEP_FORMS]) if f in forms] or [0]

    def rule(table: Sequence[Apes]) -> int:
        if len(table[0]) < MIN_MODELS_TO_CHOOSE:
            kept = forms.get(KEPT_FORM, 0)
        else:
            kept = order[nested.kept_within_se([table[i] for i in order])]
        rest = [kept, *(i for i in range(len(table)) if i != kept)]
        return rest[nested.kept_within_se([table[i] for i in rest], k)]

    return rule


def rules(variants: Sequence[Variant]) -> dict[str, nested.Rule]:
    """The two rules of choosing a variant that the figures compare: ``best`` (the lowest leave-one-model-out
    error) and ``kept`` (:func:`kept_unless_beaten`)."""
    return {"best": nested.best, "kept": kept_unless_beaten(variants)}


Picks = dict[str, Variant]


def nested_lomo_apes_by_rule(rows: Sequence[Row], variants: Sequence[Variant],
                             scored: Sequence[Row] | None = None) -> dict[str, tuple[Apes, Picks]]:
    """:func:`nested_lomo_apes` under each of :func:`rules` (the inner errors computed once per fold)."""
    return nested.nested_lomo_apes_by_rule(rows, variants, _fit, _apes, scored, rules(variants))


def describe(variant: Variant) -> str:
    """A variant in one short line."""
    form, opt = variant
    parts = [form, "log" if opt.log_space else "relative", f"prior {opt.prior_weight:g}"]
    if STEP_FORMS[form][2]:
        parts.append(f"launch prior {opt.launch_prior_us:g} us")
    if opt.spread_floor is not None:
        parts.append(f"weighted (floor {opt.spread_floor:g})")
    return ", ".join(parts)


# -- batch sizes and precisions never profiled ------------------------------------------------------------

#: the schemes of :func:`batch_size_evaluation`
BATCH_SCHEMES = ("lomo", "lomo_one_job", "profiled_one_job")


#: which batch size of a model the one-job schemes profile (:func:`batch_size_evaluation`)
REFERENCES = ("smallest", "middle", "largest")


def reference_rows(rows: Sequence[Row], reference: str = "smallest") -> dict[str, Row]:
    """Each model's profiled job in the one-job schemes: at full precision where it has one, its smallest,
    middle (the lower of two) or largest batch size."""
    out: dict[str, Row] = {}
    for model in sorted({r.model for r in rows}):
        own = [r for r in rows if r.model == model]
        amp = min(r.amp for r in own)
        sizes = sorted({r.batch for r in own if r.amp == amp})
        batch = sizes[{"smallest": 0, "middle": (len(sizes) - 1) // 2, "largest": -1}[reference]]
        out[model] = min((r for r in own if r.amp == amp and r.batch == batch), key=lambda r: r.step_time_s)
    return out


def _bin(r: Row, ref: Row, every: Sequence[Row]) -> str:
    """Where a scored row sits among ``every`` row of its model: the other precision than the profiled
    job's, or the smallest or largest batch size of its precision, or between."""
    if r.amp != ref.amp:
        return "other_precision"
    sizes = sorted({h.batch for h in every if h.amp == r.amp})
    if r.batch == sizes[0]:
        return "smallest_batch"
    return "largest_batch" if r.batch == sizes[-1] else "middle_batch"


def _score(out: dict[str, list[dict[str, float | str]]], scheme: str, held: Sequence[Row], ref: Row,
           predicted: dict[str, np.ndarray], every: Sequence[Row]) -> None:
    step = np.array([r.step_time_s for r in held])
    for i, r in enumerate(held):
        row: dict[str, float | str] = {"model": r.model, "batch": r.batch, "amp": float(r.amp),
                                       "bin": _bin(r, ref, every), "measured": float(step[i])}
        row |= {m: float(v[i]) for m, v in predicted.items()}
        out.setdefault(scheme, []).append(row)


def batch_size_evaluation(rows: Sequence[Row], variants: Sequence[Variant] | None = None,
                          model_scale_shrink: float = 1.0,
                          reference: str = "smallest") -> dict[str, list[dict[str, float | str]]]:
    """Step time of every job of the models profiled at several batch sizes or precisions, per scheme:

    - ``lomo``: the model never profiled; fitted on every row of the other models;
    - ``lomo_one_job``: the model never profiled; fitted on one job of each other model (full precision, at
      its ``reference`` batch size of :data:`REFERENCES`: a profile dataset of one batch size per model, as a
      GPU's first profile is);
    - ``profiled_one_job``: that one job of every model profiled, the model included, and its other jobs
      predicted: ``calibrated`` times the model's scale from its profiled job (as the calibration prices a
      model it has profiles of, ``model_scale_shrink`` pseudo-profiles at 1), ``calibrated_no_model_scale``,
      and the rules ``same_step`` (the profiled step) and ``linear_in_batch`` (the profiled step times the
      ratio of batch sizes).

    The variant is chosen among ``variants`` (default: the forms) as the calibration chooses
    (:func:`kept_unless_beaten`), by leave-one-model-out over the training rows alone (nested). Beside it on
    the same rows: ``default`` (the uncalibrated kernel step model's parameters, no input-pipeline term) and
    ``constant`` (the training rows' median). Each scored row names its bin (:func:`_bin`)."""
    variants = list(variants or default_variants())
    models = sorted({r.model for r in rows})
    several = [m for m in models if len({(r.batch, r.amp) for r in rows if r.model == m}) > 1]
    ref = reference_rows(rows, reference)
    one = [ref[m] for m in models]
    default = default_step_params()
    out: dict[str, list[dict[str, float | str]]] = {}

    def fitted(train: Sequence[Row]) -> dict[str, float]:
        enough = len({r.model for r in train}) >= MIN_MODELS_TO_CHOOSE
        kept = next((v for v in variants if v == (KEPT_FORM, DEFAULT_FIT)), variants[0])
        pick = choose(train, variants, kept_unless_beaten(variants)) if enough else kept
        return fit_step_form(train, *pick)

    for m in several:
        held = [r for r in rows if r.model == m]
        cols = _columns(held)
        for scheme, pool in (("lomo", rows), ("lomo_one_job", one)):
            train = [r for r in pool if r.model != m]
            _score(out, scheme, held, ref[m], {"calibrated": _step_array(fitted(train), cols),
                                               "default": _step_array(default, cols),
                                               "constant": np.full(len(held), statistics.median(
                                                   r.step_time_s for r in train))}, held)
    params = fitted(one)
    for m in several:
        r0 = ref[m]
        held = [r for r in rows if r.model == m and r is not r0]
        cols = _columns(held)
        plain = _step_array(params, cols)
        own = float(_step_array(params, _columns([r0]))[0])
        scale = math.exp(math.log(r0.step_time_s / own) / (1.0 + model_scale_shrink))
        batch = np.array([r.batch / r0.batch for r in held], dtype=float)
        _score(out, "profiled_one_job", held, r0,
               {"calibrated": plain * scale, "calibrated_no_model_scale": plain,
                "default": _step_array(default, cols), "same_step": np.full(len(held), r0.step_time_s),
                "linear_in_batch": r0.step_time_s * batch}, [r0, *held])
    return out


def batch_size_figures(scored: dict[str, list[dict[str, float | str]]]) -> dict[str, dict[str, object]]:
    """Per scheme: each method's MAPE over every scored row and per bin, and the calibrated prediction's
    median ratio to the measurement per bin (below 1: too fast)."""
    out: dict[str, dict[str, object]] = {}
    for scheme, got in scored.items():
        methods = [k for k in got[0] if k not in ("model", "batch", "amp", "bin", "measured")]
        bins = sorted({str(r["bin"]) for r in got})

        def mape(sub: list[dict[str, float | str]], m: str) -> float:
            return statistics.fmean(100.0 * abs(float(r[m]) / float(r["measured"]) - 1.0) for r in sub)

        fig: dict[str, object] = {"n": len(got), "models": len({r["model"] for r in got})}
        fig |= {f"{m}_mape": mape(got, m) for m in methods}
        fig["per_bin"] = {b: {"n": len(sub), **{f"{m}_mape": mape(sub, m) for m in methods},
                              "calibrated_median_ratio": statistics.median(
                                  float(r["calibrated"]) / float(r["measured"]) for r in sub)}
                          for b in bins for sub in [[r for r in got if r["bin"] == b]]}
        out[scheme] = fig
    return out


__all__ = ["BATCH_SCHEMES", "REFERENCES", "Variant", "batch_size_evaluation", "batch_size_figures", "choose",
           "default_variants", "describe", "kept_unless_beaten", "lomo_apes", "lomo_mape", "nested_lomo_apes",
           "nested_lomo_apes_by_rule", "rules", "searched_variants"]
