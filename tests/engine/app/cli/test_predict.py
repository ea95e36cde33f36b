"""``dltsched predict ...``, ``profile --smoke`` and ``bench predict`` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.cli.main import main


def _run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_step_time_json(capsys):
    code, out, _err = _run(capsys, "predict", "step-time", "--model", "ResNet-50", "--gpu", "v100",
                           "--batch-size", "32", "--num-gpus", "2", "--freeze", "3", "--json")
    data = json.loads(out)
    assert code == 0 and {"step_time_s", "compute_s", "memory_s", "comm_s", "memory_mib"} <= set(data)
    assert data["comm_s"] > 0 and data["step_time_s"] > data["compute_s"]


@pytest.mark.parametrize(("args", "message"), [
    (("--model", "resnet5000", "--gpu", "v100", "--batch-size", "8"), "unknown model 'resnet5000'"),
    (("--model", "resnet50", "--gpu", "v999", "--batch-size", "8"), "unknown GPU type 'v999'"),
    (("--model", "resnet50", "--gpu", "v100", "--batch-size", "0"), "batch_size: 0 not understood"),
    (("--model", "gpt2", "--gpu", "k80", "--batch-size", "64"), "MiB > 12288 MiB on k80"),
])
def test_step_time_errors(capsys, args, message):
    code, _out, err = _run(capsys, "predict", "step-time", *args, "--json")
    assert code == 2 and err.startswith("error: ") and message in err


def test_eval_steptime_csv(capsys, tmp_path):
    from dltsched.engine.domain.model import Job
    from dltsched.predictors.steptime import DeletePopStepTime

    # rows measured as exactly 1.25 x the prediction: MAPE must be 20% (|p - 1.25p| / 1.25p)
    p = DeletePopStepTime()
    lines = ["model,gpu,batch_size,num_gpus,step_time_s,amp"]
    for model, gpu, bs in (("resnet18", "v100", 64), ("bert_base", "a100", 16)):
        t = p.step_time_s(Job(id="x", model=model, batch_size=bs, total_iterations=1.0), gpu)
        lines.append(f"{model},{gpu},{bs},1,{1.25 * t},0")
    path = tmp_path / "m.csv"
    path.write_text("\n".join(lines) + "\n")
    code, out, _err = _run(capsys, "predict", "eval-steptime", str(path), "--json")
    data = json.loads(out)
    assert code == 0 and data["n"] == 2 and data["mape"] == pytest.approx(20.0)
    # each row names what timed it: the V100's fitted groups, the kernel model on the A100 (no fitted steps)
    assert [r["gpu_model"] for r in data["rows"]] == ["groups", "kernels"]


def test_freeze_table_and_bench(capsys):
    code, out, _err = _run(capsys, "predict", "freeze-table", "--model", "vgg16", "--gpu", "t4",
                           "--batch-size", "64", "--json")
    rows = json.loads(out)["rows"]
    assert code == 0 and len(rows) == 14 and rows[0]["penalty"] == 0
    code, out, _err = _run(capsys, "bench", "predict", "--pairs", "500", "--json")
    figures = json.loads(out)
    assert code == 0 and figures["pairs"] == figures["colocation_groups"] == 500
    assert figures["seconds"] > 0 and figures["colocation_seconds"] > 0


def test_profile_smoke_on_cpu(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    out_csv = tmp_path / "p.csv"
    code, out, _err = _run(capsys, "profile", "--smoke", "--model", "ppo", "--output", str(out_csv), "--json")
    rows = json.loads(out)["rows"]
    assert code == 0 and rows[0]["model"] == "ppo" and rows[0]["step_time_s"] > 0
    assert out_csv.read_text().startswith("model,dataset,gpu,batch_size,num_gpus,step_time_s")
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _err = _run(capsys, "profile", "--smoke", "--model", "ppo")  # for people: a table, not a repr
    lines = out.rstrip("\n").splitlines()
    assert code == 0 and "[{" not in out and "'model'" not in out and max(map(len, lines)) <= 80
    assert any(line.split()[:3] == ["ppo", "-", "cpu"] or line.split()[:1] == ["ppo"] for line in lines)
    assert any("step time" in line or "(ms)" in line for line in lines)
