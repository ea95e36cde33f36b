"""Cross-fitting: every model is predicted by predictors that never saw a measurement of it.

The folds are fitted here with two small real learners (a step-time scale fitted on the fold's rows, and
per-model mean co-located speeds), so that the test runs in seconds; the property does not depend on the
learner: what a fold is trained on is decided by :func:`TrainingData.without` and the fold assignment.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from itertools import combinations_with_replacement

import pytest

from dltsched.engine.domain.model import Job
from dltsched.predictors.colocation.baselines import PerModelMeanBaseline
from dltsched.predictors.colocation.features import Group
from dltsched.predictors.colocation.samples import ColocDataset, ColocSample, IsolatedProfile, JobSpec
from dltsched.predictors.colocation.table import ColocationTable, group_key, job_key
from dltsched.predictors.crossfit import Recipe, TrainingData, build_crossfit, model_folds
from dltsched.predictors.steptime import DeletePopStepTime
from dltsched.predictors.steptime.calibrate import job_of
from dltsched.predictors.steptime.measurements import Measurement

MODELS = ("resnet18", "resnet50", "vgg16", "transformer")
GPU = "v100"


def _scaled_factors(rows) -> dict:
    """The shipped factors with every time term scaled by the geometric mean measured / predicted ratio of
    ``rows``."""
    shipped = DeletePopStepTime()
    scale = statistics.geometric_mean(m.step_time_s / shipped.step_time_s(job_of(m), m.gpu, 1) for m in rows)
    f = dict(shipped.factors)
    f["inverse_efficiency"] = {k: v * scale for k, v in f["inverse_efficiency"].items()}
    f["dispatch_us"] = f["dispatch_us"] * scale
    f["step_overhead_s"] = f["step_overhead_s"] * scale
    f["host_overhead"] = {k: {t: x * scale for t, x in v.items()} for k, v in f["host_overhead"].items()}
    return f


SEEN: list[tuple[tuple[str, ...], frozenset[str], frozenset[str]]] = []


def _fit_steps(data: TrainingData) -> dict:
    return _scaled_factors(data.steptime)


def _fit_table(data: TrainingData, held: tuple[str, ...], step) -> dict:
    SEEN.append((tuple(held), frozenset(m.model for m in data.steptime), frozenset(data.colocation.models())))
    model = PerModelMeanBaseline().fit(data.colocation)
    jobs = sorted({j for _g, j in data.colocation.isolated}, key=job_key)
    groups = [Group(GPU, pair) for pair in combinations_with_replacement(jobs, 2)]  # pairs in the key's order
    preds = model.predict(groups, ColocDataset((), dict(data.colocation.isolated)))
    entries = {group_key(GPU, g.jobs): p for g, p in zip(groups, preds, strict=True)}
    return ColocationTable(entries, 2, {"held_out": list(held)}).to_json()


RECIPE = Recipe("test/1", _fit_steps, _fit_table)


def _build(data: TrainingData, cache_dir, recipe: Recipe = RECIPE):
    cf = build_crossfit(data, 2, recipe=recipe, cache_dir=cache_dir)
    assert cf is not None
    return cf


def _data(slow: dict[str, float] | None = None) -> TrainingData:
    """Step times = shipped predictions x a per-model factor (x ``slow[model]``); pair speeds by model."""
    slow = slow or {}
    shipped = DeletePopStepTime()
    bias = {"resnet18": 1.2, "resnet50": 0.8, "vgg16": 1.5, "transformer": 0.7}
    rows = []
    for model in MODELS:
        for batch in (16, 32, 64):
            job = Job("m", model, batch, 1.0)
            t = shipped.step_time_s(job, GPU, 1) * bias[model] * slow.get(model, 1.0)
            rows.append(Measurement(model, GPU, batch, 1, t, source="gavel"))
    specs = {m: JobSpec(m, 32) for m in MODELS}
    pair_speed = {"resnet18": 0.7, "resnet50": 0.5, "vgg16": 0.4, "transformer": 0.8}
    samples = []
    for i, a in enumerate(MODELS):
        for b in MODELS[i + 1:]:
            sa = pair_speed[a] / slow.get(a, 1.0) ** 0.5
            sb = pair_speed[b] / slow.get(b, 1.0) ** 0.5
            samples.append(ColocSample(GPU, (specs[a], specs[b]), (sa, sb), source="test"))
    isolated = {(GPU, s): IsolatedProfile(step_time_s=0.1) for s in specs.values()}
    return TrainingData(tuple(rows), {}, ColocDataset(tuple(samples), isolated, "test"))


def _answers(bundle, model: str) -> tuple[float, float]:
    """(step time of a batch-32 job of ``model``, its speed beside a batch-32 resnet18) from ``bundle``."""
    job = Job("j", model, 32, 1.0)
    other = Job("o", "resnet18" if model != "resnet18" else "resnet50", 32, 1.0)
    return bundle.step_time.step_time_s(job, GPU), bundle.colocation.colocated_speeds([job, other], GPU)[0]


def test_folds_hold_every_model_out_exactly_once():
    folds = model_folds(MODELS, 3)
    held = [m for fold in folds for m in fold]
    assert sorted(held) == sorted(MODELS)  # each model in exactly one fold
    assert len(folds) == 3
    assert model_folds(MODELS, 10) == tuple((m,) for m in sorted(MODELS))  # at most one fold per model


def test_no_fold_is_fitted_on_a_measurement_of_a_model_it_holds_out(tmp_path):
    SEEN.clear()
    cf = _build(_data(), tmp_path)
    assert len(SEEN) == 2 and sorted(m for f in cf.folds for m in f.held_out) == sorted(MODELS)
    for held, step_models, coloc_models in SEEN:
        assert not set(held) & step_models and not set(held) & coloc_models
        assert step_models | set(held) == set(MODELS)  # and on every other model's measurements


def test_out_of_fold_answers_ignore_the_models_own_measurements(tmp_path):
    """Make vgg16's measured steps 3x slower and its pairs slower: the cross-fitted answers for vgg16 do
    not move, while those for a model of another fold and the in-sample fit do (the change is visible)."""
    base, perturbed = _data(), _data({"vgg16": 3.0})
    cf0, cf1 = _build(base, tmp_path / "a"), _build(perturbed, tmp_path / "b")
    assert cf0.key != cf1.key  # the cache key follows the data
    b0, b1 = cf0.predictors(), cf1.predictors()
    assert _answers(b0, "vgg16") == _answers(b1, "vgg16")
    vgg_fold = cf0.fold_of("vgg16")
    assert vgg_fold is not None
    other = next(m for m in MODELS if m not in vgg_fold.held_out)
    step0, speed0 = _answers(b0, other)
    step1, speed1 = _answers(b1, other)
    assert step1 > step0 * 1.05  # vgg16's slower rows moved the scale the other fold learned
    # in-sample: one fit on everything sees vgg16's own rows, and its answer for vgg16 moves
    job = Job("j", "vgg16", 32, 1.0)
    in0 = DeletePopStepTime(factors=_fit_steps(base)).step_time_s(job, GPU)
    in1 = DeletePopStepTime(factors=_fit_steps(perturbed)).step_time_s(job, GPU)
    assert in1 > in0 * 1.05


def test_pair_speeds_come_from_each_members_fold(tmp_path):
    cf = _build(_data(), tmp_path)
    a, b = (Job("a", "vgg16", 32, 1.0), Job("b", "resnet18", 32, 1.0))
    speeds = cf.predictors().colocation.colocated_speeds([a, b], GPU)
    fa, fb = cf.fold_of("vgg16"), cf.fold_of("resnet18")
    assert fa is not None and fb is not None
    ta, tb = fa.colocation(fa.step_time()), fb.colocation(fb.step_time())
    assert speeds == (ta.colocated_speeds([a, b], GPU)[0], tb.colocated_speeds([a, b], GPU)[1])
    # a model no measurement is of is answered by the shipped predictors (fitted on no row of it)
    assert cf.fold_of("mobilenet_v2") is None


def test_folds_are_read_back_from_the_cache_without_refitting(tmp_path):
    first = _build(_data(), tmp_path)

    def refuse(*_args):
        raise AssertionError("refitted a cached fold")

    again = _build(_data(), tmp_path, replace(RECIPE, steptime=refuse, colocation=refuse))
    assert again.key == first.key and again.folds == first.folds
    # other data is another key: nothing cached, and a cache-only build fits nothing
    assert build_crossfit(_data({"vgg16": 2.0}), 2, recipe=RECIPE, cache_dir=tmp_path,
                          fit_missing=False) is None


def test_bundle_is_registered_and_named_in_results():
    from dltsched.engine.app.registry import BUNDLE_FIT, check_predictors, predictor_names

    assert "crossfit" in predictor_names() and check_predictors("CrossFit") == "crossfit"
    assert BUNDLE_FIT["default"] == "in-sample"
    from dltsched.engine.domain.errors import ValidationError

    with pytest.raises(ValidationError, match="crossfit"):
        check_predictors("crosfit")


# ---------------------------------------------------------------------------------------- the default
# recipe's co-location family: the profile predictor, refitted per fold (its fit takes a second on these rows)


def _profile_data(slow: dict[str, float] | None = None) -> TrainingData:
    """``_data`` with every pair measured at three batch sizes (enough rows for the trees) and each model's
    isolated profile its (``slow``-scaled) measured step time."""
    base = _data(slow)
    slow = slow or {}
    shipped = DeletePopStepTime()
    pair_speed = {"resnet18": 0.7, "resnet50": 0.5, "vgg16": 0.4, "transformer": 0.8}
    samples, isolated = [], {}
    for batch in (16, 32, 64):
        specs = {m: JobSpec(m, batch) for m in MODELS}
        for m, spec in specs.items():
            isolated[(GPU, spec)] = IsolatedProfile(
                step_time_s=shipped.step_time_s(Job("m", m, batch, 1.0), GPU, 1) * slow.get(m, 1.0))
        for i, a in enumerate(MODELS):
            for b in MODELS[i + 1:]:
                speeds = (pair_speed[a] / slow.get(a, 1.0) ** 0.5, pair_speed[b] / slow.get(b, 1.0) ** 0.5)
                samples.append(ColocSample(GPU, (specs[a], specs[b]), speeds, source="test"))
    return TrainingData(base.steptime, {}, ColocDataset(tuple(samples), isolated, "test"))


PROFILE_RECIPE = Recipe("test-profile/1", _fit_steps)  # the default co-location recipe: the profile predictor


def test_default_recipe_refits_the_profile_predictor_without_the_held_out_models(tmp_path):
    from dltsched.predictors.colocation.profiled import ProfileColocation

    cf = _build(_profile_data(), tmp_path, PROFILE_RECIPE)
    assert cf.record()["colocation"] == "profile" and cf.record()["recipe"] == "test-profile/1"
    for fold in cf.folds:
        model = fold.colocation(fold.step_time())
        assert isinstance(model, ProfileColocation)  # the default bundle's family, not the ensemble table
        assert model.profiles and not {j.model for _g, j in model.profiles} & set(fold.held_out)
        assert model.record["held_out"] == list(fold.held_out)
    bundle = cf.predictors()
    assert bundle.colocation.record == cf.record()  # the bundle says what it is


def test_profile_folds_ignore_the_held_out_models_measurements(tmp_path):
    """vgg16 measured 3x slower, its pairs and isolated profiles too: its cross-fitted step time and speed
    beside resnet18 stay; the speed of a model of another fold beside vgg16 moves (it reads vgg16's
    profile)."""
    cf0 = _build(_profile_data(), tmp_path / "a", PROFILE_RECIPE)
    cf1 = _build(_profile_data({"vgg16": 3.0}), tmp_path / "b", PROFILE_RECIPE)
    b0, b1 = cf0.predictors(), cf1.predictors()
    assert _answers(b0, "vgg16") == _answers(b1, "vgg16")
    fold = cf0.fold_of("vgg16")
    assert fold is not None
    other = next(m for m in MODELS if m not in fold.held_out)
    pair = [Job("o", other, 32, 1.0), Job("v", "vgg16", 32, 1.0)]
    assert b0.colocation.colocated_speeds(pair, GPU)[0] != b1.colocation.colocated_speeds(pair, GPU)[0]


def test_a_new_colocation_recipe_refits_the_folds_but_not_the_step_times(tmp_path):
    first = _build(_profile_data(), tmp_path, PROFILE_RECIPE)

    def refuse(*_args):
        raise AssertionError("refitted cached step-time factors")

    renamed = replace(PROFILE_RECIPE, name="test-profile/2", steptime=refuse)
    again = _build(_profile_data(), tmp_path, renamed)  # co-location refitted (new key), step times read back
    assert again.key != first.key
    assert [f.factors for f in again.folds] == [f.factors for f in first.folds]
    # a new step-time recipe invalidates the step-time cache too, also under the same co-location recipe name
    with pytest.raises(AssertionError, match="refitted cached step-time"):
        _build(_profile_data(), tmp_path,
               replace(renamed, name="test-profile/3", steptime_name="test-steptime/2"))
    with pytest.raises(AssertionError, match="refitted cached step-time"):
        _build(_profile_data(), tmp_path, replace(renamed, steptime_name="test-steptime/2"))


def test_fold_errors_price_each_row_by_its_predictor_beside_roofline_constant_and_speedups():
    from dltsched.predictors.crossfit import CrossFitStepTime, steptime_fold_errors

    shipped = DeletePopStepTime()
    slow = DeletePopStepTime(factors=_scaled_factors([Measurement("resnet50", GPU, 64, 1, 10.0, source="s")]))
    truth = {(m, g): shipped.step_time_s(Job("j", m, 64, 1.0), g, 1) for m in ("resnet50", "resnet18")
             for g in ("v100", "k80")}
    rows = [Measurement(m, g, 64, 1, t, source="s") for (m, g), t in truth.items()]
    out = steptime_fold_errors(CrossFitStepTime({"resnet18": slow}, shipped), rows, shipped)
    # resnet50 is priced by the fallback (the truth here, 0% error), resnet18 by its fold's slow predictor
    assert out["crossfit"]["per_model"]["resnet50"] == pytest.approx(0.0, abs=1e-6)
    assert out["crossfit"]["per_model"]["resnet18"] > 50.0
    assert out["in_sample"]["mape"] == pytest.approx(0.0, abs=1e-6)
    # the constant rule for a row is the other models' median on that GPU: resnet18's row on v100 gets
    # resnet50's
    expected = abs(truth[("resnet50", "v100")] / truth[("resnet18", "v100")] - 1) * 100
    assert out["constant"]["n"] == 4 and min(out["constant"]["per_model"].values()) > 0
    assert out["constant"]["per_model"]["resnet18"] == pytest.approx(
        (expected + abs(truth[("resnet50", "k80")] / truth[("resnet18", "k80")] - 1) * 100) / 2)
    assert out["roofline"]["n"] == 4 and out["roofline"]["mape"] > 0
    # speed-ups: measured k80 / v100, and each predictor's ratio to it (1 = right)
    measured = truth[("resnet18", "k80")] / truth[("resnet18", "v100")]
    assert out["speedup"]["resnet18"]["measured"] == pytest.approx(measured)
    assert out["speedup"]["resnet50"]["crossfit"] == pytest.approx(1.0)
    assert out["speedup"]["resnet18"]["in_sample"] == pytest.approx(1.0)
