"""Optional NVML access: GPU name, driver, memory and a utilisation sampler thread.

NVML comes from ``nvidia-ml-py`` (``import pynvml``), an optional dependency. Without it, or
without an NVIDIA driver, every value here is ``None`` (JSON ``null``, CSV ``nan``).
The device is the first entry of ``CUDA_VISIBLE_DEVICES`` when it is a number, else NVML index 0.

Utilisation. NVML's ``nvmlDeviceGetUtilizationRates`` is itself an average over a sample period of 1/6 s
to 1 s depending on the GPU, so polling it during a short window reads what the GPU did before the window.
:class:`UtilSampler` therefore reads NVML's timestamped samples (``nvmlDeviceGetSamples`` with
``NVML_GPU_UTILIZATION_SAMPLES``; timestamps in microseconds of the host's wall clock) and keeps only
those whose whole period lies inside the window (``util_source`` ``nvml_samples``). Where the GPU or driver
does not support the call, or no sample falls inside the window, it falls back to the mean of the polled
rates (``util_source`` ``polled``).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

#: ``util_source`` values: utilisation from NVML samples inside the window, or the polled mean
UTIL_SOURCES = ("nvml_samples", "polled")


def nvml() -> ModuleType | None:
    """The initialised ``pynvml`` module, or ``None`` when it or the driver is missing."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    return pynvml


def _handle(lib: ModuleType) -> Any:
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return lib.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def gpu_info() -> dict[str, Any]:
    """NVML's GPU name, driver version and total memory (MiB); ``None`` values without NVML."""
    lib = nvml()
    if lib is None:
        return {"nvml_gpu_name": None, "driver": None, "gpu_memory_total_mib": None}
    handle = _handle(lib)
    return {"nvml_gpu_name": _text(lib.nvmlDeviceGetName(handle)),
            "driver": _text(lib.nvmlSystemGetDriverVersion()),
            "gpu_memory_total_mib": lib.nvmlDeviceGetMemoryInfo(handle).total / 2**20}


def now_us() -> int:
    """The host's wall clock in microseconds, the clock of NVML's sample timestamps."""
    return int(time.time() * 1e6)


