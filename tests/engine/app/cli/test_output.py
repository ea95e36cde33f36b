"""What the commands print: tables that fit the terminal (80 and 160 columns), one JSON shape (an object with
its rows) for one policy or many, ``-o`` writing the file and printing one line, warnings counted per run."""

from __future__ import annotations

import json
import logging

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.app.cli.output import tallied_warnings

TINY6 = "instances/examples/tiny-6jobs-4gpus.json"
SIM = ["simulate", "--instance", TINY6, "--predictors", "analytic"]
POLICIES = ("fifo", "sjf", "tiresias", "gandiva", "isacpp", "icefrog", "lucid", "gavel", "optimizing")


@pytest.fixture(autouse=True)
def _in_repo(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)


@pytest.fixture(scope="module")
def tables(repo_root):
    """``simulate --policy all`` printed at 80 and at 160 columns (one simulation each)."""
    import os
    import subprocess
    import sys

    out = {}
    for width in (80, 160):
        env = {**os.environ, "COLUMNS": str(width)}
        run = subprocess.run([sys.executable, "-m", "dltsched.engine.app.cli.main", *SIM, "--policy", "all"],
                             capture_output=True, text=True, env=env, cwd=repo_root, timeout=300)
        assert run.returncode == 0, run.stderr
        out[width] = run.stdout
    return out


@pytest.mark.parametrize("width", [80, 160])
def test_table_fits_the_terminal_and_cuts_no_cell(tables, width):
    text = tables[width]
    lines = text.rstrip("\n").splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in text  # no cell or header cut to an ellipsis
    rows = {line.split()[0]: line.split() for line in lines if line.split() and line.split()[0] in POLICIES}
    assert set(rows) == set(POLICIES)  # every policy on one line, its name whole
    for cells in rows.values():  # the avg JCT (hours) is whole, never '0.…'
        assert all(c.replace(".", "", 1).replace("%", "").isdigit() or c == "-" for c in cells[1:])


def test_narrow_terminal_names_the_columns_it_leaves_out(tables):
    wide, narrow = tables[160], tables[80]
    assert "not shown" not in wide and "median JCT (h)" in wide and "OOM" in wide
    note = " ".join(line for line in narrow.splitlines() if "not shown at 80 columns" in line
                    or "--json" in line)
    assert "not shown at 80 columns" in note and "OOM" in note
    for kept in ("avg", "makespan", "p99", "util"):  # the headline metrics stay
        assert kept in narrow


@pytest.mark.parametrize("policies", [["fifo"], ["fifo", "sjf"], ["baselines"]])
def test_json_is_one_shape_for_one_policy_or_many(policies, capsys):
    argv = [*SIM, "--json"]
    for p in policies:
        argv += ["--policy", p]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert isinstance(payload, dict) and isinstance(payload["rows"], list)
    assert payload["instance"] == "tiny-6jobs-4gpus" and payload["predictors"] == "analytic"
    expected = ["fifo", "sjf", "tiresias", "gandiva"] if policies == ["baselines"] else policies
    assert [r["policy"] for r in payload["rows"]] == expected
    assert all(r["num_jobs_finished"] == 6 for r in payload["rows"])


def test_output_file_gets_the_result_and_stdout_one_line(tmp_path, capsys):
    target = tmp_path / "sim.json"
    assert main([*SIM, "--policy", "fifo", "--policy", "gandiva", "--records", "--json", "-o",
                 str(target)]) == 0
    out = capsys.readouterr().out
    data = json.loads(target.read_text())
    assert len(out.strip().splitlines()) == 1
    summary = json.loads(out)
    assert summary == {"output": str(target), "bytes": target.stat().st_size, "rows": 2,
                       "what": "simulation results"}
    assert [r["policy"] for r in data["rows"]] == ["fifo",
                                                   "gandiva"] and all(r["records"] for r in data["rows"])
    assert target.stat().st_size > 10 * len(out)  # the records stayed in the file

    assert main([*SIM, "--policy", "fifo", "-o", str(target)]) == 0  # for people: the table, then one line
    out = capsys.readouterr().out
    assert "fifo" in out and out.strip().splitlines()[-1].startswith("wrote simulation results (1 row, ")
    assert out.strip().splitlines()[-1].endswith(f"to {target}")


def test_warnings_are_counted_not_repeated(capsys):
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    root = logging.getLogger()
    keep = Keep(logging.WARNING)
    root.addHandler(keep)
    log = logging.getLogger("dltsched.predictors.somewhere")
    try:
        with tallied_warnings():
            for model in ("resnet18", "vgg16", "lstm", "bert"):
                log.warning("no profile of %s on %s; predicted", model, "v100")
            log.warning("round skipped: %s", "why")
            logging.getLogger("other.library").warning("kept")
    finally:
        root.removeHandler(keep)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1  # one line per run
    assert "5 warnings of 2 kinds" in err[0]
    assert "no profile of resnet18 on v100; predicted (and 3 more like it)" in err[0]
    assert "round skipped: why" in err[0] and "-v shows each" in err[0]
    assert [r.getMessage() for r in seen] == ["kept"]  # dltsched's warnings were held back, others not


def test_verbose_prints_each_warning(capsys):
    with tallied_warnings(enabled=False) as tally:
        logging.getLogger("dltsched.x").warning("each")
    assert not tally.counts and capsys.readouterr().err == ""


@pytest.mark.data
def test_crossfit_run_counts_its_profile_warnings(capsys, data_dir):
    assert main(["simulate", "--instance", TINY6, "--policy", "optimizing", "--predictors", "crossfit"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line.lower()]
    assert len(err) == 1 and "no profile of" in err[0] and "more like it" in err[0]
