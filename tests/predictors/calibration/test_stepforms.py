"""The step-time fit's options and its choice by nested leave-one-model-out, on a synthetic GPU."""

from __future__ import annotations

import math
import random

import pytest

from dltsched.predictors.calibration import isolated as iso
from dltsched.predictors.calibration import stepforms

from .conftest import GPU, JOBS, TRUE_STEP

HOST_BOUND = {**TRUE_STEP, "overlap_power": 1.0, "host_ops": 1.0, "dispatch_us": 30.0, "launch_us": 0.0}
FEW = JOBS[:5]


def _rows(params, noise=0.02, seed=0, jobs=FEW, spreads=None):
    rng = random.Random(seed)
    out = []
    for i, (model, dataset, batch) in enumerate(jobs):
        f = iso.job_features(model, dataset, batch, False, GPU, frozenset({"conv"}))
        step = iso.step_seconds(params, f, batch) * math.exp(rng.gauss(0.0, noise))
        spread = None if spreads is None else spreads[i]
        out.append(iso.Row(model, batch, "compute", f, step, step_rel_sd=spread))
    return out


def test_default_options_are_the_calibrations_fit():
    rows = _rows(HOST_BOUND)
    assert iso.fit_step_form(rows, "host_ops") == iso.fit_step_form(rows, "host_ops", iso.StepFitOptions())
    assert [f for f, _ in stepforms.default_variants()] == list(iso.STEP_FORMS)


def test_log_residuals_recover_a_clean_gpu_as_relative_ones_do():
    rows = _rows(HOST_BOUND, noise=0.0, jobs=JOBS)
    for opt in (iso.StepFitOptions(log_space=True), iso.StepFitOptions()):
        fitted = iso.fit_step_form(rows, "host_ops", opt)
        for r in rows:
            assert iso.step_seconds(fitted, r.features, r.batch) == pytest.approx(r.step_time_s, rel=0.1)


def test_a_row_whose_steps_spread_widely_weighs_less():
    spreads = [0.01, 0.01, 0.01, 0.01, 0.5]
    rows = _rows(HOST_BOUND, noise=0.0, spreads=spreads)
    w = iso.StepFitOptions(spread_floor=0.05).weights(rows)
    assert w[0] == pytest.approx(0.05 / math.hypot(0.05, 0.01)) and w[4] < w[0] / 5
    assert list(iso.StepFitOptions().weights(rows)) == [1.0] * 5
    # the last row measured 2x too slow: weighted by its spread, it drags the fit less
    last = rows[4]
    bad = [*rows[:4], iso.Row(last.model, last.batch, "compute", last.features, 2 * last.step_time_s,
                              step_rel_sd=0.5)]
    err = {}
    for floor in (None, 0.05):
        fitted = iso.fit_step_form(bad, "host_ops", iso.StepFitOptions(spread_floor=floor))
        err[floor] = max(abs(iso.step_seconds(fitted, r.features, r.batch) / r.step_time_s - 1)
                         for r in rows[:4])
    assert err[0.05] < err[None]


def test_nested_over_one_variant_is_plain_leave_one_model_out():
    rows = _rows(HOST_BOUND)
    variant = ("host_ops", iso.DEFAULT_FIT)
    apes, picks = stepforms.nested_lomo_apes(rows, [variant])
    assert apes == stepforms.lomo_apes(rows, variant) and set(picks.values()) == {variant}
    assert stepforms.lomo_mape(rows, variant) == pytest.approx(iso.lomo_step_mape(rows, "host_ops"))


def test_each_outer_fold_chooses_without_its_model_and_the_data_s_form_wins():
    rows = _rows(HOST_BOUND, jobs=JOBS)
    variants = [("overlap", iso.DEFAULT_FIT), ("host_ops", iso.DEFAULT_FIT)]
    apes, picks = stepforms.nested_lomo_apes(rows, variants, scored=rows[:3])
    assert sorted(apes) == sorted(r.model for r in rows[:3])  # only the scored rows' models are held out
    assert all(form == "host_ops" for form, _ in picks.values())
    held = rows[0].model
    assert picks[held] == stepforms.choose([r for r in rows if r.model != held], variants)


def test_the_searched_variants_hold_every_form_once_per_setting_and_describe_themselves():
    variants = stepforms.searched_variants()
    assert len(set(variants)) == len(variants) and {f for f, _ in variants} == set(iso.STEP_FORMS)
    assert all(v in variants for v in stepforms.default_variants())
    text = stepforms.describe(("ops_and_launches", iso.StepFitOptions(log_space=True, spread_floor=0.03)))
    assert "log" in text and "launch prior 3 us" in text and "weighted" in text
