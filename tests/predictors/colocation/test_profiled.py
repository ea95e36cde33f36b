"""The profile-based co-location predictor: physics bounds, JSON trees, files, fallbacks, rules, splits."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import ColocationPredictor
from dltsched.predictors.colocation.baselines import ConstantBaseline, PerModelMeanBaseline, UtilShareRule
from dltsched.predictors.colocation.experiments import compare
from dltsched.predictors.colocation.features import Group
from dltsched.predictors.colocation.jsontrees import JsonTrees, fit_trees, from_sklearn
from dltsched.predictors.colocation.profile_rows import feature_rows, feature_rows_loop
from dltsched.predictors.colocation.profile_train import train_profile_table
from dltsched.predictors.colocation.profiled import ProfileColocation, shipped_profile_predictor
from dltsched.predictors.colocation.samples import ColocDataset, ColocSample, IsolatedProfile, JobSpec

JOBS = (JobSpec("resnet18", 32), JobSpec("resnet50", 64), JobSpec("lstm_lm", 20), JobSpec("vgg16", 64))
UTIL = {JOBS[0]: 40.0, JOBS[1]: 90.0, JOBS[2]: 70.0, JOBS[3]: 20.0}
MEM = {JOBS[0]: 2000.0, JOBS[1]: 6000.0, JOBS[2]: 3000.0, JOBS[3]: 2500.0}
ISO = {("v100", j): IsolatedProfile(0.02 * (i + 1), MEM[j], UTIL[j], UTIL[j] / 2) for i, j in enumerate(JOBS)}


def _toy() -> ColocDataset:
    """Every pair of JOBS (with repetition) on a V100, labelled by a noisy version of the time-slicing
    rule."""
    samples = []
    for i, a in enumerate(JOBS):
        for b in JOBS[i:]:
            total = UTIL[a] + UTIL[b]
            speed = min(1.0, 100.0 / total) * 0.97
            samples.append(ColocSample("v100", (a, b), (speed, speed), 1.01 * (MEM[a] + MEM[b]),
                                       min(100.0, 0.9 * total)))
    return ColocDataset(tuple(samples), ISO, "toy")


def _fitted() -> ProfileColocation:
    return ProfileColocation(max_iter=20, min_samples_leaf=2).fit(_toy())


_FITTED = _fitted()  # shared by the property test (only its fallback counts change)


def test_rules_on_a_hand_made_set() -> None:
    data = _toy()
    group = Group("v100", (JOBS[0], JOBS[1]))  # utils 40 + 90 = 130; memory 2000 + 6000
    (rule,) = UtilShareRule().predict([group], data)
    assert rule.speeds == pytest.approx((100 / 130, 100 / 130))
    assert (rule.memory_mib, rule.gpu_util) == (8000.0, 100.0)
    const = ConstantBaseline().fit(data)
    all_speeds = [v for s in data.samples for v in s.speeds]
    assert const.speed == pytest.approx(sum(all_speeds) / len(all_speeds))
    per_model = PerModelMeanBaseline().fit(data)
    r18 = [v for s in data.samples for j, v in zip(s.jobs, s.speeds, strict=True) if j.model == "resnet18"]
    assert per_model.by_model["resnet18"] == pytest.approx(sum(r18) / len(r18))
    assert per_model.predict([group], data)[0].memory_mib == 8000.0


def test_json_trees_match_sklearn_with_missing_values() -> None:
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    x = rng.random((400, 3))
    x[::4, 1] = np.nan
    y = 2 * x[:, 0] + np.nan_to_num(x[:, 1], nan=-1.0) - x[:, 2] ** 2
    with threadpool_limits(1):  # all cores thrash on a loaded machine
        model = HistGradientBoostingRegressor(max_iter=30, max_depth=3, random_state=0).fit(x, y)
    trees = JsonTrees.from_json(json.loads(json.dumps(from_sklearn(model).to_json())))
    test = rng.random((200, 3))
    test[::3, 1] = np.nan
    assert np.allclose(trees.predict(test), model.predict(test))
    for k in (1, 2):  # the engine's single rows and pairs take their own paths (row 0 has a missing value)
        assert np.allclose(trees.predict(test[:k]), model.predict(test[:k]))
    assert np.isfinite(fit_trees([[np.nan, 1.0], [np.nan, 2.0]] * 20, [0.0, 1.0] * 20, min_samples_leaf=2)
                       .predict([[np.nan, 1.5]])).all()  # an all-missing column is fitted as a constant


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 100.0), st.floats(100.0, 30000.0), st.floats(0.001, 2.0),
                          st.one_of(st.none(), st.floats(0.0, 100.0))), min_size=2, max_size=3))
def test_physics_bounds_hold_for_any_profiles(profiles: list[tuple[float, float, float,
                                                                   float | None]]) -> None:
    model = _FITTED
    jobs = tuple(JobSpec("resnet18", 8 * (i + 1)) for i in range(len(profiles)))
    iso = {("v100", j): IsolatedProfile(step, mem, util, bw)
           for j, (util, mem, step, bw) in zip(jobs, profiles,
                                                                                                 strict=True)}
    (est,) = model.estimate_groups([Group("v100", jobs)], iso)
    assert all(0.0 < v <= 1.0 for v in est.speeds)
    mems = [p[1] for p in profiles]
    assert max(mems) - 1e-6 <= est.memory_mib <= 1.25 * sum(mems) + 1e-6
    assert 0.0 < est.gpu_util <= min(100.0, sum(p[0] for p in profiles)) + 1e-9
    assert est.sources == ("measured",) * len(jobs) and not est.fallback


def test_missing_profiles_are_predicted_counted_logged_and_flagged(caplog: pytest.LogCaptureFixture) -> None:
    model = _fitted().with_profiles(ISO)
    assert isinstance(model, ColocationPredictor)
    known, unknown = Job("a", "resnet18", 32, 1.0), Job("b", "mobilenet_v2", 64, 1.0)
    with caplog.at_level(logging.WARNING):
        est = model.estimate([known, unknown], "v100")
        model.estimate([unknown, known], "v100")
    assert est.sources == ("measured", "predicted") and est.fallback
    assert model.fallbacks["predicted_step_time_s"] == 1  # resolved once, then remembered
    assert model.fallbacks["predicted_gpu_util"] == 1
    assert sum("no profile of mobilenet_v2:64" in r.message for r in caplog.records) == 1
    speeds = model.colocated_speeds([known, unknown], "v100")
    assert speeds == est.speeds and model.group_memory_mib([known, unknown], "v100") == est.memory_mib
    three = model.estimate([known, unknown, Job("c", "resnet50", 64, 1.0)], "v100")
    assert len(three.speeds) == 3 and max(three.speeds) <= 1.0
    with pytest.raises(ValidationError, match="jobs"):
        model.estimate([known] * 4, "v100")


def test_file_round_trip_predicts_the_same(tmp_path: Path) -> None:
    model = _fitted().with_profiles(ISO)
    path = tmp_path / "table_profile_toy.json"
    model.save(path)
    again = ProfileColocation.load(path)
    groups = [Group("v100", (a, b)) for a in JOBS for b in JOBS]
    assert again.estimate_groups(groups) == model.estimate_groups(groups)
    raw = json.loads(path.read_text())
    raw["job_features"] = raw["job_features"][:-1]
    with pytest.raises(ValidationError, match="retrain"):
        ProfileColocation.from_json(raw)


def test_leave_one_model_out_never_trains_on_the_held_out_model() -> None:
    seen: list[set[str]] = []

    class Recording(UtilShareRule):
        def fit(self, train: ColocDataset) -> UtilShareRule:
            seen.append({m for s in train.samples for m in s.models})
            return self

    result = compare(_toy(), "model", ["rec"], factories={"rec": Recording}, ensembles={})["rec"]
    assert result["folds"] == sorted({j.model for j in JOBS})
    assert all(held not in models for held, models in zip(result["folds"], seen, strict=True))


def test_lucid_models_are_never_written_into_the_package(tmp_path: Path) -> None:
    package_dir = Path(__file__).resolve().parents[3] / "predictors" / "colocation"
    with pytest.raises(ValidationError, match="inside the package"):
        train_profile_table(package_dir, "lucid")


def test_shipped_model_needs_no_torch_and_knows_gavel_profiles() -> None:
    model = shipped_profile_predictor()
    assert model.record["data"] == "gavel" and "MIT" in model.record["license"]
    est = model.estimate([Job("a", "resnet18", 32, 1.0, dataset="cifar10"), Job("b", "lstm_lm", 20, 1.0)],
                         "p100")
    assert all(0.0 < v <= 1.0 for v in est.speeds)
    # Gavel measured step times; memory and utilisation predicted
    assert est.sources == ("partial", "partial")


def test_idle_member_flags_speeds_the_utilisation_cannot_hold() -> None:
    from dltsched.predictors.colocation.samples import idle_member, suspect

    a, b = JOBS[0], JOBS[3]  # isolated utilisation 40% and 20%
    busy = ColocSample("v100", (a, b), (1.0, 1.0), 4600.0, 50.0)   # 40 x 1.0 = 40 busy: 50 is plausible
    idle = ColocSample("v100", (a, b), (1.0, 1.0), 4600.0, 15.0)   # below half of 40: job a cannot have run
    assert idle_member(busy, ISO) is None and not suspect(busy, ISO)
    assert idle_member(idle, ISO) == 0 and suspect(idle, ISO)


@pytest.mark.data
@pytest.mark.slow
def test_lucid_leave_one_model_out_beats_the_rules(data_dir: Path) -> None:
    from dltsched.predictors.colocation.experiments import BASELINES, read_dataset

    names = ["constant", "per_model_mean", "util_share", "profile"]
    result = compare(read_dataset("lucid", data_dir), "model", names,
                     factories={n: BASELINES[n] for n in names}, ensembles={})
    ours, rules = result["profile"], [result[n] for n in names[:-1]]
    assert ours["speed_mape"] < min(r["speed_mape"] for r in rules)
    assert ours["valid"]["memory_mape"] < min(r["valid"]["memory_mape"] for r in rules
                                              if r["valid"]["memory_mape"])
    assert ours["util_mape"] < min(r["util_mape"] for r in rules if r["util_mape"])


def test_cli_predicts_from_a_profile_model_and_marks_predicted_profiles() -> None:
    from click.testing import CliRunner

    from dltsched.engine.app.cli.colocation import colocation
    from dltsched.predictors.colocation.profiled import SHIPPED

    path = Path(__file__).resolve().parents[3] / "predictors" / "colocation" / SHIPPED
    result = CliRunner().invoke(colocation, ["--gpu", "a100", "--job", "resnet18:64", "--job", "lm:20",
                                             "--model", str(path), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output[result.output.index("{"):])
    # no A100 profile: predicted
    assert [row["profile"] for row in payload["jobs"]] == ["predicted", "predicted"]
    assert payload["fallbacks"]["predicted_step_time_s"] >= 2
    assert payload["memory_mib"] >= 0 and 0 < payload["gpu_util"] <= 100


def test_callers_job_profiles_replace_predicted_ones() -> None:
    from dltsched.predictors.profiles import JobProfile, ProfileKey

    model = _fitted().with_profiles(ISO)
    job = Job("b", "mobilenet_v2", 64, 1.0, dataset="cifar10")
    assert model.estimate([Job("a", "resnet18", 32, 1.0), job], "v100").sources == ("measured", "predicted")
    measured = JobProfile(ProfileKey("v100", "mobilenet_v2", 64, False, "cifar10"), 0.03, 3000.0, 60.0)
    guessed = JobProfile(ProfileKey("v100", "vgg16", 64), 0.03, 3000.0, 60.0, source="predicted")
    richer = model.with_job_profiles([measured, guessed])
    assert richer.estimate([Job("a", "resnet18", 32, 1.0), job], "v100").sources == ("measured", "measured")
    # from ISO, not replaced by the predicted profile
    assert ("v100", JobSpec("vgg16", 64)) in richer.profiles
    assert richer.profiles[("v100", JobSpec("vgg16", 64))] == ISO[("v100", JobSpec("vgg16", 64))]


def test_schedule_time_predictions_need_no_torch() -> None:
    import subprocess
    import sys

    code = ("import sys; from dltsched.engine.domain.model import Job; "
            "from dltsched.predictors.colocation.profiled import shipped_profile_predictor as s; "
            "e = s().estimate([Job('a', 'resnet18', 32, 1.0), Job('b', 'vgg16', 64, 1.0)], 'v100'); "
            "print('torch' in sys.modules, len(e.speeds))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False 2"


def test_numpy_and_loop_features_agree() -> None:
    model = _fitted()
    jobs = (*JOBS, JobSpec("mobilenet_v2", 64))  # the last has no profile: predicted, NaN bandwidth
    groups = [Group("v100", (a, b)) for a in jobs for b in jobs] + [Group("v100", (a, b, a)) for a in jobs
                                                                    for b in jobs]
    memo: dict = {}
    vectors = [[model.job_vector("v100", j, ISO, memo) for j in g.jobs] for g in groups]
    gpus = ["v100"] * len(groups)
    fast, slow = feature_rows(vectors, gpus), feature_rows_loop(vectors, gpus)
    # to the last bit: a value a hair off lands on the other side of a split fitted between two close values
    assert np.array_equal(fast[0], slow[0],
                          equal_nan=True) and np.array_equal(fast[1], slow[1], equal_nan=True)


def test_engine_default_is_the_shipped_profile_model_and_takes_measured_profiles() -> None:
    from dltsched.predictors import default_predictors
    from dltsched.predictors.colocation import default_colocation_predictor
    from dltsched.predictors.profiles import JobProfile, ProfileKey

    model = default_predictors().colocation
    assert isinstance(model, ProfileColocation)
    assert model.record["data"] == "gavel" and "MIT" in model.record["license"]
    jobs = (Job("a", "resnet18", 32, 1.0), Job("b", "mobilenet_v2", 64, 1.0))  # b: no Gavel profile
    model.colocated_speeds(jobs, "v100")
    assert model.fallbacks["predicted_step_time_s"] == 1 and model.estimate(jobs, "v100").fallback

    def with_util(util: float) -> ProfileColocation:
        return default_colocation_predictor(profiles=[JobProfile(ProfileKey("v100", "mobilenet_v2", 64), 0.05,
                                                                 3000.0, util)])

    busy, idle = with_util(95.0), with_util(5.0)
    estimate = busy.estimate(jobs, "v100")
    assert estimate.sources[1] == "measured" and not busy.fallbacks["predicted_step_time_s"]
    # the measured util is used
    assert busy.colocated_speeds(jobs, "v100") != idle.colocated_speeds(jobs, "v100")
    assert busy.group_memory_mib(jobs, "v100") >= 3000.0  # at least the largest member's measured memory
    with pytest.raises(ValidationError, match="strict mode"):
        default_colocation_predictor(strict=True).colocated_speeds(jobs, "v100")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 100.0), st.floats(100.0, 30000.0), st.floats(0.001, 2.0)),
                min_size=2, max_size=3), st.integers(0, 2), st.floats(0.0, 60.0))
def test_group_utilisation_never_falls_when_a_member_is_busier(profiles: list[tuple[float, float, float]],
                                                               which: int, more: float) -> None:
    model = _FITTED
    assert model.util_trees is not None  # the toy data has measured utilisation: the correction is fitted
    which %= len(profiles)
    jobs = tuple(JobSpec("resnet18", 8 * (i + 1)) for i in range(len(profiles)))

    def util(bump: float) -> float:
        iso = {("v100", j): IsolatedProfile(step, mem, min(100.0, u + (bump if i == which else 0.0)), None)
               for i, (j, (u, mem, step)) in enumerate(zip(jobs, profiles, strict=True))}
        return model.estimate_groups([Group("v100", jobs)], iso)[0].gpu_util

    assert util(more) >= util(0.0) - 1e-9


def test_profiling_harness_groups_read_with_their_gpu_and_unmeasured_cells(tmp_path: Path) -> None:
    from dltsched.predictors.colocation.samples import read_lucid_samples

    (tmp_path / "single_data.csv").write_text(
        "model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,gpu\n"
        "resnet18,cifar10,32,0,1600,40,10,2000,h100\n"
        "vgg16,cifar10,64,0,1280,nan,nan,nan,h100\n"
        "lstm_lm,wikitext2,20,0,400,70,20,3000,h100\n")
    (tmp_path / "colocate3_info.csv").write_text(
        ",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,amp2,speed2,"
        "model3,dataset3,gpu_num3,batchsize3,amp3,speed3,gpu_util,gmem_util,gmem,gpu,sharing,gmem_source\n"
        "0,vgg16,cifar10,1,64,0,0.5,resnet18,cifar10,1,32,0,0.6,lstm_lm,wikitext2,1,20,0,0.7,95,9,7500,h100,"
        "timeslice,nvml\n"
        "1,lstm_lm,wikitext2,1,20,0,0.8,resnet18,cifar10,1,32,0,0.4,vgg16,cifar10,1,64,0,0.6,nan,nan,nan,"
        "h100,timeslice,torch\n")
    data = read_lucid_samples(tmp_path / "colocate3_info.csv")
    (sample,) = data.samples  # the same three jobs twice: one group, runs averaged, unmeasured cells left out
    assert sample.gpu == "h100" and [j.model for j in sample.jobs] == ["lstm_lm", "resnet18", "vgg16"]
    assert sample.speeds == pytest.approx((0.75, 0.5, 0.55))
    assert (sample.memory_mib, sample.gpu_util) == (7500.0, 95.0)
    vgg = data.isolated[("h100", JobSpec("vgg16", 64, False, "cifar10"))]
    assert vgg.step_time_s == pytest.approx(0.05) and vgg.memory_mib is None and vgg.gpu_util is None
    (pred,) = _FITTED.predict([Group("h100", sample.jobs)], data)
    assert len(pred.speeds) == 3 and 0 < pred.gpu_util <= 100.0


def test_a_model_fitted_on_analytic_utilisation_gives_measured_groups_the_rule() -> None:
    shipped = shipped_profile_predictor()
    assert not shipped.measured_util_trained  # Gavel measures no utilisation
    assert _FITTED.measured_util_trained  # the toy set's utilisations are measured
    jobs = (JobSpec("resnet18", 32), JobSpec("vgg16", 64))
    iso = {("v100", j): IsolatedProfile(0.05, 2000.0, u, None)
           for j, u in zip(jobs, (70.0, 60.0), strict=True)}
    (measured,) = shipped.estimate_groups([Group("v100", jobs)], iso)
    assert measured.speeds == pytest.approx((100 / 130, 100 / 130))  # min(1, 100 / sum of measured util)
    # no utilisation correction: independent members' busy time, not the sum
    assert shipped.util_trees is None
    assert measured.gpu_util == pytest.approx(100.0 * (1.0 - 0.3 * 0.4))
    partly = {**iso, ("v100", jobs[1]): IsolatedProfile(0.05, 2000.0, None, None)}
    # an analytic util: the fitted model
    (corrected,) = shipped.estimate_groups([Group("v100", jobs)], partly)
    assert corrected.speeds != measured.speeds
    again = ProfileColocation.from_json(json.loads(json.dumps(shipped.to_json())))
    assert not again.measured_util_trained


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 100.0), st.floats(100.0, 30000.0), st.floats(0.001, 2.0)),
                min_size=3, max_size=3))
def test_a_third_job_never_speeds_the_others_up(profiles: list[tuple[float, float, float]]) -> None:
    jobs = tuple(JobSpec("resnet18", 8 * (i + 1)) for i in range(3))
    iso = {("v100", j): IsolatedProfile(step, mem, u, None)
           for j, (u, mem, step) in zip(jobs, profiles, strict=True)}
    for model in (_FITTED, shipped_profile_predictor()):
        (three,) = model.estimate_groups([Group("v100", jobs)], iso)
        for k in range(3):
            pair = tuple(j for i, j in enumerate(jobs) if i != k)
            (two,) = model.estimate_groups([Group("v100", pair)], iso)
            assert all(three.speeds[jobs.index(j)] <= v + 1e-12
                       for j, v in zip(pair, two.speeds, strict=True))
            assert three.memory_mib >= two.memory_mib - 1e-9 and three.gpu_util >= two.gpu_util - 1e-9
        assert three.gpu_util <= min(100.0, sum(p[0] for p in profiles)) + 1e-9
        assert max(p[1]
                   for p in profiles) - 1e-6 <= three.memory_mib <= 1.25 * sum(p[1] for p in profiles) + 1e-6
        engine = model.with_profiles(iso)  # one group at a time, sub-groups remembered: the same answer
        members = [Job(f"j{i}", j.model, j.batch_size, 1.0) for i, j in enumerate(jobs)]
        assert engine.estimate(members, "v100") == three


def test_profiles_measured_in_the_run_replace_predicted_ones() -> None:
    """Profiling on arrival: inside a run's profile book a member measured alone on one GPU of the type enters
    with its measurement (sources ``measured``, its memory counted); outside the book, or measured on two
    GPUs, the predictor's own answer stands."""
    from dltsched.engine.domain.profiles import IsolatedProfile as Measured
    from dltsched.engine.domain.profiles import ProfileBook, observing_profiles

    model = shipped_profile_predictor()
    a, b = Job("a", "resnet18", 32, 1e4), Job("b", "mobilenet_v2", 64, 1e4)
    before = model.estimate([a, b], "v100")
    assert before.sources[1] == "predicted"
    book = ProfileBook()
    book.record_isolated(b, "v100", Measured(1, 1, 0.05, 9_000.0, 0.4))
    with observing_profiles(book):
        during = model.estimate([a, b], "v100")
        other_type = model.estimate([a, b], "p100")
    assert during.sources == (before.sources[0], "measured")
    assert during.memory_mib >= 9_000.0 > before.memory_mib
    assert other_type == model.estimate([a, b], "p100")
    assert model.estimate([a, b], "v100") == before  # the book is gone: remembered answer again
    wide = ProfileBook()
    wide.record_isolated(b, "v100", Measured(2, 1, 0.05, 9_000.0, 0.4))
    with observing_profiles(wide):
        assert model.estimate([a, b], "v100") == before


