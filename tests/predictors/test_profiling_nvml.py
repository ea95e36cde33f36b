"""NVML utilisation of a profiled window: timestamped samples inside the window, the polled fallback, the hold
that makes the window long enough, and the dataset columns that record it (with a fake ``pynvml``)."""

from __future__ import annotations

import csv
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from dltsched.predictors.profiling import nvml as nv
from dltsched.predictors.profiling.dataset import write_dataset

T0 = 1_700_000_000_000_000  # µs, the window's start
PERIOD = 166_667  # µs, 1/6 s


class _Err(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def _fake_pynvml(samples: Any, rate: float = 90.0) -> types.ModuleType:
    """A fake ``pynvml``: ``samples(last_seen_us)`` gives (timestamp µs, value) pairs or raises ``_Err``."""
    lib = types.ModuleType("pynvml")
    lib.NVMLError = _Err
    lib.NVML_ERROR_NOT_SUPPORTED, lib.NVML_ERROR_NOT_FOUND = 3, 6
    lib.NVML_GPU_UTILIZATION_SAMPLES = 1
    lib.NVML_VALUE_TYPE_DOUBLE, lib.NVML_VALUE_TYPE_UNSIGNED_INT = 0, 1
    lib.nvmlInit = lambda: None
    lib.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    lib.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 * 2**30, used=8 * 2**30)
    lib.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=rate)

    def get_samples(handle: Any, kind: int, last_seen: int) -> tuple[int, list[Any]]:
        assert kind == lib.NVML_GPU_UTILIZATION_SAMPLES
        got = [types.SimpleNamespace(timeStamp=t, sampleValue=types.SimpleNamespace(uiVal=int(v), dVal=-1.0))
               for t, v in samples(last_seen) if t > last_seen]
        if not got:
            raise _Err(lib.NVML_ERROR_NOT_FOUND)
        return lib.NVML_VALUE_TYPE_UNSIGNED_INT, got

    lib.nvmlDeviceGetSamples = get_samples
    return lib


class _Clock:
    def __init__(self) -> None:
        self.us = T0

    def __call__(self) -> int:
        return self.us

    def sleep(self, seconds: float) -> None:
        self.us += int(seconds * 1e6)


