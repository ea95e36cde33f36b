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


def _sizes_rows(params, amp_model=None):
    """Each of five models at its batch size and at twice it (and one model in mixed precision too)."""
    out = []
    for model, dataset, batch in FEW:
        for b, amp in [(batch, False), (2 * batch, False), *([(batch, True)] if model == amp_model else [])]:
            f = iso.job_features(model, dataset, b, amp, GPU, frozenset({"conv"}))
            out.append(iso.Row(model, b, "compute", f, iso.step_seconds(params, f, b), amp=amp))
    return out


def test_batch_sizes_never_profiled_follow_a_gpu_the_form_describes():
    rows = _sizes_rows(HOST_BOUND, amp_model=FEW[1][0])
    scored = stepforms.batch_size_evaluation(rows, [("host_ops", iso.DEFAULT_FIT)])
    assert set(scored) == set(stepforms.BATCH_SCHEMES)
    assert len(scored["lomo"]) == len(rows) and len(scored["profiled_one_job"]) == len(rows) - len(FEW)
    assert {r["bin"] for r in scored["profiled_one_job"]} == {"largest_batch", "other_precision"}
    figures = stepforms.batch_size_figures(scored)
    for scheme in stepforms.BATCH_SCHEMES:
        rule = "same_step" if scheme == "profiled_one_job" else "constant"
        assert figures[scheme]["calibrated_mape"] < 10.0 < figures[scheme][f"{rule}_mape"]
    one = figures["profiled_one_job"]["per_bin"]["largest_batch"]
    assert one["calibrated_median_ratio"] == pytest.approx(1.0, abs=0.1)


def test_a_per_sample_input_cost_is_fitted_only_where_a_model_was_timed_at_two_batch_sizes():
    rows = [iso.Row(r.model, r.batch, "iteration", r.features, r.step_time_s + 1e-5 * r.batch)
            for r in _sizes_rows(HOST_BOUND)]
    one = {r.model: r for r in reversed(rows)}
    assert not iso.per_sample_identified(list(one.values())) and iso.per_sample_identified(rows)
    assert iso.fit_step_form(list(one.values()), "host_ops")["per_sample_s"] == 0.0
    assert iso.fit_step_form(rows, "host_ops")["per_sample_s"] > 0.0


def test_mixed_precision_counts_the_casts_of_the_weights():
    model, dataset, batch = FEW[0]
    fp32, amp = (iso.job_features(model, dataset, batch, a, GPU, frozenset({"conv"})) for a in (False, True))
    casts = iso.amp_casts(model, dataset)
    assert casts > 0 and casts == iso.amp_casts(model, dataset, 0) >= iso.amp_casts(model, dataset, 3)
    assert amp["host_ops"] - fp32["host_ops"] == casts and amp["launches"] - fp32["launches"] == casts


def test_the_profiled_job_is_the_chosen_batch_size_at_full_precision():
    rows = _sizes_rows(HOST_BOUND, amp_model=FEW[1][0])
    for reference, factor in (("smallest", 1), ("middle", 1), ("largest", 2)):
        picked = stepforms.reference_rows(rows, reference)
        assert sorted(picked) == sorted(m for m, _, _ in FEW)
        assert all(picked[m].batch == factor * b and not picked[m].amp for m, _, b in FEW)


def test_the_first_choice_is_kept_unless_another_beats_it_beyond_one_standard_error():
    from dltsched.predictors.calibration import nested

    first = {"a": [10.0], "b": [10.0], "c": [10.0], "d": [10.0]}
    # lower on average (8.5 against 10) by differences that scatter: 5, -2, 5, -2 (mean 1.5, std. error 2.0)
    noisy = {"a": [5.0], "b": [12.0], "c": [5.0], "d": [12.0]}
    # lower on every model by about as much: 2, 1, 1.5, 1.5 (mean 1.5, standard error 0.2)
    steady = {"a": [8.0], "b": [9.0], "c": [8.5], "d": [8.5]}
    assert nested.best([first, noisy]) == 1 and nested.kept_within_se([first, noisy]) == 0
    assert nested.best([first, steady]) == 1 and nested.kept_within_se([first, steady]) == 1
    assert nested.kept_within_se([steady, first, noisy]) == 0  # the first is the best
    assert nested.kept_within_se([first, noisy], k=0.5) == 1  # half a standard error: 1.5 > 1.0


def test_nested_under_both_rules_matches_each_rule_alone():
    rows = _rows(HOST_BOUND, jobs=JOBS)
    variants = [("host_ops", iso.DEFAULT_FIT), ("host_ops", iso.StepFitOptions(prior_weight=1.0)),
                ("overlap", iso.DEFAULT_FIT)]
    both = stepforms.nested_lomo_apes_by_rule(rows, variants, scored=rows[:3])
    assert set(both) == {"best", "kept"}
    assert both["best"] == stepforms.nested_lomo_apes(rows, variants, scored=rows[:3])
    # "kept" starts from the calibration's own choice (the best of the forms at the default options, 0 or 2)
    # and leaves it only for the best variant of all
    table = [stepforms.lomo_apes(rows, v) for v in variants]
    calibration = min((0, 2), key=lambda i: stepforms.lomo_mape(rows, variants[i]))
    overall = min(range(3), key=lambda i: stepforms.lomo_mape(rows, variants[i]))
    assert stepforms.kept_unless_beaten(variants)(table) in {calibration, overall}
    assert stepforms.kept_unless_beaten(variants, k=1e9)(table) == calibration
    assert stepforms.kept_unless_beaten(variants, k=-1.0)(table) == overall


def test_the_calibration_keeps_its_form_unless_another_is_better_beyond_one_standard_error(monkeypatch):
    rows = _rows(HOST_BOUND)  # five models: enough to choose
    kept = {m: [10.0] for m in "abcde"}
    tables = {"ops_and_launches": kept, "overlap": {m: [20.0] for m in "abcde"},
              # lower on average by 1.6 points, by differences that scatter (standard error 2.8)
              "host_ops": {"a": [2.0], "b": [16.0], "c": [4.0], "d": [14.0], "e": [6.0]}}
    monkeypatch.setattr(iso, "lomo_step_apes", lambda rows, form, options=None: tables[form])
    assert iso.KEPT_FORM == "ops_and_launches" and iso.choose_step_form(rows) == "ops_and_launches"
    tables["host_ops"] = {m: [8.0 + 0.1 * i] for i, m in enumerate("abcde")}  # lower on every model
    assert iso.choose_step_form(rows) == "host_ops"
    assert iso.choose_step_form(rows[:3]) == "ops_and_launches"  # too few models to leave it
