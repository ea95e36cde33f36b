"""Readers on real data, and splits without leakage."""

from __future__ import annotations

import pytest

from dltsched.engine.errors import ValidationError
from dltsched.predictors.colocation.samples import (
    LUCID_GPU,
    ColocDataset,
    ColocSample,
    JobSpec,
    read_gavel_samples,
    read_lucid_samples,
)
from dltsched.predictors.colocation.splits import folds, leave_one_gpu_out, leave_one_model_out, random_split

A, B, C = JobSpec("resnet18", 32), JobSpec("resnet50", 64), JobSpec("lstm_lm", 20)


def _toy() -> ColocDataset:
    samples = [ColocSample(gpu, jobs, (0.5,) * len(jobs)) for gpu in ("k80", "p100")
               for jobs in ((A, A), (A, B), (B, C), (A, C), (C, C))]
    return ColocDataset(tuple(samples), {}, "toy")


def test_sample_needs_two_jobs_and_one_speed_each() -> None:
    with pytest.raises(ValidationError, match="needs >= 2"):
        ColocSample("k80", (A,), (1.0,))
    with pytest.raises(ValidationError, match="speeds"):
        ColocSample("k80", (A, B), (1.0,))


def test_leave_one_model_out_has_no_leakage() -> None:
    split = leave_one_model_out(_toy(), "resnet50")
    assert all("resnet50" not in s.models for s in split.train.samples)
    assert all("resnet50" in s.models for s in split.test.samples)
    assert len(split.train) + len(split.test) == len(_toy())


def test_leave_one_gpu_out_and_unknown_names() -> None:
    split = leave_one_gpu_out(_toy(), "k80")
    assert {s.gpu for s in split.train.samples} == {"p100"}
    assert {s.gpu for s in split.test.samples} == {"k80"}
    with pytest.raises(ValidationError, match="held_out"):
        leave_one_model_out(_toy(), "vgg16")


def test_random_split_is_seeded_and_disjoint() -> None:
    a, b = random_split(_toy(), seed=3), random_split(_toy(), seed=3)
    assert a.test.samples == b.test.samples
    assert not set(a.train.samples) & set(a.test.samples)
    assert len(list(folds(_toy(), "model"))) == 3


@pytest.mark.data
def test_gavel_reader_normalizes_speeds(data_dir) -> None:
    data = read_gavel_samples(data_dir=data_dir)
    assert data.gpus() == ("k80", "p100")
    assert len(data) > 500
    assert all(0.0 < v < 1.5 for s in data.samples for v in s.speeds)
    # V100 keeps isolated profiles (for leave-one-GPU-out prediction) but has no pairs
    assert any(gpu == "v100" for gpu, _ in data.isolated)
    # (a, b) and (b, a) became one unordered group
    keys = [(s.gpu, s.jobs) for s in data.samples]
    assert len(keys) == len(set(keys)) and all(list(s.jobs) == sorted(s.jobs) for s in data.samples)


@pytest.mark.data
def test_lucid_reader_has_memory_util_and_isolated_profiles(data_dir) -> None:
    data = read_lucid_samples(data_dir=data_dir)
    assert data.gpus() == (LUCID_GPU,)
    assert "mobilenet_v3" in data.models() and "vgg16" in data.models()
    assert all(s.memory_mib and s.gpu_util is not None for s in data.samples)
    assert all((LUCID_GPU, j) in data.isolated for s in data.samples for j in s.jobs)
    split = leave_one_model_out(data, "resnet18")
    assert all("resnet18" not in s.models for s in split.train.samples)
