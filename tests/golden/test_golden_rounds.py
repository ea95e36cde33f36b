"""Golden rounds: every recorded round, re-solved on every backend, gives the recorded plan.

``data/rounds.json.gz`` holds round problems captured from real runs of the optimizing policy (shipped
examples, a Philly window, generated instances; running jobs, co-location, freezing, down GPUs, every
objective) and each backend's plan, recorded by ``scripts/record_golden.py``. The problems are solved in
deterministic mode with ``relative_gap=0`` and a generous time limit: the exact backends prove their optimum.

What "the same plan" means, per backend:

* ``greedy``: a deterministic heuristic, so the assignments (job -> GPUs, freeze level) must be identical.
* ``cpsat``, ``milp`` and the backends compared with its plans (:data:`RECORDED_AS`: ``pyomo``,
  ``highs``): the assignments are compared first; when they differ, the solver picked another optimum
  among ties, which is accepted only if the new plan is proven optimal too, passes the checker and its
  objective equals the recorded optimum to 1e-9 relative.
* ``decomposed``: refuses ``makespan`` rounds (recorded as an error, expected again); otherwise
  deterministic, but its LP relaxation may have several optima (a different but equally good vertex after
  the model's rows are reordered): identical assignments, or the same status and the objective to 1e-9
  relative.

Every re-solved plan goes through the independent checker. The normal run re-solves a sample of
:data:`FAST_SAMPLE` rounds per backend; the whole set is marked ``slow``.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from dltsched.formulations.backends import BACKENDS
from dltsched.formulations.checker import check_plan
from dltsched.formulations.problem import RoundProblem
from dltsched.formulations.solve import solve_problem

ROUNDS_FILE = Path(__file__).parent / "data" / "rounds.json.gz"
#: rounds per backend re-solved in the normal (not slow) run
FAST_SAMPLE = 20
#: relative tolerance on objectives
REL_TOL = 1e-9
#: backends compared with another's recorded plans: ``pyomo`` is ``milp`` under its own name, ``highs``
#: the same model given to the same HiGHS without Pyomo (another optimum among ties accepted as for ``milp``)
RECORDED_AS = {"pyomo": "milp", "highs": "milp"}


def same_status(backend: str, status: str, expected: str) -> bool:
    """``status`` is the recorded one; HiGHS seen directly (``highs``) reports the gap it closed, where the
    same run seen through Pyomo (the record) may keep a relative gap of about 1e-8 and say ``feasible``."""
    return status == expected or (backend == "highs" and expected == "feasible" and status == "optimal")


@cache
def golden() -> dict[str, Any]:
    with gzip.open(ROUNDS_FILE, "rt") as f:
        return json.load(f)  # type: ignore[no-any-return]


def _cases() -> list[Any]:
    rounds = golden()["rounds"]
    step = max(1, len(rounds) // FAST_SAMPLE)
    fast = set(range(0, len(rounds), step)[:FAST_SAMPLE])
    return [pytest.param(i, backend, id=f"{rounds[i]['id']}-{backend}",
                         marks=() if i in fast else (pytest.mark.slow,))
            for backend in BACKENDS for i in range(len(rounds))]


def assignments(plan: Any) -> list[list[Any]]:
    return sorted([a.job_id, sorted(a.gpus), a.freeze_level] for a in plan.assignments)


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(1.0, abs(a), abs(b))


def test_golden_file_covers_every_backend_and_path() -> None:
    data = golden()
    assert len(data["rounds"]) == 200
    recorded = {RECORDED_AS.get(b, b) for b in BACKENDS}
    assert set(data["backends"]) == recorded, "a backend was added or removed: record its golden plans"
    seen = {key for r in data["rounds"] for key, on in r["features"].items() if on}
    assert seen >= {"running", "down", "groups", "freezing", "unplaceable"}
    objectives = {r["problem"]["options"]["objective"] for r in data["rounds"]}
    assert objectives == {"jct", "weighted_completion", "effective_progress", "makespan"}
    assert any(r["problem"]["options"]["length_weight"] for r in data["rounds"])
    assert {r["source"] for r in data["rounds"]} >= {"philly", "medium-200jobs-64gpus", "generated-60x32"}


#: makespan rounds on which the recorded ``milp`` plan was the MIP start HiGHS returned with its presolve on,
#: worse than the optimum it reported (its own bound); the HiGHS backends now reach CP-SAT's recorded optimum
MILP_RECORDED_SHORT = {"r105-default", "r112-medium-200jobs-64gpus"}


def test_the_milp_recording_was_short_of_its_own_bound_on_those_rounds_only() -> None:
    short = {r["id"] for r in golden()["rounds"] if "objective" in r["plans"]["milp"]
             and r["plans"]["milp"].get("bound") is not None
             and not close(r["plans"]["milp"]["objective"], r["plans"]["milp"]["bound"])
             and r["plans"]["milp"]["status"] == "optimal"}
    assert short == MILP_RECORDED_SHORT


@pytest.mark.parametrize(("index", "backend"), _cases())
def test_golden_round(index: int, backend: str) -> None:
    record = golden()["rounds"][index]
    expected = record["plans"][RECORDED_AS.get(backend, backend)]
    problem = RoundProblem.from_dict(record["problem"])
    if "error" in expected:  # a backend that refuses the round (decomposed on makespan) still refuses it
        with pytest.raises(ValueError, match="not decomposed"):
            solve_problem(problem, backend)
        return
    if RECORDED_AS.get(backend, backend) == "milp" and record["id"] in MILP_RECORDED_SHORT:
        expected = record["plans"]["cpsat"]  # the recording kept a worse plan than HiGHS proved (see above)
    result = solve_problem(problem, backend)
    plan = result.plan
    report = check_plan(problem, plan)
    assert report.feasible, report.violations[:3]
    assert close(report.objective, plan.objective)
    if assignments(plan) == expected["assignments"]:
        assert same_status(backend, str(plan.status), expected["status"]), (plan.status, expected["status"])
        assert close(plan.objective, expected["objective"]), (plan.objective, expected["objective"])
        return
    # another plan: only an equally good one among ties is accepted (see the module docstring)
    assert backend != "greedy", f"greedy is deterministic: {assignments(plan)} != {expected['assignments']}"
    assert same_status(backend, str(plan.status), expected["status"]), (plan.status, expected["status"])
    if BACKENDS[backend].exact:
        assert expected["status"] == "optimal" and str(plan.status) == "optimal"
    assert close(plan.objective, expected["objective"]), (
        f"{backend} on {record['id']}: objective {plan.objective!r} != recorded {expected['objective']!r}")
