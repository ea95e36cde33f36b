"""What a round keeps between solves (each job's options and predictions) never goes stale: after any change
of what it was derived from, the kept round equals a round built from scratch, and candidates made from it
equal those of the fresh round."""

from __future__ import annotations

import random
from dataclasses import replace

from dltsched.engine.domain.model import Assignment, ClusterState, Job, JobState
from dltsched.engine.domain.predictors import Predictors, memoized
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import GroupPrices, KeptOptions, best_alone, build_round
from dltsched.formulations.candidates import (
    Candidate,
    CandidateKind,
    alone_as_good,
    build_candidates,
    member_alone_as_good,
)
from dltsched.formulations.model import RoundModel
from dltsched.formulations.problem import NodeTypes, RoundOptions
from dltsched.predictors import analytic_predictors


def _fresh(state: ClusterState, raw: Predictors, options: RoundOptions):  # type: ignore[no-untyped-def]
    """The round and candidates as a first solve builds them: nothing kept (a new memo)."""
    problem = build_round(state, memoized(raw), options)
    return problem, build_candidates(problem)


def _same(state: ClusterState, kept: Predictors, raw: Predictors, options: RoundOptions) -> None:
    problem = build_round(state, kept, options)
    fresh, cset = _fresh(state, raw, options)
    assert problem == fresh
    assert build_candidates(problem).candidates == cset.candidates


def _kept(jobs: int, seed: int) -> tuple[Predictors, Predictors, RoundOptions, ClusterState]:
    """The raw analytic predictors, a memo over them that keeps a round's prices and options, the rounds'
    options and a synthetic snapshot of ``jobs`` jobs on 32 GPUs."""
    raw = analytic_predictors()
    return raw, memoized(raw), RoundOptions(max_jobs_per_gpu=2), synthetic_state(jobs, 32, seed=seed)


def _progressed(state: ClusterState, share: float) -> ClusterState:
    """Every running job has run ``share`` of its remaining work; the clock moved."""
    return replace(state, time_s=state.time_s + 600.0, jobs=tuple(
        replace(js, remaining_iterations=js.remaining_iterations * (1.0 - share)) if js.assignment else js
        for js in state.jobs))


def test_options_of_jobs_that_may_freeze_are_kept_per_progress_and_priced_again_when_it_moves() -> None:
    raw, kept, options, state = _kept(30, 2)  # every job may freeze: its penalty moves with its progress
    first = build_round(state, kept, options)
    prices = GroupPrices.of(kept)
    assert prices is not None
    offers = prices.offers(NodeTypes.of(first.nodes), options)
    assert set(offers) == {id(js.job) for js in state.jobs}  # every job's options kept, frozen levels too
    running = next(js for js in state.jobs if js.assignment is not None and js.job.freeze_allowed)
    assert offers[id(running.job)][2].last is not None
    assert offers[id(running.job)][2].last[0] == running.progress
    later = _progressed(state, 0.5)
    _same(later, kept, raw, options)
    moved = next(js for js in later.jobs if js.job.id == running.job.id)
    assert offers[id(running.job)][2].last[0] == moved.progress != running.progress  # priced again
    # the progress moved the frozen penalties: the kept options changed with it (else this proves nothing)
    old = {j.id: j.options for j in first.jobs}
    assert any(j.options != old[j.id] for j in build_round(later, kept, options).jobs)


def test_a_job_replaced_under_the_same_id_is_priced_again() -> None:
    raw, kept, options, state = _kept(24, 4)
    build_round(state, kept, options)
    js = state.jobs[0]
    bigger = replace(js.job, batch_size=js.job.batch_size * 2)  # another job object, same id
    changed = replace(state, jobs=(replace(js, job=bigger), *state.jobs[1:]))
    _same(changed, kept, raw, options)
    assert build_round(changed, kept, options).jobs[0].options \
        != build_round(state, kept, options).jobs[0].options


