"""Concurrent batches into one folder: every (instance, policy, seed) runs once in all, each row is kept, and
a claim held by a killed process is taken over."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dltsched.engine.app.batch import CLAIMS_DIR, Claims, make_items, run_batch

pytestmark = pytest.mark.timeout(300)

TINY = Path(__file__).parents[2] / "instances" / "examples" / "tiny-4jobs-2gpus.json"
CLI = [sys.executable, "-m", "dltsched.engine.app.cli.main"]


def _keys(out: Path) -> Counter[str]:
    with (out / "results.csv").open(newline="") as fh:
        return Counter(row["key"] for row in csv.DictReader(fh))


def test_two_concurrent_batches_never_run_an_item_twice(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [*CLI, "--quiet", "batch", str(TINY), "--policy", "fifo", "--policy", "sjf", "--seeds", "0-11",
            "--predictors", "analytic", "-j", "1", "-o", str(out), "--json"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [p.communicate(timeout=240) for p in procs]
    for proc, (_stdout, stderr) in zip(procs, results, strict=True):
        assert proc.returncode == 0, stderr
    keys = _keys(out)
    assert len(keys) == 24, keys  # every item has its row
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]  # and none ran twice
    summaries = [json.loads(stdout) for stdout, _ in results]
    assert sum(s["ran"] for s in summaries) == 24


def test_an_item_claimed_elsewhere_is_left_to_its_claimant(tmp_path: Path) -> None:
    items = make_items([TINY], ["fifo"], [0, 1], predictors="analytic")
    out = tmp_path / "out"
    # another open file description: flock tells it apart, as another process
    other = Claims(out / CLAIMS_DIR)
    assert other.take(items[0].key)
    summary = run_batch(items, out, max_workers=1)
    assert (summary["ran"], summary["claimed_elsewhere"]) == (1, 1)
    assert list(_keys(out)) == [items[1].key]
    other.release(items[0].key)
    summary = run_batch(items, out, max_workers=1)
    assert (summary["ran"], summary["skipped"], summary["claimed_elsewhere"]) == (1, 1, 0)
    assert sorted(_keys(out)) == sorted(i.key for i in items)


def test_a_claim_of_a_killed_process_is_free(tmp_path: Path) -> None:
    items = make_items([TINY], ["fifo"], [0], predictors="analytic")
    folder = tmp_path / "out" / CLAIMS_DIR
    code = ("import sys, os; from pathlib import Path; from dltsched.engine.app.batch import Claims; "
            f"c = Claims(Path({str(folder)!r})); assert c.take({items[0].key!r}); os.kill(os.getpid(), 9)")
    proc = subprocess.run([sys.executable, "-c", code], check=False)
    assert proc.returncode == -9
    assert any(folder.iterdir())
    summary = run_batch(items, tmp_path / "out", max_workers=1)
    assert summary["ran"] == 1 and summary["claimed_elsewhere"] == 0
    assert os.path.exists(tmp_path / "out" / "results.csv")
