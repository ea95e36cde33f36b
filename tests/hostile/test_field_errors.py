"""Errors that name the field: non-finite, overflowing and unreadably long numbers in instance files, CLI
options and service bodies; malformed result files for ``plot``; options that do not apply."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dltsched.engine.app.service.server import ServiceConfig, create_app
from dltsched.formulations.pipeline import ConfiguredSolver

pytestmark = pytest.mark.timeout(120)

TINY = Path(__file__).parents[2] / "instances" / "examples" / "tiny-4jobs-2gpus.json"


def _error(run_cli: Any, check_cli_outcome: Any, argv: list[str]) -> str:
    got = run_cli(argv)
    check_cli_outcome(got, 2)
    return str(got.stderr).strip()


@pytest.mark.parametrize(("old", "new", "field"), [
    ('"total_iterations": 414.0', '"total_iterations": NaN', "jobs[0].total_iterations: NaN not understood"),
    ('"total_iterations": 414.0', '"total_iterations": Infinity', "jobs[0].total_iterations: Infinity not"),
    ('"arrival_time_s": 15.6', '"arrival_time_s": -Infinity', "jobs[1].arrival_time_s: -Infinity not"),
    ('"network_gbps": 100.0', '"network_gbps": 1e400', "cluster.nodes[0].network_gbps: 1e400 not understood"),
    ('"reference": {}', '"reference": {"x": [1, NaN]}', "reference.x[1]: NaN not understood"),
    ('"batch_size": 128', '"batch_size": ' + "9" * 5000, "jobs[0].batch_size: an integer of 5000 digits"),
])
def test_bad_numbers_in_an_instance_name_their_field(old: str, new: str, field: str, tmp_path: Path,
                                                     run_cli: Any,
                                                    check_cli_outcome: Any) -> None:
    path = tmp_path / "bad.json"
    text = TINY.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    for argv in (["instance", "validate", str(path)],
                 ["simulate", "--instance", str(path), "--policy", "fifo"]):
        line = _error(run_cli, check_cli_outcome, argv)
        assert line.startswith(f"error: {field}"), line
        assert str(path) in line


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400", "[1, NaN]", "9" * 5000])
def test_a_non_finite_option_names_its_key(value: str, run_cli: Any, check_cli_outcome: Any) -> None:
    line = _error(run_cli, check_cli_outcome, ["simulate", "--instance", str(TINY), "--policy", "optimizing",
                                               "--option", f"time_limit_s={value}"])
    assert line.startswith("error: --option time_limit_s: "), line


def test_plot_of_a_result_with_records_out_of_shape_names_the_field(tmp_path: Path, run_cli: Any,
                                                                    check_cli_outcome: Any) -> None:
    good = tmp_path / "result.json"
    got = run_cli(["simulate", "--instance", str(TINY), "--policy", "fifo", "--predictors", "analytic",
                   "--records", "--json", "-o", str(good)])
    check_cli_outcome(got, 0)
    data = json.loads(good.read_text())
    for field, value, expected in (("records", "abc", "rows[0].records: "),
                                   ("records", [{"jct_s": "1"}], "rows[0].records[0]"),
                                   ("utilization", [[0.0]], "rows[0].utilization[0]"),
                                   ("placements", [{"job_id": "a", "gpus": "x", "start_s": 0, "end_s": 1}],
                                    "rows[0].placements[0]")):
        bad = tmp_path / f"bad-{field}.json"
        bad.write_text(json.dumps(data | {"rows": [data["rows"][0] | {field: value}]}))
        line = _error(run_cli, check_cli_outcome, ["plot", str(bad), "-o", str(tmp_path / "figs")])
        assert line.startswith(f"error: {expected}"), line
    check_cli_outcome(run_cli(["plot", str(good), "-o", str(tmp_path / "figs")]), 0)


@pytest.mark.parametrize("extra",
                         [["--cluster", "v100:1x1"], ["--jobs", "2"],
                          ["--cluster", "v100:1x1", "--jobs", "2"]])
def test_workload_options_beside_an_instance_are_refused(extra: list[str], run_cli: Any,
                                                         check_cli_outcome: Any) -> None:
    line = _error(run_cli, check_cli_outcome,
                  ["simulate", "--instance", str(TINY), "--policy", "fifo", *extra])
    assert line.startswith(f"error: {extra[0]}: applies to --workload only"), line


@pytest.mark.parametrize("sizes", ["", " , "])
def test_bench_solve_without_sizes_is_refused(sizes: str, run_cli: Any, check_cli_outcome: Any) -> None:
    line = _error(run_cli, check_cli_outcome, ["bench", "solve", "--sizes", sizes])
    assert line.startswith("error: --sizes: "), line


NODE = {"id": "n0", "gpu_type": "v100", "num_gpus": 4}
JOB = {"id": "j0", "model": "resnet18", "batch_size": 32, "remaining_iterations": 100}


@pytest.fixture(scope="module")
def client() -> TestClient:
    solver = ConfiguredSolver.of(time_limit_s=5.0, predictors="analytic")
    return TestClient(create_app(ServiceConfig(solve=solver)))


@pytest.mark.parametrize(("body", "field"), [
    (json.dumps({"cluster": {"nodes": [NODE]},
                 "jobs": [JOB]}).replace('"num_gpus": 4', '"num_gpus": ' + "9" * 5000),
     "cluster.nodes[0].num_gpus"),
    (json.dumps({"cluster": {"nodes": [NODE]},
                 "jobs": [JOB | {"measured": {"step_time_s": {"v100": 5e-324}}}]}),
     "jobs[0].measured.step_time_s.v100"),
    (json.dumps({"cluster": {"nodes": [NODE]}, "jobs": [JOB | {"batch_size": 32}]})[:-1] + ', "jobs": []}',
     "jobs"),
])
def test_service_bodies_name_the_field(body: str, field: str, client: TestClient) -> None:
    got = client.post("/v1/schedule", content=body, headers={"content-type": "application/json"})
    assert got.status_code == 422, got.text
    assert got.json()["errors"][0]["field"] == field, got.json()