class _Slower:
    """Step times of another predictor: twice as slow."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *, freeze_level: int = 0,
                    num_nodes: int = 1) -> float:
        return 2.0 * self.inner.step_time_s(job, gpu_type, num_gpus,  # type: ignore[attr-defined]
                                            freeze_level=freeze_level, num_nodes=num_nodes)

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        return float(self.inner.memory_mib(job, gpu_type, freeze_level=freeze_level))  # type: ignore[attr-defined]


def test_other_step_time_predictors_with_the_same_kept_prices_start_over() -> None:
    raw, kept, options, state = _kept(24, 6)
    build_round(state, kept, options)
    slower = Predictors(step_time=_Slower(kept.step_time), colocation=kept.colocation,  # type: ignore[arg-type]
                        freezing=kept.freezing)
    assert GroupPrices.of(slower) is GroupPrices.of(kept)  # the same kept entries would be read
    uncached = Predictors(step_time=_Slower(raw.step_time), colocation=raw.colocation,  # type: ignore[arg-type]
                          freezing=raw.freezing)
    assert build_round(state, slower, options).jobs == build_round(state, uncached, options).jobs
    _same(state, kept, raw, options)  # and back: the first predictors' answers, not the slower ones


def test_a_simulated_run_of_rounds_keeps_nothing_stale() -> None:
    """Arrivals, completions, progress, moves, a job preempted and a GPU down, round after round: each kept
    round equals the round built from scratch, and so do its candidates."""
    raw = analytic_predictors()
    kept = memoized(raw)
    options = RoundOptions(max_jobs_per_gpu=2)
    rng = random.Random(11)
    start = synthetic_state(60, 32, seed=8)
    pool = list(start.jobs)
    state = replace(start, jobs=tuple(pool[:30]))
    waiting = pool[30:]
    for step in range(8):
        _same(state, kept, raw, options)
        jobs = list(state.jobs)
        del jobs[rng.randrange(len(jobs))]  # a completion
        if waiting:
            jobs.append(replace(waiting.pop(), assignment=None))  # an arrival
        k = next((i for i, js in enumerate(jobs) if js.assignment is not None), None)
        if k is not None and step % 2:
            jobs[k] = replace(jobs[k], assignment=None, queued_since_s=state.time_s)  # preempted
        free = sorted(set(range(state.cluster.num_gpus)) - {g for js in jobs if js.assignment
                                                               for g in js.assignment.gpus})
        q = next((i for i, js in enumerate(jobs) if js.assignment is None and js.job.num_gpus == 1), None)
        if q is not None and free:
            jobs[q] = replace(jobs[q], assignment=Assignment(jobs[q].job.id, (free[0],)))  # started
        state = _progressed(replace(state, jobs=tuple(jobs)), 0.1)
        if step == 5:  # a GPU fails: its job stops with it
            hit = next(i for i, js in enumerate(state.jobs) if js.assignment is not None)
            gpu = state.jobs[hit].assignment.gpus[0]  # type: ignore[union-attr]
            jobs = list(state.jobs)
            jobs[hit] = replace(jobs[hit], assignment=None, queued_since_s=state.time_s)
            state = replace(state, jobs=tuple(jobs), down_gpus=frozenset({gpu}))
    _same(state, kept, raw, options)


def test_best_alone_from_kept_options_is_the_fresh_answer_as_the_job_progresses() -> None:
    raw = analytic_predictors()
    asked = memoized(raw)
    options = RoundOptions()
    state = synthetic_state(20, 32, seed=3)
    types = NodeTypes.of(build_round(state, asked, options).nodes)
    kept = {js.job.id: KeptOptions(asked) for js in state.jobs}
    for share in (0.0, 0.3, 0.6, 0.9):
        for js in state.jobs:
            moved = JobState(js.job, js.job.total_iterations * (1.0 - share), assignment=js.assignment)
            assert best_alone(moved, 0.0, types, asked, options, kept=kept[js.job.id]) \
                == best_alone(moved, 0.0, types, memoized(raw), options)


def test_the_candidates_of_a_round_are_what_the_constructor_makes() -> None:
    state = synthetic_state(30, 32, seed=1)
    cset = build_candidates(build_round(state, analytic_predictors(), RoundOptions()))
    kinds = set()
    for c in cset.candidates:
        made = Candidate(c.jobs, c.freeze, c.gpu_type, c.kind, c.where, c.num_gpus, c.gain, c.completion_s)
        assert type(c) is Candidate and c == made and hash(c) == hash(made) and repr(c) == repr(made)
        kinds.add(c.kind)
    assert {CandidateKind.TYPE, CandidateKind.STAY} <= kinds


def test_no_candidate_of_a_round_is_dominated_and_the_rule_is_one() -> None:
    state = synthetic_state(40, 32, seed=5)
    cset = build_candidates(build_round(state, analytic_predictors(), RoundOptions(max_jobs_per_gpu=3)))
    assert any(len(c.jobs) > 1 for c in cset.candidates)
    assert not RoundModel(cset).dominated
    alone = {(c.jobs[0], c.gpu_type, c.kind, c.where): c.gain for c in cset.candidates if len(c.jobs) == 1}
    for c in cset.candidates:
        if len(c.jobs) > 1:
            beaten = replace(c, gain=min(alone.get((j, c.gpu_type, c.kind, c.where), c.gain) for j in c.jobs))
            assert member_alone_as_good(alone, beaten) == alone_as_good(alone, *_fields(beaten))
            assert member_alone_as_good(alone, beaten) == any(
                (j, c.gpu_type, c.kind, c.where) in alone for j in c.jobs)


def _fields(c: Candidate) -> tuple:  # type: ignore[type-arg]
    return c.jobs, c.gpu_type, c.kind, c.where, c.gain


def test_the_policy_prices_a_job_in_place_from_kept_options_as_asking_afresh() -> None:
    """As a running job progresses, is replaced by another job object, or memory is measured above the
    prediction, the prediction cache's best option where it runs is what the pipeline gives from scratch."""
    from dltsched.engine.domain.predictors import MemoryObservations, observing_memory
    from dltsched.engine.policies.optimizing import PredictionCache

    raw = analytic_predictors()
    options = RoundOptions()
    state = synthetic_state(20, 32, seed=7)
    cache = PredictionCache(raw)
    types = cache.node_types(state)
    running = [js for js in state.jobs if js.assignment is not None]

    def fresh(js: JobState, gpu_type: str):  # type: ignore[no-untyped-def]
        one = NodeTypes({gpu_type: types.nodes[gpu_type]}, {gpu_type: types.largest[gpu_type]},
                        {gpu_type: types.total[gpu_type]}, {gpu_type: types.memory_mib[gpu_type]})
        return best_alone(js, 0.0, one, memoized(raw), options)

    levels = set()
    for share in (0.0, 0.5, 0.95):
        for js in running:
            moved = replace(js, remaining_iterations=js.job.total_iterations * (1.0 - share))
            gpu_type = state.cluster.gpu_type_of(js.assignment.gpus[0])  # type: ignore[union-attr]
            got = cache.best_in_place(moved, types, gpu_type, options)
            assert got == fresh(moved, gpu_type)
            levels.add(None if got is None else got.freeze_level)
    assert len(levels) > 1  # the progress moved some job's best level: the kept answer had to change
    js = running[0]
    gpu_type = state.cluster.gpu_type_of(js.assignment.gpus[0])  # type: ignore[union-attr]
    other = replace(js, job=replace(js.job, batch_size=js.job.batch_size * 4))
    assert cache.best_in_place(other, types, gpu_type, options) == fresh(other, gpu_type)
    with observing_memory(MemoryObservations()) as seen:
        best = cache.best_in_place(js, types, gpu_type, options)
        assert best is not None
        seen.record(js.job, gpu_type, best.freeze_level, 1e9)
        after = cache.best_in_place(js, types, gpu_type, options)
        assert after == best_alone(js, 0.0, NodeTypes({gpu_type: types.nodes[gpu_type]},
                                                      {gpu_type: types.largest[gpu_type]},
                                                      {gpu_type: types.total[gpu_type]},
                                                      {gpu_type: types.memory_mib[gpu_type]}),
                                   cache.predictors, options)
        assert after is None or after.freeze_level != best.freeze_level
