"""The domain's vocabulary as enums: objectives know their sense, plan statuses are typed, and both stay
plain strings on the outside (comparisons with names hold, JSON writes the names)."""

from __future__ import annotations

import json
import warnings

import pytest

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import DEFAULT_OBJECTIVE, OBJECTIVES, Objective, Plan, PlanStatus, Sense
from dltsched.formulations.problem import RoundOptions


@pytest.mark.parametrize(("objective", "sense"), [
    ("effective_progress", Sense.MAXIMIZE), ("jct", Sense.MAXIMIZE),
    ("weighted_completion", Sense.MINIMIZE), ("makespan", Sense.MINIMIZE),
])
def test_objective_knows_its_sense(objective, sense):
    member = Objective(objective)
    assert member.sense is sense and member.minimize == (sense is Sense.MINIMIZE)
    assert member == objective and json.dumps({"objective": member}) == json.dumps({"objective": objective})


def test_objectives_list_every_member_in_help_order():
    assert OBJECTIVES == tuple(Objective) and [str(o) for o in OBJECTIVES] == [
        "effective_progress", "jct", "weighted_completion", "makespan"]
    assert DEFAULT_OBJECTIVE is Objective.JCT


@pytest.mark.parametrize("name", ["jct", "makespan"])
def test_round_options_turn_a_name_into_the_enum_once(name):
    options = RoundOptions(objective=name)
    assert type(options.objective) is Objective and options.objective == name
    assert options.minimize is Objective(name).minimize


@pytest.mark.parametrize("bad", ["latency", "", 3, None])
def test_round_options_refuse_an_unknown_objective_in_one_line(bad):
    with pytest.raises(ValidationError) as info:
        RoundOptions(objective=bad)
    message = str(info.value)
    assert message.startswith("options.objective: ") and "\n" not in message
    assert "one of effective_progress, jct, weighted_completion, makespan" in message


def test_minimize_set_is_deprecated_and_still_right():
    from dltsched.formulations import problem

    with pytest.warns(DeprecationWarning, match=r"MINIMIZE is deprecated.*Objective\.minimize"):
        minimize = problem.MINIMIZE
    assert minimize == frozenset({"weighted_completion", "makespan"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Objective.MAKESPAN.minimize  # the new path warns about nothing


def test_plan_status_is_the_enum_and_writes_its_name():
    plan = Plan()
    assert plan.status is PlanStatus.HEURISTIC and plan.status == "heuristic"
    assert json.dumps({"status": Plan(status=PlanStatus.TIMEOUT).status}) == '{"status": "timeout"}'
    assert f"{PlanStatus.FALLBACK}" == "fallback" and str(PlanStatus.OPTIMAL) == "optimal"
