"""Ground truth from profile datasets: measured rows used as measured, the rest modelled and counted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.engine.sim.profile_truth import ProfileTruth
from dltsched.engine.sim.truth import MeasuredTruth

STEPTIME = """model,dataset,gpu,batch_size,num_gpus,step_time_s,amp,optimizer,peak_memory_mib,gpu_util
resnet18,cifar10,h200,128,1,0.010,0,sgd,700,40
lstm_lm,wikitext2,h200,20,1,0.005,0,sgd,400,90
a3c,pong,h200,4,1,0.002,0,sgd,70,1.0
"""
PAIRS = (",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,amp2,speed2,"
         "gpu_util,gmem_util,gmem,gpu,sharing,gmem_source\n"
         """0,resnet18,cifar10,1,128,0,0.6,lstm_lm,wikitext2,1,20,0,0.7,90,3,3000,h200,{mode},nvml
""")


def _dataset(root: Path, mode: str = "timeslice") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "steptime.csv").write_text(STEPTIME)
    (root / "colocate_info.csv").write_text(PAIRS.format(mode=mode))
    (root / "measurement.json").write_text(json.dumps({"gpu": "h200", "sharing": mode}))
    return root


@pytest.fixture(scope="module")
def base() -> MeasuredTruth:
    return MeasuredTruth(use_measurements=False)


def test_measured_rows_are_the_truth_and_the_rest_is_modelled(tmp_path: Path, base: MeasuredTruth) -> None:
    truth = ProfileTruth([_dataset(tmp_path / "d")], base=base)
    r18 = Job("a", "resnet18", 128, 100.0)
    lm = Job("b", "lstm_lm", 20, 100.0)
    assert truth.step_time_s(r18, "h200", 1) == pytest.approx(0.010)
    assert truth.memory_mib(r18, "h200") == pytest.approx(700)
    assert truth.colocated_speeds([lm, r18], "h200") == pytest.approx((0.7, 0.6))  # order follows the jobs
    # another batch size: the measurement scaled by the fallback model's ratio, so smaller and still positive
    assert 0 < truth.step_time_s(Job("c", "resnet18", 32, 1.0), "h200", 1) < 0.010
    # the one measured pair fixes the utilisation slope: 1/0.6 - 1 = c 0.9 and 1/0.7 - 1 = c 0.4
    c = (0.9 * (1 / 0.6 - 1) + 0.4 * (1 / 0.7 - 1)) / (0.9**2 + 0.4**2)
    assert truth.record()["utilization_slope"]["h200"] == pytest.approx(c, abs=1e-4)
    # an unmeasured pair is the utilisation model; a 1% reading is a failed sample and takes the fallback's
    # share
    a3c = Job("d", "a3c", 4, 100.0)
    share = truth.gpu_utilization(a3c, "h200")
    assert share != pytest.approx(0.01)
    assert truth.colocated_speeds([r18, a3c],
                                  "h200") == pytest.approx((1 / (1 + c * share), 1 / (1 + c * 0.4)))
    # a model never measured: the fallback model times the GPU's median measured/fallback ratio
    unknown = Job("e", "vgg16", 64, 1.0)
    correction = truth.record()["step_correction"]["h200"]
    assert truth.step_time_s(unknown, "h200", 1) == pytest.approx(
        base.fallback.step_time_s(unknown, "h200", 1) * correction, rel=1e-3)
    lookups = truth.record()["lookups"]
    assert lookups["measured"] == 1 and lookups["utilization_model"] == 1 and lookups["step_corrected"] == 1


def test_other_gpu_types_use_the_base_truth(tmp_path: Path, base: MeasuredTruth) -> None:
    truth = ProfileTruth([_dataset(tmp_path / "d")], base=base)
    job = Job("a", "resnet18", 128, 100.0)
    assert truth.step_time_s(job, "v100", 2) == base.step_time_s(job, "v100", 2)
    assert truth.colocated_speeds([job, job], "k80") == base.colocated_speeds([job, job], "k80")
    assert truth.gpu_types == ("h200",)


def test_sharing_mode_is_explicit_when_both_were_measured(tmp_path: Path, base: MeasuredTruth) -> None:
    ts, mps = _dataset(tmp_path / "ts"), _dataset(tmp_path / "mps", "mps")
    with pytest.raises(ValidationError, match="truth-sharing"):
        ProfileTruth([ts, mps], base=base)
    assert ProfileTruth([ts, mps], "mps", base=base).record()["sharing"] == "mps"
    with pytest.raises(ValidationError, match="steptime.csv"):
        ProfileTruth([tmp_path], base=base)


@pytest.mark.data
def test_h200_mps_pairs_run_faster_than_time_sliced(data_dir: Path, base: MeasuredTruth) -> None:
    ts = ProfileTruth([data_dir / "h200"], base=base)
    mps = ProfileTruth([data_dir / "h200", data_dir / "h200" / "mps"], "mps", base=base)
    pair = [Job("a", "transformer", 64, 1.0), Job("b", "lstm_lm", 20, 1.0)]  # measured under MPS only
    assert sum(mps.colocated_speeds(pair, "h200")) == pytest.approx(0.7456 + 0.9641, abs=1e-3)
    assert sum(ts.colocated_speeds(pair, "h200")) < sum(mps.colocated_speeds(pair, "h200"))
    assert ts.record()["lookups"]["utilization_model"] == 1
    assert mps.record()["utilization_slope"]["h200"] < ts.record()["utilization_slope"]["h200"]
    assert math.isfinite(ts.record()["utilization_model_fit_mape"]["h200"])


def test_simulate_takes_truth_and_names_it(tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from dltsched.engine.app.cli.main import main

    monkeypatch.chdir(repo_root)
    truth = _dataset(tmp_path / "d")
    args = ["simulate", "--instance", "instances/examples/tiny-6jobs-4gpus.json", "--policy", "fifo",
            "--predictors", "analytic", "--json", "--truth", str(truth)]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["truth"]["kind"] == "profile" and out["truth"]["sharing"] == "timeslice"
    assert main([*args[:-1], str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "steptime.csv" in err[0]


def test_results_name_a_profile_truth_as_measured_with_its_datasets(tmp_path):
    """A simulation on profile datasets says its truth is measured and names each dataset beside Gavel's."""
    from dltsched.engine.sim.profile_truth import ProfileTruth

    folder = tmp_path / "h200"
    folder.mkdir()
    (folder / "steptime.csv").write_text(
        "model,dataset,gpu,batch_size,num_gpus,step_time_s,amp,optimizer,peak_memory_mib,gpu_util\n"
        "resnet18,imagenet,h200,64,1,0.01,0,sgd,4000,60\n")
    truth = ProfileTruth([folder], "mps")
    assert truth.kind == "measured"
    assert truth.sources[0] == "profile:h200:mps" and "profile:h200:mps" not in truth.sources[1:]
