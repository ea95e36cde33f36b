"""Golden rounds: every recorded round, re-solved on every backend, gives the recorded plan.

``data/rounds.json.gz`` holds round problems captured from real runs of the optimizing policy (shipped
examples, a Philly window, generated instances; running jobs, co-location, freezing, down GPUs, every
objective) and each backend's plan, recorded by ``scripts/record_golden.py``. The problems are solved in
deterministic mode with ``relative_gap=0`` and a generous time limit: the exact backends prove their optimum.

What "the same plan" means, per backend:

* ``greedy``: a deterministic heuristic, so the assignments (job -> GPUs, freeze level) must be identical.
* ``cpsat`` and ``milp``: the assignments are compared first; when they differ, the solver picked another
  optimum among ties, which is accepted only if the new plan is proven optimal too, passes the checker and
  its objective equals the recorded optimum to 1e-9 relative.
* ``decomposed``: refuses ``makespan`` rounds (recorded as an error, expected again); otherwise
  deterministic, but its LP relaxation may have several optima (a different but equally good vertex after
  the model's rows are reordered): identical assignments, or the same status and the objective to 1e-9
  relative.

An exact backend added to the registry after the recording is held to the recorded CP-SAT optimum. Every
re-solved plan goes through the independent checker. The normal run re-solves a sample of
:data:`FAST_SAMPLE` rounds per backend; the whole set is marked ``slow``.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from dltsched.formulations.backends import BACKENDS, EXACT_BACKENDS
from dltsched.formulations.checker import check_plan
from dltsched.formulations.problem import RoundProblem
from dltsched.formulations.solve import solve_problem

ROUNDS_FILE = Path(__file__).parent / "data" / "rounds.json.gz"
#: rounds per backend re-solved in the normal (not slow) run
FAST_SAMPLE = 20
#: relative tolerance on objectives
REL_TOL = 1e-9


@cache
def golden() -> dict[str, Any]:
    with gzip.open(ROUNDS_FILE, "rt") as f:
        return json.load(f)  # type: ignore[no-any-return]


def _cases(backends: list[str]) -> list[Any]:
    rounds = golden()["rounds"]
    step = max(1, len(rounds) // FAST_SAMPLE)
    fast = set(range(0, len(rounds), step)[:FAST_SAMPLE])
    return [pytest.param(i, backend, id=f"{rounds[i]['id']}-{backend}",
                         marks=() if i in fast else (pytest.mark.slow,))
            for backend in backends for i in range(len(rounds))]


#: exact backends of the registry that were added after the recording: held to the recorded CP-SAT optimum
NEW_EXACT = [name for name in EXACT_BACKENDS if name not in golden()["backends"]]


def assignments(plan: Any) -> list[list[Any]]:
    return sorted([a.job_id, sorted(a.gpus), a.freeze_level] for a in plan.assignments)


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(1.0, abs(a), abs(b))


def test_golden_file_covers_every_backend_and_path() -> None:
    data = golden()
    assert len(data["rounds"]) == 200
    assert data["backends"] == ["cpsat", "milp", "greedy", "decomposed"]
    seen = {key for r in data["rounds"] for key, on in r["features"].items() if on}
    assert seen >= {"running", "down", "groups", "freezing", "unplaceable"}
    objectives = {r["problem"]["options"]["objective"] for r in data["rounds"]}
    assert objectives == {"jct", "weighted_completion", "effective_progress", "makespan"}
    assert any(r["problem"]["options"]["length_weight"] for r in data["rounds"])
    assert {r["source"] for r in data["rounds"]} >= {"philly", "medium-200jobs-64gpus", "generated-60x32"}


@pytest.mark.parametrize(("index", "backend"), _cases(golden()["backends"] + NEW_EXACT))
def test_golden_round(index: int, backend: str) -> None:
    record = golden()["rounds"][index]
    problem = RoundProblem.from_dict(record["problem"])
    if backend not in record["plans"]:  # an exact backend added after the recording: CP-SAT's proven optimum
        plan = solve_problem(problem, backend).plan
        report = check_plan(problem, plan)
        assert report.feasible, report.violations[:3]
        optimum = record["plans"]["cpsat"]["objective"]
        assert str(plan.status) == "optimal" and close(plan.objective, optimum), (
            f"{backend} on {record['id']}: {plan.status} {plan.objective!r} != CP-SAT's recorded optimum")
        return
    expected = record["plans"][backend]
    if "error" in expected:  # a backend that refuses the round (decomposed on makespan) still refuses it
        with pytest.raises(ValueError, match="not decomposed"):
            solve_problem(problem, backend)
        return
    result = solve_problem(problem, backend)
    plan = result.plan
    report = check_plan(problem, plan)
    assert report.feasible, report.violations[:3]
    assert close(report.objective, plan.objective)
    if assignments(plan) == expected["assignments"]:
        assert str(plan.status) == expected["status"]
        assert close(plan.objective, expected["objective"]), (plan.objective, expected["objective"])
        return
    # another plan: only an equally good one among ties is accepted (see the module docstring)
    assert backend != "greedy", f"greedy is deterministic: {assignments(plan)} != {expected['assignments']}"
    assert str(plan.status) == expected["status"]
    if BACKENDS[backend].exact:
        assert expected["status"] == "optimal" and str(plan.status) == "optimal"
    assert close(plan.objective, expected["objective"]), (
        f"{backend} on {record['id']}: objective {plan.objective!r} != recorded {expected['objective']!r}")

