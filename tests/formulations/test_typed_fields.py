"""A solved round carries enums, not strings: the plan's status, the termination and the solution status, and
each candidate's kind; the JSON form writes their plain names, as before."""

from __future__ import annotations

import json

from dltsched.engine.domain.model import PlanStatus
from dltsched.formulations import RoundOptions
from dltsched.formulations.candidates import CandidateKind, build_candidates
from dltsched.formulations.result import SolutionStatus, Termination
from dltsched.formulations.solve import solve_problem
from dltsched.formulations.testing import Tables, checked, job, make_round


def _round():
    # two one-GPU jobs (one running on GPU 0) and a two-GPU job on 2 nodes of 2 V100s: every kind but cross
    tables = Tables(step_s={"a": [1.0], "b": [1.0], "c": [2.0]})
    return make_round(tables, [("v100", 2), ("v100", 2)], [job("a"), job("b"), job("c", num_gpus=2)],
                      running={"a": (0,)}, options=RoundOptions(max_jobs_per_gpu=1,
                                                                time_limit_s=5.0, relative_gap=0.0))


def test_candidate_kinds_are_the_enum():
    cset = build_candidates(_round())
    kinds = {c.kind for c in cset.candidates}
    assert all(type(k) is CandidateKind for k in kinds)
    assert kinds == {CandidateKind.TYPE, CandidateKind.NODE, CandidateKind.STAY}
    assert CandidateKind.STAY == "stay"  # a str: backends that compare with the name keep working


def test_round_result_holds_enums_and_writes_names(backend):
    problem = _round()
    result = solve_problem(problem, backend, time_limit_s=5.0)
    checked(problem, result)
    assert type(result.termination) is Termination and type(result.solution_status) is SolutionStatus
    assert type(result.plan.status) is PlanStatus
    assert result.plan.status is PlanStatus.OPTIMAL and result.termination is Termination.OPTIMAL
    data = result.to_dict()
    for key in ("status", "termination", "solution_status"):
        assert type(data[key]) is str  # plain names: a caller's own encoder needs nothing of ours
    assert (data["status"], data["termination"], data["solution_status"]) == ("optimal", "optimal", "optimal")
    assert json.loads(json.dumps(data))["status"] == "optimal"


def test_greedy_result_is_heuristic_not_run():
    result = solve_problem(_round(), "greedy", time_limit_s=5.0)
    assert result.plan.status is PlanStatus.HEURISTIC and result.termination is Termination.NOT_RUN
    assert result.solution_status is SolutionStatus.FEASIBLE
