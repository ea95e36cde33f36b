"""Co-located measurement: 1-3 worker processes train zoo models on one device at the same time.

Each worker builds its model, runs ``warmup`` steps and reports ready; once every worker of the round is ready
the parent sets their start events (the barrier), each times steps until its :class:`~.precision.StoppingRule`
says the median is known well enough (the steady window) and the parent says the utilisation window is long
enough, reports, and keeps training until the parent says stop, so that every job's window overlaps the
others' whole windows. The parent samples NVML utilisation from the start of the windows; since NVML averages
over a sample period of 1/6 s to 1 s and a reading over a few periods does not repeat (the same H200 job read
69% and 56% over 0.8-1 s, within about 4.5% over 2.4-10 s), the timed windows of short-step jobs run on until
the utilisation window lasts at least ``util_window_s`` (:data:`UTIL_WINDOW_S`) and holds ``util_samples``
(:data:`UTIL_SAMPLES`) whole NVML sample periods (:meth:`.nvml.UtilSampler.hold`), never past the rule's
``max_window_s`` (``--max-window``); without NVML (a CPU smoke run) there is no utilisation window and each
job's window ends by its rule alone. The utilisation is thus read while the jobs time their steps, as their
step times are. A group of one job is an isolated run. Workers live in a :class:`WorkerPool` reused across
rounds, so that spawning (and importing torch) is paid once per pool, not per round.
"""

from __future__ import annotations

import multiprocessing as mp
import platform
import queue
import statistics
from dataclasses import dataclass
from typing import Any

from dltsched.engine.domain.errors import DltschedError, ValidationError
from dltsched.predictors.profiling.nvml import UtilSampler
from dltsched.predictors.profiling.precision import StepInterval, StoppingRule, median_interval

#: the shortest utilisation window (s) and the fewest whole NVML sample periods it holds, by default
UTIL_WINDOW_S, UTIL_SAMPLES = 3.0, 15


@dataclass(frozen=True, slots=True, order=True)
class ProfiledJob:
    """A zoo model at a batch size; ``dataset`` ``None`` means the model's default."""

    model: str
    batch_size: int
    dataset: str | None = None

    @property
    def label(self) -> str:
        """``model:batch``, e.g. ``resnet50:64``."""
        return f"{self.model}:{self.batch_size}"


def parse_group(text: str) -> tuple[ProfiledJob, ...]:
    """``"resnet18:64+lstm_lm:20"`` -> jobs (``model:batch_size`` joined by ``+``)."""
    jobs = []
    for part in text.split("+"):
        model, _, batch = part.strip().partition(":")
        if not model or not batch.isdigit() or int(batch) < 1:
            raise ValidationError("groups", f"'{part}' in '{text}' not understood; write model:batch_size, "
                                            "e.g. resnet18:64+lstm_lm:20")
        jobs.append(ProfiledJob(model, int(batch)))
    return tuple(jobs)


@dataclass(frozen=True, slots=True)
class JobRun:
    """One worker's measurement: step times of its steady window (s) and peak CUDA memory (MiB);
    ``stop``: why the window ended (:meth:`StoppingRule.stop_reason`)."""

    job: ProfiledJob
    model: str
    dataset: str
    step_times_s: tuple[float, ...]
    peak_memory_mib: float | None
    device_name: str
    versions: dict[str, str | None]
    stop: str = "steps"

    @property
    def step_time_s(self) -> float:
        """Median step time of the steady window, seconds."""
        return statistics.median(self.step_times_s)

    @property
    def interval(self) -> StepInterval:
        """The median step time's 95% interval."""
        return median_interval(self.step_times_s)


@dataclass(frozen=True, slots=True)
class GroupRun:
    """The runs of jobs that shared the device, with NVML's utilisation summary."""

    runs: tuple[JobRun, ...]
    nvml: dict[str, float | None]


