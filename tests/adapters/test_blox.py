"""The Blox-style policy adapter on a recorded round in the shapes Blox's policies receive
(``tests/adapters/data/blox_round.json``: ``job_state.active_jobs``, ``cluster_state.server_map`` and
``cluster_state.gpu_df`` rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dltsched.engine.app.adapters.blox import BloxPolicy
from dltsched.engine.app.api import load_predictors
from dltsched.engine.app.measured import measured_predictors, prepare_state
from dltsched.engine.domain.errors import ValidationError
from dltsched.formulations import build_round, check_plan

DATA = Path(__file__).parent / "data"


def recorded() -> tuple[dict[int, Any], dict[int, Any], list[dict[str, Any]]]:
    p = json.loads((DATA / "blox_round.json").read_text())
    return ({int(k): v for k, v in p["job_dict"].items()}, {int(k): v for k, v in p["node_info"].items()},
            p["gpu_df"])


def test_schedule_and_place_give_blox_shapes_from_a_checked_plan():
    jobs, nodes, gpu_df = recorded()
    policy = BloxPolicy()
    schedule = policy.schedule(jobs, nodes, gpu_df)
    assert schedule["run_all_jobs"] is False
    order = [k for k, _ in schedule["job_order"]]
    assert sorted(order) == sorted(jobs) and all(schedule["job_order"][i][1] is jobs[k]
                                                 for i, k in enumerate(order))
    placement = schedule["placement"]
    assert order[: len(placement)] == list(placement)  # the jobs the plan runs come first
    all_gpus = {r["GPU_ID"] for r in gpu_df}
    taken = [g for gpus in placement.values() for g in gpus]
    assert len(taken) == len(set(taken)) and set(taken) <= all_gpus
    assert all(len(placement[k]) == jobs[k]["num_GPUs"] for k in placement)
    # every solver result through the independent checker
    state, measured, _ = policy.round_of(jobs, nodes, gpu_df)
    state = prepare_state(state, measured.checked())
    problem = build_round(state, measured_predictors(load_predictors("default"), measured.checked()),
                          policy.solver.options)
    assert check_plan(problem, schedule["plan"]).feasible and schedule["plan"].status == "optimal"
    # placement: the running jobs keep their GPUs unless the plan moves them; new jobs launch on theirs
    terminate, launch = policy.place(jobs, schedule, nodes, gpu_df)
    running = {0: [0, 1], 1: [4]}
    assert set(terminate) == {k for k, gpus in running.items() if sorted(placement.get(k, [])) != gpus}
    assert launch == {k: g for k, g in placement.items() if sorted(g) != running.get(k)}
    assert launch, "free GPUs and waiting jobs: something starts"


def test_jobs_without_a_zoo_model_are_priced_by_their_iteration_times():
    jobs, nodes, gpu_df = recorded()
    schedule = BloxPolicy().schedule(jobs, nodes, gpu_df)
    provenance = schedule["plan"].provenance
    assert set(provenance) == {str(k) for k in jobs}
    assert all(e["step_time"] == "measured" and e["memory"] == "trusted" for e in provenance.values())


def test_a_dataframe_is_read_like_its_rows():
    pd = pytest.importorskip("pandas")
    jobs, nodes, gpu_df = recorded()
    a = BloxPolicy().schedule(jobs, nodes, gpu_df)["placement"]
    b = BloxPolicy().schedule(jobs, nodes, pd.DataFrame(gpu_df))["placement"]
    assert a == b


@pytest.mark.parametrize(("edit", "field"), [
    (lambda j, n, g: j[3].pop("job_iteration_time"), "job_dict[3].job_iteration_time"),
    (lambda j, n, g: j[0].update(num_GPUs=0), "job_dict[0].num_GPUs"),
    (lambda j, n, g: g[0].pop("Node_ID"), "gpu_df[0].Node_ID"),
    (lambda j, n, g: g[2].update(IN_USE=True, JOB_IDS=0), "gpu_df.JOB_IDS[0]"),
])
def test_bad_blox_state_is_one_typed_error(edit, field):
    jobs, nodes, gpu_df = recorded()
    edit(jobs, nodes, gpu_df)
    with pytest.raises(ValidationError) as err:
        BloxPolicy().schedule(jobs, nodes, gpu_df)
    assert err.value.path == field and "\n" not in str(err.value)
