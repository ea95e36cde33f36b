"""Golden simulations: every policy on the shipped instances, and the optimizing policy with two baselines
on a Philly window, give the recorded metrics (``data/simulations.json``, by ``scripts/record_golden.py``).

Seed 0 and deterministic solves (the default: CP-SAT under a deterministic work budget), so a run repeats bit
for bit. The fields compared (the file's ``deterministic_metrics``) are the schedule's: job counts, JCT
statistics, makespan and its bound, queueing, utilisation, preemptions, OOMs, faults, fairness and the
number of rounds, each to 1e-9 relative. Wall-clock fields (decision times, the run's wall time) are not
compared.

Quick cases run in the normal run; the rest, and every Philly case (marked ``data``), are marked ``slow``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dltsched.engine.app.api import load_instance_file, simulate_instance

SIMULATIONS_FILE = Path(__file__).parent / "data" / "simulations.json"
ROOT = Path(__file__).resolve().parents[2]
REL_TOL = 1e-9


def golden() -> dict[str, Any]:
    return json.loads(SIMULATIONS_FILE.read_text())  # type: ignore[no-any-return]


def _cases() -> list[Any]:
    out = []
    for case in golden()["cases"]:
        marks = [pytest.mark.slow] if case["slow"] else []
        if case["instance"] == "philly":
            marks.append(pytest.mark.data)
        out.append(pytest.param(case, id=f"{case['instance']}-{case['policy']}", marks=marks))
    return out


def same(a: float, b: float) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return abs(a - b) <= REL_TOL * max(1.0, abs(a), abs(b))


def test_golden_simulations_cover_every_policy_and_instance() -> None:
    from dltsched.engine.app.registry import policy_names

    data = golden()
    examples = {p.name for p in (ROOT / "instances" / "examples").glob("*.json")}
    for name in examples:
        ran = {c["policy"] for c in data["cases"] if c["instance"] == f"examples/{name}"}
        assert ran == set(policy_names())
    assert {c["policy"] for c in data["cases"] if c["instance"] == "philly"} >= {"optimizing", "tiresias"}
    assert any(not c["slow"] for c in data["cases"]), "no quick case left for the normal run"


@pytest.mark.parametrize("case", _cases())
def test_golden_simulation(case: dict[str, Any], request: pytest.FixtureRequest) -> None:
    if case["instance"] == "philly":
        request.getfixturevalue("data_dir")
        from dltsched.instances.readers import read_workload

        window = golden()["philly"]
        inst = read_workload(window["name"], cluster=window["cluster"], max_jobs=window["max_jobs"],
                             seed=window["seed"])
    else:
        inst = load_instance_file(ROOT / "instances" / case["instance"])
    result = simulate_instance(inst, case["policy"], seed=golden()["seed"])
    differ = {name: (getattr(result, name), want) for name, want in case["metrics"].items()
              if not same(getattr(result, name), want)}
    assert not differ, f"{case['instance']} {case['policy']}: (now, recorded) {differ}"