_VALUE_FIELDS = (("NVML_VALUE_TYPE_DOUBLE", "dVal"), ("NVML_VALUE_TYPE_UNSIGNED_INT", "uiVal"),
                 ("NVML_VALUE_TYPE_UNSIGNED_LONG", "ulVal"), ("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "ullVal"),
                 ("NVML_VALUE_TYPE_SIGNED_LONG_LONG", "sllVal"))


def _sample_value(lib: ModuleType, value_type: int, sample: Any) -> float:
    """A sample's value from NVML's value union, by the value type the call returned."""
    for constant, field in _VALUE_FIELDS:
        if getattr(lib, constant, None) == value_type:
            return float(getattr(sample.sampleValue, field))
    return float(sample.sampleValue.uiVal)  # utilisation samples are unsigned ints


def samples_in_window(samples: Sequence[tuple[int, float]], start_us: int,
                      end_us: int) -> tuple[list[float], float]:
    """The values of ``samples`` (timestamp µs, value) whose whole averaging period lies in
    ``[start_us, end_us]``, and the seconds those periods cover.

    A sample's timestamp ends its period; the period starts at the previous sample's timestamp. The first
    sample seen has no predecessor, so its period is taken as the median gap between samples (it is kept
    only when that is known).
    """
    ordered = sorted(dict(samples).items())
    gaps = [b[0] - a[0] for a, b in zip(ordered, ordered[1:], strict=False) if b[0] > a[0]]
    typical = statistics.median(gaps) if gaps else None
    kept: list[float] = []
    covered_us = 0.0
    for i, (stamp, value) in enumerate(ordered):
        begin = ordered[i - 1][0] if i else (stamp - typical if typical is not None else None)
        if begin is not None and begin >= start_us and stamp <= end_us:
            kept.append(value)
            covered_us += stamp - begin
    return kept, covered_us / 1e6


class UtilSampler:
    """Context manager sampling GPU utilisation (%) and used memory (MiB) every ``period_s``.

    The window runs from :meth:`start` (default: entering) to leaving; :meth:`hold` keeps it open until it
    is long enough for NVML's sample period. ``clock_us``: the host clock in µs (tests pass a fake).
    """

    def __init__(self, period_s: float = 0.05, clock_us: Callable[[], int] = now_us) -> None:
        self.period_s = period_s
        self._clock = clock_us
        self._lib = nvml()
        self._util_pct: list[float] = []
        self._used_mib: list[float] = []
        self._total_mib: float | None = None
        self._samples: dict[int, float] = {}
        self._samples_ok = True  # until NVML says the call is unsupported
        self._last_seen_us = 0
        self.start_us: int | None = None
        self.end_us: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> UtilSampler:
        if self._lib is not None:
            self._handle = _handle(self._lib)
            self.start()
            self._last_seen_us = self.start_us or 0
            # ask from a little before the window, so the first sample inside has its predecessor
            self._last_seen_us = max(0, self._last_seen_us - 2_000_000)
            self._thread.start()
        return self

    @property
    def sampling(self) -> bool:
        """Whether NVML is there to sample (on a CPU, or without the NVML library, there is no window to
        hold open)."""
        return self._lib is not None

    def start(self) -> None:
        """Mark the start of the window now (e.g. when the timed windows begin)."""
        self.start_us = self._clock()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._lib is not None:
            self.end_us = self._clock()
            self._fetch_samples()

    def _fetch_samples(self) -> None:
        """Add NVML's utilisation samples newer than the last seen; mark the call unsupported on error."""
        lib = self._lib
        if lib is None or not self._samples_ok:
            return
        try:
            value_type, samples = lib.nvmlDeviceGetSamples(self._handle, lib.NVML_GPU_UTILIZATION_SAMPLES,
                                                           self._last_seen_us)
        except AttributeError:
            self._samples_ok = False
            return
        except lib.NVMLError as err:
            if getattr(lib, "NVML_ERROR_NOT_FOUND", None) is not None \
                    and getattr(err, "value", None) == lib.NVML_ERROR_NOT_FOUND:
                return  # no sample newer than the last seen yet
            self._samples_ok = False
            return
        with self._lock:
            for sample in samples:
                stamp = int(sample.timeStamp)
                self._samples[stamp] = _sample_value(lib, value_type, sample)
                self._last_seen_us = max(self._last_seen_us, stamp)

    def _run(self) -> None:
        lib = self._lib
        assert lib is not None
        handle = self._handle
        polls = 0
        while not self._stop.is_set():
            memory = lib.nvmlDeviceGetMemoryInfo(handle)
            self._total_mib = memory.total / 2**20
            self._used_mib.append(memory.used / 2**20)
            self._util_pct.append(float(lib.nvmlDeviceGetUtilizationRates(handle).gpu))
            if polls % 10 == 0:  # NVML keeps a short ring of samples: read it every half second
                self._fetch_samples()
            polls += 1
            self._stop.wait(self.period_s)

    def in_window(self, end_us: int | None = None) -> tuple[list[float], float]:
        """Utilisation samples whose period lies inside the window so far, and the seconds they cover."""
        if self.start_us is None:
            return [], 0.0
        with self._lock:
            samples = list(self._samples.items())
        return samples_in_window(samples, self.start_us, end_us if end_us is not None else self._clock())

    def hold(self, min_window_s: float = 1.0, min_samples: int = 1, max_window_s: float = 3.0,
             sleep: Callable[[float], None] = time.sleep) -> None:
        """Keep the window open until it lasts ``min_window_s`` and (where NVML gives samples) holds
        ``min_samples`` whole sample periods, at most ``max_window_s``; where no sample has come inside the
        window by twice ``min_window_s``, NVML is not sampling and the window closes (the polled fallback).
        Call it while the jobs still run."""
        if self._lib is None or self.start_us is None:
            return
        while True:
            elapsed_s = (self._clock() - self.start_us) / 1e6
            if elapsed_s >= max_window_s:
                return
            if elapsed_s >= min_window_s:
                self._fetch_samples()
                kept = len(self.in_window()[0])
                silent = not kept and elapsed_s >= 2 * min_window_s
                if not self._samples_ok or kept >= min_samples or silent:
                    return
            sleep(self.period_s)

    def summary(self) -> dict[str, Any]:
        """Utilisation (%) with ``util_source``, ``util_samples`` (readings it rests on) and
        ``util_window_s`` (seconds they cover), peak used memory (MiB) and its share of the total (%)."""
        empty = {"gpu_util": None, "util_source": None, "util_samples": None, "util_window_s": None,
                 "gmem_used_mib": None, "gmem_util": None}
        if not self._util_pct or self._total_mib is None:
            return empty
        peak = max(self._used_mib)
        memory = {"gmem_used_mib": peak, "gmem_util": 100.0 * peak / self._total_mib}
        kept, covered_s = self.in_window(self.end_us)
        if kept:
            return {"gpu_util": statistics.fmean(kept), "util_source": "nvml_samples",
                    "util_samples": len(kept), "util_window_s": covered_s, **memory}
        window_s = None if self.start_us is None or self.end_us is None \
            else (self.end_us - self.start_us) / 1e6
        return {"gpu_util": statistics.fmean(self._util_pct), "util_source": "polled",
                "util_samples": len(self._util_pct), "util_window_s": window_s, **memory}
