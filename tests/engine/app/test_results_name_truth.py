"""Every result output names the ground truth it ran on: `bench simulate` rows and title, `batch` rows and
results.csv, and an experiment's results.json summary, runs.csv and summary.csv."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from dltsched.engine.app.cli.main import main


@pytest.fixture
def packaged_truth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty data folder: the truth is measured from the packaged Gavel table, whatever lies beside."""
    empty = tmp_path / "empty-data"
    empty.mkdir()
    monkeypatch.setenv("DLTSCHED_DATA", str(empty))


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_bench_simulate_rows_and_title_name_the_truth(packaged_truth, capsys, repo_root) -> None:
    inst = str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")
    args = ["bench", "simulate", "--instance", inst, "--policy", "fifo", "--policy", "sjf", "--predictors",
            "analytic"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["truth"] == "measured (gavel:packaged)"
    assert [(r["truth"], r["truth_sources"]) for r in out["rows"]] == [("measured", ["gavel:packaged"])] * 2
    assert main(args) == 0
    assert "truth measured (gavel:packaged)" in " ".join(capsys.readouterr().out.split())


def test_batch_rows_and_table_name_the_truth(packaged_truth, tmp_path, repo_root) -> None:
    from dltsched.engine.app.batch import discover, make_items, run_batch, run_item

    items = make_items(discover(str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")),
                       ["fifo"], [0])
    row = run_item(items[0])
    assert (row["error"], row["truth"], row["truth_sources"]) == ("", "measured", "gavel:packaged")
    assert run_batch(items, tmp_path / "out", max_workers=1)["failed"] == 0
    (saved,) = _csv(tmp_path / "out" / "results.csv")
    assert (saved["truth"], saved["truth_sources"]) == ("measured", "gavel:packaged")


def test_batch_resumes_a_table_written_before_the_truth_columns(packaged_truth, tmp_path, repo_root) -> None:
    """A results.csv without the truth columns is read (its rows kept as done) and rewritten with them."""
    from dltsched.engine.app.batch import COLUMNS, EARLIER_COLUMNS, discover, make_items, run_batch

    items = make_items(discover(str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")),
                       ["fifo"], [0, 1])
    out = tmp_path / "out"
    run_batch(items[:1], out, max_workers=1)
    old = [{c: r[c] for c in EARLIER_COLUMNS} for r in _csv(out / "results.csv")]
    with (out / "results.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, EARLIER_COLUMNS)
        writer.writeheader()
        writer.writerows(old)
    summary = run_batch(items, out, max_workers=1)
    assert (summary["skipped"], summary["ran"], summary["failed"]) == (1, 1, 0)
    with (out / "results.csv").open(newline="") as fh:
        assert tuple(next(csv.reader(fh))) == COLUMNS
    rows = {r["key"]: r for r in _csv(out / "results.csv")}
    assert rows[items[0].key]["truth"] == "" and rows[items[0].key]["avg_jct_s"] == old[0]["avg_jct_s"]
    assert rows[items[1].key]["truth"] == "measured"


def test_experiment_summary_and_tables_name_the_truth(packaged_truth, tmp_path, repo_root) -> None:
    shutil.copy(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json", tmp_path / "tiny.json")
    exp = tmp_path / "tiny.toml"
    exp.write_text(f"""
name = "tiny"
policies = ["fifo", "sjf"]
seeds = [0]
predictors = "analytic"
[workload]
instance = "tiny.json"
[outputs]
figures = []
dir = "{tmp_path / 'out'}"
""")
    assert main(["-q", "experiment", "run", str(exp), "--json"]) == 0
    out = tmp_path / "out"
    results = json.loads((out / "results.json").read_text())
    assert results["truth"] == results["truth"] | {"kind": "measured", "sources": ["gavel:packaged"]}
    assert [(r["truth"], r["truth_sources"])
            for r in results["summary"]] == [("measured", ["gavel:packaged"])] * 2
    for table in ("runs.csv", "summary.csv"):
        assert [(r["truth"], r["truth_sources"])
                for r in _csv(out / table)] == [("measured", "gavel:packaged")] * 2
