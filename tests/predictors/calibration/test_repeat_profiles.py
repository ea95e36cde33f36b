"""A job profiled alone several times: every run's step time and memory kept, its utilisation from the
reading on the most NVML samples; and the H200 profiles shipped in ``instances/data/profiles``."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltsched.predictors.calibration.data import read_datasets, read_folder
from dltsched.predictors.calibration.model import fitted_and_scored_rows
from dltsched.predictors.calibration.rows import IsolatedRow, mean_row, with_best_utilisation
from dltsched.predictors.profiling.dataset import write_dataset

SHIPPED = Path(__file__).resolve().parents[3] / "instances" / "data" / "profiles" / "h200_2026_11_27"


def _row(util: float | None, samples: int | None, step: float = 0.004, model: str = "dcgan") -> IsolatedRow:
    return IsolatedRow(model, "lsun", 64, step, gmem_mib=1900.0, gpu_util=util, util_samples=samples,
                       util_window_s=None if samples is None else samples / 5.0)


def test_the_reading_on_most_samples_gives_the_utilisation() -> None:
    short, other_short, long = _row(69.0, 4), _row(56.0, 5), _row(60.0, 21, step=0.005)
    kept = with_best_utilisation([short, long, other_short])
    assert [r.gpu_util for r in kept] == [None, 60.0, None]
    assert [r.step_time_s for r in kept] == [0.004, 0.005, 0.004]  # step times untouched
    merged = mean_row([short, long, other_short])
    assert merged.gpu_util == 60.0 and merged.util_samples == 21
    assert merged.util_window_s == pytest.approx(4.2)
    assert merged.step_time_s == pytest.approx((0.004 + 0.005 + 0.004) / 3)


def test_ties_and_readings_without_samples_are_averaged() -> None:
    # two readings as long: their mean; older readings (no samples recorded) only where nothing better exists
    tied = mean_row([_row(70.0, 50), _row(69.0, 50), _row(40.0, None)])
    assert tied.gpu_util == pytest.approx(69.5)
    old = mean_row([_row(44.5, None), _row(1.0, None)])
    assert old.gpu_util == pytest.approx(22.75) and old.util_samples is None
    # other jobs are not compared with each other
    kept = with_best_utilisation([_row(10.0, 4, model="a3c"), _row(69.0, 4), _row(60.0, 20)])
    assert [r.gpu_util for r in kept] == [10.0, None, 60.0]


def _profile(folder: Path, util: float, source: str, samples: int, step: float) -> None:
    row = {"model": "dcgan", "dataset": "lsun", "gpu": "h200", "batch_size": 64, "num_gpus": 1,
           "step_time_s": step, "amp": 0, "optimizer": "sgd", "peak_memory_mib": 340.0, "gpu_util": util,
           "gmem_used_mib": 1920.0, "scope": "compute", "n": 100, "step_time_ci95_low_s": step * 0.99,
           "step_time_ci95_high_s": step * 1.01, "stop": "precision", "util_source": source,
           "util_samples": samples, "util_window_s": samples / 5.0, "gmem_util": 1.3, "gmem_mib": 1920.0}
    other = {**row, "model": "resnet18", "dataset": "cifar10", "batch_size": 128, "gpu_util": 70.0,
             "step_time_s": 0.010}
    write_dataset(folder, [row, other], [], {"gpu": "h200", "sharing": "timeslice",
                                             "command": "dltsched profile"})


def test_calibration_reads_repeat_folders_once_per_job(tmp_path: Path) -> None:
    _profile(tmp_path / "short", 69.0, "nvml_samples", 4, 0.0036)
    _profile(tmp_path / "long", 60.0, "nvml_samples", 20, 0.0040)
    # a polled reading counts polls, not NVML samples: it never outranks a sampled one
    _profile(tmp_path / "polled", 90.0, "polled", 400, 0.0038)
    assert read_folder(tmp_path / "polled").isolated[0].util_samples is None
    (data,) = read_datasets([tmp_path])
    assert len(data.isolated) == 6  # every run kept
    dcgan = [r for r in data.isolated if r.model == "dcgan"]
    assert sorted(r.gpu_util for r in dcgan if r.gpu_util is not None) == [60.0]
    merged = data.isolated_by_key()[("dcgan", "lsun", 64, False)]
    assert merged.gpu_util == 60.0 and merged.step_time_s == pytest.approx((0.0036 + 0.0040 + 0.0038) / 3)
    fitted, scored = fitted_and_scored_rows([data], "timeslice")
    assert len(fitted) == 6 and len(scored) == 2  # fitted on every run, scored once per job
    # each job its one reading on 20 samples (resnet18 too: its runs share the folders' windows)
    assert sorted(r.gpu_util for r in fitted if r.gpu_util is not None) == [60.0, 70.0]
    assert {r.model: r.gpu_util for r in scored} == {"dcgan": 60.0, "resnet18": 70.0}


def test_the_shipped_h200_profiles_read_with_long_windows() -> None:
    folders = sorted(p.name for p in SHIPPED.iterdir() if p.is_dir())
    assert folders == ["alone", "long1", "long2", "repeat"]
    assert (SHIPPED / "SOURCE.md").is_file()
    (data,) = read_datasets([SHIPPED])
    assert (data.gpu, data.sharing, len(data.isolated), len(data.groups)) == ("h200", "timeslice", 37, 0)
    jobs = data.isolated_by_key()
    assert len(jobs) == 16
    # the seven short-step jobs read from their long windows; the others had one run each
    short = {"a3c", "dcgan", "lstm_lm", "neumf", "pointnet", "resnet18", "vgg16"}
    assert all(r.util_samples is not None and r.util_samples >= 12 and r.util_window_s >= 2.4
               for k, r in jobs.items() if k[0] in short)
    assert all(r.gpu_util is not None and 1.0 < r.gpu_util <= 100.0 for r in jobs.values())


@pytest.mark.data
def test_beside_the_shared_folder_each_job_takes_its_long_window_reading(data_dir: Path) -> None:
    from dltsched.predictors.calibration.model import fit_gpu

    datasets = read_datasets([data_dir / "h200", SHIPPED])
    timeslice = next(d for d in datasets if d.sharing == "timeslice")
    jobs = {k[0]: (k, r) for k, r in timeslice.isolated_by_key().items()}
    assert len(jobs) == 16
    key, dcgan = jobs["dcgan"]
    # read 44.5% over 0.1 s on 2026-11-26; 59.2% over 4 s (21 samples) on 2026-11-27
    assert dcgan.gpu_util == pytest.approx(59.19, abs=0.01) and dcgan.util_samples == 21
    runs = [r.step_time_s for r in timeslice.isolated if r.key == key]
    assert len(runs) == 5 and dcgan.step_time_s == pytest.approx(sum(runs) / 5)  # both days' runs
    cal = fit_gpu(datasets, with_groups=False)
    util, source = cal.util_pct(key)
    assert source == "measured" and util == pytest.approx(59.19, abs=0.01)
