"""What policies are told (lengths known/unknown/estimate), profiling on arrival, batch arrivals; each resumes
from a checkpoint to the same result."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from dltsched.engine.app.registry import make_policy
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import memoized
from dltsched.engine.domain.profiled import profiled
from dltsched.engine.domain.profiles import IsolatedProfile, ProfileBook, observing_profiles
from dltsched.engine.sim.checkpoint import CheckpointStore
from dltsched.engine.sim.config import ProfilingConfig
from dltsched.engine.sim.lengths import LengthEstimates
from dltsched.engine.sim.simulator import SimulationConfig, Simulator, simulate
from dltsched.engine.sim.truth import MeasuredTruth
from dltsched.engine.sim.workload import batch_arrivals

TRUTH = MeasuredTruth(use_measurements=False)


class Spy:
    """FIFO that records every (job id, total iterations, remaining iterations) it is shown."""

    name = "fifo"
    round_interval_s = 600.0

    def __init__(self, predictors):
        self.inner = make_policy("fifo", predictors=predictors)
        self.seen: list[tuple[str, float, float, float]] = []

    def schedule(self, state):
        for s in state.jobs:
            self.seen.append((s.job.id, s.job.total_iterations, s.remaining_iterations, s.progress))
        return self.inner.schedule(state)


def test_unknown_lengths_hide_every_true_length(analytic, small_instance):
    inst = small_instance(7, num_jobs=20)
    true = {j.id: j.total_iterations for j in inst.jobs}
    spy = Spy(analytic)
    Simulator(inst, spy, TRUTH, SimulationConfig(lengths="unknown")).run()
    prior = LengthEstimates("unknown", 0.0, 0, inst.jobs).prior
    assert spy.seen
    for job_id, total, remaining, progress in spy.seen:
        assert total != true[job_id] or total == prior  # only the instance-wide prior, never the job's own
        assert remaining >= total / 2 - 1e-9  # the attained-service prior: at least as much again as done
        assert 0.0 <= progress <= 0.5 + 1e-9
        assert total / prior == 2 ** round(math.log2(total / prior))  # doublings of the prior


def test_known_lengths_are_shown_and_estimates_without_error_equal_them(analytic, small_instance):
    inst = small_instance(8, num_jobs=20)
    known = simulate(inst, make_policy("sjf", predictors=analytic), truth=TRUTH)
    exact = simulate(inst, make_policy("sjf", predictors=analytic), truth=TRUTH,
                     config=SimulationConfig(lengths="estimate", length_error=0.0))
    assert exact.records == known.records


def test_length_setting_changes_sjf_not_fifo(analytic, small_instance):
    inst = small_instance(9, num_jobs=30, mean_gap_s=5.0)  # queues long enough for the order to matter
    out = {}
    for mode in ("known", "unknown", "estimate"):
        cfg = SimulationConfig(lengths=mode, length_error=1.0)
        out[mode] = {p: simulate(inst, make_policy(p, predictors=analytic), truth=TRUTH, config=cfg)
                     for p in ("fifo", "sjf")}
    assert out["known"]["fifo"].records == out["unknown"]["fifo"].records == out["estimate"]["fifo"].records
    assert out["known"]["sjf"].records != out["unknown"]["sjf"].records
    assert out["known"]["sjf"].records != out["estimate"]["sjf"].records


def test_estimates_are_seeded_per_job_and_double_when_outrun():
    jobs = (Job("a", "resnet18", 32, 1000.0), Job("b", "resnet18", 32, 3000.0),
            Job("c", "resnet18", 32, 5000.0))
    est = LengthEstimates("estimate", 0.5, 1, jobs)
    first = est.initial_total(jobs[0])
    assert first == LengthEstimates("estimate", 0.5, 1, jobs).initial_total(jobs[0])
    assert first != LengthEstimates("estimate", 0.5, 2, jobs).initial_total(jobs[0])
    left, total = est.estimate(jobs[0], remaining=jobs[0].total_iterations - 2.5 * first)  # outrun 2.5x
    assert total == first * 4 and left == pytest.approx(1.5 * first)
    unknown = LengthEstimates("unknown", 0.0, 0, jobs)
    assert unknown.prior == 3000.0
    assert unknown.estimate(jobs[2], 5000.0) == (3000.0, 3000.0)
    assert unknown.estimate(jobs[2], 5000.0 - 1600.0) == (4400.0, 6000.0)  # done > prior / 2: doubled


def test_bad_length_settings_name_the_field():
    with pytest.raises(ValidationError, match="lengths"):
        SimulationConfig(lengths="guess")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="length_error"):
        SimulationConfig(length_error=-1.0)
    with pytest.raises(ValidationError, match="profile_s"):
        ProfilingConfig(profile_s=float("nan"))


def test_profiled_predictors_use_measurements_and_memo_sees_new_ones(analytic):
    job = Job("p", "resnet50", 64, 100.0)
    wrapped = memoized(profiled(analytic))
    book = ProfileBook()
    with observing_profiles(book):
        before = wrapped.step_time.step_time_s(job, "v100")
        book.record_isolated(job, "v100", IsolatedProfile(1, 1, 2 * before, 1234.0, 0.5))
        assert wrapped.step_time.step_time_s(job, "v100") == pytest.approx(2 * before)
        assert wrapped.step_time.memory_mib(job, "v100") == 1234.0
        assert wrapped.step_time.step_time_s(job, "k80") == analytic.step_time.step_time_s(job, "k80")
        other = Job("q", "resnet18", 32, 100.0)
        predicted = wrapped.colocation.colocated_speeds([job, other], "v100")
        book.record_colocated([other, job], "v100", [0.9, 0.4])
        assert wrapped.colocation.colocated_speeds([job, other], "v100") == (0.4, 0.9) != predicted
    assert wrapped.step_time.step_time_s(job, "v100") == before  # outside a profiling run: predictions


def test_profiling_measures_running_jobs_with_noise(analytic, small_instance):
    inst = small_instance(5, num_jobs=25)
    sim = Simulator(inst, make_policy("gandiva", predictors=profiled(analytic)), TRUTH,
                    SimulationConfig(seed=3, profiling=ProfilingConfig(profile_s=60.0, noise=0.05)))
    run = sim.start()
    run.run()
    rows = run.profiles.to_list()
    isolated = [r for r in rows if r[0] == "isolated"]
    assert isolated, "no job ran 60 s: the test needs longer jobs"
    jobs = {j.id: j for j in inst.jobs}
    ratios = [r[5] / TRUTH.step_time_s(jobs[r[1]], r[2], r[3], r[4]) for r in isolated]
    assert all(0.7 < x < 1.4 for x in ratios) and len(set(ratios)) > 1  # noisy, near the truth
    assert ProfileBook.from_list(rows).to_list() == rows


def test_profiling_every_type_measures_each_job_on_every_type(analytic, small_instance):
    inst = small_instance(5, num_jobs=25)
    types = sorted(inst.cluster.gpus_by_type())
    assert len(types) > 1, "the test needs a cluster of several GPU types"
    cfg = ProfilingConfig(profile_s=60.0, noise=0.05, all_types=True)
    run = Simulator(inst, make_policy("fifo", predictors=profiled(analytic)), TRUTH,
                    SimulationConfig(seed=3, profiling=cfg)).start()
    run.run()
    isolated = [r for r in run.profiles.to_list() if r[0] == "isolated"]
    jobs = {j.id: j for j in inst.jobs}
    types_of: dict[str, set[str]] = {}
    for r in isolated:
        types_of.setdefault(r[1], set()).add(r[2])
    assert any(measured == set(types) for measured in types_of.values())  # a job measured on every type
    ratios = [r[5] / TRUTH.step_time_s(jobs[r[1]], r[2], r[3], r[4]) for r in isolated]
    assert all(0.7 < x < 1.4 for x in ratios) and len(set(ratios)) > 1  # noisy, near the truth
    plain = Simulator(inst, make_policy("fifo", predictors=profiled(analytic)), TRUTH,
                      SimulationConfig(seed=3, profiling=replace(cfg, all_types=False))).start()
    plain.run()
    assert len(plain.profiles) < len(run.profiles)


class Crash(Exception):
    pass


@pytest.mark.parametrize("setting", ["unknown", "estimate", "profiling"])
def test_resume_after_crash_gives_the_same_result(setting, analytic, small_instance, tmp_path):
    inst = small_instance(21, num_jobs=30)
    if setting == "profiling":
        cfg = SimulationConfig(seed=4, profiling=ProfilingConfig(profile_s=30.0))
        preds = profiled(analytic)
    else:
        cfg = SimulationConfig(seed=4, lengths=setting)
        preds = analytic
    full_run = Simulator(inst, make_policy("tiresias", predictors=preds), TRUTH, cfg).start()
    full = full_run.run()
    rounds = {"n": 0}

    def crash_midway(_t, _finished):
        rounds["n"] += 1
        if rounds["n"] == 23:
            raise Crash

    ckpt = tmp_path / "sim.json"
    with pytest.raises(Crash):
        Simulator(inst, make_policy("tiresias", predictors=preds), TRUTH, cfg, on_round=crash_midway,
                  store=CheckpointStore(ckpt, 5)).run()
    resumed = Simulator(inst, make_policy("tiresias", predictors=preds), TRUTH, cfg,
                        store=CheckpointStore(ckpt, 5)).run(resume=True)
    assert resumed.records == full.records
    if setting == "profiling":
        assert len(full_run.profiles) > 0


def test_batch_arrivals_start_every_job_at_zero(analytic, small_instance):
    inst = batch_arrivals(small_instance(2, num_jobs=15))
    assert {j.arrival_time_s for j in inst.jobs} == {0.0}
    res = simulate(inst, make_policy("fifo", predictors=analytic), truth=TRUTH)
    assert res.makespan_s == max(r.finish_s for r in res.records)
    assert replace(inst, name="x").metadata["arrivals"] == "batch"


def test_resume_refuses_other_length_or_profiling_settings(analytic, small_instance, tmp_path):
    from dltsched.engine.sim.checkpoint import CheckpointError

    inst = small_instance(1, num_jobs=10)
    ckpt = tmp_path / "c.json"
    Simulator(inst, make_policy("fifo", predictors=analytic), TRUTH, SimulationConfig(lengths="unknown"),
              store=CheckpointStore(ckpt, 1)).run()
    for other in (SimulationConfig(), SimulationConfig(lengths="unknown", profiling=ProfilingConfig())):
        with pytest.raises(CheckpointError, match="simulation settings"):
            Simulator(inst, make_policy("fifo", predictors=analytic), TRUTH, other,
                      store=CheckpointStore(ckpt, 1)).run(resume=True)


@pytest.mark.parametrize("args", [["--lengths", "guess"], ["--profile-on-arrival", "-5"],
                                  ["--length-error", "nan"], ["--arrivals", "later"],
                                  ["--freeze-penalty-scale", "-1"]])
def test_cli_refuses_bad_settings_with_exit_2(args):
    from click.testing import CliRunner

    from dltsched.engine.app.cli.main import cli

    result = CliRunner().invoke(cli, ["simulate", "--instance", "instances/examples/default.json",
                                      "--policy", "fifo", *args])
    assert result.exit_code == 2, result.output
    assert args[0] in result.output
    assert "Traceback" not in result.output
