"""Step-time scopes, GPUs sharing a fit, TF32, the fixed host term and the evaluation CSV reader."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dltsched.engine.domain.catalog import gpu_spec
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.predictors.steptime import DeletePopStepTime
from dltsched.predictors.steptime import measurements as ms
from dltsched.predictors.steptime.model import compute_peaks, learned_id


def _job(model="neumf", batch=32768, **kw):
    return Job(id="j", model=model, batch_size=batch, total_iterations=1.0, **kw)


def test_scope_switch_removes_the_input_pipeline():
    p = DeletePopStepTime(host_source="zeus")
    job = _job(dataset="movielens")
    it, comp = p.breakdown(job, "v100", scope="iteration"), p.breakdown(job, "v100", scope="compute")
    assert it.input_s > 0.0 and comp.input_s == 0.0
    assert comp.step_time_s == pytest.approx(it.step_time_s - it.input_s)
    fb = p.breakdown(job, "v100", scope="fwd_bwd")
    assert fb.step_time_s < comp.step_time_s and fb.comm_s == 0.0


def test_unknown_scope_is_one_line():
    with pytest.raises(ValidationError, match="scope"):
        DeletePopStepTime().step_time_s(_job(), "v100", scope="epoch")


def test_v100_32gb_shares_what_was_learned_for_v100():
    p = DeletePopStepTime()
    job = _job("resnet50", 64)
    assert learned_id("v100-32gb", p.factors["gpu_efficiency"]) == "v100"
    assert p.step_time_s(job, "v100-32gb") == pytest.approx(p.step_time_s(job, "v100"))
    assert "v100" in p.calibration_basis("v100-32gb")
    assert "fitted" in p.calibration_basis("v100-32gb")


def test_tf32_math_modes_on_ampere_only():
    a100, v100 = gpu_spec("a100"), gpu_spec("v100")
    job = _job("resnet18", 256)
    assert compute_peaks(job, a100)["conv"] == pytest.approx(19.5e12)
    assert compute_peaks(job, a100, tf32_conv=True)["conv"] == pytest.approx(156e12)
    assert compute_peaks(job, a100, tf32_conv=True)["gemm"] == pytest.approx(19.5e12)
    assert compute_peaks(job, a100, tf32_matmul=True)["gemm"] == pytest.approx(156e12)
    assert compute_peaks(job, v100, tf32_conv=True)["conv"] == pytest.approx(15.7e12)
    assert (DeletePopStepTime(tf32_conv=True).breakdown(job, "a100").compute_s
            < DeletePopStepTime().breakdown(job, "a100").compute_s)
    assert compute_peaks(replace(job, amp=True), a100)["gemm"] == pytest.approx(312e12)
    bert = _job("bert_base", 32)
    assert (DeletePopStepTime(tf32_matmul=True).breakdown(bert, "a100").compute_s
            < DeletePopStepTime().breakdown(bert, "a100").compute_s)


def test_fixed_host_cost_is_reported_in_every_scope():
    p = DeletePopStepTime(factors={**DeletePopStepTime().factors, "step_overhead_s": 0.01},
                          gpu_model="groups")
    for scope in ("iteration", "compute", "fwd_bwd"):
        b = p.breakdown(_job("resnet50", 1), "a100", scope=scope)
        assert b.host_s == pytest.approx(0.01, rel=0.5) and b.step_time_s > b.host_s


def _write(tmp_path, text):
    path = tmp_path / "rows.csv"
    path.write_text(text)
    return path


def test_csv_reader_reads_scope_and_seq_len(tmp_path):
    rows = ms.read_csv(_write(tmp_path, "model,gpu,batch_size,num_gpus,step_time_s,seq_len,scope\n"
                                        "bert_base,v100-32gb,8,1,0.2,384,fwd_bwd\nresnet50,t4,32,1,0.3,,\n"))
    assert (rows[0].scope, rows[0].seq_len) == ("fwd_bwd", 384)
    assert (rows[1].scope, rows[1].seq_len) == ("iteration", None)


@pytest.mark.parametrize(("text", "match"), [
    ("model,gpu,batch_size\nresnet50,v100,1\n", "missing columns"),
    ("model,gpu,batch_size,num_gpus,step_time_s\nresnett50,v100,32,1,0.1\n",
     r"rows.csv:2.model.*did you mean"),
    ("model,gpu,batch_size,num_gpus,step_time_s\nresnet50,v1000,32,1,0.1\n", r"rows.csv:2.gpu.*did you mean"),
    ("model,gpu,batch_size,num_gpus,step_time_s,scope\nresnet50,v100,32,1,0.1,epoch\n", r"rows.csv:2.scope"),
    ("model,gpu,batch_size,num_gpus,step_time_s\nresnet50,v100,x,1,0.1\n", r"rows.csv:2"),
    ("model,gpu,batch_size,num_gpus,step_time_s\nresnet50,v100,32,1,-1\n", r"step_time_s"),
])
def test_csv_reader_errors_are_one_line(tmp_path, text, match):
    with pytest.raises(ValidationError, match=match) as err:
        ms.read_csv(_write(tmp_path, text))
    assert "\n" not in str(err.value)


def test_transfer_from_one_profile_reproduces_it():
    p = DeletePopStepTime()
    job = _job("resnet50", 64)
    assert p.transfer_s(job, "v100", [("v100", 64, 0.5)], weight=1.0) == pytest.approx(0.5)
    a, b = p.breakdown(job, "v100"), p.breakdown(job, "a100")
    # the GPU part takes what the host part leaves of the measurement; the host part keeps its prediction
    scale = (0.5 - a.overhead_s) / (a.step_time_s - a.overhead_s)
    whole = b.overhead_s + scale * (b.step_time_s - b.overhead_s)
    assert p.transfer_s(job, "a100", [("v100", 64, 0.5)], weight=1.0) == pytest.approx(whole)
    # resnet50 is in the fit: by default blended halfway (geometrically) with the prediction without it
    assert p.knows(job)
    assert p.transfer_s(job, "a100", [("v100", 64, 0.5)]) == pytest.approx((whole * b.step_time_s) ** 0.5)
    assert p.transfer_s(job, "a100", [("v100", 64, 0.5)], weight=0.0) == pytest.approx(b.step_time_s)
    with pytest.raises(ValidationError, match="weight"):
        p.transfer_s(job, "a100", [("v100", 64, 0.5)], weight=2.0)


def test_transfer_fits_the_gpu_part_over_batch_sizes():
    p = DeletePopStepTime()
    job = _job("resnet50", 64)

    def truth(batch, gpu):
        b = p.breakdown(replace(job, batch_size=batch), gpu)
        return b.overhead_s + 0.5 * (b.step_time_s - b.overhead_s)

    measured = [("v100", 16, truth(16, "v100")), ("v100", 128, truth(128, "v100"))]
    assert p.transfer_s(job, "a100", measured, weight=1.0) == pytest.approx(truth(64, "a100"), rel=1e-6)


@pytest.mark.parametrize("gpu_model", ["groups", "kernels"])
def test_transfer_blends_a_never_fitted_workload_s_measurement_like_a_fitted_one(gpu_model):
    p = DeletePopStepTime(gpu_model=gpu_model)
    new = _job("gpt2_large", 4, dataset="seq1024")
    assert not p.knows(new) and p.knows(_job("resnet50", 64))
    assert p.transfer_s(new, "v100", [("v100", 4, 0.9)]) == pytest.approx(0.9)
    # from another GPU: halfway (geometrically) between the whole transfer and the unprofiled prediction
    whole = p.transfer_s(new, "a100", [("v100", 4, 0.9)], weight=1.0)
    alone = p.step_time_s(new, "a100")
    assert whole != pytest.approx(alone)
    assert p.transfer_s(new, "a100", [("v100", 4, 0.9)]) == pytest.approx((whole * alone) ** 0.5)
    with pytest.raises(ValidationError, match="measured"):
        p.transfer_s(new, "a100", [])


def test_transfer_takes_measurements_on_the_asked_gpu_whole():
    p = DeletePopStepTime()
    job = _job("resnet50", 64)
    assert p.knows(job)  # a fitted workload: other GPUs' measurements would be blended halfway
    # measured at this batch on this GPU: that is the answer, whatever else was measured
    assert p.transfer_s(job, "v100", [("v100", 64, 0.5), ("a100", 64, 0.1)]) == pytest.approx(0.5)
    assert p.transfer_s(job, "v100", [("v100", 64, 0.5), ("v100", 64, 0.7)]) == pytest.approx(0.6)
    # at another batch on this GPU: only those measurements, taken whole
    only_here = p.transfer_s(job, "v100", [("v100", 32, 0.3)], weight=1.0)
    assert p.transfer_s(job, "v100", [("v100", 32, 0.3), ("a100", 64, 0.1)]) == pytest.approx(only_here)
    assert only_here != pytest.approx(p.transfer_s(job, "v100", [("v100", 32, 0.3)], weight=0.5))
    for bad in (float("inf"), float("nan"), 0.0):
        with pytest.raises(ValidationError, match="measured"):
            p.transfer_s(job, "v100", [("v100", 64, bad)])
