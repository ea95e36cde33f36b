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
