"""The CP-SAT model is written without a Python call per variable: the same model as its text form, solved the
same."""

from __future__ import annotations

import pytest

from dltsched.formulations import RoundOptions, solve_problem
from dltsched.formulations.backends.cpsat import boolean_variables, model_proto, model_text
from dltsched.formulations.candidates import Candidate, build_candidates
from dltsched.formulations.model import RoundModel
from dltsched.formulations.problem import RoundProblem
from dltsched.formulations.testing import Tables, checked, job, make_round

pytest.importorskip("ortools")


def _round(objective: str) -> RoundProblem:
    # one- and two-GPU jobs on two types, two of them running (stay candidates, node and type rows)
    names = ["a", "b", "c", "d", "e"]
    tables = Tables(step_s={n: [1.0 + i / 10, 0.8 + i / 10] for i, n in enumerate(names)},
                    penalty={n: [0.0, 0.01] for n in names}, type_factor={"k80": 2.0})
    jobs = [job("a"), job("b"), job("c", num_gpus=2), job("d", num_gpus=2), job("e", freeze_allowed=True,
                                                                             accuracy_budget=0.05)]
    return make_round(tables, [("v100", 4), ("v100", 2), ("k80", 4)], jobs, running={"a": (0,), "c": (4, 5)},
                      options=RoundOptions(objective=objective, relative_gap=0.0))


def _text_proto(text: str) -> object:
    from ortools.sat.python import cp_model_helper as cmh

    proto = cmh.CpModelProto()
    proto.parse_text_format(text)
    return proto


@pytest.mark.parametrize("objective", ["jct", "effective_progress", "makespan", "weighted_completion"])
@pytest.mark.parametrize("hinted", [False, True])
def test_the_written_model_is_the_text_model(objective: str, hinted: bool) -> None:
    model = RoundModel(build_candidates(_round(objective)))
    hint = tuple(range(0, model.num_candidates, 2)) if hinted else ()
    written = model_proto(model, hint)
    # every candidate a Boolean, the makespan column (if any) last, then the same rows and objective
    assert len(written.variables) == model.num_columns
    assert str(written) == str(_text_proto(model_text(model, hint)))


@pytest.mark.parametrize("num", [0, 1, 2, 7, 64, 1000, 1025])
def test_booleans_are_fresh_and_counted(num: int) -> None:
    first, second = boolean_variables(num), boolean_variables(num)
    assert len(first.variables) == num and all(list(v.domain) == [0, 1] for v in first.variables)
    first.parse_text_format("variables { domain: [0, 5] }")  # changing one leaves the next untouched
    assert len(second.variables) == num and len(boolean_variables(num).variables) == num


@pytest.mark.parametrize("objective", ["jct", "makespan"])
def test_the_written_model_solves_to_the_checked_optimum(objective: str) -> None:
    problem = _round(objective)
    result = solve_problem(problem, "cpsat")
    assert result.plan.status == "optimal"
    assert checked(problem, result) == pytest.approx(result.plan.objective)
    assert solve_problem(problem, "cpsat").plan.assignments == result.plan.assignments


def _pairs(num_gpus: int, objective: str = "jct", running: bool = False) -> RoundProblem:
    # a (weight 3) alone is worth 3; with b at speeds 0.7 / 0.5 the pair is worth 3 * 0.7 + 0.5 = 2.6 < 3:
    # a alone beats the pair on the same place. c and d (weight 1 each) at 0.8 / 0.8 are worth 1.6
    # together, more than either alone: their pair is worth offering (a with c or d, at the default speeds
    # 0.6 / 0.6, is worth 2.4 < 3). ``running``: a runs on the first GPUs (a slot where a or a group stays)
    tables = Tables(step_s={n: [1.0] for n in "abcd"},
                    speeds={("a", "b"): [0.7, 0.5], ("c", "d"): [0.8, 0.8]})
    jobs = [job("a", num_gpus, weight=3.0), job("b", num_gpus), job("c", num_gpus), job("d", num_gpus)]
    return make_round(tables, [("v100", 2 * num_gpus)], jobs,
                      running={"a": tuple(range(num_gpus))} if running else None,
                      options=RoundOptions(objective=objective, relative_gap=0.0, max_partners=3))


