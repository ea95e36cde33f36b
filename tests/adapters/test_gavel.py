"""The Gavel policy adapter on recorded per-round inputs in the shapes Gavel passes (``tests/adapters/data/
gavel_round_*.json``: Gavel's own measured throughputs, keys printed as its ``JobIdPair``)."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from dltsched.engine.app.adapters.gavel import GavelPolicy, fifo_allocation, members, replay
from dltsched.engine.app.measured import measured_predictors, prepare_state
from dltsched.engine.domain.errors import ValidationError
from dltsched.formulations import build_round, check_plan

DATA = Path(__file__).parent / "data"
ROUNDS = ("gavel_round_a.json", "gavel_round_b.json", "gavel_round_c.json")


class JobIdPair:
    """Gavel's job key as its scheduler builds it (``job_id_pair.JobIdPair``): hashable, ``singletons()``."""

    def __init__(self, a: int, b: int | None) -> None:
        self._a, self._b = a, b

    def singletons(self) -> tuple[JobIdPair, ...]:
        return (self,) if self._b is None else (JobIdPair(self._a, None), JobIdPair(self._b, None))

    def integer_job_id(self) -> int:
        return self._a

    def as_tuple(self) -> tuple[int, int | None]:
        return (self._a, self._b)

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobIdPair) and self.as_tuple() == other.as_tuple()


def load(name: str, key: Any = lambda t: t) -> tuple[dict[Any, Any], dict[Any, int], dict[Any, float],
                                                     dict[str, int]]:
    p = json.loads((DATA / name).read_text())

    def keyed(d: dict[str, Any]) -> dict[Any, Any]:
        return {key(ast.literal_eval(k)): v for k, v in d.items()}

    return (keyed(p["unflattened_throughputs"]), keyed(p["scale_factors"]), keyed(p["num_steps_remaining"]),
            p["cluster_spec"])


@pytest.mark.parametrize("name", ROUNDS)
def test_recorded_round_gives_a_checked_allocation_in_gavel_shape(name):
    throughputs, scale, steps, spec = load(name)
    policy = GavelPolicy()
    allocation = policy.get_allocation(throughputs, scale, steps, spec)
    assert set(allocation) == set(throughputs)
    assert all(set(v) == set(spec) and set(v.values()) <= {0.0, 1.0} for v in allocation.values())
    used = dict.fromkeys(spec, 0)
    seen: set[str] = set()
    for key, per_type in allocation.items():
        for wt, share in per_type.items():
            if share:
                assert not seen.intersection(members(key)), key  # a job runs once
                seen.update(members(key))
                used[wt] += sum(scale[(int(j), None)] for j in members(key)[:1])
                assert throughputs[key][wt]  # only on a worker type Gavel measured it on
    assert all(used[wt] <= spec[wt] for wt in spec)
    assert seen, "the plan runs nothing"
    # the plan, re-checked by the solver-independent checker on the round the adapter built
    plan = policy.last_plan
    state, measured, _ = policy.round_of(throughputs, scale, steps, spec)
    state = prepare_state(state, measured.checked())
    problem = build_round(state, measured_predictors(None, measured.checked()), policy.solver.options)
    assert check_plan(problem, plan).feasible
    assert plan.status == "optimal" and policy.rounds[-1].status == "optimal"
    assert all(entry["step_time"] == "measured" and entry["memory"] == "trusted"
               for entry in plan.provenance.values())


def test_pairs_gavel_measured_are_co_located_with_their_measured_speeds():
    throughputs, scale, steps, spec = load("gavel_round_a.json")
    policy = GavelPolicy()
    allocation = policy.get_allocation(throughputs, scale, steps, spec)
    pairs = [k for k, v in allocation.items() if len(members(k)) == 2 and any(v.values())]
    assert pairs, "six jobs on four GPUs with measured pairs: some pair shares a GPU"
    for k in pairs:
        assert all(policy.last_plan.provenance[j]["colocation"] == "measured" for j in members(k))
        assert all(throughputs[k]["p100"][i] > 0 for i in range(2))  # never a pair Gavel says does not fit


def test_job_id_pair_objects_key_the_allocation():
    throughputs, scale, steps, spec = load("gavel_round_c.json", key=lambda t: JobIdPair(*t))
    allocation = GavelPolicy().get_allocation(throughputs, scale, steps, spec)
    assert set(allocation) == set(throughputs)
    assert all(isinstance(k, JobIdPair) for k in allocation)
    assert sum(1 for v in allocation.values() for share in v.values() if share) >= 4


@pytest.mark.parametrize("name", ROUNDS)
def test_replay_finishes_every_job_no_later_on_average_than_fifo(name):
    throughputs, scale, steps, spec = load(name)
    policy = GavelPolicy()
    ours = replay(policy.get_allocation, throughputs, scale, steps, spec)
    fifo = replay(fifo_allocation, throughputs, scale, steps, spec)
    assert ours["avg_jct_s"] <= fifo["avg_jct_s"]
    assert all(r.status == "optimal" for r in policy.rounds)


@pytest.mark.parametrize(("change", "field"), [
    (lambda t, s, n, c: (t, s, n, None), "cluster_spec"),
    (lambda t, s, n, c: (t, {k: 0 for k in s}, n, c), "scale_factors"),
    (lambda t, s, n, c: (t, s, n, {"tpu-v9": 4}), "cluster_spec[tpu-v9]"),
    (lambda t, s, n, c: (t, s, {k: float("nan") for k in n}, c), "num_steps_remaining"),
])
def test_bad_gavel_input_is_one_typed_error(change, field):
    args = change(*load("gavel_round_a.json"))
    with pytest.raises(ValidationError) as err:
        GavelPolicy().get_allocation(*args)
    assert err.value.path.startswith(field) and "\n" not in str(err.value)
