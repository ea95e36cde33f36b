"""Step-time predictor against the real measurements in the shared data folder."""

from __future__ import annotations

import pytest

from dltsched.engine.domain.model import Job
from dltsched.predictors.steptime import DeletePopStepTime
from dltsched.predictors.steptime import calibrate as cal
from dltsched.predictors.steptime import measurements as ms

pytestmark = pytest.mark.data


@pytest.fixture(scope="module")
def train(data_dir):
    """What ``calibrate-steptime`` fits on: Gavel scales 1-8, Zeus and Orion's V100 kernel sums."""
    return [*ms.gavel_measurements(data_dir, max_scale=8), *ms.zeus_measurements(data_dir),
            *ms.orion_measurements(data_dir)]


@pytest.fixture(scope="module")
def efficiency(data_dir):
    return ms.deepbench_kernel_efficiency(data_dir)


@pytest.fixture(scope="module")
def fitted(train, efficiency):
    return DeletePopStepTime(factors=cal.fit(train, efficiency))


def test_readers_cover_gavel_zeus_and_deepbench(data_dir, efficiency):
    gavel, zeus = ms.gavel_measurements(data_dir), ms.zeus_measurements(data_dir)
    assert {m.gpu for m in gavel} == {"k80", "p100", "v100"} and len(gavel) == 78
    assert {m.gpu for m in zeus} == {"a40", "p100", "rtx6000", "v100"}
    assert all(m.step_time_s > 0 for m in gavel + zeus)
    assert set(efficiency) >= {"v100", "p100", "t4"}
    assert set(efficiency["v100"]) == {"gemm", "conv", "lstm"}
    assert all(0.05 < v <= 1.0 for per_kind in efficiency.values() for v in per_kind.values())


def test_orion_rows_are_gpu_time_of_v100_steps(data_dir, fitted):
    # SOURCE.md: ResNet-50 at batch 32 sums to 95.3 ms; MobileNetV2 at 32/64/96 to 40.5/74.9/109.6 ms
    rows = {(m.model, m.batch_size): m for m in ms.orion_measurements(data_dir)}
    assert all(m.gpu == "v100" and m.kernel_time for m in rows.values())
    assert rows[("resnet50", 32)].step_time_s == pytest.approx(0.0953, abs=5e-4)
    assert [rows[("mobilenet_v2", b)].step_time_s for b in (32, 64, 96)] == pytest.approx(
        [0.0405, 0.0749, 0.1096], abs=5e-4)
    # evaluated against the GPU time alone (compute + memory), not the whole step; measured 4.0%
    assert cal.evaluate(fitted, list(rows.values())).mape < 6.0


