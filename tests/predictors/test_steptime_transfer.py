"""One-profile transfer rules (``predictors.steptime.transfer``) and the per-GPU group pull of the fit."""

from __future__ import annotations

import numpy as np
import pytest

from dltsched.predictors.steptime import calibrate as cal
from dltsched.predictors.steptime import transfer as tr


def test_split_keeps_the_host_part_and_scales_the_gpu_part():
    # measured 0.5 s on a: host 0.1 s predicted, so the GPU part is 0.4 / 0.2 = 2x the prediction
    assert tr.split_transfer(0.5, 0.1, 0.2, 0.1, 0.05) == pytest.approx(0.1 + 2.0 * 0.05)
    # the same GPU and batch reproduces the measurement
    assert tr.split_transfer(0.37, 0.1, 0.2, 0.1, 0.2) == pytest.approx(0.37)


def test_split_bounds_the_gpu_scale():
    assert tr.split_transfer(100.0, 0.1, 0.2, 0.1, 0.05) == pytest.approx(0.1 + tr.C_MAX * 0.05)
    # below what the host part allows: host and GPU part shrink together, the ratio at C_MIN kept
    low = tr.split_transfer(0.05, 0.1, 0.2, 0.1, 0.05)
    assert low == pytest.approx(0.05 * (0.1 + tr.C_MIN * 0.05) / (0.1 + tr.C_MIN * 0.2))
    assert low < 0.1


def test_fit_transfer_fits_one_gpu_scale_over_batch_sizes():
    truth = [(h, g, h + 0.5 * g) for h, g in ((0.01, 0.1), (0.012, 0.4), (0.015, 1.2))]
    assert tr.fit_transfer(truth, 0.02, 0.3) == pytest.approx(0.02 + 0.5 * 0.3)
    # one measurement: the split rule
    assert tr.fit_transfer(truth[:1], 0.02, 0.3) == pytest.approx(
        tr.split_transfer(truth[0][2], 0.01, 0.1, 0.02, 0.3))
    assert tr.blend(4.0, 1.0) == pytest.approx(2.0) and tr.blend(4.0, 1.0, 1.0) == pytest.approx(4.0)


def test_rules_and_summary():
    rules = tr.rule_predictions(0.4, (0.1, 0.3), (0.1, 0.1), roofline=(0.2, 0.1), peak_tflops=(10.0, 20.0))
    assert set(rules) == set(tr.RULES)
    assert rules["same"] == 0.4 and rules["none"] == pytest.approx(0.2)
    assert rules["roofline"] == pytest.approx(0.2) and rules["peak_flops"] == pytest.approx(0.2)
    assert rules["ratio"] == pytest.approx(0.4 * 0.2 / 0.4) and rules["split"] == pytest.approx(0.2)
    assert rules["blend"] == pytest.approx(np.sqrt(rules["split"] * rules["none"]))
    assert rules["profile"] == rules["split"] and rules["profile_blend"] == rules["blend"]
    recs = [{"source": "s", "held_out": "b", "from_gpu": "a", "measured_s": 0.25, **rules}]
    out = tr.summarize(recs)
    assert out["n"] == 1 and out["same"] == pytest.approx(60.0) and out["none"] == pytest.approx(20.0)
    assert out["per_pair"]["s:a->b"]["roofline"] == pytest.approx(20.0)


def test_fit_names_the_groups_one_workload_alone_informs():
    from dltsched.predictors.steptime.measurements import Measurement

    rows = [Measurement("lstm_lm", "k80", b, 1, t, dataset="wikitext2", source="gavel", optimizer="sgd")
            for b, t in ((5, 0.039), (20, 0.058), (80, 0.165))]
    rows += [Measurement("resnet50", "k80", b, 1, t, dataset="imagenet", source="gavel")
             for b, t in ((16, 0.43), (64, 1.6))]
    rows += [Measurement("resnet18", "k80", b, 1, t, dataset="cifar10", source="gavel")
             for b, t in ((32, 0.14), (128, 0.55))]
    factors = cal.fit(rows)
    single = factors["single_workload_groups"]["k80"]
    assert single["rnn"]["workload"] == "lstm_lm/wikitext2"
    assert "conv" not in single  # resnet18 and resnet50 both inform it
    # the common scale is that of the groups several workloads inform
    assert single["rnn"]["shared"] == pytest.approx(factors["gpu_efficiency"]["k80"]["conv"], rel=1e-3)
    # on every GPU together too: lstm_lm alone informs the recurrent efficiency; the others share what several
    # inform
    alone = factors["single_workload_efficiency"]
    assert alone["rnn"]["workload"] == "lstm_lm/wikitext2" and "conv" not in alone
    # GEMM's efficiency where several workloads inform it; here lstm_lm alone does (its output layer), so
    # conv's
    theta = factors["inverse_efficiency"]
    assert alone["gemm"]["workload"] == "lstm_lm/wikitext2"
    assert alone["rnn"]["shared"] == alone["gemm"]["shared"] == pytest.approx(theta["conv"], rel=1e-4)


