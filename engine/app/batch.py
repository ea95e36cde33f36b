"""``dltsched batch``: solve or simulate many instances (x policies x seeds) in parallel, resumably.

Items run in a local process pool by default, or on a Ray cluster with ``--ray [ADDRESS]`` (Ray is an
optional extra). Each finished item appends one row to ``OUT/results.csv`` (flushed at once); at the end
the table is also written as ``OUT/results.parquet`` when pyarrow is installed. An interrupted batch
resumes: items whose key (instance file hash + mode + policy + predictor bundle + seed) has a row are not
run again. Batches may run at once into one folder: each item runs under a claim (a lock file), so no
item runs twice (see :func:`run_batch`).
"""

from __future__ import annotations

import csv
import fcntl
import glob
import hashlib
import io
import itertools
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from dltsched.engine.app.cli.main import FiniteFloat
from dltsched.engine.domain.errors import DltschedError, ValidationError, write_atomically

log = logging.getLogger(__name__)

MODES = ("simulate", "solve")
#: largest seed (numpy's generators take seeds below 2**32)
MAX_SEED = 2**32 - 1
#: columns of every row, in table order; metric columns absent from a mode stay empty
ID_COLUMNS = ("key", "instance_file", "file_sha256", "instance", "mode", "policy", "predictors", "seed",
              "error")
SIMULATE_COLUMNS = ("num_jobs", "num_gpus", "num_jobs_finished", "avg_jct_s", "median_jct_s", "p95_jct_s",
                    "p99_jct_s", "makespan_s", "avg_queueing_s", "gpu_util", "ftf_mean", "ftf_max",
                    "num_preemptions", "num_oom", "num_rounds", "decision_time_mean_s", "truth",
                    "truth_sources")
SOLVE_COLUMNS = ("status", "backend", "objective", "bound", "gap", "num_placed", "solve_time_s",
                 "build_time_s")
#: columns that measure time on this machine: they differ between runs and are not compared
TIMING_COLUMNS = ("decision_time_mean_s", "solve_time_s", "build_time_s", "item_wall_s")
COLUMNS = ID_COLUMNS + SIMULATE_COLUMNS + SOLVE_COLUMNS + ("item_wall_s",)
#: the columns of a table written before the ground truth had its columns: such a table is read and rewritten
EARLIER_COLUMNS = tuple(c for c in COLUMNS if c not in ("truth", "truth_sources"))
RESULTS_CSV = "results.csv"
RESULTS_PARQUET = "results.parquet"
#: folder of the claim files of items being run (see :func:`run_batch`)
CLAIMS_DIR = "claims"


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One unit of work: ``mode`` on one instance file with one policy (or backend) and seed."""

    instance_file: str
    file_sha256: str
    mode: str
    policy: str
    seed: int
    time_limit_s: float = 10.0
    predictors: str = "default"

    @property
    def key(self) -> str:
        """The item's identity in the result table: file digest, mode, policy, predictors and seed."""
        return f"{self.file_sha256[:16]}:{self.mode}:{self.policy}:{self.predictors}:{self.seed}"


def file_sha256(path: Path) -> str:
    """SHA-256 of an instance file, read within the ``max_input_mib`` cap."""
    from dltsched.engine.domain.limits import read_limited

    return hashlib.sha256(read_limited(path, str(path), text=False)).hexdigest()


