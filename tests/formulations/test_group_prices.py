"""Group prices kept across rounds on memoized predictors give exactly the round that asking again gives."""

from __future__ import annotations

from dataclasses import replace

from dltsched.engine.domain.model import ClusterState
from dltsched.engine.domain.predictors import MemoryObservations, memoized, observing_memory
from dltsched.engine.domain.profiles import IsolatedProfile, ProfileBook, observing_profiles
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import GroupPrices, build_round
from dltsched.formulations.problem import NodeTypes, RoundOptions
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
        assert prices is not None and {entry[0] for entry in prices.entries.values()} == {0}
        own = asked.step_time.memory_mib(job, "v100")
        seen.record(job, "v100", 0, own + 100.0)  # measured above its prediction: overheads shrink
        after = build_round(state, asked, options)
        fresh = build_round(state, raw, options)
    assert after.groups == fresh.groups
    assert {entry[0] for entry in prices.entries.values()} == {1}  # every group of the round priced again


def test_a_kind_is_what_a_job_is_not_which_job() -> None:
    state = synthetic_state(10, 16, seed=7)
    job = state.jobs[0].job
    prices = GroupPrices()
    twin = replace(job, id="twin", total_iterations=job.total_iterations * 3, arrival_time_s=123.0,
                   weight=2.0, deadline_s=9e9)
    assert prices.kind(twin) == prices.kind(job)
    assert prices.kind(replace(job, batch_size=job.batch_size * 2)) != prices.kind(job)
    assert prices.kind(replace(job, amp=not job.amp)) != prices.kind(job)
    # a job measured in the run is its own kind, a new one at each profile version
    measured = prices.kind(job, 1)
    assert measured not in (prices.kind(job), prices.kind(twin, 1))
    assert prices.kind(job, 2) != measured and prices.kind(job, 1) == measured


def test_new_jobs_of_kinds_already_priced_are_not_asked_again_and_get_the_same_round() -> None:
    raw = analytic_predictors()
    asked = memoized(raw)
    options = RoundOptions(max_jobs_per_gpu=2)
    state = synthetic_state(40, 32, seed=5)
    build_round(state, asked, options)
    prices = GroupPrices.of(asked)
    assert prices is not None
    kept = dict(prices.entries)
    # every job replaced by a new job object of the same kind (another id, another amount of work)
    renamed = replace(state, jobs=tuple(
        replace(js, job=replace(js.job, id=f"{js.job.id}-again",
                                total_iterations=js.job.total_iterations + 1))
        for js in state.jobs))
    again = build_round(renamed, asked, options)
    assert prices.entries == kept  # every price found under the members' kinds
    assert again.groups == build_round(renamed, raw, options).groups


def test_a_measured_profile_makes_the_job_its_own_kind_and_the_round_is_priced_again() -> None:
    raw = analytic_predictors()
    asked = memoized(raw)
    options = RoundOptions(max_jobs_per_gpu=2)
    state = synthetic_state(40, 32, seed=5)
    book = ProfileBook()
    with observing_profiles(book):
        build_round(state, asked, options)
        prices = GroupPrices.of(asked)
        assert prices is not None
        before = len(prices.entries)
        job = state.jobs[0].job
        own = asked.step_time.memory_mib(job, "v100")
        assert book.record_isolated(job, "v100", IsolatedProfile(1, 1, 0.5, own, 0.9))
        after = build_round(state, asked, options)
        assert after.groups == build_round(state, raw, options).groups
    assert len(prices.entries) > before  # the measured job's pairs priced under its new kind


def _unfrozen(state: ClusterState) -> ClusterState:
    return replace(state, jobs=tuple(replace(js, job=replace(js.job, freeze_allowed=False))
                                     for js in state.jobs))


def test_kept_options_give_the_same_round_and_are_dropped_when_what_they_depend_on_changes() -> None:
    raw = analytic_predictors()
    asked = memoized(raw)
    options = RoundOptions(max_jobs_per_gpu=2)
    state = _unfrozen(synthetic_state(30, 32, seed=9))
    first = build_round(state, asked, options)
    prices = GroupPrices.of(asked)
    assert prices is not None
    offers = prices.offers(NodeTypes.of(first.nodes), options)
    assert set(offers) == {id(js.job) for js in state.jobs}  # every job's options kept
    later = replace(state, time_s=state.time_s + 900.0)
    assert build_round(later, asked, options) == build_round(later, raw, options)
    # a GPU down changes the GPU classes: the kept options are dropped and priced again on the new classes
    down = replace(state, down_gpus=frozenset({0}))
    assert build_round(down, asked, options) == build_round(down, raw, options)
    assert prices.offers(NodeTypes.of(build_round(down, raw, options).nodes), options) is offers
    assert set(offers) == {id(js.job) for js in state.jobs}
    # other round settings: dropped
    other = RoundOptions(max_jobs_per_gpu=2, allow_cross_node=not options.allow_cross_node)
    prices.offers(NodeTypes.of(first.nodes), other)
    assert not offers
    # a measured peak above the prediction: dropped, and the round's memory follows the measurement
    job = state.jobs[0].job
    build_round(state, asked, options)
    with observing_memory(MemoryObservations()) as seen:
        seen.record(job, "v100", 0, asked.step_time.memory_mib(job, "v100") + 500.0)
        again = build_round(state, asked, options)
        assert again == build_round(state, memoized(raw), options)  # nothing kept in a fresh memo
    assert again.jobs[0].options[0].memory_mib == first.jobs[0].options[0].memory_mib + 500.0
    # a profile measured in the run: the job's options are priced again
    book = ProfileBook()
    with observing_profiles(book):
        build_round(state, asked, options)
        assert offers[id(job)][1] == 0
        assert book.record_isolated(job, "v100", IsolatedProfile(1, 1, 0.5, 1000.0, 0.9))
        assert build_round(state, asked, options) == build_round(state, raw, options)
        assert offers[id(job)][1] == 1