# samples every 1/6 s: idle before the window (0), one straddling the start (77, half idle), 40/60 inside,
# one after the end (99)
WINDOW = [(T0 - 2 * PERIOD, 0), (T0 - PERIOD // 3, 0), (T0 + 2 * PERIOD // 3, 77),
          *((T0 + 2 * PERIOD // 3 + k * PERIOD, 40 if k % 2 else 60) for k in range(1, 7)),
          (T0 + 2 * PERIOD // 3 + 7 * PERIOD, 99)]
END = T0 + 2 * PERIOD // 3 + 6 * PERIOD + 1000  # just after the last 40/60 sample


def _sampler(monkeypatch: pytest.MonkeyPatch, lib: types.ModuleType, clock: _Clock) -> nv.UtilSampler:
    monkeypatch.setitem(sys.modules, "pynvml", lib)
    return nv.UtilSampler(period_s=0.001, clock_us=clock)


def test_samples_in_window_keep_only_whole_periods() -> None:
    kept, covered = nv.samples_in_window(WINDOW, T0, END)
    assert kept == [40, 60, 40, 60, 40, 60]  # not the idle ones, not the straddling 77, not the later 99
    assert covered == pytest.approx(6 * PERIOD / 1e6)
    # the first sample seen has no predecessor: its period is the median gap, so it counts when inside
    first_inside = [s for s in WINDOW if s[0] > T0 + PERIOD]
    assert nv.samples_in_window(first_inside, T0, END)[0] == [40, 60, 40, 60, 40, 60]
    assert nv.samples_in_window(WINDOW[:1], T0 - 10 * PERIOD, END) == ([], 0.0)  # one sample, no period


def test_sampler_reads_samples_inside_the_window_not_the_stale_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    lib = _fake_pynvml(lambda last: [s for s in WINDOW if s[0] <= clock.us], rate=90.0)
    with _sampler(monkeypatch, lib, clock) as sampler:
        clock.us = END
    out = sampler.summary()
    assert out["util_source"] == "nvml_samples"
    assert out["gpu_util"] == pytest.approx(50.0)  # the polled rate says 90, the straddling sample 77
    assert out["util_samples"] == 6 and out["util_window_s"] == pytest.approx(1.0, abs=1e-3)
    assert out["gmem_used_mib"] == pytest.approx(8 * 1024) and out["gmem_util"] == pytest.approx(10.0)


def test_sampler_falls_back_to_the_polled_mean_where_samples_are_unsupported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    calls = []

    def unsupported(last: int) -> list[tuple[int, int]]:
        calls.append(last)
        raise _Err(3)

    with _sampler(monkeypatch, _fake_pynvml(unsupported, rate=70.0), clock) as sampler:
        clock.us = T0 + 1_500_000
    out = sampler.summary()
    assert out["util_source"] == "polled" and out["gpu_util"] == pytest.approx(70.0)
    assert out["util_samples"] >= 1 and out["util_window_s"] == pytest.approx(1.5)
    assert len(calls) == 1  # once NVML says unsupported it is not asked again


def test_sampler_falls_back_when_no_sample_lies_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    before = [s for s in WINDOW if s[0] < T0]
    with _sampler(monkeypatch, _fake_pynvml(lambda last: before, rate=30.0), clock) as sampler:
        clock.us = T0 + 200_000
    out = sampler.summary()
    assert out["util_source"] == "polled" and out["gpu_util"] == pytest.approx(30.0)


def test_no_nvml_gives_no_utilisation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with nv.UtilSampler() as sampler:
        sampler.hold(sleep=lambda s: pytest.fail("no NVML: nothing to wait for"))
    assert sampler.summary() == {"gpu_util": None, "util_source": None, "util_samples": None,
                                 "util_window_s": None, "gmem_used_mib": None, "gmem_util": None}


def _ticking(clock: _Clock, start: int) -> Any:
    """Samples every 1/6 s from ``start`` up to the clock's now, value 50."""
    return lambda last: [(t, 50) for t in range(start, clock.us + 1, PERIOD)]


def test_hold_keeps_the_window_open_for_a_second_and_a_whole_period(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    sampler = _sampler(monkeypatch, _fake_pynvml(_ticking(clock, T0 - PERIOD // 2)), clock)
    with sampler:
        sampler.hold(1.0, max_window_s=3.0, sleep=clock.sleep)
        held_s = (clock.us - T0) / 1e6
    assert 1.0 <= held_s < 1.1
    out = sampler.summary()
    assert out["util_source"] == "nvml_samples" and out["util_samples"] >= 5
    assert out["util_window_s"] <= held_s


def test_hold_waits_for_a_slow_gpus_first_whole_period(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    # a 1 s sample period, samples half-way between seconds: the period ending at 0.5 s began before the
    # window, so the first whole one ends at 1.5 s
    slow = lambda last: [(t, 50) for t in range(T0 - 500_000, clock.us + 1, 1_000_000)]  # noqa: E731
    sampler = _sampler(monkeypatch, _fake_pynvml(slow), clock)
    with sampler:
        sampler.hold(1.0, max_window_s=3.0, sleep=clock.sleep)
        held_s = (clock.us - T0) / 1e6
    assert 1.5 <= held_s < 1.6 and sampler.summary()["util_samples"] == 1


def test_hold_gives_up_at_the_cap_or_without_samples_and_waits_for_a_slow_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    sampler = _sampler(monkeypatch, _fake_pynvml(lambda last: []), clock)  # supported, never a sample
    with sampler:
        sampler.hold(1.0, max_window_s=1.5, sleep=clock.sleep)
        assert 1.5 <= (clock.us - T0) / 1e6 < 1.6  # the cap comes first
    clock = _Clock()
    sampler = _sampler(monkeypatch, _fake_pynvml(lambda last: []), clock)
    with sampler:
        sampler.hold(1.0, max_window_s=3.0, sleep=clock.sleep)
        assert 2.0 <= (clock.us - T0) / 1e6 < 2.1  # no sample by twice the minimum: NVML is not sampling
    # asked for 15 samples over 3 s of a 30 s cap: with none by 6 s, NVML is not sampling
    clock = _Clock()
    sampler = _sampler(monkeypatch, _fake_pynvml(lambda last: []), clock)
    with sampler:
        sampler.hold(3.0, min_samples=15, max_window_s=30.0, sleep=clock.sleep)
        assert 6.0 <= (clock.us - T0) / 1e6 < 6.1
    # a slow GPU (one sample a second) that does sample is waited for up to its 15th whole period
    clock = _Clock()
    slow = lambda last: [(t, 50) for t in range(T0 - 500_000, clock.us + 1, 1_000_000)]  # noqa: E731
    sampler = _sampler(monkeypatch, _fake_pynvml(slow), clock)
    with sampler:
        sampler.hold(3.0, min_samples=15, max_window_s=30.0, sleep=clock.sleep)
        assert 15.5 <= (clock.us - T0) / 1e6 < 15.6 and sampler.summary()["util_samples"] == 15
    clock = _Clock()

    def unsupported(last: int) -> list[tuple[int, int]]:
        raise _Err(3)

    sampler = _sampler(monkeypatch, _fake_pynvml(unsupported), clock)
    with sampler:
        sampler.hold(1.0, max_window_s=3.0, sleep=clock.sleep)
        assert 1.0 <= (clock.us - T0) / 1e6 < 1.1


# ---- dataset columns and their readers, new files and files written before the columns existed ----

def _rows(util: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    extra = {"util_source": "nvml_samples", "util_samples": 7, "util_window_s": 1.17} if util else {}
    isolated = [{"model": m, "dataset": d, "gpu": "h200", "batch_size": b, "num_gpus": 1, "step_time_s": t,
                 "amp": 0, "optimizer": "sgd", "peak_memory_mib": 500.0, "gpu_util": u,
                 "gmem_used_mib": 900.0, "scope": "compute", "n": 40, "step_time_ci95_low_s": t * 0.99,
                 "step_time_ci95_high_s": t * 1.01, "stop": "precision", "gmem_util": 0.6, "gmem_mib": 900.0,
                 **extra}
                for m, d, b, t, u in (("resnet18", "cifar10", 128, 0.010, 90.0),
                                      ("lstm_lm", "wikitext2", 20, 0.020, 40.0))]
    jobs = [{"model": r["model"], "dataset": r["dataset"], "batch_size": r["batch_size"], "amp": 0,
             "speed": s} for r, s in zip(isolated, (0.6, 0.7), strict=True)]
    groups = [{"group": "resnet18:128+lstm_lm:20", "jobs": jobs, "gpu": "h200", "sharing": "timeslice",
               "gpu_util": 95.0, "gmem_util": 1.2, "gmem": 1800.0, "gmem_source": "nvml", **extra}]
    return isolated, groups


def _strip(folder: Path) -> None:
    """Rewrite the CSVs of ``folder`` without the utilisation-window columns (a file from before them)."""
    for path in folder.glob("*.csv"):
        with path.open() as fh:
            rows = list(csv.reader(fh))
        drop = {i for i, name in enumerate(rows[0]) if name.startswith("util_")}
        assert drop, path  # the new writer wrote them
        path.write_text("".join(",".join(c for i, c in enumerate(r) if i not in drop) + "\n" for r in rows))


@pytest.mark.parametrize("old", [False, True], ids=["new", "old"])
def test_dataset_records_the_window_and_readers_read_old_and_new(tmp_path: Path, old: bool) -> None:
    from dltsched.predictors.colocation.samples import read_lucid_samples
    from dltsched.predictors.steptime.measurements import read_csv

    isolated, groups = _rows(util=True)
    write_dataset(tmp_path, isolated, groups,
                  {"gpu": "h200", "sharing": "timeslice", "command": "dltsched profile"})
    with (tmp_path / "steptime.csv").open() as fh:
        steptime = list(csv.DictReader(fh))
    assert [r["util_source"] for r in steptime] == ["nvml_samples"] * 2 and steptime[0]["util_samples"] == "7"
    with (tmp_path / "colocate_info.csv").open() as fh:
        assert next(csv.DictReader(fh))["util_window_s"] == "1.17"
    if old:
        _strip(tmp_path)
    rows = read_csv(tmp_path / "steptime.csv")
    assert [(m.model, m.batch_size, m.step_time_s) for m in rows] == [("resnet18", 128, 0.010),
                                                                     ("lstm_lm", 20, 0.020)]
    data = read_lucid_samples(tmp_path / "colocate_info.csv")
    sample = data.samples[0]
    assert len(data) == 1
    assert dict(zip((j.model for j in sample.jobs), sample.speeds, strict=True)) == {"resnet18": 0.6,
                                                                                  "lstm_lm": 0.7}
    assert len(data.isolated) == 2
    from dltsched.predictors.calibration.data import read_folder

    for reader in ("groups.json", "csv"):  # calibration reads groups.json, or the CSVs without it
        if reader == "csv":
            (tmp_path / "groups.json").unlink()
        profile = read_folder(tmp_path)
        assert (profile.gpu, profile.sharing) == ("h200", "timeslice"), reader
        assert sorted(r.step_time_s for r in profile.isolated) == pytest.approx([0.010, 0.020]), reader
        assert len(profile.groups) == 1, reader


def test_rows_without_a_utilisation_window_write_nan(tmp_path: Path) -> None:
    isolated, groups = _rows(util=False)  # as a session without NVML, or rows built before the fields existed
    write_dataset(tmp_path, isolated, groups, {"gpu": "h200"})
    with (tmp_path / "single_data.csv").open() as fh:
        row = next(csv.DictReader(fh))
    assert (row["util_source"], row["util_samples"], row["util_window_s"]) == ("nan", "nan", "nan")
    assert json.loads((tmp_path / "groups.json").read_text())["groups"][0]["gpu_util"] == 95.0


# ---- the utilisation window lengthens the timed window of a short-step job (a real worker, on the CPU) ----

def test_a_short_jobs_timed_window_runs_on_until_the_utilisation_window_is_long_enough(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from dltsched.predictors.profiling.colocate import ProfiledJob, WorkerPool
    from dltsched.predictors.profiling.precision import StoppingRule

    period_us = 100_000  # a fake GPU that gives a utilisation sample every 0.1 s of the host's clock
    start = nv.now_us() - 1_000_000
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(
        lambda last: [(t, 60) for t in range(start, nv.now_us() + 1, period_us)]))
    rule = StoppingRule(min_steps=3, precision=None, max_window_s=5.0)  # alone: three steps of a few ms
    with WorkerPool(1, "cpu", timeout_s=120.0) as pool:
        run = pool.measure((ProfiledJob("neumf", 8),), warmup=1, steps=rule, util_window_s=0.8,
                           util_samples=10)
    (job,) = run.runs
    timed_s = sum(job.step_times_s)
    assert len(job.step_times_s) > 3 and timed_s >= 0.5  # timed on well past the rule's three steps
    assert run.nvml["util_source"] == "nvml_samples" and run.nvml["gpu_util"] == pytest.approx(60.0)
    assert run.nvml["util_samples"] >= 10 and run.nvml["util_window_s"] >= 0.8
    # the samples lie inside the timed window (plus the moment the result takes to come back)
    assert run.nvml["util_window_s"] <= timed_s + 0.3