def test_base_only_comparator_predicts_the_physics_base_without_corrections() -> None:
    from dltsched.predictors.colocation.experiments import BASELINES

    base = BASELINES["profile_base"]().fit(_toy())
    assert base.speed_trees is None and base.memory_trees is None and base.util_trees is None
    jobs = (JOBS[0], JOBS[1])  # utilisations 40% and 90%
    (est,) = base.estimate_groups([Group("v100", jobs)], ISO)
    assert est.speeds == pytest.approx(((100.0 / 130.0) ** base.alpha,) * 2)
    assert est.memory_mib == pytest.approx(MEM[JOBS[0]] + MEM[JOBS[1]])
    assert est.gpu_util == pytest.approx(100.0 * (1.0 - 0.6 * 0.1))  # independent members' busy time
    (fitted,) = _FITTED.estimate_groups([Group("v100", jobs)], ISO)
    assert fitted.gpu_util != est.gpu_util  # the full model's utilisation is corrected on min(100, sum)


def test_pair_rows_from_kept_job_parts_match_pair_rows() -> None:
    from dltsched.predictors.colocation.features import job_features, pair_features, pair_rows, pair_rows_from

    group = Group("v100", (JOBS[0], JOBS[1], JOBS[0]))
    own = [[*job_features(j, ISO[("v100", j)]), *pair_features("v100", j, ISO)] for j in group.jobs]
    assert pair_rows_from(group, own, [ISO[("v100", j)] for j in group.jobs]) == pair_rows(group, ISO)
    from dltsched.predictors.colocation.profiled import pair_rows_of

    unmeasured = {**ISO, ("v100", JOBS[1]): IsolatedProfile(0.04, 6000.0, None)}  # no utilisation: the flag
    for jobs in (group.jobs, group.jobs[:2], (JOBS[2], JOBS[3])):
        for isolated in (ISO, unmeasured):
            g = Group("v100", jobs)
            own = [[*job_features(j, isolated[("v100", j)]), *pair_features("v100", j, isolated)]
                   for j in jobs]
            profiles = [isolated[("v100", j)] for j in jobs]
            assert pair_rows_of("v100", jobs, own, profiles) == pair_rows_from(g, own, profiles)


