"""Kernel step model: GEMM views recovered from graph rows, batch-grid tables, host-term fit, predictor
path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.predictors.steptime import DeletePopStepTime, kernelstep
from dltsched.predictors.steptime import kernels as kn
from dltsched.predictors.steptime import opgraph as og
from dltsched.predictors.steptime.kernel_logo import ROOFLINE
from dltsched.predictors.zoo.graphs import COLUMNS, graph_record

GPU = kn.KernelGpu("test", 80, 15.0, 900.0, tf32_tflops=60.0, fp16_tflops=120.0)


def _row(op: str, cls: str, fwd: float, read: float, written: float, params: float) -> list:
    values = {"op": op, "op_class": cls, "layer": 0, "fwd_flops": fwd, "bwd_flops": 2 * fwd,
              "bytes_read": read, "bytes_written": written, "activation_bytes": read, "param_bytes": params}
    return [values[c] for c in COLUMNS]


def test_linear_row_gives_its_gemm_and_transposed_backward():
    tokens, width_in, width_out = 10, 64, 32  # per sample
    row = _row("linear", "matmul", 2.0 * tokens * width_in * width_out, 4.0 * tokens * width_in,
               4.0 * tokens * width_out, 4.0 * width_in * width_out)
    ok = og.op_kernels(row, batch=8)
    (fwd, _count), = ok.forward
    assert (fwd.op_class, fwd.m, fwd.n, fwd.k) == ("linear", 80, 32, 64)
    assert fwd.flops == pytest.approx(2.0 * 80 * 32 * 64)
    shapes = sorted((k.m, k.n, k.k) for k, _c in ok.backward)
    assert shapes == sorted([(80, 64, 32), (64, 32, 80)])  # data gradient, weight gradient


def test_conv_row_is_implicit_gemm():
    pixels, cin, cout, area = 196, 16, 32, 9
    row = _row("conv2d", "conv", 2.0 * pixels * cout * cin * area, 4.0 * pixels * cin, 4.0 * pixels * cout,
               4.0 * cout * cin * area)
    (fwd, _c), = og.op_kernels(row, batch=4).forward
    assert (fwd.op_class, fwd.m, fwd.n, fwd.k) == ("conv", 4 * pixels, cout, cin * area)


def test_table_is_exact_on_the_grid_and_interpolates_between():
    rec = graph_record("resnet18", "cifar10")
    times = og.kernel_times(ROOFLINE, "resnet18", "cifar10", GPU)
    for batch in (1, 64):
        direct = sum(c * max(kn.roofline_s(k, GPU)) for row in rec["nodes"]
                     for k, c in (*og.op_kernels(row, batch).forward, *og.op_kernels(row, batch).backward))
        assert og.step_kernel_s(times, batch) == pytest.approx(direct, rel=1e-9)
    low, mid, high = (og.step_kernel_s(times, b) for b in (64, 96, 128))
    assert low < mid < high
    assert og.step_kernel_s(times, 64, freeze_level=3) < low  # frozen layers skip their backward
    assert og.step_kernel_s(times, 64, backward=False) < og.step_kernel_s(times, 64, freeze_level=3)


def test_kernel_model_is_never_below_the_roofline():
    times = og.kernel_times(kn.load_kernel_model(), "bert_base", None or "sentiment140", GPU)
    roof = og.kernel_times(ROOFLINE, "bert_base", "sentiment140", GPU)
    assert np.all(times.forward >= roof.forward * (1 - 1e-12))
    assert np.all(times.backward >= roof.backward * (1 - 1e-12))


def test_fit_recovers_synthetic_host_terms():
    rng = np.random.default_rng(0)
    truth = {"kernel": 1.3, "optimizer": 1.5, "dispatch_us": 8.0, "fixed_s": {"a": 0.004},
             "fixed_default_s": 0.004, "input": {"a:w1": (0.01, 2e-4), "a:w2": (0.0, 0.0)}, "scale": {}}
    rows = []
    for _ in range(120):
        work = {"kernel_s": float(rng.uniform(0.005, 0.5)), "optimizer_s": float(rng.uniform(0, 0.002)),
                "launches": float(rng.integers(50, 500))}
        w, batch = ("a:w1", "a:w2")[int(rng.integers(2))], int(rng.integers(8, 256))
        y = sum(kernelstep.predict_terms(truth, work, "a", w, batch, "iteration").values())
        rows.append((work, "a", w, batch, "iteration", y))
    params = kernelstep.fit(rows)
    errors = [abs(sum(kernelstep.predict_terms(params, *r[:5]).values()) - r[5]) / r[5] for r in rows]
    assert max(errors) < 0.05
    assert params["kernel"] * params["scale"]["a:w1"] == pytest.approx(1.3, rel=0.1)


def test_fit_learns_per_gpu_scales_and_unseen_gpus_get_none():
    rng = np.random.default_rng(1)
    base = {"kernel": 1.0, "optimizer": 1.5, "dispatch_us": 8.0, "fixed_s": {"a": 0.002},
            "fixed_default_s": 0.002, "input": {}, "scale": {}}
    truth = base | {"gpu_scale": {"slow": 1.6, "fast": 0.8}}
    rows = []
    for _ in range(150):
        work = {"kernel_s": float(rng.uniform(0.01, 0.5)), "optimizer_s": 0.0, "launches": 100.0}
        gpu = ("slow", "fast")[int(rng.integers(2))]
        y = sum(kernelstep.predict_terms(truth, work, "a", "a:w", 32, "compute", gpu).values())
        rows.append((work, "a", "a:w", 32, "compute", y, gpu))
    params = kernelstep.fit(rows)
    assert params["gpu_scale"]["slow"] / params["gpu_scale"]["fast"] == pytest.approx(2.0, rel=0.1)
    work = {"kernel_s": 0.1, "optimizer_s": 0.0, "launches": 100.0}
    unseen = kernelstep.predict_terms(params, work, "a", "a:w", 32, "compute", "never-measured")
    assert unseen == kernelstep.predict_terms(params, work, "a", "a:w", 32, "compute")
    slow = kernelstep.predict_terms(params, work, "a", "a:w", 32, "compute", "slow")["gpu"]
    fast = kernelstep.predict_terms(params, work, "a", "a:w", 32, "compute", "fast")["gpu"]
    assert fast < unseen["gpu"] < slow  # unseen GPUs get the shared fit alone


def _job(**kw) -> Job:
    base = {"id": "j", "model": "resnet50", "batch_size": 64, "total_iterations": 1.0}
    return Job(**(base | kw))


def test_predictor_kernel_path_scopes_and_freezing():
    p = DeletePopStepTime(gpu_model="kernels")
    job = _job()
    it, comp, fb = (p.step_time_s(job, "v100", scope=s) for s in ("iteration", "compute", "fwd_bwd"))
    assert it >= comp >= fb > 0
    assert p.step_time_s(job, "v100", freeze_level=5) < comp + (it - comp)
    assert p.step_time_s(job, "a100") < p.step_time_s(job, "k80")
    two = p.breakdown(job, "v100", 2)
    assert two.comm_s > 0 and two.step_time_s > p.breakdown(job, "v100", 1).step_time_s


def test_predictor_kernel_path_errors_are_one_line():
    with pytest.raises(ValidationError, match="gpu_model"):
        DeletePopStepTime(gpu_model="flops").step_time_s(_job(), "v100")
    no_block = {k: v for k, v in DeletePopStepTime().factors.items() if k != "kernel_step"}
    with pytest.raises(ValidationError, match="fit-kernel-step"):
        DeletePopStepTime(factors=no_block, gpu_model="kernels").step_time_s(_job(), "v100")


def test_math_modes_amp_is_faster_on_tensor_cores():
    p = DeletePopStepTime(gpu_model="kernels")
    fp32 = p.step_time_s(_job(), "a100", scope="fwd_bwd")
    amp = p.step_time_s(_job(amp=True), "a100", scope="fwd_bwd")
    assert amp < fp32
    assert not math.isnan(amp)


def test_cli_fit_kernel_step_then_predict_with_it(capsys, tmp_path):
    import json

    from dltsched.engine.app.cli.main import main

    rows = tmp_path / "rows.csv"
    lines = ["model,gpu,batch_size,num_gpus,step_time_s,scope,source"]
    for gpu, speed in (("v100", 1.0), ("p100", 1.6), ("k80", 4.0)):
        lines += [f"resnet50,{gpu},{b},1,{speed * (0.01 + 0.0015 * b):.5f},iteration,lab"
                  for b in (16, 32, 64)]
    rows.write_text("\n".join(lines) + "\n")
    out = tmp_path / "factors.json"
    assert main(["predict", "fit-kernel-step", str(rows), "--output", str(out), "--json"]) == 0
    fitted = json.loads(out.read_text())["kernel_step"]
    assert (fitted["fitted_on"] == ["lab:k80", "lab:p100", "lab:v100"]
            and "lab:resnet50/imagenet:0" in fitted["scale"])
    capsys.readouterr()
    code = main(["predict", "step-time", "--model", "resnet50", "--gpu", "v100", "--batch-size", "32",
                 "--gpu-model", "kernels", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["step_time_s"] >= data["compute_s"] > 0
    predictor = DeletePopStepTime(factors=json.loads(out.read_text()), gpu_model="kernels", host_source="lab")
    predicted = predictor.step_time_s(_job(batch_size=32), "v100")
    assert predicted == pytest.approx(0.01 + 0.0015 * 32, rel=0.25)  # in-sample: the fit reproduces its rows
    assert main(["predict", "fit-kernel-step", str(rows), "--json"]) == 2  # neither --output nor --overwrite
