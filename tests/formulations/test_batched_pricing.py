"""A round's new co-location pairs priced together, and pairs priced the other way round reused, give the
round that pricing each pair alone gives, to the last bit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import Predictors, memoized
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import GroupPrices, build_round
from dltsched.formulations.problem import RoundOptions
from dltsched.predictors import default_predictors


class _Counted:
    """The shipped co-location predictor, counting the groups it is asked about; ``many=False``: without
    ``colocated_many`` and ``order_symmetric`` (asked one group at a time, each order apart)."""

    def __init__(self, many: bool = True) -> None:
        self.inner = default_predictors().colocation
        self.asked = 0
        if many:
            self.colocated_many = self._many
            self.order_symmetric = self.inner.order_symmetric

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        self.asked += 1
        return self.inner.colocated_speeds(jobs, gpu_type)  # type: ignore[no-any-return]

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        return self.inner.group_memory_mib(jobs, gpu_type)  # type: ignore[no-any-return]

    def _many(self, groups: Sequence[tuple[Sequence[Job], str]]) -> list[Any]:
        self.asked += len(groups)
        return self.inner.colocated_many(groups)  # type: ignore[no-any-return]


def _predictors(colocation: Any) -> Predictors:
    base = default_predictors()
    return Predictors(base.step_time, colocation, base.freezing)


@pytest.mark.parametrize("max_jobs", [2, 3])
def test_pairs_priced_together_give_the_round_priced_one_by_one(max_jobs: int) -> None:
    options = RoundOptions(max_jobs_per_gpu=max_jobs)
    state = synthetic_state(80, 64, seed=11)
    together = _Counted()
    kept = build_round(state, memoized(_predictors(together)), options)
    alone = build_round(state, memoized(_predictors(_Counted(many=False))), options)
    assert kept.groups and kept.groups == alone.groups
    assert [g.speeds for g in kept.groups] == [g.speeds for g in alone.groups]
    assert [g.overhead_mib for g in kept.groups] == [g.overhead_mib for g in alone.groups]
    # predictors that keep nothing: the round's own prices, asked together as well
    fresh = build_round(state, _predictors(_Counted()), options)
    assert fresh.groups == alone.groups


def test_a_pair_priced_the_other_way_round_is_not_asked_again() -> None:
    options = RoundOptions(max_jobs_per_gpu=2)
    state = synthetic_state(60, 48, seed=4)
    flipped = replace(state, jobs=tuple(reversed(state.jobs)))  # every pair's members the other way round
    counted = _Counted()
    asked = memoized(_predictors(counted))
    build_round(state, asked, options)
    prices = GroupPrices.of(asked)
    assert prices is not None and counted.asked > 0
    before = counted.asked
    again = build_round(flipped, asked, options)
    assert counted.asked == before  # every price read from the kept one, its speeds swapped
    assert again.groups == build_round(flipped, _predictors(_Counted(many=False)), options).groups
    # a predictor that does not say it is symmetric is asked about the other order
    plain = _Counted(many=False)
    one_by_one = memoized(_predictors(plain))
    build_round(state, one_by_one, options)
    before = plain.asked
    assert build_round(flipped, one_by_one, options).groups == again.groups
    assert plain.asked > before


def test_kept_pair_verdicts_give_the_round_judged_afresh_as_jobs_progress() -> None:
    """Jobs that may freeze change their options as they progress (the frozen penalty falls): a pair's kept
    verdict is read only while both members' kinds, GPU types and least memory are what it was judged on."""
    options = RoundOptions(max_jobs_per_gpu=2, freeze_levels=4)
    state = synthetic_state(60, 48, seed=9)
    asked = memoized(default_predictors())
    prices = None
    for step in range(4):
        left = 1.0 - 0.3 * step
        moved = replace(state, time_s=state.time_s + 900.0 * step, jobs=tuple(
            replace(js, remaining_iterations=js.remaining_iterations * left) for js in state.jobs))
        kept = build_round(moved, asked, options)
        prices = GroupPrices.of(asked)
        assert prices is not None
        verdicts = len(prices.pair_verdicts([], [], [], 0, {n.gpu_type: n.memory_mib for n in kept.nodes})[1])
        assert kept.groups == build_round(moved, default_predictors(), options).groups
        if step == 0:
            first = verdicts
            assert first > 0
    assert prices is not None and verdicts > first  # progress changed options: new signatures were judged


def test_a_signature_is_the_kind_the_types_in_order_and_the_least_memory() -> None:
    prices = GroupPrices()
    memory = {"v100": 16e3}

    def numbers(kinds: list[int], types: list[tuple[str, ...]], least: list[dict[str, float]]) -> list[int]:
        return prices.pair_verdicts(kinds, types, least, 0, memory)[0]

    base = numbers([0, 0], [("v100", "k80"), ("v100", "k80")],
                   [{"v100": 100.0, "k80": 90.0}, {"v100": 100.0, "k80": 90.0}])
    assert base[0] == base[1]
    assert numbers([1], [("v100", "k80")], [{"v100": 100.0, "k80": 90.0}]) != base[:1]
    assert numbers([0], [("k80", "v100")], [{"v100": 100.0, "k80": 90.0}]) != base[:1]
    assert numbers([0], [("v100", "k80")], [{"v100": 100.0, "k80": 95.0}]) != base[:1]
    assert numbers([0], [("v100", "k80")], [{"v100": 100.0, "k80": 90.0}]) == base[:1]
    verdicts = prices.pair_verdicts([], [], [], 0, memory)[1]
    verdicts[(0, 0)] = ([], 0.0)
    assert prices.pair_verdicts([], [], [], 0, memory)[1] == {(0, 0): ([], 0.0)}
    assert prices.pair_verdicts([], [], [], 1, memory)[1] == {}  # a new memory measurement drops them
    prices.pair_verdicts([], [], [], 1, memory)[1][(0, 0)] = ([], 0.0)
    assert prices.pair_verdicts([], [], [], 1, {"v100": 32e3})[1] == {}  # so does another GPU memory
    assert verdicts == {(0, 0): ([], 0.0)}  # a dict handed out before is left as it was