def test_stacked_trees_give_each_ensembles_own_predictions() -> None:
    from dltsched.predictors.colocation.jsontrees import StackedTrees

    rng = np.random.default_rng(1)
    x = rng.random((300, 5))
    a = fit_trees(x[:, :3], x[:, 0] - x[:, 2], max_iter=20, max_depth=4, min_samples_leaf=5)
    b = fit_trees(x[:, 2:], x[:, 3] * x[:, 4], max_iter=15, max_depth=None, min_samples_leaf=5)
    stacked = StackedTrees((a, b), (0, 2))
    test = rng.random((40, 5))
    test[::3, 2] = np.nan  # read by both ensembles
    for rows in (test[:1], test[:3], test):  # a few rows decide every split first; many walk
        both = stacked.predict(rows)
        assert np.allclose(both[:, 0],
                           a.predict(rows[:, :3])) and np.allclose(both[:, 1], b.predict(rows[:, 2:]))
    with pytest.raises(ValueError, match="offset"):
        StackedTrees((a,), (0, 2))


def test_one_group_at_a_time_predicts_as_the_batch_path_in_any_order() -> None:
    model = _fitted()  # speed, pair, memory and utilisation trees: all four in the one-group walk
    assert all(t is not None for t in (model.speed_trees, model.pair_speed_trees, model.memory_trees,
                                       model.util_trees))
    jobs = (*JOBS, JobSpec("mobilenet_v2", 64))  # the last has no profile: predicted
    groups = [Group("v100", (a, b)) for a in jobs for b in jobs] + [Group("v100", (a, b, c)) for a in jobs
                                                                    for b in jobs[:3] for c in jobs[2:]]
    batch = model.estimate_groups(groups, ISO)
    assert len(groups) >= 32  # the numpy path
    for g, e in zip(groups, batch, strict=True):
        one = model.estimate_groups([g], ISO)[0]
        assert one.speeds == pytest.approx(e.speeds, rel=1e-9) and one.sources == e.sources
        assert one.memory_mib == pytest.approx(e.memory_mib, rel=1e-9)
        assert one.gpu_util == pytest.approx(e.gpu_util, rel=1e-9)
    engine = model.with_profiles(ISO)
    for g, e in zip(groups, batch, strict=True):  # the engine's calls, asked in reverse order
        members = [Job(f"j{i}", j.model, j.batch_size, 1.0, amp=j.amp, dataset=j.dataset)
                   for i, j in enumerate(g.jobs)]
        got = engine.estimate(members[::-1], "v100")
        assert got.speeds == pytest.approx(e.speeds[::-1], rel=1e-9) and got.sources == e.sources[::-1]
        assert got.memory_mib == pytest.approx(e.memory_mib, rel=1e-9)