def test_a_group_one_workload_informs_holds_for_that_workload_only():
    import copy

    from dltsched.engine.domain.model import Job
    from dltsched.predictors.steptime import DeletePopStepTime
    from dltsched.predictors.steptime.model import load_factors

    f = copy.deepcopy(load_factors())
    f["gpu_efficiency"]["k80"]["rnn"] = 20.0
    f["single_workload_groups"] = {"k80": {"rnn": {"workload": "lstm_lm/wikitext2", "shared": 2.0}}}
    plain = copy.deepcopy(f)
    plain["single_workload_groups"] = {}
    ds2 = Job(id="d", model="deepspeech2", batch_size=32, total_iterations=1.0, dataset="librispeech")
    lm = Job(id="l", model="lstm_lm", batch_size=80, total_iterations=1.0)
    with_rule, without = DeletePopStepTime(factors=f), DeletePopStepTime(factors=plain)
    assert with_rule.step_time_s(lm, "k80") == pytest.approx(without.step_time_s(lm, "k80"))
    assert with_rule.step_time_s(ds2, "k80") < 0.5 * without.step_time_s(ds2, "k80")
    assert with_rule.step_time_s(ds2, "v100") == pytest.approx(without.step_time_s(ds2, "v100"))


def test_an_efficiency_one_workload_alone_informs_holds_for_that_workload_only():
    import copy

    from dltsched.engine.domain.model import Job
    from dltsched.predictors.steptime import DeletePopStepTime
    from dltsched.predictors.steptime.model import load_factors

    f = copy.deepcopy(load_factors())
    f["inverse_efficiency"]["rnn"] = 15.0  # as lstm_lm alone sets it with DeepSpeech2 held out
    f["single_workload_efficiency"] = {"rnn": {"workload": "lstm_lm/wikitext2",
                                               "shared": f["inverse_efficiency"]["gemm"]}}
    plain = copy.deepcopy(f)
    plain["single_workload_efficiency"] = {}
    ds2 = Job(id="d", model="deepspeech2", batch_size=32, total_iterations=1.0, dataset="librispeech")
    lm = Job(id="l", model="lstm_lm", batch_size=80, total_iterations=1.0)
    resnet = Job(id="r", model="resnet50", batch_size=64, total_iterations=1.0)
    with_rule, without = DeletePopStepTime(factors=f), DeletePopStepTime(factors=plain)
    for gpu in ("v100", "k80"):
        assert with_rule.step_time_s(lm, gpu) == pytest.approx(without.step_time_s(lm, gpu))
        assert with_rule.step_time_s(resnet, gpu) == pytest.approx(without.step_time_s(resnet, gpu))
        assert with_rule.step_time_s(ds2, gpu) < 0.5 * without.step_time_s(ds2, gpu)


def test_cli_takes_measured_steps_and_their_weight():
    import json

    from click.testing import CliRunner

    from dltsched.engine.app.cli.main import cli

    args = ["predict", "step-time", "--model", "resnet50", "--gpu", "v100", "--batch-size", "64",
            "--measured", "v100:64:0.5", "--json"]
    whole = CliRunner().invoke(cli, [*args, "--measured-weight", "1"])
    assert whole.exit_code == 0, whole.output
    assert json.loads(whole.output)["transferred_step_time_s"] == pytest.approx(0.5)
    # measured on this very GPU at this batch: the measurement is the answer by default
    assert json.loads(CliRunner().invoke(cli, args).output)["transferred_step_time_s"] == pytest.approx(0.5)
    # measured on another GPU: resnet50 is in the fit, so blended halfway with the prediction without it
    other = ["predict", "step-time", "--model", "resnet50", "--gpu", "a100-40gb", "--batch-size", "64",
             "--measured", "v100:64:0.5", "--json"]
    whole = json.loads(CliRunner().invoke(cli, [*other, "--measured-weight", "1"]).output)
    half = json.loads(CliRunner().invoke(cli, other).output)
    assert half["transferred_step_time_s"] == pytest.approx(
        (whole["transferred_step_time_s"] * half["step_time_s"]) ** 0.5)
    bad = CliRunner().invoke(cli, [*args, "--measured-weight", "2"])
    assert bad.exit_code == 2 and "measured-weight" in bad.output


def test_eval_steptime_new_jobs_needs_leave_one_gpu_out(tmp_path, capsys):
    from dltsched.engine.app.cli.main import main

    rows = tmp_path / "rows.csv"
    rows.write_text("model,gpu,batch_size,num_gpus,step_time_s\nresnet50,v100,32,1,0.1\n")
    assert main(["predict", "eval-steptime", str(rows), "--new-jobs"]) == 2
    err = capsys.readouterr().err
    assert "--new-jobs" in err and "leave-one-gpu-out" in err and "Traceback" not in err
    assert main(["predict", "eval-steptime", str(rows), "--json"]) == 0
