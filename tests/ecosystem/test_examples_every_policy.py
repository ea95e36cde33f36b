"""Every shipped example and every README command flow runs under every registered policy with default flags:
exit 0, every job finished. Crashes out of memory (predicted memory below the truth) are allowed and counted
(``num_oom``), as in a real cluster; they must not end a run.

Fast path (``make test``): the tiny and default examples under every policy, the medium one under FIFO, and
the README's generate-then-simulate flow. The medium example under every policy, the README's other simulate
commands and the converted Philly trace under every policy are marked ``slow``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.app.registry import policy_names

EXAMPLES = Path(__file__).resolve().parents[2] / "instances" / "examples"
FAST_EXAMPLES = ("tiny-4jobs-2gpus.json", "tiny-6jobs-4gpus.json", "default.json")


def _simulate(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    """``dltsched simulate ARGS --json``: exit 0, and the result rows."""
    code = main(["simulate", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, f"simulate {' '.join(args)}: exit {code}: {err.strip()[-500:]}"
    rows = json.loads(out)["rows"]  # one shape for one policy or many
    for row in rows:
        assert row["num_jobs_finished"] == row["num_jobs"], row["policy"]
        assert row["num_jobs_unfinished"] == 0
        assert isinstance(row["num_oom"], int) and row["num_oom"] >= 0
    return rows


def test_the_examples_are_the_ones_walked():
    assert {p.name for p in EXAMPLES.glob("*.json")} == {*FAST_EXAMPLES, "medium-200jobs-64gpus.json"}, \
        "a new shipped example: add it to FAST_EXAMPLES or to the slow walk"


@pytest.mark.parametrize("example", FAST_EXAMPLES)
@pytest.mark.parametrize("policy", policy_names())
def test_small_examples_under_every_policy(example, policy, capsys):
    (row,) = _simulate(capsys, "--instance", str(EXAMPLES / example), "--policy", policy)
    assert row["policy"] == policy


@pytest.mark.data
def test_medium_example_under_fifo_survives_its_memory_mispredictions(capsys):
    """The medium example's K80s are too small for some jobs whose predicted memory fits: they crash out of
    memory, leave the K80s and finish elsewhere (the strict check refuses the same run)."""
    medium = str(EXAMPLES / "medium-200jobs-64gpus.json")
    (row,) = _simulate(capsys, "--instance", medium, "--policy", "fifo")
    assert row["num_oom"] >= 1
    assert main(["simulate", "--instance", medium, "--policy", "fifo", "--memory", "reject", "--json"]) == 2
    assert "memory" in capsys.readouterr().err


def test_readme_generate_then_simulate(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["instance", "generate", "--jobs", "200", "--gpus", "64", "--seed", "1", "-o",
                 "my.json"]) == 0
    capsys.readouterr()
    (row,) = _simulate(capsys, "--instance", "my.json", "--policy", "tiresias", "--seed", "3")
    assert row["num_jobs"] == 200


@pytest.mark.slow
@pytest.mark.parametrize("policy", policy_names())
def test_medium_example_under_every_policy(policy, capsys):
    (row,) = _simulate(capsys, "--instance", str(EXAMPLES / "medium-200jobs-64gpus.json"), "--policy", policy)
    assert row["num_jobs"] == 200


@pytest.mark.slow
def test_readme_simulate_commands(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["instance", "generate", "--jobs", "200", "--gpus", "64", "--seed", "1", "-o",
                 "my.json"]) == 0
    capsys.readouterr()
    _simulate(capsys, "--instance", "my.json", "--policy", "optimizing", "--option", "backend=milp",
              "--prediction-error", "0.2")
    assert main(["simulate", "--instance", "my.json", "--policy", "all", "--records", "-o", "sim.json",
                 "--json"]) == 0
    summary = capsys.readouterr().out  # -o: the file gets the result, stdout one line saying so
    rows = json.loads(Path("sim.json").read_text())["rows"]
    assert len(summary.strip().splitlines()) == 1 and json.loads(summary)["rows"] == len(rows) == 9
    assert all(r["num_jobs_finished"] == r["num_jobs"] and r["records"] for r in rows)


@pytest.mark.slow
@pytest.mark.data
def test_readme_convert_philly_then_simulate_every_policy(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["instance", "convert", "philly", "--max-jobs", "1000", "--cluster",
                 "v100:8x8,p100:4x8,k80:4x8", "-o", "philly-1k.json"]) == 0
    capsys.readouterr()
    policies = [arg for name in policy_names() for arg in ("--policy", name)]
    rows = _simulate(capsys, "--instance", "philly-1k.json", *policies)
    assert [r["policy"] for r in rows] == list(policy_names())
