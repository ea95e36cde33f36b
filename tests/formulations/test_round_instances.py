"""Shipped small instances: both backends agree on the optimum (and match the oracle on the tiniest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltsched.engine.app.cli.solve import load_round
from dltsched.formulations import RoundOptions, solve_problem
from dltsched.formulations.oracle import brute_force
from dltsched.formulations.testing import checked

EXAMPLES = Path(__file__).resolve().parents[2] / "instances" / "examples"
TINY = sorted(EXAMPLES.glob("tiny-*.json"))
OPTIONS = RoundOptions(relative_gap=0.0, freeze_levels=2)


@pytest.mark.skipif(not TINY, reason="no shipped tiny instances")
@pytest.mark.parametrize("path", TINY, ids=lambda p: p.stem)
def test_backends_agree_on_shipped_instances(path: Path, backends: tuple[str, ...]) -> None:
    problem = load_round(path, OPTIONS, "analytic")
    values = [checked(problem, solve_problem(problem, b, time_limit_s=20)) for b in backends]
    assert values == pytest.approx([values[0]] * len(values), rel=1e-5)


@pytest.mark.skipif(not (EXAMPLES / "tiny-4jobs-2gpus.json").exists(), reason="instance not shipped")
def test_tiniest_instance_matches_oracle(backend: str) -> None:
    problem = load_round(EXAMPLES / "tiny-4jobs-2gpus.json", OPTIONS, "analytic")
    best, _ = brute_force(problem)
    assert checked(problem, solve_problem(problem, backend, time_limit_s=20)) == pytest.approx(best, rel=1e-5)
