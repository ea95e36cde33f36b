"""A checkpoint resumes only the run that wrote it: every setting that changes the result is in its
fingerprint (faults, predictor weights, freeze settings, memory mode, ground truth), the fingerprint does
not drift with caches, stale temporary files are removed, and the optimizing policy repeats bit for bit."""

from __future__ import annotations

import pytest

from dltsched.engine.app.registry import make_policy
from dltsched.engine.domain.predictors import Predictors
from dltsched.engine.sim.checkpoint import CheckpointError, CheckpointStore, fingerprint
from dltsched.engine.sim.faults import FaultConfig
from dltsched.engine.sim.simulator import SimulationConfig, Simulator
from dltsched.engine.sim.truth import MeasuredTruth
from dltsched.predictors.analytic import AnalyticStepTime

TRUTH = MeasuredTruth(use_measurements=False)
FAULTS = FaultConfig(mtbf_s=4 * 3600.0, mttr_s=900.0, checkpoint_interval_s=600.0)


class Crash(Exception):
    pass


def crash_after(rounds: int):
    seen = {"n": 0}

    def hook(_t, _finished):
        seen["n"] += 1
        if seen["n"] == rounds:
            raise Crash

    return hook


def interrupted(inst, policy, cfg, path, truth=TRUTH, rounds=4):
    """Run until ``rounds`` rounds, saving every round, then crash."""
    with pytest.raises(Crash):
        Simulator(inst, policy, truth, cfg, on_round=crash_after(rounds),
                  store=CheckpointStore(path, 1)).run()
    assert path.exists()


def resume(inst, policy, cfg, path, truth=TRUTH):
    return Simulator(inst, policy, truth, cfg, store=CheckpointStore(path, 1)).run(resume=True)


def test_a_missing_fault_config_is_refused(analytic, small_instance, tmp_path):
    inst, path = small_instance(2, num_jobs=12), tmp_path / "c.json"
    interrupted(inst, make_policy("fifo", predictors=analytic), SimulationConfig(seed=1, faults=FAULTS), path)
    with pytest.raises(CheckpointError, match="fault settings"):
        resume(inst, make_policy("fifo", predictors=analytic), SimulationConfig(seed=1), path)


def test_changed_predictor_weights_are_refused(analytic, small_instance, tmp_path):
    inst, path = small_instance(2, num_jobs=12), tmp_path / "c.json"
    interrupted(inst, make_policy("sjf", predictors=analytic), SimulationConfig(seed=1), path)
    other = Predictors(AnalyticStepTime(compute_efficiency=0.5), analytic.colocation, analytic.freezing)
    with pytest.raises(CheckpointError, match="predictors"):
        resume(inst, make_policy("sjf", predictors=other), SimulationConfig(seed=1), path)


def test_changed_freeze_settings_are_refused(analytic, small_instance, tmp_path):
    inst, path = small_instance(5, num_jobs=8), tmp_path / "c.json"
    opts = {"time_limit_s": 0.2, "min_interval_s": 0.0}
    interrupted(inst, make_policy("optimizing", predictors=analytic, **opts), SimulationConfig(seed=1), path,
                rounds=2)
    with pytest.raises(CheckpointError, match="policy options"):
        resume(inst, make_policy("optimizing", predictors=analytic, freeze_levels=(0,), **opts),
               SimulationConfig(seed=1), path)


def test_changed_memory_mode_and_ground_truth_are_refused(analytic, small_instance, tmp_path):
    inst, path = small_instance(2, num_jobs=12), tmp_path / "c.json"
    interrupted(inst, make_policy("fifo", predictors=analytic), SimulationConfig(seed=1, memory="oom"), path)
    with pytest.raises(CheckpointError, match="memory mode; memory was 'oom', now 'reject'"):
        resume(inst, make_policy("fifo", predictors=analytic), SimulationConfig(seed=1, memory="reject"),
               path)
    with pytest.raises(CheckpointError, match="ground truth"):
        resume(inst, make_policy("fifo", predictors=analytic), SimulationConfig(seed=1, memory="oom"), path,
               truth=MeasuredTruth(use_measurements=False, timeslice_overhead=0.2))


def test_fingerprint_ignores_caches_filled_by_a_run(analytic, small_instance):
    inst = small_instance(2, num_jobs=12)
    truth = MeasuredTruth(use_measurements=False)
    before = fingerprint(Simulator(inst, make_policy("sjf", predictors=analytic), truth))
    Simulator(inst, make_policy("sjf", predictors=analytic), truth).run()
    assert fingerprint(Simulator(inst, make_policy("sjf", predictors=analytic), truth)) == before
    changed = fingerprint(Simulator(inst, make_policy("sjf", predictors=analytic), truth,
                                    SimulationConfig(seed=9)))
    assert {k for k in before if before[k] != changed[k]} == {"seed"}


def test_stale_temporary_files_are_removed(analytic, small_instance, tmp_path):
    inst, path = small_instance(2, num_jobs=6), tmp_path / "c.json"
    stale = [tmp_path / ".c.json.x1y2.tmp", tmp_path / "c.jsonab12.tmp"]
    for f in stale:
        f.write_text("{")
    keep = tmp_path / "other.tmp"
    keep.write_text("mine")
    Simulator(inst, make_policy("fifo", predictors=analytic), TRUTH, store=CheckpointStore(path, 1)).run()
    assert not any(f.exists() for f in stale) and keep.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "other.tmp"]


def test_every_rounds_must_be_a_positive_integer(tmp_path):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(Exception, match="checkpoint_every_rounds"):
            CheckpointStore(tmp_path / "c.json", bad)  # type: ignore[arg-type]


def test_optimizing_policy_repeats_bit_for_bit(analytic, small_instance):
    """Two runs with the same seed: identical records, placements and utilisation (deterministic solves)."""
    inst = small_instance(8, num_jobs=20, mean_gap_s=20.0)
    results = [Simulator(inst, make_policy("optimizing", predictors=analytic, time_limit_s=0.3), TRUTH,
                         SimulationConfig(seed=3, faults=FAULTS)).run() for _ in range(2)]
    a, b = (r.to_dict(records=True, utilization=True) for r in results)
    for d in (a, b):
        for k in [k for k in d if k.startswith(("decision_time", "wall_time"))]:
            d.pop(k)
    assert a == b
    assert results[0].num_rounds > 5


def test_wall_clock_solving_stays_available(analytic):
    policy = make_policy("optimizing", predictors=analytic, deterministic=False)
    assert policy.solver.options.deterministic is False
    assert make_policy("optimizing", predictors=analytic).solver.options.deterministic is True