def _versions(torch: Any) -> dict[str, str | None]:
    """Plain strings (``torch.__version__`` would make the parent import torch to unpickle it)."""
    return {"torch": str(torch.__version__), "cuda": torch.version.cuda,
            "cudnn": str(torch.backends.cudnn.version()), "python": platform.python_version(),
            "tf32_matmul": str(torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": str(torch.backends.cudnn.allow_tf32)}


def _measure(index: int, job: ProfiledJob, device: Any, warmup: int, rule: StoppingRule, go: Any, stop: Any,
             results: Any, enough: Any = None) -> None:
    """One task: build, warm up, report ready, wait for go, time the window (past the rule's stop until
    ``enough`` is set, where given), train on until stop."""
    import torch

    from dltsched.predictors.profiling.harness import build_training, peak_memory_mib
    from dltsched.predictors.profiling.precision import time_window

    training = build_training(job.model, job.dataset, job.batch_size, device)
    for _ in range(warmup):
        training.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    results.put((index, "ready", None))
    go.wait()
    keep_open = None if enough is None else (lambda: not enough.is_set())
    times, elapsed_s = time_window(training.timed_step_s, rule, keep_open=keep_open)
    name = torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu"
    results.put((index, "result",
                 JobRun(job, training.model, training.dataset, tuple(times), peak_memory_mib(device),
                                         name, _versions(torch), rule.stop_reason(times, elapsed_s))))
    while not stop.is_set():
        training.step()


def _worker(index: int, device_kind: str, tasks: Any, go: Any, stop: Any, results: Any,
            enough: Any = None) -> None:
    """Worker process body: runs ``(job, warmup, rule)`` tasks until ``None``; errors go to ``results``."""
    import torch

    device = torch.device(device_kind)
    if device.type == "cpu":
        torch.set_num_threads(1)  # co-located CPU smoke workers must not oversubscribe the cores
    while (task := tasks.get()) is not None:
        job, warmup, rule = task
        try:
            _measure(index, job, device, warmup, rule, go, stop, results, enough)
            results.put((index, "done", None))
        except BaseException as err:  # noqa: BLE001 - any failure goes back to the parent
            results.put((index, "error", f"{job.label}: {type(err).__name__}: {err}"))
        if device.type == "cuda":
            torch.cuda.empty_cache()


class WorkerTimeout(DltschedError):
    """A worker sent nothing within the pool's timeout; the pool cannot be trusted after it."""


class WorkerPool:
    """``size`` spawned worker processes on one device, reused for every measurement round.

    Workers started inside an MPS daemon's lifetime are MPS clients; start a new pool per mode.
    """

    def __init__(self, size: int, device_kind: str, timeout_s: float = 600.0) -> None:
        ctx = mp.get_context("spawn")
        self.timeout_s = timeout_s
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(size)]
        self._go = [ctx.Event() for _ in range(size)]
        self._stop = [ctx.Event() for _ in range(size)]
        self._enough = [ctx.Event() for _ in range(size)]
        self._procs = [ctx.Process(target=_worker, daemon=True,
                                   args=(i, device_kind, self._tasks[i], self._go[i], self._stop[i],
                                         self._results, self._enough[i]))
                       for i in range(size)]

    def __enter__(self) -> WorkerPool:
        for proc in self._procs:
            proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for tasks in self._tasks:
            tasks.put(None)
        for proc in self._procs:
            proc.join(timeout=self.timeout_s)
            if proc.is_alive():
                proc.kill()

    def _await(self, indices: range, kind: str, errors: dict[int, str]) -> dict[int, Any]:
        """Messages ``kind`` from every index of ``indices`` not in ``errors`` (errors collected there)."""
        out: dict[int, Any] = {}
        while len(out) + len(errors.keys() & set(indices)) < len(indices):
            try:
                index, got, value = self._results.get(timeout=self.timeout_s)
            except queue.Empty:
                raise WorkerTimeout(f"profile: no '{kind}' from the workers in {self.timeout_s:.0f} s; "
                                    "raise --timeout or lower --steps") from None
            if got == "error":
                errors[index] = value
            elif got == kind:
                out[index] = value
        return out

    def measure(self, jobs: tuple[ProfiledJob, ...], *, warmup: int, steps: int | StoppingRule,
                util_window_s: float = UTIL_WINDOW_S, util_samples: int = UTIL_SAMPLES) -> GroupRun:
        """Run ``jobs`` at the same time (one per worker) and return their runs and NVML summary; ``steps``: a
        fixed count of timed steps, or the rule that ends each job's window; ``util_window_s`` and
        ``util_samples``: the shortest utilisation window and the fewest NVML sample periods in it (the jobs
        time on past the rule's stop until both are reached, at most the rule's ``max_window_s``)."""
        rule = steps if isinstance(steps, StoppingRule) else StoppingRule(min_steps=steps, precision=None)
        workers, errors = range(len(jobs)), dict[int, str]()
        for i, job in enumerate(jobs):
            self._go[i].clear()
            self._stop[i].clear()
            self._enough[i].clear()
            self._tasks[i].put((job, warmup, rule))
        self._await(workers, "ready", errors)
        with UtilSampler() as sampler:
            if not sampler.sampling:  # no utilisation window to hold: each job's window ends by the rule
                for i in workers:
                    self._enough[i].set()
            for i in workers:
                self._go[i].set()
            sampler.start()
            if not errors:
                sampler.hold(min(util_window_s, rule.max_window_s), min_samples=util_samples,
                             max_window_s=rule.max_window_s)
            for i in workers:
                self._enough[i].set()
            runs = self._await(workers, "result", errors) if not errors else {}
        for i in workers:
            self._go[i].set()
            self._stop[i].set()
        self._await(workers, "done", errors)
        if errors:
            raise DltschedError("profile: worker failed: " + "; ".join(errors[i] for i in sorted(errors)))
        return GroupRun(tuple(runs[i] for i in workers), sampler.summary())