def discover(spec: str) -> list[Path]:
    """Instance files named by ``spec``: a folder (its ``*.json``), a glob, or one file; sorted."""
    path = Path(spec)
    if path.is_dir():
        found = sorted(path.glob("*.json"))
    elif path.is_file():
        found = [path]
    else:
        found = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
    if not found:
        raise ValidationError("DIR|GLOB",
                              f"'{spec}' names no instance files; give a folder of *.json or a glob")
    return found


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-4"`` -> 0..4, ``"1,5,9"`` -> those; mixed: ``"0-2,7"``. Seeds are integers in [0, 2**32 - 1]; at
    most ``max_seeds`` of them (:mod:`dltsched.engine.domain.limits`), counted before any is listed."""
    from dltsched.engine.domain.limits import LIMITS

    cap = int(LIMITS["max_seeds"].value())
    ranges: list[tuple[int, int]] = []
    total = 0
    try:
        for part in text.split(","):
            lo_text, sep, hi_text = part.strip().partition("-")
            if len(lo_text) > 12 or len(hi_text) > 12:
                raise ValueError
            lo = int(lo_text)
            hi = int(hi_text) if sep else lo
            if not 0 <= lo <= hi <= MAX_SEED:
                raise ValueError
            ranges.append((lo, hi))
            total += hi - lo + 1
            if total > cap:
                raise ValidationError("--seeds", f"'{text[:60]}' is more than {cap} seeds; "
                                      f"{LIMITS['max_seeds'].hint()}")
    except ValueError as err:
        if isinstance(err, ValidationError):
            raise
        raise ValidationError("--seeds",
                              f"'{text[:60]}' not understood; seeds are integers in 0..{MAX_SEED}, "
                              "e.g. '0-4' or '1,5,9'") from None
    seeds = [s for lo, hi in ranges for s in range(lo, hi + 1)]
    return tuple(dict.fromkeys(seeds))


def make_items(files: Iterable[Path], policies: Iterable[str], seeds: Iterable[int], *,
               mode: str = "simulate", time_limit_s: float = 10.0,
               predictors: str = "default") -> list[BatchItem]:
    """The cross product files x policies x seeds, in that order."""
    if mode not in MODES:
        raise ValidationError("--mode", f"'{mode}' not understood; one of {', '.join(MODES)}")
    from dltsched.engine.domain.limits import LIMITS

    files, policies, seeds = tuple(files), tuple(policies), tuple(seeds)
    cap = LIMITS["max_batch_items"]
    if len(files) * len(policies) * len(seeds) > cap.value():
        raise ValidationError("DIR|GLOB x --policy x --seeds",
                              f"{len(files)} x {len(policies)} x {len(seeds)} "
                              f"runs is more than {cap.value():g}; {cap.hint()}")
    items: list[BatchItem] = []
    for f in files:
        digest = file_sha256(f)
        items.extend(BatchItem(str(f), digest, mode, p, s, time_limit_s, predictors) for p in policies
                     for s in seeds)
    return items


def run_item(item: BatchItem) -> dict[str, Any]:
    """Run one item and return its row; an error becomes the row's ``error`` text (the batch goes on)."""
    start = time.perf_counter()
    row: dict[str, Any] = {"key": item.key, "instance_file": item.instance_file,
                           "file_sha256": item.file_sha256, "mode": item.mode, "policy": item.policy,
                           "predictors": item.predictors, "seed": item.seed, "error": ""}
    try:
        row.update(_simulate_row(item) if item.mode == "simulate" else _solve_row(item))
    except Exception as err:  # one bad instance must not stop the batch
        row["error"] = f"{type(err).__name__}: {err}"
    row["item_wall_s"] = round(time.perf_counter() - start, 4)
    return row


def _simulate_row(item: BatchItem) -> dict[str, Any]:
    from dltsched.engine.app.api import load_instance_file, simulate_instance
    from dltsched.formulations.pipeline import ConfiguredSolver

    inst = load_instance_file(item.instance_file)
    result = simulate_instance(inst, item.policy, seed=item.seed, predictors=item.predictors,
                               config=ConfiguredSolver.of(time_limit_s=item.time_limit_s,
                                                          predictors=item.predictors))
    data = result.to_dict() | {"truth_sources": ";".join(result.truth_sources)}
    row = {c: data.get(c) for c in SIMULATE_COLUMNS}
    return row | {"instance": inst.name, "num_gpus": inst.cluster.num_gpus}


