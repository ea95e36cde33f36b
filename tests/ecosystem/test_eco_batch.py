"""``dltsched batch``: process pool, resume, CSV/Parquet, Ray with the same results as the pool."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dltsched.engine.app.batch import (
    TIMING_COLUMNS,
    BatchItem,
    ResultTable,
    discover,
    make_items,
    parse_seeds,
    run_batch,
)
from dltsched.engine.app.cli.main import main
from dltsched.engine.domain.errors import ValidationError


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as fh:
        return {r["key"]: r for r in csv.DictReader(fh)}


def _comparable(rows: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    return {k: {c: v for c, v in r.items() if c not in TIMING_COLUMNS} for k, r in rows.items()}


def test_batch_cli_runs_every_item_then_resumes_without_redoing(instance_dir, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--quiet", "batch", str(instance_dir), "--policy", "fifo", "--policy", "sjf", "--seeds", "0-1",
            "-o", str(out), "-j", "2", "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == summary | {"items": 12, "ran": 12, "skipped": 0, "failed": 0}
    rows = _rows(out / "results.csv")
    assert len(rows) == 12 and all(not r["error"] and float(r["avg_jct_s"]) > 0 for r in rows.values())
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["ran"] == 0 and again["skipped"] == 12
    assert _rows(out / "results.csv") == rows


def test_interrupted_table_keeps_complete_rows_only(instance_dir, tmp_path):
    items = make_items(discover(str(instance_dir / "eco-0.json")), ["fifo"], [0, 1])
    out = tmp_path / "out"
    run_batch(items[:1], out, max_workers=1)
    with (out / "results.csv").open("a") as fh:  # a row cut short by a kill
        fh.write(items[1].key + ",partial")
    summary = run_batch(items, out, max_workers=1)
    assert summary["skipped"] == 1 and summary["ran"] == 1
    rows = _rows(out / "results.csv")
    assert set(rows) == {i.key for i in items} and all(not r["error"] for r in rows.values())


def test_failed_items_are_recorded_and_retried(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "an instance"}')
    items = make_items([bad], ["fifo"], [0])
    out = tmp_path / "out"
    first = run_batch(items, out, max_workers=1)
    assert first["failed"] == 1 and "ValidationError" in _rows(out / "results.csv")[items[0].key]["error"]
    assert run_batch(items, out, max_workers=1)["ran"] == 1  # not counted as done


def test_solve_mode_rows(instance_dir, tmp_path):
    items = make_items(discover(str(instance_dir / "eco-*.json")), ["cpsat", "greedy:sjf"], [0], mode="solve",
                       time_limit_s=5.0)
    summary = run_batch(items, tmp_path / "out", max_workers=1)
    assert summary["failed"] == 0
    rows = _rows(tmp_path / "out" / "results.csv")
    assert {r["backend"] for r in rows.values()} == {"cpsat", "greedy:sjf"}
    assert all(int(r["num_placed"]) >= 1 for r in rows.values())


def test_parquet_matches_csv(instance_dir, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    items = make_items(discover(str(instance_dir)), ["sjf"], [0])
    summary = run_batch(items, tmp_path / "out", max_workers=1)
    table = pq.read_table(summary["parquet"])
    assert table.num_rows == 3 and table.column("avg_jct_s").type.id != 13  # numeric, not string


@pytest.mark.parametrize(("text", "seeds"), [("0-2", (0, 1, 2)), ("1,5,9", (1, 5, 9)), ("0-1,7", (0, 1, 7))])
def test_parse_seeds(text, seeds):
    assert parse_seeds(text) == seeds


def test_bad_inputs_name_the_option(tmp_path, capsys):
    with pytest.raises(ValidationError, match="--seeds"):
        parse_seeds("a-b")
    assert main(["batch", str(tmp_path / "nothing*.json"), "-o", str(tmp_path / "o")]) == 2
    assert "DIR|GLOB" in capsys.readouterr().err
    with pytest.raises(ValidationError, match="--mode"):
        make_items([], ["fifo"], [0], mode="train")


def test_result_table_rejects_foreign_csv(tmp_path):
    (tmp_path / "results.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValidationError, match="--out"):
        ResultTable(tmp_path)


def _fifty_items(instance_dir: Path, tmp_path: Path) -> list[BatchItem]:
    files = []
    for k in range(10):  # 10 distinct files (hash differs) x 5 policies = 50 items
        src = instance_dir / f"eco-{k % 3}.json"
        dst = tmp_path / "many" / f"inst-{k}.json"
        dst.parent.mkdir(exist_ok=True)
        data = json.loads(src.read_text())
        data["name"] = f"inst-{k}"
        dst.write_text(json.dumps(data))
        files.append(dst)
    return make_items(files, ["fifo", "sjf", "tiresias", "gandiva", "dltsched:greedy"], [0])


@pytest.mark.slow
def test_fifty_items_on_local_ray_match_the_process_pool(instance_dir, tmp_path):
    pytest.importorskip("ray")
    items = _fifty_items(instance_dir, tmp_path)
    assert len(items) == 50
    pool = run_batch(items, tmp_path / "pool", max_workers=2)
    ray = run_batch(items, tmp_path / "ray", use_ray=True)
    assert pool["failed"] == ray["failed"] == 0 and pool["ran"] == ray["ran"] == 50
    ray_rows = _comparable(_rows(tmp_path / "ray" / "results.csv"))
    assert _comparable(_rows(tmp_path / "pool" / "results.csv")) == ray_rows


def test_local_ray_matches_in_process_results(instance_dir, tmp_path):
    pytest.importorskip("ray")
    items = make_items(discover(str(instance_dir / "eco-0.json")), ["fifo", "sjf"], [0])
    local = run_batch(items, tmp_path / "local", max_workers=1)
    ray = run_batch(items, tmp_path / "ray", use_ray=True)
    assert local["ran"] == ray["ran"] == 2
    ray_rows = _comparable(_rows(tmp_path / "ray" / "results.csv"))
    assert _comparable(_rows(tmp_path / "local" / "results.csv")) == ray_rows