def test_gavel_multi_gpu_rows_are_per_worker_step_times(data_dir):
    # Gavel's scale-n throughput counts the steps of all n workers: one worker's step is no faster
    # than a single-GPU step of the same batch (median over rows; 1/throughput would make it 2-8x faster)
    rows = ms.gavel_measurements(data_dir, max_scale=8)
    one = {(m.model, m.batch_size, m.gpu): m.step_time_s for m in rows if m.num_gpus == 1}
    ratios = {m.num_gpus: [] for m in rows if m.num_gpus > 1}
    for m in rows:
        if m.num_gpus > 1:
            ratios[m.num_gpus].append(m.step_time_s / one[(m.model, m.batch_size, m.gpu)])
    medians = [sorted(r)[len(r) // 2] for _n, r in sorted(ratios.items())]
    assert sorted(ratios) == [2, 4, 8] and all(1.0 <= r < 3.0 for r in medians)


def test_calibrated_accuracy_nothing_held_out(data_dir, fitted):
    # measured 9.95% (Gavel), 6.5% (Zeus), 18.3% (Gavel scale 2-8); Gavel at issue 3's target of 10%
    gavel = cal.evaluate(fitted, ms.gavel_measurements(data_dir))
    zeus = cal.evaluate(fitted, ms.zeus_measurements(data_dir))
    multi = cal.evaluate(fitted, [m for m in ms.gavel_measurements(data_dir, max_scale=8) if m.num_gpus > 1])
    assert gavel.mape < 10.0 and zeus.mape < 7.5 and multi.mape < 19.5


def test_fitted_efficiencies_are_physical(fitted):
    # on the median GPU, compute groups and memory classes run at 50-100% of the spec sheet;
    # compute-class ops on the memory side of the roofline (depthwise, thin convolutions) reach
    # 25-50% of the bandwidth; a launch costs 5-40 us of CPU (PyTorch's per-op overhead included)
    f = fitted.factors
    theta = f["inverse_efficiency"]
    assert all(1.0 < theta[t] < 2.0 for t in ("conv", "gemm", "rnn", "memory")) and 2.0 < theta["bound"] < 4.0
    assert 5.0 < f["dispatch_us"] < 40.0


def test_leave_one_gpu_out_is_worse_but_bounded(data_dir, train, efficiency, fitted):
    # measured 32.3% (Gavel; 28.1% on Zeus); holding the GPU out cannot help. Knowing each held-out
    # GPU's overall speed (one oracle factor) leaves 27.4%: most of the error is the model's shape
    gavel = ms.gavel_measurements(data_dir)
    loo = cal.leave_one_gpu_out(train, gavel, efficiency)
    assert cal.evaluate(fitted, gavel).mape < loo["mape"] < 35.0
    assert set(loo["per_gpu"]) == {"k80", "p100", "v100"}
    assert loo["oracle_mape"] < 0.9 * loo["mape"]
    assert all(g["oracle_mape"] <= g["mape"] for g in loo["per_gpu"].values())
    # Gavel's Recommendation (Recoder, 48 MFLOP of GEMM per user) transfers to a held-out K80 or
    # P100 (measured 12.4% / 15.6%; 8.1% / 93% when it was modelled as NeuMF); a held-out V100's
    # slow input pipeline (its hosts, per sample) is what no other GPU's rows can tell
    recoder = [r for r in loo["rows"] if r["model"] == "recoder"]
    assert len(recoder) == 15
    for gpu in ("k80", "p100"):
        assert sum(r["ape"] for r in recoder if r["gpu"] == gpu) / 5 < 20.0


def test_recommendation_is_gpu_bound_on_k80_and_input_bound_on_v100(fitted):
    # the autoencoder's two 20,108 x 200 GEMMs dominate a K80 step; V100 hosts feed it too slowly
    job = Job("rec", "Recommendation", 8192, 1, dataset="ml-20m", optimizer="adam")
    k80, v100 = fitted.breakdown(job, "k80"), fitted.breakdown(job, "v100")
    assert k80.compute_s > 0.5 * k80.step_time_s
    assert v100.overhead_s > 0.5 * v100.step_time_s


def test_a_held_out_gpu_leaves_no_trace_in_the_factors(train, efficiency):
    # leave-one-GPU-out fits without any Gavel or Zeus row of the GPU: no multipliers, host speeds or
    # communication terms of it; only its DeepBench kernel efficiencies (microbenchmarks) remain
    factors = cal.fit([m for m in train if m.gpu != "v100"], efficiency)
    assert "v100" not in factors["gpu_efficiency"] and "v100" not in factors.get("per_gpu_comm", {})
    assert all("v100" not in speeds for speeds in factors["host_speed"].values())
    assert not any(label.endswith(":v100") for label in factors["fitted_on"])
    assert set(factors["kernel_efficiency"]["v100"]) == {"gemm", "conv", "lstm"}


def test_csv_round_trip(data_dir, tmp_path):
    rows = ms.zeus_measurements(data_dir)
    path = tmp_path / "zeus.csv"
    assert ms.write_csv(rows, path) == len(rows)
    back = ms.read_csv(path)
    assert [(m.model, m.gpu, m.batch_size) for m in back] == [(m.model, m.gpu, m.batch_size) for m in rows]


def test_calibrate_steptime_reproduces_the_packaged_factors_and_keeps_the_kernel_step_block(
        data_dir, tmp_path):
    import json

    from click.testing import CliRunner

    from dltsched.engine.app.cli.main import cli
    from dltsched.predictors.steptime.model import load_factors

    base = ["predict", "calibrate-steptime", "--data-dir", str(data_dir), "--json"]
    run = CliRunner().invoke(cli, [*base, "--output", str(tmp_path / "f.json")])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["kernel_step"] == "kept"
    # the packaged factors are what the shipped data fits (kernel_step carried, fitted apart): the same keys
    # and
    # strings, numbers equal to a relative 1e-3 (the least-squares fits differ in the fifth digit between BLAS
    # builds and processors)
    _assert_same_factors(json.loads((tmp_path / "f.json").read_text()), load_factors())


def _assert_same_factors(got, want, path="factors"):
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (
            f"{path}: keys {sorted(got)} != {sorted(want)}")
        for key in want:
            _assert_same_factors(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same_factors(g, w, f"{path}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert got == pytest.approx(want, rel=1e-3, abs=1e-6), f"{path}: {got} != {want}"
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


@pytest.mark.slow
def test_calibrate_steptime_with_a_held_out_gpu_leaves_the_kernel_step_block_out(data_dir, tmp_path):
    import json

    from click.testing import CliRunner

    from dltsched.engine.app.cli.main import cli

    # the block was fitted with that GPU's rows: without it every GPU is timed by groups
    held = CliRunner().invoke(cli, ["predict", "calibrate-steptime", "--data-dir", str(data_dir), "--json",
                                    "--hold-out-gpu", "v100", "--output", str(tmp_path / "h.json")])
    assert held.exit_code == 0, held.output
    factors = json.loads((tmp_path / "h.json").read_text())
    assert "kernel_step" not in factors and not any(f.endswith(":v100") for f in factors["fitted_on"])
    assert DeletePopStepTime(factors=factors).gpu_model_for("a100") == "groups"
