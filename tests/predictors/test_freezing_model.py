"""IceFrog freezing: monotone gains per level, interior optimum for CNNs, penalty model."""

from __future__ import annotations

import pytest

from dltsched.engine.domain.catalog import model_catalog
from dltsched.engine.domain.model import Job
from dltsched.predictors.freezing import IceFrogFreezing
from dltsched.predictors.zoo import zoo_models


@pytest.fixture(scope="module")
def freezing():
    return IceFrogFreezing()


@pytest.mark.parametrize("model", zoo_models())
def test_gain_and_memory_drop_rise_with_freeze_level(freezing, model):
    spec = model_catalog().get(model)
    job = Job(id="j", model=model, batch_size=min(spec.default_batch_size, 32), total_iterations=1.0)
    table = freezing.freeze_table(job, "a100-80gb")
    assert len(table) == freezing.num_freeze_levels(job) == spec.layers
    times = [r.step_time_s for r in table]
    mems = [r.memory_mib for r in table]
    assert all(b <= a for a, b in zip(times, times[1:], strict=False))
    assert all(b <= a for a, b in zip(mems, mems[1:], strict=False))
    assert times[-1] < times[0] and mems[-1] < mems[0]
    penalties = [r.penalty for r in table]
    assert penalties[0] == 0 and penalties == sorted(penalties)


@pytest.mark.parametrize("model", [m for m in zoo_models() if model_catalog().get(m).family == "cnn"])
def test_cnn_effective_progress_has_interior_optimum(freezing, model):
    job = Job(id="j", model=model, batch_size=64, total_iterations=1.0)
    progress = [r.effective_progress for r in freezing.freeze_table(job, "v100")]
    best = max(range(len(progress)), key=progress.__getitem__)
    assert 0 < best < len(progress) - 1


def test_penalty_shrinks_when_freezing_starts_later(freezing):
    job = Job(id="j", model="resnet50", batch_size=64, total_iterations=1.0)
    early, late = freezing.frozen_penalty(job, 9, 0.0), freezing.frozen_penalty(job, 9, 0.8)
    assert 0 < late < early
    with pytest.raises(ValueError, match="start_progress"):
        freezing.frozen_penalty(job, 9, 1.5)


def test_ground_truth_penalty_matches_its_published_calibration_points():
    """FreezeOut: a CNN freezing half its blocks from half-way costs 3%; Egeria: late freezing of converged
    front layers costs under 2%; level 0 costs nothing (constants in predictors/freezing/published.py)."""
    from dltsched.engine.sim.truth import MeasuredTruth
    from dltsched.predictors.freezing import PublishedFreezing

    truth = PublishedFreezing()
    cnn = Job(id="c", model="resnet50", batch_size=64, total_iterations=1.0)
    half = truth.num_freeze_levels(cnn) // 2
    assert truth.frozen_penalty(cnn, half, 0.5) == pytest.approx(0.03, abs=0.003)
    assert truth.frozen_penalty(cnn, half, 0.6) < 0.02
    assert truth.frozen_penalty(cnn, 0, 0.0) == 0.0
    assert MeasuredTruth(use_measurements=False).frozen_penalty(cnn, half,
                                                                0.5) == truth.frozen_penalty(cnn, half, 0.5)


def test_default_predictor_is_an_estimate_not_the_truth(freezing):
    from dltsched.predictors.freezing import PublishedFreezing

    job = Job(id="j", model="resnet50", batch_size=64, total_iterations=1.0)
    pairs = [(freezing.frozen_penalty(job, k, s), PublishedFreezing().frozen_penalty(job, k, s))
             for k in (4, 9, 17) for s in (0.0, 0.5)]
    assert all(pred != true for pred, true in pairs)
    assert max(pred / true for pred, true in pairs) > 1.5  # the estimate is off by more than noise somewhere


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0])
def test_scaled_predictor_is_the_mismatch_it_names(freezing, scale):
    from dltsched.predictors.freezing import PublishedFreezing, ScaledFreezing

    job = Job(id="j", model="resnet50", batch_size=64, total_iterations=1.0)
    scaled = ScaledFreezing(freezing, scale)
    assert scaled.num_freeze_levels(job) == freezing.num_freeze_levels(job)
    for k in (1, 6, 12):
        published = PublishedFreezing().frozen_penalty(job, k, 0.2)
        assert scaled.frozen_penalty(job, k, 0.2) == pytest.approx(scale * published)
    with pytest.raises(ValueError, match="freeze_penalty_scale"):
        ScaledFreezing(freezing, -1.0)
