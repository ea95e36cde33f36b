"""``dltsched instance``: every subcommand, its --json output, and one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.instances.schema import json_schema, load_instance

TINY = Path(__file__).resolve().parents[4] / "instances" / "examples" / "tiny-4jobs-2gpus.json"


def test_validate_and_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["instance", "validate", str(TINY), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
    assert main(["instance", "show", str(TINY), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    inst = load_instance(TINY)
    assert summary["num_jobs"] == len(inst.jobs)
    assert summary["gpus_by_type"] == inst.cluster.gpus_by_type()
    assert sum(summary["jobs_by_model"].values()) == len(inst.jobs)


def test_show_human(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["instance", "show", str(TINY)]) == 0
    out = capsys.readouterr().out
    assert "GPUs by type" in out and "arrival span" in out


def test_generate_writes_a_loadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.json"
    code = main(
        [
            "instance",
            "generate",
            "--jobs",
            "12",
            "--gpus",
            "8",
            "--gpu-types",
            "v100,k80",
            "--seed",
            "5",
            "--arrival-rate",
            "20",
            "-o",
            str(out),
            "--json",
        ]
    )
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    inst = load_instance(out)
    assert payload["num_jobs"] == len(inst.jobs) == 12
    assert inst.cluster.gpus_by_type() == {"v100": 4, "k80": 4}
    assert inst.metadata["generated_by"].endswith(f"-o {out}")


def test_schema_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["instance", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema()


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ('{"format": "dltsched-instance",', "malformed JSON at line 1"),
        (None, "jobs[0].num_gpus: 0 not understood; must be >= 1"),
    ],
)
def test_validate_bad_file_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, text: str
) -> None:
    bad = tmp_path / "bad.json"
    if content is None:
        raw = json.loads(TINY.read_text())
        raw["jobs"][0]["num_gpus"] = 0
        content = json.dumps(raw)
    bad.write_text(content)
    assert main(["instance", "validate", str(bad)]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("error: ") and text in line


def test_missing_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["instance", "show", str(tmp_path / "none.json")]) == 2
    assert "not found" in _one_error_line(capsys)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--cluster", "v100:8"], "cluster[0]: 'v100:8' not understood"),
        (["--gpu-types", "v100,h900"], "gpu_types[1]: unknown GPU type 'h900'"),
        (["--jobs", "0"], "'--jobs': 0 is not in the range 1<=x<=1000000"),
    ],
)
def test_generate_bad_input_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], text: str
) -> None:
    assert main(["instance", "generate", *args, "-o", str(tmp_path / "x.json")]) == 2
    assert text in _one_error_line(capsys)
    assert not (tmp_path / "x.json").exists()


@pytest.mark.data
def test_workloads_show_their_size(capsys, data_dir, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["instance", "workloads", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["gavel:23dbec"]["num_jobs"] == 9 and rows["gavel:23dbec"]["num_gpus"] > 0  # a 9-job trace
    assert rows["philly"]["num_jobs"] > 10_000 and rows["philly"]["span_days"] > 30
    assert main(["instance", "workloads"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 80
    assert any(line.split()[:2] == ["gavel:23dbec", "9"] for line in lines)
    assert main(["instance", "workloads", "--names"]) == 0
    assert capsys.readouterr().out.split() == list(rows)
