"""Group prices kept across rounds on memoized predictors give exactly the round that asking again gives."""

from __future__ import annotations

from dataclasses import replace

from dltsched.engine.domain.predictors import MemoryObservations, memoized, observing_memory
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import GroupPrices, build_round
from dltsched.formulations.problem import RoundOptions
from dltsched.predictors import analytic_predictors


def test_kept_prices_give_the_same_round_as_fresh_predictions() -> None:
    raw = analytic_predictors()
    asked = memoized(raw)
    options = RoundOptions(max_jobs_per_gpu=3)
    state = synthetic_state(60, 64, seed=3)
    first = build_round(state, asked, options)
    prices = GroupPrices.of(asked)
    assert prices is not None and prices.entries  # the first round filled them
    later = replace(state, time_s=state.time_s + 600.0)  # same job objects, the clock moved
    again = build_round(later, asked, options)
    assert again.groups == build_round(later, raw, options).groups
    assert first.groups == build_round(state, raw, options).groups
    assert GroupPrices.of(raw) is None  # predictors that are not memoized keep nothing


def test_a_new_memory_measurement_drops_kept_prices() -> None:
    raw = analytic_predictors()
    asked = memoized(raw)
    options = RoundOptions(max_jobs_per_gpu=2)
    state = synthetic_state(40, 32, seed=5)
    job = state.jobs[0].job
    with observing_memory(MemoryObservations()) as seen:
        build_round(state, asked, options)
        prices = GroupPrices.of(asked)
        assert prices is not None and {entry[2] for entry in prices.entries.values()} == {0}
        own = asked.step_time.memory_mib(job, "v100")
        seen.record(job, "v100", 0, own + 100.0)  # measured above its prediction: overheads shrink
        after = build_round(state, asked, options)
        fresh = build_round(state, raw, options)
    assert after.groups == fresh.groups
    assert {entry[2] for entry in prices.entries.values()} == {1}  # every group of the round priced again
