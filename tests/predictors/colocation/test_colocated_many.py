"""Co-location groups priced together (``colocated_many``) get the very numbers asked one by one give."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import Predictors, memoized
from dltsched.engine.domain.profiles import ProfileBook, observing_profiles
from dltsched.predictors import default_predictors
from dltsched.predictors.colocation.profiled import ProfileColocation, shipped_profile_predictor
from dltsched.predictors.crossfit import CrossFitColocation

MODELS = ("resnet18", "resnet50", "vgg16", "bert_base", "transformer", "lstm_lm", "a3c")


def _jobs() -> list[Job]:
    jobs = [Job(f"{m}-{b}", m, b, 1000.0) for m in MODELS for b in (16, 64)]
    return [*jobs, Job("resnet18-16-amp", "resnet18", 16, 1000.0, amp=True)]


def _groups() -> list[tuple[tuple[Job, ...], str]]:
    """Pairs in both orders on three GPU types, a job paired with its twin, and a few triples."""
    jobs = _jobs()
    pairs = [((a, b), gpu) for gpu in ("v100", "k80", "a100-40gb")
             for a, b in itertools.permutations(jobs[:9], 2)]
    twin = Job("twin", jobs[0].model, jobs[0].batch_size, 5.0)
    triples = [((jobs[0], jobs[3], jobs[5]), "v100"), ((jobs[5], jobs[0], jobs[3]), "v100")]
    return [*pairs, ((jobs[0], twin), "v100"), *triples, pairs[0], pairs[1]]


Answers = list[tuple[tuple[float, ...], float]]


def _one_by_one(model: Any, groups: list[tuple[tuple[Job, ...], str]]) -> Answers:
    return [(tuple(model.colocated_speeds(jobs, gpu)), model.group_memory_mib(jobs, gpu))
            for jobs, gpu in groups]


def _same_bits(a: Answers, b: Answers) -> None:
    assert len(a) == len(b)
    for (speeds_a, memory_a), (speeds_b, memory_b) in zip(a, b, strict=True):
        assert [s.hex() for s in map(float, speeds_a)] == [s.hex() for s in map(float, speeds_b)]
        assert float(memory_a).hex() == float(memory_b).hex()


@pytest.mark.parametrize("eggat", [False, True])
def test_profile_predictor_many_equals_one_by_one(eggat: bool) -> None:
    groups = _groups()
    alone = _one_by_one(shipped_profile_predictor(eggat=eggat), groups)
    model = shipped_profile_predictor(eggat=eggat)
    together = model.colocated_many(groups)
    _same_bits(together, alone)
    # every group is remembered: asked again, one by one or together, the very same answers come back
    for (jobs, gpu), (speeds, _) in zip(groups, together, strict=True):
        assert model.colocated_speeds(jobs, gpu) is speeds
    assert all(a[0] is b[0] for a, b in zip(model.colocated_many(groups), together, strict=True))


def test_profile_predictor_pairs_are_symmetric_in_member_order() -> None:
    model = shipped_profile_predictor()
    assert model.order_symmetric()
    for (a, b), gpu in _groups()[:60]:
        speeds_ab, speeds_ba = model.colocated_speeds((a, b), gpu), model.colocated_speeds((b, a), gpu)
        assert speeds_ab == (speeds_ba[1], speeds_ba[0])
        assert model.group_memory_mib((a, b), gpu) == model.group_memory_mib((b, a), gpu)
    with observing_profiles(ProfileBook()):  # a member measured in the run is estimated in the order asked
        assert not model.order_symmetric()


def test_measured_profiles_are_asked_one_by_one() -> None:
    groups = _groups()[:20]
    with observing_profiles(ProfileBook()):
        _same_bits(shipped_profile_predictor().colocated_many(groups),
                   _one_by_one(shipped_profile_predictor(), groups))


def test_memoized_many_equals_one_by_one_and_keeps_the_answers() -> None:
    groups = _groups()
    raw = default_predictors()
    alone = _one_by_one(memoized(default_predictors()).colocation, groups)
    asked = memoized(raw)
    asked.colocation.colocated_speeds(*groups[5])  # one kept before: read from the memo, not asked again
    together = asked.colocation.colocated_many(groups)  # type: ignore[attr-defined]
    _same_bits(together, alone)
    assert asked.colocation.order_symmetric()  # type: ignore[attr-defined]
    # the memo now holds every answer: the inner predictor is not asked again
    asked.colocation.inner = None  # type: ignore[attr-defined]
    _same_bits(_one_by_one(asked.colocation, groups), alone)


class _OneByOne:
    """A co-location predictor without ``colocated_many`` (asked one group at a time)."""

    def __init__(self, inner: ProfileColocation) -> None:
        self.inner = inner

    def colocated_speeds(self, jobs: object, gpu_type: str) -> tuple[float, ...]:
        return self.inner.colocated_speeds(jobs, gpu_type)  # type: ignore[arg-type]

    def group_memory_mib(self, jobs: object, gpu_type: str) -> float:
        return self.inner.group_memory_mib(jobs, gpu_type)  # type: ignore[arg-type]


def test_cross_fitted_many_equals_one_by_one() -> None:
    """Two folds (the shipped model with and without its network) and a fallback without ``colocated_many``:
    each member's speed from its own fold, the memory the largest of the folds'."""
    groups = _groups()

    def bundle() -> CrossFitColocation:
        with_net, without = shipped_profile_predictor(), shipped_profile_predictor(eggat=False)
        folds = {"resnet18": with_net, "bert_base": with_net, "resnet50": without, "vgg16": without}
        return CrossFitColocation(folds, _OneByOne(shipped_profile_predictor()))

    _same_bits(bundle().colocated_many(groups), _one_by_one(bundle(), groups))
    assert not bundle().order_symmetric()  # the fallback does not say so
    symmetric = CrossFitColocation({"resnet18": shipped_profile_predictor()},
                                   shipped_profile_predictor(eggat=False))
    assert symmetric.order_symmetric()


def test_a_bundle_of_memoized_cross_fitted_folds_prices_the_same() -> None:
    groups = _groups()[:80]

    def bundle() -> CrossFitColocation:
        folds = {"resnet18": shipped_profile_predictor(eggat=False), "vgg16": shipped_profile_predictor()}
        return CrossFitColocation(folds, shipped_profile_predictor(eggat=False))

    base = default_predictors()
    asked = memoized(Predictors(base.step_time, bundle(), base.freezing))
    fresh = bundle()
    _same_bits(asked.colocation.colocated_many(groups), _one_by_one(fresh, groups))  # type: ignore[attr-defined]
