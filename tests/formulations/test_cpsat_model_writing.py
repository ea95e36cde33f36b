"""The CP-SAT model is written without a Python call per variable: the same model as its text form, solved the
same."""

from __future__ import annotations

import pytest

from dltsched.formulations import RoundOptions, solve_problem
from dltsched.formulations.backends.cpsat import _booleans, model_proto, model_text
from dltsched.formulations.candidates import build_candidates
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
    first, second = _booleans(num), _booleans(num)
    assert len(first.variables) == num and all(list(v.domain) == [0, 1] for v in first.variables)
    first.parse_text_format("variables { domain: [0, 5] }")  # changing one leaves the next untouched
    assert len(second.variables) == num and len(_booleans(num).variables) == num


@pytest.mark.parametrize("objective", ["jct", "makespan"])
def test_the_written_model_solves_to_the_checked_optimum(objective: str) -> None:
    problem = _round(objective)
    result = solve_problem(problem, "cpsat")
    assert result.plan.status == "optimal"
    assert checked(problem, result) == pytest.approx(result.plan.objective)
    assert solve_problem(problem, "cpsat").plan.assignments == result.plan.assignments


def _pairs(num_gpus: int, objective: str = "jct") -> RoundProblem:
    # a (weight 3) alone is worth 3; with b at speeds 0.7 / 0.5 the pair is worth 3 * 0.7 + 0.5 = 2.6 < 3:
    # a alone beats the pair on the same place. c and d (weight 1 each) at 0.8 / 0.8 are worth 1.6
    # together, more than either alone: their pair is worth offering (a with c or d, at the default speeds
    # 0.6 / 0.6, is worth 2.4 < 3)
    tables = Tables(step_s={n: [1.0] for n in "abcd"},
                    speeds={("a", "b"): [0.7, 0.5], ("c", "d"): [0.8, 0.8]})
    jobs = [job("a", num_gpus, weight=3.0), job("b", num_gpus), job("c", num_gpus), job("d", num_gpus)]
    return make_round(tables, [("v100", 2 * num_gpus)], jobs,
                      options=RoundOptions(objective=objective, relative_gap=0.0, max_partners=3))


def test_a_one_gpu_group_no_better_than_a_member_alone_is_not_offered() -> None:
    problem = _pairs(1)
    assert problem.group((0, 1), "v100") is not None and problem.group((2, 3), "v100") is not None
    units = {c.jobs for c in build_candidates(problem).candidates}
    assert (0, 1) not in units and (2, 3) in units
    # with the makespan objective a member's completion counts on its own: the group is offered
    assert (0, 1) in {c.jobs for c in build_candidates(_pairs(1, "makespan")).candidates}


def test_dominated_groups_are_those_a_member_alone_beats_on_the_same_node() -> None:
    model = RoundModel(build_candidates(_pairs(2)))  # two-GPU jobs: node candidates, left to the model
    assert {model.cset.candidates[c].jobs for c in model.dominated} == {(0, 1), (0, 2), (0, 3)}
    # every dominated candidate has a member's own candidate on the same type and place at no lower gain
    for c in model.dominated:
        group = model.cset.candidates[c]
        place = (group.gpu_type, group.kind, group.where)
        assert any(o.jobs == (j,) and (o.gpu_type, o.kind, o.where) == place and o.gain >= group.gain
                   for j in group.jobs for o in model.cset.candidates)
    assert not RoundModel(build_candidates(_pairs(2, "makespan"))).dominated


@pytest.mark.parametrize("objective", ["jct", "effective_progress", "weighted_completion"])
def test_leaving_out_dominated_candidates_keeps_the_optimum(objective: str) -> None:
    from dltsched.formulations.backends.base import SolveParams
    from dltsched.formulations.backends.cpsat import CpSat
    from dltsched.formulations.candidates import objective_of

    class Whole(CpSat):
        leave_out_dominated = False

    names = [f"j{i}" for i in range(8)]  # two-GPU jobs, some pairs worth less than a member alone
    tables = Tables(step_s={n: [1.0 + (i % 3) / 4] for i, n in enumerate(names)},
                    speeds={(a, b): [0.9 - (i % 4) / 10, 0.3 + (i % 3) / 10]
                            for i, (a, b) in enumerate(zip(names, names[1:], strict=False))})
    problem = make_round(tables, [("v100", 4), ("v100", 4), ("k80", 4)],
                         [job(n, 2, weight=1.0 + (i % 4)) for i, n in enumerate(names)],
                         options=RoundOptions(objective=objective, relative_gap=0.0, max_partners=4))
    model = RoundModel(build_candidates(problem))
    assert model.dominated  # the case is one where the rule applies
    left_out = CpSat().solve(model, SolveParams(30.0))
    whole = Whole().solve(RoundModel(model.cset), SolveParams(30.0))
    assert left_out.selected is not None and whole.selected is not None
    assert not set(left_out.selected) & model.dominated
    best = objective_of(model.cset, whole.selected)
    assert objective_of(model.cset, left_out.selected) == pytest.approx(best)
    assert checked(problem, solve_problem(problem, "cpsat")) == pytest.approx(best)
