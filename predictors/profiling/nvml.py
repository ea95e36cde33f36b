"""Optional NVML access: GPU name, driver, memory and a utilisation sampler thread.

NVML comes from ``nvidia-ml-py`` (``import pynvml``), an optional dependency. Without it, or
without an NVIDIA driver, every value here is ``None`` (JSON ``null``, CSV ``nan``).
The device is the first entry of ``CUDA_VISIBLE_DEVICES`` when it is a number, else NVML index 0.
"""

from __future__ import annotations

import os
import statistics
import threading
from types import ModuleType
from typing import Any


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


class UtilSampler:
    """Context manager sampling GPU utilisation (%) and used memory (MiB) every ``period_s``."""

    def __init__(self, period_s: float = 0.05) -> None:
        self.period_s = period_s
        self._lib = nvml()
        self._util_pct: list[float] = []
        self._used_mib: list[float] = []
        self._total_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> UtilSampler:
        if self._lib is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        lib = self._lib
        assert lib is not None
        handle = _handle(lib)
        while not self._stop.is_set():
            memory = lib.nvmlDeviceGetMemoryInfo(handle)
            self._total_mib = memory.total / 2**20
            self._used_mib.append(memory.used / 2**20)
            self._util_pct.append(float(lib.nvmlDeviceGetUtilizationRates(handle).gpu))
            self._stop.wait(self.period_s)

    def summary(self) -> dict[str, float | None]:
        """Mean utilisation (%), peak used memory (MiB) and its share of the total (%)."""
        if not self._util_pct or self._total_mib is None:
            return {"gpu_util": None, "gmem_used_mib": None, "gmem_util": None}
        peak = max(self._used_mib)
        return {"gpu_util": statistics.fmean(self._util_pct), "gmem_used_mib": peak,
                "gmem_util": 100.0 * peak / self._total_mib}