def test_members_differing_only_by_a_named_dataset_are_ordered() -> None:
    model = _fitted().with_profiles(ISO)
    jobs = [Job("a", "resnet18", 32, 1.0, dataset="cifar10"), Job("b", "resnet18", 32, 1.0)]  # dataset None
    forward, backward = model.estimate(jobs, "v100"), model.estimate(jobs[::-1], "v100")
    assert forward.speeds == pytest.approx(backward.speeds[::-1], rel=1e-9)
    assert forward.memory_mib == pytest.approx(backward.memory_mib, rel=1e-9)


def test_analytic_busy_fraction_falls_with_the_measured_step_time() -> None:
    from dltsched.predictors.colocation.profile_rows import log_busy

    job = JobSpec("resnet50", 64)
    assert log_busy("v100", job, 0.1) - log_busy("v100", job, 1.0) == pytest.approx(np.log(10.0))
    assert log_busy("v100", JobSpec("resnet50", 128), 1.0) > log_busy("v100", job, 1.0)  # twice the work
    assert log_busy("k80", job, 1.0) > log_busy("v100", job, 1.0)  # the same work at a lower peak


def test_pair_speed_trees_are_fitted_saved_and_switched_off_by_weight_zero(tmp_path: Path) -> None:
    assert _FITTED.pair_speed_trees is not None and _FITTED.pair_weight == 0.5
    _FITTED.save(tmp_path / "m.json")
    again = ProfileColocation.load(tmp_path / "m.json")
    groups = [Group("v100", (JOBS[0], JOBS[1])), Group("v100", (JOBS[2], JOBS[3], JOBS[1]))]
    assert again.estimate_groups(groups, ISO) == _FITTED.estimate_groups(groups, ISO)
    alone = ProfileColocation(max_iter=20, min_samples_leaf=2, pair_weight=0.0).fit(_toy())
    assert alone.pair_speed_trees is None
    assert alone.estimate_groups(groups, ISO)[0].speeds != _FITTED.estimate_groups(groups, ISO)[0].speeds
