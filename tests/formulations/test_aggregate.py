"""Interchangeable empty nodes aggregated into classes: which nodes form a class, first-fit decreasing packs
every set of gangs that the class row admits, and the aggregated round keeps the optimum of the round
without aggregation (on every backend)."""

from __future__ import annotations

import random

import pytest

from dltsched.formulations import RoundOptions, solve_problem
from dltsched.formulations import candidates as candidates_module
from dltsched.formulations.aggregate import (
    NodeClass,
    class_of,
    divides_chain,
    empty_node_classes,
    place_in_class,
)
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import build_round
from dltsched.formulations.candidates import build_candidates
from dltsched.formulations.testing import Tables, checked, job, make_round
from dltsched.predictors import analytic_predictors


def test_divides_chain() -> None:
    assert divides_chain([2, 4, 8], 8)
    assert divides_chain([], 8)
    assert divides_chain([2, 16], 8)  # 16 never uses one 8-GPU node
    assert divides_chain([2, 6], 12)  # 2 | 6 | 12
    assert not divides_chain([3], 8)
    assert not divides_chain([4, 6], 12)  # 4 does not divide 6: not aggregated


def test_only_empty_fully_usable_nodes_of_dividing_sizes_form_classes() -> None:
    tables = Tables(step_s={"run": [1.0], "g2": [1.0], "g4": [1.0]})
    # four 4-GPU v100 nodes: node 0 runs a job, node 3 has a down GPU -> nodes 1 and 2 form the class
    problem = make_round(tables, [("v100", 4)] * 4, [job("run", 2), job("g2", 2), job("g4", 4)],
                         running={"run": (0, 1)}, down=(15,))
    classes = empty_node_classes(problem)
    assert classes == (NodeClass("v100", (1, 2), 4),)
    assert class_of(classes) == {1: 0, 2: 0}
    assert classes[0].capacity == 8
    # a 3-GPU gang does not divide 4: no class
    three = make_round(Tables(step_s={"g3": [1.0], "g2": [1.0]}), [("v100", 4)] * 3,
                       [job("g3", 3), job("g2", 2)])
    assert empty_node_classes(three) == ()


def test_first_fit_decreasing_places_every_admitted_set() -> None:
    rng = random.Random(7)
    cls = NodeClass("v100", (0, 1, 2, 3, 4), 8)
    for _ in range(300):
        sizes: list[int] = []
        while True:  # random gangs of 1, 2, 4 and 8 GPUs up to the class's 40 GPUs
            size = rng.choice((1, 2, 4, 8))
            if sum(sizes) + size > cls.capacity:
                break
            sizes.append(size)
        free = [list(range(8 * n, 8 * n + 8)) for n in cls.nodes]
        for size in sorted(sizes, reverse=True):
            node = place_in_class(cls, free, size)
            del free[node][:size]
        assert sum(len(f) for f in free) == cls.capacity - sum(sizes)
    with pytest.raises(RuntimeError, match="capacity bookkeeping"):
        place_in_class(cls, [[] for _ in cls.nodes], 2)


def test_gangs_on_a_class_of_empty_nodes(backend: str) -> None:
    # three empty 4-GPU nodes (one class of 12 GPUs), one job per GPU: gangs of 4, 4, 2, 2 and 2 GPUs (14)
    # cannot all run; a placed job is worth its weight (alone, normalised progress 1), so one 2-GPU job of
    # weight 1 waits: 3 + 3 + 2 + 1 = 9, the gangs of 2 sharing the third node.
    tables = Tables(step_s={k: [1.0] for k in ("a", "b", "c", "d", "e")})
    jobs = [job("a", 4, weight=3.0), job("b", 4, weight=3.0), job("c", 2, weight=2.0), job("d", 2),
            job("e", 2)]
    problem = make_round(tables, [("v100", 4)] * 3, jobs,
                         options=RoundOptions(objective="effective_progress", max_jobs_per_gpu=1,
                                              relative_gap=0.0))
    cset = build_candidates(problem)
    assert {c.kind for c in cset.candidates} == {"class"}
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(9.0)
    placed = result.plan.by_job()
    assert set(placed) >= {"a", "b", "c"} and len(placed) == 4


@pytest.mark.parametrize("running", [0.0, 0.3])
def test_aggregation_keeps_the_optimum(running: float, monkeypatch: pytest.MonkeyPatch) -> None:
    # the same synthetic round with and without aggregated classes: fewer candidates, the same proven optimum
    predictors = analytic_predictors()
    options = RoundOptions(relative_gap=0.0)
    problem = build_round(synthetic_state(60, 64, seed=5, running_fraction=running), predictors, options)
    aggregated = solve_problem(problem, "cpsat")
    with_classes = build_candidates(problem)
    monkeypatch.setattr(candidates_module, "empty_node_classes", lambda problem: ())
    plain = solve_problem(problem, "cpsat")
    assert aggregated.num_candidates < plain.num_candidates == len(build_candidates(problem).candidates)
    assert any(c.kind == "class" for c in with_classes.candidates)
    assert aggregated.plan.status == plain.plan.status == "optimal"
    assert checked(problem, aggregated) == pytest.approx(checked(problem, plain), rel=1e-9)
