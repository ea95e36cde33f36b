"""Step-time predictor against the real measurements in the shared data folder."""

from __future__ import annotations

import pytest

from dltsched.predictors.steptime import DeletePopStepTime
from dltsched.predictors.steptime import calibrate as cal
from dltsched.predictors.steptime import measurements as ms

pytestmark = pytest.mark.data


def test_readers_cover_gavel_zeus_and_deepbench(data_dir):
    gavel, zeus = ms.gavel_measurements(data_dir), ms.zeus_measurements(data_dir)
    assert {m.gpu for m in gavel} == {"k80", "p100", "v100"}
    assert {m.gpu for m in zeus} == {"a40", "p100", "rtx6000", "v100"}
    assert all(m.step_time_s > 0 for m in gavel + zeus)
    eff = ms.deepbench_gemm_efficiency(data_dir)
    assert set(eff) >= {"v100", "p100", "t4"} and all(0.2 < v <= 1.0 for v in eff.values())


def test_fit_beats_spec_only_and_loo_runs(data_dir):
    rows = ms.gavel_measurements(data_dir) + ms.zeus_measurements(data_dir)
    factors = cal.fit(rows, ms.deepbench_gemm_efficiency(data_dir))
    fitted = cal.evaluate(DeletePopStepTime(factors=factors), rows)
    loo = cal.leave_one_gpu_out(rows, ms.zeus_measurements(data_dir), ms.deepbench_gemm_efficiency(data_dir))
    assert fitted.n == len(rows) and loo["n"] == len(ms.zeus_measurements(data_dir))
    assert fitted.mape <= loo["mape"] + 1e-9  # holding the GPU out cannot help


def test_csv_round_trip(data_dir, tmp_path):
    rows = ms.zeus_measurements(data_dir)
    path = tmp_path / "zeus.csv"
    assert ms.write_csv(rows, path) == len(rows)
    back = ms.read_csv(path)
    assert [(m.model, m.gpu, m.batch_size) for m in back] == [(m.model, m.gpu, m.batch_size) for m in rows]