def _solve_row(item: BatchItem) -> dict[str, Any]:
    from dltsched.engine.app.api import initial_state, load_instance_file, solve_round
    from dltsched.formulations.pipeline import ConfiguredSolver

    inst = load_instance_file(item.instance_file)
    state = initial_state(inst)
    plan = solve_round(state, ConfiguredSolver.of(backend=item.policy, time_limit_s=item.time_limit_s,
                                                  predictors=item.predictors))
    return {"instance": inst.name, "num_jobs": len(inst.jobs), "num_gpus": inst.cluster.num_gpus,
            "status": plan.status, "backend": plan.backend, "objective": plan.objective, "bound": plan.bound,
            "gap": plan.gap, "num_placed": len(plan.assignments), "solve_time_s": plan.solve_time_s,
            "build_time_s": plan.build_time_s}


class ResultTable:
    """``results.csv`` in ``out_dir``: finished keys on open, one flushed row per :meth:`append`.

    Several batches may share one folder: every read-modify-write of the table holds an exclusive lock on
    ``results.csv.lock`` beside it, so rows appended by another process are never lost."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / RESULTS_CSV
        out_dir.mkdir(parents=True, exist_ok=True)
        self._seen: tuple[int, int, int] | None = None
        self._done: set[str] | None = None
        with self._locked():
            self.rows = self._read_complete_rows()
            self._rewrite()

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _refresh(self) -> None:
        """Re-read the table if another process changed it since this one last wrote or read it."""
        if self._stamp() != self._seen:
            self.rows = self._read_complete_rows()
            self._seen = self._stamp()
            self._done = None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with file_lock(self.path.with_name(RESULTS_CSV + ".lock")):
            yield

    def _read_complete_rows(self) -> list[dict[str, str]]:
        """Rows of a previous run; a row cut short by an interruption (missing cells) is dropped."""
        if not self.path.exists():
            return []
        with self.path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            if tuple(reader.fieldnames or ()) not in (COLUMNS, EARLIER_COLUMNS):
                raise ValidationError("--out", f"{self.path} has other columns; use a new --out folder")
            return [{c: r.get(c, "") for c in COLUMNS} for r in reader
                    if None not in r.values() and None not in r and r["key"]]

    def _rewrite(self) -> None:
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, COLUMNS)
        writer.writeheader()
        writer.writerows(self.rows)
        write_atomically(self.path, text.getvalue().encode())
        self._seen = self._stamp()

    def done_keys(self) -> set[str]:
        """Keys of items that finished without error (failed items are retried on resume)."""
        return {r["key"] for r in self.rows if not r["error"]}

    def done_on_disk(self, key: str) -> bool:
        """Whether ``key`` has a row without error in the file now (another batch may have written it)."""
        with self._locked():
            self._refresh()
        if self._done is None:
            self._done = self.done_keys()
        return key in self._done

    def append(self, row: dict[str, Any]) -> None:
        """Add one result row (a retried key replaces its earlier row), under the table's file lock.

        Parameters
        ----------
        row
            Column -> value; missing columns are written empty.
        """
        clean = {c: "" if row.get(c) is None else str(row[c]) for c in COLUMNS}
        with self._locked():
            self._refresh()
            retried = any(r["key"] == clean["key"] for r in self.rows)
            self._done = None
            if retried:
                self.rows = [r for r in self.rows if r["key"] != clean["key"]] + [clean]
                self._rewrite()
                return
            self.rows.append(clean)
            with self.path.open("a", newline="") as fh:
                csv.DictWriter(fh, COLUMNS).writerow(clean)
                fh.flush()
                os.fsync(fh.fileno())
            self._seen = self._stamp()

    def write_parquet(self) -> Path | None:
        """``results.parquet`` beside the CSV (typed columns), or ``None`` without pyarrow."""
        try:
            import pyarrow.csv as pacsv
            import pyarrow.parquet as pq
        except ImportError:
            log.info("pyarrow not installed; wrote %s only", self.path)
            return None
        out = self.path.with_name(RESULTS_PARQUET)
        pq.write_table(pacsv.read_csv(self.path), out)
        return out


def run_local(items: Iterable[BatchItem], max_workers: int | None) -> Iterator[dict[str, Any]]:
    """Rows as items finish, from a pool of spawned processes (``max_workers=1``: in this process). Items are
    taken from ``items`` as workers free up (at most two per worker in flight), so a claim is taken late."""
    if max_workers == 1:
        yield from map(run_item, items)
        return
    workers = max_workers or os.cpu_count() or 1
    source = iter(items)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        pending = {pool.submit(run_item, item) for item in itertools.islice(source, 2 * workers)}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield fut.result()
                following = next(source, None)
                if following is not None:
                    pending.add(pool.submit(run_item, following))


def run_ray(items: Iterable[BatchItem], address: str | None) -> Iterator[dict[str, Any]]:
    """Rows as items finish, from Ray tasks (``address=None``: start or join a local Ray)."""
    items = list(items)
    if not items:
        return
    try:
        import ray
    except ImportError:
        raise ValidationError("--ray",
                              "Ray is not installed; pip install 'dltsched[ray]' or drop --ray") from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        remote = ray.remote(run_item)
        pending = [remote.remote(item) for item in items]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield from ray.get(done)
    finally:
        if started_here:
            ray.shutdown()


def run_batch(items: list[BatchItem], out_dir: Path, *, max_workers: int | None = None,
              ray_address: str | None = None, use_ray: bool = False,
              on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the items not yet in ``out_dir``'s table; returns counts and the table paths.

    Batches may run at once into one folder: an item runs only under its claim, an exclusive lock on
    ``claims/<key>.lock`` held from before it starts until its row is in the table (the lock goes with a
    killed process), and only when the table has no row for it; an item claimed by another batch is left
    to it (``claimed_elsewhere``)."""
    table = ResultTable(out_dir)
    done = table.done_keys()
    todo = [item for item in items if item.key not in done]
    claims = Claims(out_dir / CLAIMS_DIR)
    counts = {"claimed_elsewhere": 0, "done_elsewhere": 0}

    def claimed() -> Iterator[BatchItem]:
        for item in todo:
            if not claims.take(item.key):
                counts["claimed_elsewhere"] += 1
                continue
            if table.done_on_disk(item.key):  # another batch finished it after this one started
                claims.release(item.key)
                counts["done_elsewhere"] += 1
                continue
            yield item

    rows = run_ray(claimed(), ray_address) if use_ray else run_local(claimed(), max_workers)
    failed = ran = 0
    try:
        for row in rows:
            table.append(row)
            claims.release(row["key"])
            ran += 1
            failed += bool(row["error"])
            if on_row is not None:
                on_row(row)
    finally:
        claims.release_all()
    parquet = table.write_parquet()
    failures = [f"{r['instance_file']} {r['mode']} {r['policy']} seed {r['seed']}: {r['error']}"
                for r in table.rows if r["error"]]
    return {"items": len(items), "skipped": len(items) - len(todo) + counts["done_elsewhere"], "ran": ran,
            "claimed_elsewhere": counts["claimed_elsewhere"], "failed": failed, "failures": failures,
            "csv": str(table.path), "parquet": str(parquet) if parquet else None}


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block; waits for it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the file releases the lock