def _dominated(cset: object) -> list[Candidate]:
    """Group candidates with a member's own candidate at the same type, kind and place, of no lower gain."""
    cands = cset.candidates  # type: ignore[attr-defined]
    own = {(c.jobs[0], c.gpu_type, c.kind, c.where): c.gain for c in cands if len(c.jobs) == 1}
    return [c for c in cands if len(c.jobs) > 1 and any(
        own.get((j, c.gpu_type, c.kind, c.where), -1e300) >= c.gain for j in c.jobs)]


@pytest.mark.parametrize("num_gpus", [1, 2])
@pytest.mark.parametrize("running", [False, True])
def test_a_group_no_better_than_a_member_alone_on_the_same_place_is_not_offered(num_gpus: int,
                                                                                running: bool) -> None:
    problem = _pairs(num_gpus, running=running)
    assert problem.group((0, 1), "v100") is not None and problem.group((2, 3), "v100") is not None
    cset = build_candidates(problem)
    units = {c.jobs for c in cset.candidates}
    assert (0, 1) not in units and (2, 3) in units and not _dominated(cset)
    if running:  # a stays alone; b, c, d may join it there only in groups worth more than a alone
        assert any(c.kind == "stay" and c.jobs == (0,) for c in cset.candidates)
    # with the makespan objective a member's completion counts on its own: the group is offered
    makespan = build_candidates(_pairs(num_gpus, "makespan", running))
    assert (0, 1) in {c.jobs for c in makespan.candidates} and _dominated(makespan)


@pytest.mark.parametrize("num_gpus", [1, 2])
@pytest.mark.parametrize("running", [False, True])
@pytest.mark.parametrize("objective", ["jct", "weighted_completion"])
def test_the_groups_left_out_keep_the_oracle_optimum(num_gpus: int, running: bool, objective: str) -> None:
    from dltsched.formulations.oracle import brute_force

    problem = _pairs(num_gpus, objective, running)
    best, _ = brute_force(problem)
    assert checked(problem, solve_problem(problem, "cpsat")) == pytest.approx(best)


def test_the_model_leaves_out_dominated_candidates_and_keeps_the_optimum() -> None:
    from dataclasses import replace

    from dltsched.formulations.backends.base import SolveParams
    from dltsched.formulations.backends.cpsat import CpSat
    from dltsched.formulations.candidates import objective_of

    class Whole(CpSat):
        leave_out_dominated = False

    cset = build_candidates(_pairs(2, running=True))
    # a group of a and b at a's own places, worth a little less than a alone there: dominated, each of them
    extra = [replace(c, jobs=(0, 1), freeze=(0, 0), gain=c.gain - 0.1) for c in cset.candidates
             if c.jobs == (0,)]
    assert {c.kind for c in extra} == {"node", "stay"}
    cands = (*cset.candidates, *extra)
    by_job = tuple(tuple(i for i, c in enumerate(cands) if j in c.jobs) for j in range(len(cset.by_job)))
    model = RoundModel(replace(cset, candidates=cands, by_job=by_job))
    added = set(range(len(cset.candidates), len(cands)))
    assert model.dominated == added
    left_out = CpSat().solve(model, SolveParams(30.0))
    whole = Whole().solve(RoundModel(model.cset), SolveParams(30.0))
    assert left_out.selected is not None and whole.selected is not None
    assert not set(left_out.selected) & added
    best = objective_of(model.cset, whole.selected)
    assert objective_of(model.cset, left_out.selected) == pytest.approx(best)
    # under makespan a member's completion counts on its own: nothing is dominated
    makespan = build_candidates(_pairs(2, "makespan", running=True))
    assert not RoundModel(makespan).dominated
