"""DeletePop step-time predictor: monotonicity, freezing, data parallelism, errors, no torch."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import FreezingPredictor, StepTimePredictor
from dltsched.predictors import default_predictors
from dltsched.predictors.steptime import DeletePopStepTime, MemoryFitError


def _job(model="resnet50", batch=64, **kw):
    return Job(id="j", model=model, batch_size=batch, total_iterations=100.0, **kw)


def test_implements_protocols():
    p = default_predictors()
    assert isinstance(p.step_time, StepTimePredictor) and isinstance(p.freezing, FreezingPredictor)


def test_breakdown_sums_and_grows_with_batch():
    p = DeletePopStepTime()
    small, large = p.breakdown(_job(batch=16), "v100"), p.breakdown(_job(batch=64), "v100")
    assert small.step_time_s == pytest.approx(small.compute_s + small.memory_s + small.comm_s
                                              + small.overhead_s)
    assert large.step_time_s > small.step_time_s and large.memory_mib > small.memory_mib


def test_faster_gpu_is_faster_and_amp_helps_on_tensor_cores():
    p = DeletePopStepTime()
    assert p.step_time_s(_job(), "h100") < p.step_time_s(_job(), "k80")
    assert p.step_time_s(_job(amp=True), "a100") < p.step_time_s(_job(), "a100")


def test_data_parallel_adds_communication_and_cross_node_costs_more():
    p = DeletePopStepTime()
    one = p.breakdown(_job(num_gpus=1), "v100")
    four = p.breakdown(_job(num_gpus=4), "v100")
    far = p.breakdown(_job(num_gpus=4), "v100", num_nodes=2)
    assert one.comm_s == 0 and four.comm_s > 0 and far.comm_s >= four.comm_s


def test_freeze_level_speeds_up_and_saves_memory():
    p = DeletePopStepTime()
    levels = range(0, 18, 3)
    times = [p.step_time_s(_job(), "v100", freeze_level=k) for k in levels]
    mems = [p.memory_mib(_job(), "v100", freeze_level=k) for k in levels]
    assert times == sorted(times, reverse=True) and mems == sorted(mems, reverse=True)


def test_clear_errors():
    p = DeletePopStepTime()
    with pytest.raises(ValidationError, match="gpu_type: unknown GPU type 'v1000'"):
        p.step_time_s(_job(), "v1000")
    with pytest.raises(ValidationError, match="freeze_level"):
        p.step_time_s(_job(), "v100", freeze_level=18)
    with pytest.raises(ValidationError, match="batch_size"):
        _job(batch=0)
    with pytest.raises(MemoryFitError, match="needs .* MiB > 12288 MiB on k80"):
        p.breakdown(_job(batch=1024), "k80", check_memory=True)


def test_prediction_needs_no_torch():
    code = ("import sys; from dltsched.predictors import default_predictors; from "
            "dltsched.engine.domain.model import Job;p = default_predictors(); "
            "p.step_time.step_time_s(Job(id='a', model='gpt2', batch_size=4, total_iterations=1.0), 'a100'); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_ten_thousand_predictions_run():
    from dltsched.engine.app.cli.predict import time_predictions

    out = time_predictions(2_000)
    assert out["pairs"] == out["colocation_groups"] == 2_000
    assert out["pairs_per_s"] > 0 and out["colocation_groups_per_s"] > 0


@pytest.mark.slow
def test_benchmark_ten_thousand_predictions(benchmark):
    from dltsched.engine.app.cli.predict import time_predictions

    out = benchmark.pedantic(time_predictions, args=(10_000,), rounds=1, iterations=1)
    assert out["pairs"] == 10_000


def test_host_term_adds_to_its_workload_only_scaled_by_its_setups_host_speeds():
    base = DeletePopStepTime(gpu_model="groups")
    host = {"per_step_s": 0.1, "per_sample_s": 0.001}
    speeds = {"a": {"v100": {"per_step": 2.0, "per_sample": 3.0}},
              "b": {"v100": {"per_step": 0.5, "per_sample": 0.5}}}
    factors = {**base.factors, "sources": ["a", "b"], "host_speed": speeds, "dispatch_us": 0.0,
               "host_overhead": {"a:resnet50/imagenet": host,
                                 "b:resnet50/imagenet": host, "b:vgg16/cifar10": host}}
    with_host = DeletePopStepTime(factors=factors, gpu_model="groups")
    no_host = DeletePopStepTime(factors={**factors, "host_overhead": {}}, gpu_model="groups")

    def gain(p: DeletePopStepTime, job: Job, gpu: str = "v100") -> float:
        return p.step_time_s(job, gpu) - no_host.step_time_s(job, gpu)

    # batch 64: 0.1 s per step and 0.064 s of samples, each at its own speed; setup "a" comes first
    assert gain(with_host, _job(batch=64)) == pytest.approx(0.1 * 2.0 + 0.064 * 3.0)
    assert gain(replace(with_host, host_source="b"), _job(batch=64)) == pytest.approx(0.164 * 0.5)
    # no host speed: the average machine
    assert gain(with_host, _job(batch=64), "h100") == pytest.approx(0.164)
    assert gain(with_host, _job("vgg16", batch=64)) == pytest.approx(0.164 * 0.5)  # only "b" measured it
    # never measured: the terms learned across setup "a"'s workloads (one: its median), at "a"'s speeds
    assert gain(with_host, _job("resnet101", batch=64)) == pytest.approx(0.1 * 2.0 + 0.064 * 3.0)
    assert gain(DeletePopStepTime(factors={**factors, "sources": []}), _job("resnet101")) == 0.0


def test_host_model_learns_per_step_cost_over_kernels_robustly_and_predicts_unseen_workloads():
    from dltsched.predictors.steptime.model import host_model, workload_kernels

    base = DeletePopStepTime(gpu_model="groups")
    loads = [("resnet18", "cifar10"), ("resnet50", "imagenet"),
             ("transformer", "multi30k"), ("lstm_lm", "wikitext2")]
    host = {f"s:{m}/{d}": {"per_step_s": 0.004 + 60e-6 * workload_kernels(m, d), "per_sample_s": 1e-5}
            for m, d in loads}
    host["s:a3c/pong"] = {"per_step_s": 0.5, "per_sample_s": 0.0}  # an RL environment on the CPU: an outlier
    factors = {**base.factors, "sources": ["s"], "host_overhead": host, "host_speed": {}, "dispatch_us": 0.0}
    learned = host_model(factors)["s"]
    assert learned["per_kernel_s"] == pytest.approx(60e-6, rel=0.05)
    assert learned["per_step_s"] == pytest.approx(0.004, rel=0.1)
    assert learned["per_sample_s"] == pytest.approx(1e-5)
    # resnet101 was never measured: its input term follows the line, not zero and not the RL outlier
    with_host = DeletePopStepTime(factors=factors)
    b = with_host.breakdown(_job("resnet101", batch=32), "v100")
    expected = 0.004 + 60e-6 * workload_kernels("resnet101", "imagenet") + 32 * 1e-5
    assert b.input_s == pytest.approx(expected, rel=0.1)
    assert b.step_time_s >= b.input_s  # the host cost is a floor of the step
    assert with_host.breakdown(_job("resnet101", batch=32), "v100", scope="compute").input_s == 0.0


def test_cpu_dispatch_runs_at_the_per_step_speed_of_the_host():
    # PPO at batch 1 is bound by kernel launches: a host twice as slow per step doubles its step
    base = DeletePopStepTime(gpu_model="groups")
    host = {"per_step_s": 0.0, "per_sample_s": 0.0}
    factors = {**base.factors, "sources": ["a"], "host_overhead": {"a:ppo/lunarlander": host},
               "step_overhead_s": 0.0, "host_speed": {"a": {"v100": {"per_step": 2.0, "per_sample": 1.0}}}}
    job = _job("ppo", batch=1)
    average_host = DeletePopStepTime(factors={**factors, "host_speed": {}})
    slow, average = (DeletePopStepTime(factors=factors).step_time_s(job, "v100"),
                     average_host.step_time_s(job, "v100"))
    assert slow == pytest.approx(2.0 * average, rel=0.05)


def test_roofline_moves_compute_ops_to_memory_when_the_peak_outgrows_the_bandwidth():
    from dltsched.predictors.steptime.aggregates import work_table

    # resnet50 at 10 TFLOPS / 1 TB/s: convolutions are compute-bound; at 10^6 TFLOPS none is,
    # so their activation traffic joins the memory work and no compute time is left
    normal = work_table("resnet50", "imagenet", (1e13, 1e13, 1e13), 1e12, 1.0)
    huge = work_table("resnet50", "imagenet", (1e18, 1e18, 1e18), 1e12, 1.0)
    assert normal.compute_s["conv"][0] > 0 and huge.compute_s["conv"][0] == 0
    # compute-class ops on the memory side are kept apart from the memory classes (norms, element-wise)
    assert huge.bound_s[0] > normal.bound_s[0] and huge.memory_s == normal.memory_s
    assert huge.kernels == normal.kernels
    # the backward of a frozen prefix is skipped: suffix tables shrink with the freeze level
    assert normal.compute_s["conv"][5] < normal.compute_s["conv"][0] and normal.kernels[5] < normal.kernels[0]


def test_recurrent_weights_bound_small_batches_of_rnns():
    from dltsched.predictors.steptime.aggregates import aggregates, recurrent_steps, work_table

    # an LSTM's forward FLOPs are 2 x steps x parameters: DeepSpeech2's layers run ~615 steps
    # (12.3 s at a 10 ms hop, stride 2); CNNs re-read no recurrent weights
    ds2 = [op for op in aggregates("deepspeech2", "librispeech").ops if op[0] == "rnn"]
    assert all(600 < recurrent_steps(op[2], op[5]) < 630 for op in ds2)
    assert work_table("resnet50", "imagenet", (1e13,) * 3, 1e12, 1.0).recurrent_s[0] == 0.0
    # V100: re-reading 5 x 2 x 16.8 MB of hidden-to-hidden weights per step dominates batch 2 and 4,
    # FLOPs dominate batch 64 and 128
    p = DeletePopStepTime()
    ds2_job = _job("deepspeech2", dataset="librispeech")
    gpu_s = {b: p.breakdown(replace(ds2_job, batch_size=b), "v100").compute_s for b in (2, 4, 64, 128)}
    assert gpu_s[4] / gpu_s[2] < 1.2 and 1.8 < gpu_s[128] / gpu_s[64] < 2.05


def test_cpu_dispatch_and_gpu_work_overlap_as_a_smooth_maximum():
    from dltsched.predictors.steptime.model import OVERLAP_POWER, combine

    assert combine(0.3, 0.0) == pytest.approx(0.3) and combine(0.0, 0.2) == pytest.approx(0.2)
    assert combine(0.1, 0.1) == pytest.approx(0.1 * 2 ** (1 / OVERLAP_POWER))
    assert max(0.3, 0.1) < combine(0.3, 0.1) < 0.3 + 0.1


def test_tiny_jobs_are_bound_by_cpu_dispatch_on_every_gpu():
    # PPO's 64-64 MLP at batch 1: a few hundred kernels of negligible GPU work; the step is the CPU's
    # launch time, so an H100 is no faster than a K80 (on the same host machines)
    base = DeletePopStepTime(gpu_model="groups")
    p = DeletePopStepTime(factors={**base.factors, "host_speed": {}}, gpu_model="groups")
    k80, h100 = p.breakdown(_job("ppo", batch=1), "k80"), p.breakdown(_job("ppo", batch=1), "h100")
    assert h100.step_time_s == pytest.approx(k80.step_time_s, rel=0.05)
    assert k80.overhead_s > 10 * (k80.compute_s + k80.memory_s)
    big = p.breakdown(_job("resnet50", batch=128), "k80")
    assert big.compute_s + big.memory_s > 5 * big.overhead_s  # large CNN steps are GPU-bound


def test_old_factor_files_are_refused_with_a_hint(tmp_path):
    from dltsched.predictors.steptime.model import load_factors

    path = tmp_path / "factors.json"
    path.write_text('{"format_version": 3}')
    with pytest.raises(ValidationError, match="format_version 3; expected 4.*calibrate-steptime"):
        load_factors(str(path))


def test_calibration_basis_says_what_a_gpu_rests_on():
    groups = DeletePopStepTime(gpu_model="groups")
    assert groups.calibration_basis("V100").startswith("fitted on its step-time measurements (gavel")
    assert groups.calibration_basis("t4") == "spec sheet scaled by its DeepBench kernel efficiencies"
    assert groups.calibration_basis("h100") == "spec sheet only"
    auto = DeletePopStepTime()  # the default: the kernel model on GPUs without fitted step times
    assert auto.calibration_basis("V100") == groups.calibration_basis("V100")
    assert auto.calibration_basis("t4") == "kernel model fitted on its measured kernels (NeuSight)"
    assert auto.calibration_basis("a100-40gb") == "kernel model fitted on its measured kernels (NeuSight)"
    assert auto.calibration_basis("h100") == "kernel model from its spec sheet"


def test_auto_gpu_model_times_unfitted_gpus_with_the_kernel_model():
    job = _job("resnet50", batch=64)
    auto, groups, kernels = (DeletePopStepTime(gpu_model=g) for g in ("auto", "groups", "kernels"))
    assert [auto.gpu_model_for(g) for g in ("k80", "v100-32gb", "a40", "a100", "h100", "l4")] == [
        "groups", "groups", "groups", "kernels", "kernels", "kernels"]
    assert auto.step_time_s(job, "v100") == pytest.approx(groups.step_time_s(job, "v100"))
    assert auto.step_time_s(job, "a100") == pytest.approx(kernels.step_time_s(job, "a100"))
    assert auto.step_time_s(job, "a100") != pytest.approx(groups.step_time_s(job, "a100"))
    # factors without a kernel_step block (a cross-fitted fold's) time every GPU by groups
    bare = DeletePopStepTime(factors={k: v for k, v in auto.factors.items() if k != "kernel_step"})
    assert bare.gpu_model_for("a100") == "groups"
    assert bare.step_time_s(job, "a100") == pytest.approx(groups.step_time_s(job, "a100"))
    with pytest.raises(ValidationError, match="gpu_model"):
        DeletePopStepTime(gpu_model="flops").gpu_model_for("v100")