class Claims:
    """Claims of batch items: a non-blocking exclusive ``flock`` on ``folder/<digest of key>.lock`` per
    item, held by this process until :meth:`release` (the operating system drops it if the process dies).
    Claim files stay in place: removing one while another process opens it would let two hold a claim."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.held: dict[str, int] = {}

    def take(self, key: str) -> bool:
        """Claim ``key``; ``False`` when another process holds it."""
        name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock"
        fd = os.open(self.folder / name, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.held[key] = fd
        return True

    def release(self, key: str) -> None:
        """Give up the claim on ``key`` (closing its lock file); a key not held is ignored.

        Parameters
        ----------
        key
            The item's key.
        """
        fd = self.held.pop(key, None)
        if fd is not None:
            os.close(fd)

    def release_all(self) -> None:
        """Give up every claim this process holds."""
        for key in list(self.held):
            self.release(key)


class BatchFailedError(DltschedError):
    """Some runs of a batch failed; ``failures`` names each (file, mode, policy, seed: error)."""

    def __init__(self, failures: list[str], total: int, csv_path: str) -> None:
        self.failures = failures
        shown = "; ".join(f[:200] for f in failures[:5]) + (f"; ... {len(failures) - 5} more"
                                                            if len(failures) > 5 else "")
        super().__init__(f"{len(failures)} of {total} runs failed (see the error column of "
                         f"{csv_path}): {shown}")


@click.command("batch")
@click.argument("source", metavar="DIR|GLOB")
@click.option("--mode", type=click.Choice(MODES), default="simulate", show_default=True,
              help="simulate each policy, or solve the first round with each backend.")
@click.option("--policy", "policies", multiple=True, default=("fifo", "sjf"), show_default=True,
              help="Policy (simulate: a name, dltsched[:<backend>] or a group: baselines, papers, all) or "
                   "backend (solve: cpsat, milp, greedy, greedy:<policy>, auto), repeatable.")
@click.option("--seeds", default="0", show_default=True, help="Seed sweep, e.g. '0-4' or '1,5,9'.")
@click.option("--time-limit", "time_limit_s", type=FiniteFloat(0.0, 86_400.0, min_open=True), default=10.0,
              show_default=True, help="Solver time limit per round, seconds.")
@click.option("--predictors", "predictor_set", default="default", show_default=True,
              help="Predictor bundle (default: in-sample | crossfit | analytic); every row names it.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Folder for results.csv / results.parquet (reused to resume).")
@click.option("-j", "--workers", type=click.IntRange(min=1), default=None,
              help="Processes (default: CPU count).")
@click.option("--ray", "ray_address", is_flag=False, flag_value="auto-local", default=None,
              help="Run on Ray: --ray alone starts a local Ray; --ray ADDRESS joins a cluster.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def batch(ctx: click.Context, source: str, mode: str, policies: tuple[str, ...], seeds: str,
          time_limit_s: float, predictor_set: str, out_dir: str, workers: int | None, ray_address: str | None,
          as_json: bool) -> None:
    """Solve or simulate every instance in DIR|GLOB x policies x seeds, in parallel and resumably."""
    from dltsched.engine.app.cli.main import emit
    from dltsched.engine.app.vocabulary import expand_policies, parse_backend

    if mode == "simulate":  # an unknown name fails at once, not once per item; names in their canonical form
        policies = tuple(c.name for c in expand_policies(policies, "--policy"))
    else:
        policies = tuple(str(parse_backend(p, "--policy")) for p in policies)
    from dltsched.engine.app.registry import check_predictors

    items = make_items(discover(source), policies, parse_seeds(seeds), mode=mode, time_limit_s=time_limit_s,
                       predictors=check_predictors(predictor_set))
    quiet = bool((ctx.obj or {}).get("quiet"))
    address = None if ray_address in (None, "auto-local") else ray_address
    with progress_bar(len(items), "batch", enabled=not quiet and not as_json) as advance:
        summary = run_batch(items, Path(out_dir), max_workers=workers, use_ray=ray_address is not None,
                            ray_address=address, on_row=lambda _row: advance(1))
    emit(summary, as_json, lambda: click.echo(
        f"{summary['ran']} ran ({summary['failed']} failed), {summary['skipped']} already done, "
        f"{summary['claimed_elsewhere']} run by another batch -> {summary['csv']}"))
    if summary["failures"]:
        raise BatchFailedError(summary["failures"], summary["items"], summary["csv"])


@contextmanager
def progress_bar(total: int, label: str, *, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """A rich progress bar over ``total`` steps, yielding ``advance(n)``; a no-op when disabled."""
    if not enabled:
        yield lambda _n: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  transient=True) as progress:
        task = progress.add_task(label, total=total)
        yield lambda n: progress.advance(task, n)
