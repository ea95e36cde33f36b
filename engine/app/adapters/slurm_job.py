"""A training job that reports its progress to ``dltsched slurm``: real training steps of a zoo model (the
profiling harness's :func:`~dltsched.predictors.profiling.harness.build_training`), with its iterations done
and its measured speed written to a progress file the daemon reads each round.

Run it as a Slurm job's command::

    sbatch --hold -p dltsched --gres=gpu:1 --comment "dltsched:model=neumf,batch=64,iters=600,step_s=0.1" \\
        --wrap "python -m dltsched.engine.app.adapters.slurm_job --model neumf --batch 64 --iters 600 \\
                --progress /shared/dltsched-progress"

The progress protocol. Each job owns one file, ``<folder>/<SLURM_JOB_ID>.json``, replaced atomically (a reader
sees the old record or the new one whole, never a torn one)::

    {"job": "42", "iterations": 310, "total": 600, "checkpoint": 300, "step_s": 0.1012, "time": 1764180000.5}

``iterations`` are done so far, ``total`` the job's length, ``checkpoint`` the iterations a restart resumes
from, ``step_s`` the median wall seconds per step over the last steps (its real speed), ``time`` when the
record was written (Unix seconds). The job writes a record when it starts (at its checkpoint), then at
least every ``--report-every`` seconds, and a last one when it finishes.

Checkpoints: every ``--checkpoint-every`` seconds, and at once on ``SIGUSR1`` (what the daemon sends before
it requeues a preempted job), the job records its iterations as its checkpoint. Requeued, it starts again
from that count. Only the count is kept: the model's weights are the harness's random start each time.

``--pace`` makes each step last at least that many seconds (the job waits out the rest): the step time of
the GPU the job stands for, on a machine whose CPU is much slower than that GPU. The step's compute is
real; when it takes longer than the pace (a loaded CPU), the job is slower, and its record says so.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from dltsched.engine.domain.errors import ValidationError, write_atomically

#: the largest progress record read (bytes); a longer file is not a record
MAX_RECORD_BYTES = 4096
#: steps over which the reported speed is the median
SPEED_WINDOW = 20


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    """One job's progress, as its file holds it.

    Parameters
    ----------
    job
        The Slurm job id.
    iterations
        Iterations done so far (since the job's first start, restarts resuming from ``checkpoint``).
    total
        The job's length in iterations.
    checkpoint
        Iterations a restart resumes from.
    step_s
        Measured wall seconds per step (median of the last steps); ``None`` before the first step.
    time
        When the record was written, Unix seconds.
    """

    job: str
    iterations: int
    total: int
    checkpoint: int = 0
    step_s: float | None = None
    time: float = 0.0

    def to_json(self) -> bytes:
        """The record as the file holds it."""
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, text: str | bytes, path: str = "progress") -> ProgressRecord:
        """The record in ``text``; raises :class:`ValidationError` naming the field."""
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as err:
            raise ValidationError(path, f"not JSON ({err})") from None
        if not isinstance(data, dict):
            raise ValidationError(path, "not a JSON object")

        def count(key: str, default: int | None = None) -> int:
            value = data.get(key, default)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValidationError(f"{path}.{key}", f"{value!r} not understood; a number >= 0")
            return int(value)

        step = data.get("step_s")
        if step is not None and (
            isinstance(step, bool)
            or not isinstance(step, int | float)
            or not math.isfinite(step)
            or step <= 0
        ):
            raise ValidationError(f"{path}.step_s", f"{step!r} not understood; seconds > 0, or null")
        stamp = data.get("time", 0.0)
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
            raise ValidationError(f"{path}.time", f"{stamp!r} not understood; Unix seconds")
        return cls(
            job=str(data.get("job", "")),
            iterations=count("iterations"),
            total=count("total"),
            checkpoint=count("checkpoint", 0),
            step_s=None if step is None else float(step),
            time=float(stamp),
        )


def progress_path(folder: str | os.PathLike[str], job_id: str) -> Path:
    """The progress file of job ``job_id`` in ``folder``."""
    if not job_id or not job_id.replace("_", "").isalnum():
        raise ValidationError("job", f"'{job_id}' not understood; a Slurm job id (digits, '_')")
    return Path(folder) / f"{job_id}.json"


def write_progress(folder: str | os.PathLike[str], record: ProgressRecord) -> Path:
    """Replace the job's progress file with ``record``, atomically."""
    return write_atomically(progress_path(folder, record.job), record.to_json())


def read_progress(folder: str | os.PathLike[str], job_id: str) -> ProgressRecord | None:
    """The job's record, or ``None`` when it has none or it cannot be read (a reader never fails on it)."""
    try:
        with progress_path(folder, job_id).open("rb") as f:
            text = f.read(MAX_RECORD_BYTES + 1)
    except (OSError, ValidationError):
        return None
    if len(text) > MAX_RECORD_BYTES:
        return None
    try:
        return ProgressRecord.from_json(text)
    except ValidationError:
        return None


def read_progress_folder(
    folder: str | os.PathLike[str], job_ids: set[str] | None = None
) -> dict[str, ProgressRecord]:
    """Job id -> record, for the readable records in ``folder`` (only ``job_ids`` when given)."""
    root = Path(folder)
    if job_ids is None:
        try:
            job_ids = {p.stem for p in root.glob("*.json") if not p.name.startswith(".")}
        except OSError:
            return {}
    out = {}
    for job_id in sorted(job_ids):
        record = read_progress(root, job_id)
        if record is not None:
            out[job_id] = record
    return out


class ProgressReporter:
    """Counts a job's steps and writes its record: at start, every ``report_every_s``, on checkpoints and at
    the end. ``checkpoint_requested`` is set by the signal handler; the next step boundary records it."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        job_id: str,
        total: int,
        *,
        report_every_s: float = 0.5,
        checkpoint_every_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.folder, self.job_id, self.total, self.clock = Path(folder), job_id, total, clock
        self.report_every_s, self.checkpoint_every_s = report_every_s, checkpoint_every_s
        previous = read_progress(self.folder, job_id)
        self.checkpoint = min(previous.checkpoint, total) if previous is not None else 0
        self.iterations = self.checkpoint
        self.steps: deque[float] = deque(maxlen=SPEED_WINDOW)
        self.checkpoint_requested = False
        self.last_report = self.last_checkpoint = clock()
        self.report()

    @property
    def step_s(self) -> float | None:
        """Median wall seconds per step over the last steps."""
        return statistics.median(self.steps) if self.steps else None

    def report(self) -> None:
        """Write the record now."""
        write_progress(
            self.folder,
            ProgressRecord(
                self.job_id, self.iterations, self.total, self.checkpoint, self.step_s, self.clock()
            ),
        )
        self.last_report = self.clock()

    def step_done(self, seconds: float) -> None:
        """Count one step of ``seconds``; write the record when due (a checkpoint first, when one is due)."""
        self.iterations += 1
        self.steps.append(seconds)
        now = self.clock()
        if (
            self.checkpoint_requested
            or now - self.last_checkpoint >= self.checkpoint_every_s
            or self.iterations >= self.total
        ):
            self.checkpoint, self.checkpoint_requested, self.last_checkpoint = self.iterations, False, now
            self.report()
        elif now - self.last_report >= self.report_every_s:
            self.report()


def run_training(
    step: Callable[[], Any],
    reporter: ProgressReporter,
    *,
    pace_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    """Step until the reporter's total; each step lasts at least ``pace_s``. Returns the iterations done."""
    while reporter.iterations < reporter.total:
        start = clock()
        step()
        spent = clock() - start
        if spent < pace_s:
            sleep(pace_s - spent)
        reporter.step_done(max(spent, pace_s))
    return reporter.iterations


def job_id_from(environ: Mapping[str, str]) -> str:
    """This job's id from Slurm's environment (an array task: ``<array job>_<task>``)."""
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    job = environ.get("SLURM_JOB_ID") or ""
    return job if not (array and task) else f"{array}_{task}"


@click.command("slurm-job")
@click.option("--model", required=True, help="Zoo model id or alias (as the job's comment names it).")
@click.option("--batch", "batch_size", type=click.IntRange(min=1), required=True, help="Batch size.")
@click.option("--iters", "iterations", type=click.IntRange(min=1), required=True, help="Iterations to train.")
@click.option(
    "--progress",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder of progress files (the daemon's --progress-file).",
)
@click.option("--job-id", default=None, help="Job id (default: $SLURM_JOB_ID).")
@click.option(
    "--pace",
    "pace_s",
    type=click.FloatRange(min=0, max=3600),
    default=0.0,
    show_default=True,
    help="Seconds each step lasts at least (the step time of the GPU the job stands for).",
)
@click.option(
    "--checkpoint-every",
    "checkpoint_every_s",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds between checkpoints (and at once on SIGUSR1).",
)
@click.option(
    "--report-every",
    "report_every_s",
    type=click.FloatRange(min=0.05),
    default=0.5,
    show_default=True,
    help="Seconds between progress records.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1, max=256),
    default=1,
    show_default=True,
    help="CPU threads for the training steps.",
)
def main(
    model: str,
    batch_size: int,
    iterations: int,
    folder: Path,
    job_id: str | None,
    pace_s: float,
    checkpoint_every_s: float,
    report_every_s: float,
    threads: int,
) -> None:
    """Train a zoo model for ITERS steps on CPU, reporting progress for ``dltsched slurm``."""
    job = job_id or job_id_from(os.environ)
    if not job:
        raise click.UsageError("--job-id: not given and $SLURM_JOB_ID is not set; run under Slurm or pass it")
    # the handler comes first: a signal during the seconds of imports below must not kill the job
    asked: list[int] = []
    reporter: ProgressReporter | None = None

    def checkpoint_now(signum: int, _frame: Any) -> None:
        asked.append(signum)
        if reporter is not None:
            reporter.checkpoint_requested = True

    signal.signal(signal.SIGUSR1, checkpoint_now)
    import torch

    from dltsched.predictors.profiling.harness import build_training

    torch.set_num_threads(threads)
    try:
        training = build_training(model, None, batch_size, torch.device("cpu"))
    except (KeyError, ValidationError) as err:
        raise click.BadParameter(str(err), param_hint="--model") from None
    reporter = ProgressReporter(
        folder, job, iterations, report_every_s=report_every_s, checkpoint_every_s=checkpoint_every_s
    )
    reporter.checkpoint_requested = bool(asked)
    if reporter.checkpoint:
        click.echo(f"job {job}: resumes at checkpoint {reporter.checkpoint} of {iterations}", err=True)
    done = run_training(training.step, reporter, pace_s=pace_s)
    click.echo(
        f"job {job}: {training.model} batch {batch_size}: {done} iterations, "
        f"{reporter.step_s or 0:.4f} s/step"
    )


if __name__ == "__main__":
    main()
