"""``dltsched slurm``: a scheduling daemon that decides, round by round, where a Slurm cluster's GPU
jobs run, with :func:`dltsched.engine.app.api.solve_round`.

Convention. Jobs are submitted held, to a partition dltsched owns, with a comment that describes them::

    sbatch --hold -p dltsched --gres=gpu:2 \
        --comment "dltsched:model=resnet50,batch=64,iters=1000,step_s=0.21" job.sh

(``model``, ``batch`` and ``iters`` are required; ``step_s`` is the job's own measured seconds per step on
its GPU count, used instead of the prediction, and it stands in for a model the catalogue does not know;
``gpu_type`` names the GPU type it was measured on; ``weight`` as in
:class:`~dltsched.engine.domain.model.Job`).
GPU counts come from the job's gres request (typed, ``--gres=gpu:a100:2``, keeps it to nodes of that gres
type), ``--constraint`` features keep it to nodes with those features, ``-N 2`` makes it a gang job with the
same GPU count on each node. Node GPU counts and types come from the nodes' gres (``gpu:a100:4``).

One round: read jobs and nodes (``squeue --json``, ``sinfo --json``, Slurm 22.05 to 24.x); running jobs keep
the GPUs Slurm gave them (``gres_detail`` indices, inferred from the node's used GPUs where Slurm gives
none); held jobs form the queue; solve; for each queued job the plan starts on GPUs that are free now:
``scontrol update JobId=.. NodeList=<nodes>`` then ``scontrol release``. With ``--preempt``, a running job
the plan stops or moves is sent ``SIGUSR1`` (``scancel --signal``: time to checkpoint), and requeued held
(``scontrol requeuehold``) once, ``--preempt-grace`` seconds later. Finished and failed jobs are Slurm's;
drained, down or failed nodes give no GPUs to new jobs.

A job that cannot be planned (malformed comment, a model neither the catalogue nor ``step_s`` prices, a
gres type or constraint no node meets) stays held, with the reason appended to its comment
(``squeue -o "%i %t %r %k"`` shows ``<its description> # dltsched: <reason>``) and in its admin comment,
and never holds up the others. A round that fails for
any reason (controller away, an answer not understood, a bug) is logged and skipped; the daemon goes on.

Never losing a job: Slurm's state is authoritative. The daemon only holds, releases, signals and requeues;
it never cancels. Its state file (written atomically) remembers the jobs it released (with the restart
count they had) and the jobs it is preempting; a released job that Slurm has not started within
``start_timeout_s``, or that Slurm requeued by itself (its restart count went up), is held again and
re-planned; a dltsched job found pending and not held that the daemon did not release (after a crash
between release and state write) is held again. So a crash at any point and a restart pick up where it was.

Progress: with ``--progress-file``, jobs report iterations done and their measured seconds per step
(:mod:`.slurm_job` defines the records and a CPU training job that writes them); running jobs' remaining work
and speed then come from those reports instead of elapsed time and predictions.

Shared nodes: Slurm GPU gres are exclusive, so rounds are solved with one job per GPU and no layer freezing.
A job that takes whole nodes (``--exclusive``, or a partition with ``OverSubscribe=EXCLUSIVE``) starts only
on nodes where nothing runs and keeps them to itself; a node with no CPU or memory left takes no new job.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from dltsched.engine.app.adapters.slurm_job import read_progress_folder
from dltsched.engine.app.adapters.slurm_parse import (  # noqa: F401  (the daemon's vocabulary, re-exported)
    ACTIVE_STATES,
    COMMENT_PREFIX,
    NOTE_MARK,
    JobSpec,
    SlurmJob,
    SlurmNode,
    expand_hostlist,
    format_comment,
    parse_comment,
    parse_gres,
    parse_oversubscribe,
    parse_sinfo_json,
    parse_squeue_json,
    satisfies,
    strip_note,
)
from dltsched.engine.app.adapters.slurm_round import (  # noqa: F401
    Action,
    Placement,
    RoundConfig,
    Snapshot,
    decide,
    node_gpu_type,
    plan_actions,
    price_problem,
)
from dltsched.engine.app.cli.main import BackendName
from dltsched.engine.domain.errors import DltschedError, ValidationError, write_atomically

log = logging.getLogger(__name__)

#: a progress record written this many seconds before Slurm's start time still counts as the current run's
#: (Slurm's start time has one-second resolution; the job writes its first record as it starts)
PROGRESS_SLACK_S = 2.0

# ----------------------------------------------------------------------------- the daemon


class SlurmCommandError(DltschedError):
    """A Slurm command failed (slurmctld down, job gone, ...); the message has its stderr."""


class SlurmCommands:
    """Runs Slurm's commands (``SLURM_CONF`` from the environment unless ``slurm_conf`` is given)."""

    def __init__(self, slurm_conf: str | None = None, timeout_s: float = 30.0) -> None:
        self.env = dict(os.environ) | ({"SLURM_CONF": slurm_conf} if slurm_conf else {})
        self.timeout_s = timeout_s

    def __call__(self, args: Sequence[str]) -> str:
        try:
            done = subprocess.run(
                list(args), env=self.env, capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
        except FileNotFoundError:
            raise DltschedError(
                f"slurm: '{args[0]}' not found; install Slurm's client commands "
                "(bash scripts/slurm-sandbox.sh sets up a local Slurm)"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"{' '.join(args)}: no answer within {self.timeout_s:g} s") from None
        if done.returncode != 0:
            raise SlurmCommandError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[:300]}")
        return done.stdout


@dataclass
class DaemonOptions:
    """How :class:`SlurmDaemon` runs: the options of ``dltsched slurm``.

    Parameters
    ----------
    partition
        The partition whose held jobs dltsched decides.
    state_file
        Where the daemon keeps the jobs it released and is preempting, across restarts.
    events_file
        A file to which one JSON line per action taken is appended; ``None``: none.
    poll_s
        Seconds between rounds.
    preempt
        Requeue (held) running jobs the plan stops or moves; they restart from their checkpoint.
    preempt_grace_s
        Seconds between the signal to a preempted job and its requeue, for it to checkpoint.
    preempt_signal
        The signal sent to a job before it is preempted (``scancel --signal``).
    dry_run
        Print the Slurm commands instead of running them (and keep no state).
    time_limit
        Slurm's ``TimeLimit`` set on each job the daemon starts (``2:00:00``); ``None``: the job's own.
    start_timeout_s
        Seconds after its release within which Slurm must start a job; later, it is held and re-planned.
    progress_file
        The jobs' progress records (a folder of :mod:`.slurm_job` records, or a file of
        ``{"<job id>": iterations done}``); ``None``: none.
    round
        How each round is solved.
    """

    partition: str = "dltsched"
    state_file: Path = Path("dltsched-slurm-state.json")
    events_file: Path | None = None
    poll_s: float = 5.0
    preempt: bool = False
    preempt_grace_s: float = 60.0
    preempt_signal: str = "USR1"
    dry_run: bool = False
    time_limit: str | None = None
    start_timeout_s: float = 60.0
    #: the jobs' progress records (a folder, :mod:`.slurm_job`), or a file of
    #: ``{"<job id>": iterations done}``
    progress_file: Path | None = None
    round: RoundConfig = field(default_factory=RoundConfig)


class SlurmDaemon:
    """The scheduling loop. ``run`` executes a Slurm command and returns its stdout (raises
    :class:`SlurmCommandError` on failure)."""

    def __init__(
        self,
        options: DaemonOptions,
        run: Callable[[Sequence[str]], str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options, self.run, self.clock = options, run or SlurmCommands(), clock
        state = self._load_state()
        self.released: dict[str, dict[str, Any]] = state.get("released", {})
        #: job -> {"at": when signalled, "restarts": its restart count then, "requeued": bool}
        self.preempting: dict[str, dict[str, Any]] = state.get("preempting", {})
        self.warm: Any = None
        #: job -> (comment it was judged on, reason it cannot be planned); flagged once per reason
        self.unplannable: dict[str, tuple[str, str]] = {}
        self.restarts: dict[str, int] = {}
        self.stopping = False

    # --- state file: the jobs this daemon released or is preempting, written atomically
    def _load_state(self) -> dict[str, dict[str, dict[str, Any]]]:
        try:
            data = json.loads(self.options.state_file.read_text())
            return {
                key: {str(k): dict(v) for k, v in (data.get(key) or {}).items()}
                for key in ("released", "preempting")
            }
        except FileNotFoundError:
            return {}
        except (json.JSONDecodeError, AttributeError, TypeError, ValueError) as err:
            log.warning(
                "state file %s unreadable (%s); starting from Slurm's state alone",
                self.options.state_file,
                err,
            )
            return {}

    def _save_state(self) -> None:
        if self.options.dry_run:
            return
        data = {"version": 2, "released": self.released, "preempting": self.preempting}
        write_atomically(self.options.state_file, json.dumps(data, indent=1, sort_keys=True).encode())

    def _event(self, **record: Any) -> None:
        if self.options.events_file is not None and not self.options.dry_run:
            with self.options.events_file.open("a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")

    def _progress(self, start: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
        """Iterations done and measured seconds per step, by job, from ``--progress-file``: a folder of the
        jobs' own records (:mod:`.slurm_job`; a record written before the job's current start is from an
        earlier run and counts as its checkpoint only), or one ``{job id: iterations}`` file."""
        path = self.options.progress_file
        if path is None:
            return {}, {}
        if path.is_dir():
            done: dict[str, float] = {}
            speed: dict[str, float] = {}
            for job_id, record in read_progress_folder(path).items():
                current = record.time >= start.get(job_id, float("inf")) - PROGRESS_SLACK_S
                done[job_id] = float(min(record.iterations if current else record.checkpoint, record.total))
                if current and record.step_s is not None:
                    speed[job_id] = record.step_s
            return done, speed
        try:
            data = json.loads(path.read_text()[:10_000_000])
        except (OSError, ValueError) as err:
            log.debug("progress file %s unreadable: %s", path, err)
            return {}, {}
        return (
            {str(k): float(v) for k, v in data.items() if isinstance(v, int | float) and v >= 0}
            if isinstance(data, dict)
            else {}
        ), {}

    def _partition_exclusive(self) -> bool:
        """Whether the partition gives every job whole nodes (``OverSubscribe=EXCLUSIVE``); an answer not
        understood counts as no (GPUs stay exclusive either way)."""
        try:
            answer = self.run(["sinfo", "-h", "--partition", self.options.partition, "-o", "%h"])
        except SlurmCommandError as err:
            log.debug("partition OverSubscribe unknown: %s", err)
            return False
        return parse_oversubscribe(answer) == "EXCLUSIVE"

    def _unplannable(self, job: SlurmJob, reason: str, flags: list[Action]) -> None:
        """Keep ``job`` out of the round; flag it with ``reason`` once."""
        own = strip_note(job.comment)
        if self.unplannable.get(job.job_id) != (own, reason):
            log.warning("job %s stays held: %s", job.job_id, reason)
            self.unplannable[job.job_id] = (own, reason)
            if job.held and job.comment != f"{own}{NOTE_MARK}{reason[:250]}":
                flags.append(Action("flag", job.job_id, reason=reason, comment=own))

    # --- one round
    def snapshot(self) -> tuple[Snapshot, list[Action]]:
        """Read Slurm; the round's snapshot, and the actions that come first (holds that restore dltsched's
        control, reasons for jobs that cannot be planned)."""
        part = self.options.partition
        jobs = parse_squeue_json(self.run(["squeue", "--json", "--partition", part]))
        nodes = tuple(
            n
            for n in parse_sinfo_json(self.run(["sinfo", "--json", "--partition", part]))
            if part in n.partitions
        )
        by_name = {n.name: n for n in nodes}
        whole_nodes = self._partition_exclusive()
        now = self.clock()
        running: dict[str, Placement] = {}
        queued: list[str] = []
        fixes: list[Action] = []
        specs: dict[str, JobSpec] = {}
        num_gpus: dict[str, int] = {}
        submit: dict[str, float] = {}
        start: dict[str, float] = {}
        allowed: dict[str, frozenset[str]] = {}
        node_count: dict[str, int] = {}
        foreign: dict[str, set[int]] = {n.name: set(n.used_gpus) for n in nodes}
        promised: list[tuple[str, Mapping[str, Any]]] = []
        unindexed: list[SlurmJob] = []
        exclusive: set[str] = set()
        seen = set()
        mine = [j for j in jobs if j.partition == part]
        for j in sorted(mine, key=lambda j: any(not i for i in j.gpus.values())):  # indexed jobs first
            try:
                spec = parse_comment(j.comment)
            except ValidationError as err:
                self._unplannable(j, str(err), fixes)
                continue
            if spec is None:
                continue
            seen.add(j.job_id)
            self.restarts[j.job_id] = j.restart_count
            if j.state in ACTIVE_STATES:
                self.released.pop(j.job_id, None)
                if not j.gpus or any(n not in by_name for n in j.gpus):
                    continue  # not on this partition's nodes (or Slurm has not said where yet)
                if any(not idx for idx in j.gpus.values()):
                    unindexed.append(j)
                else:
                    for node, idx in j.gpus.items():
                        foreign[node].difference_update(idx)
                    running[j.job_id] = _placement(j.gpus)
            elif j.state == "PENDING":
                record = self.released.get(j.job_id)
                if j.held:
                    self.released.pop(j.job_id, None)
                    queued.append(j.job_id)
                elif (
                    record is None
                    or int(record.get("restarts", 0)) != j.restart_count
                    or (
                        now - float(record.get("at", now)) > self.options.start_timeout_s
                        and j.reason != "BeginTime"
                    )
                ):  # a requeued job waits out Slurm's delay: not late
                    fixes.append(Action("hold", j.job_id))  # not started as planned: back under our control
                    self.released.pop(j.job_id, None)
                    continue
                else:
                    promised.append((j.job_id, record))
            else:
                self.released.pop(j.job_id, None)
                continue
            specs[j.job_id] = spec
            if j.exclusive or whole_nodes:
                exclusive.add(j.job_id)
            node_count[j.job_id] = j.node_count
            num_gpus[j.job_id] = max(1, j.num_gpus)
            submit[j.job_id] = float(j.submit_time)
            if j.start_time and j.state in ACTIVE_STATES:
                start[j.job_id] = float(j.start_time)
            allowed[j.job_id] = frozenset(
                n.name
                for n in nodes
                if n.num_gpus > 0
                and satisfies(n.features, j.constraint)
                and (j.gpu_type is None or (n.gpu_type or "").lower() == j.gpu_type.lower())
            )
        # running jobs Slurm gave no GPU index (e.g. just after a controller restart): the node's used GPUs
        # that no other job explains, else its lowest free ones
        for j in unindexed:
            placed: dict[str, tuple[int, ...]] = {}
            each = max(1, num_gpus[j.job_id] // max(1, len(j.gpus)))
            for node in j.gpus:
                spare = sorted(foreign[node]) + [
                    g
                    for g in range(by_name[node].num_gpus)
                    if g not in foreign[node]
                    and not any(g in p.per_node.get(node, ()) for p in running.values())
                ]
                placed[node] = tuple(spare[:each])
                foreign[node].difference_update(placed[node])
            running[j.job_id] = _placement(placed)
        for job_id in set(self.released) - seen:  # gone from Slurm: finished long ago or cancelled
            self.released.pop(job_id)
        for job_id in set(self.preempting) - set(running):  # requeued (or ended): preemption done
            self.preempting.pop(job_id)
        for job_id in list(self.preempting):
            if self.restarts.get(job_id, 0) > int(self.preempting[job_id].get("restarts", 0)):
                self.preempting.pop(job_id)
        # released, not started yet: Slurm will give them GPUs of their nodes that nobody holds now (which
        # ones is Slurm's choice); when too few are left, the job is taken back and re-planned
        taken = {name: set(idx) for name, idx in foreign.items()}
        for p in running.values():
            for node, idx in p.per_node.items():
                taken.setdefault(node, set()).update(idx)
        for job_id, promise in promised:
            want = _record_nodes(promise)
            free = {
                n: [
                    g
                    for g in range(by_name[n].num_gpus if n in by_name else 0)
                    if g not in taken.get(n, set())
                ]
                for n in want
            }
            if any(len(free[n]) < len(idx) for n, idx in want.items()):
                fixes.append(Action("hold", job_id))
                self.released.pop(job_id, None)
                for table in (specs, num_gpus, submit, allowed, node_count):
                    table.pop(job_id, None)  # type: ignore[attr-defined]
                continue
            got = {n: tuple(free[n][: len(idx)]) for n, idx in want.items()}
            running[job_id] = _placement(got)
            for n, idx in got.items():
                taken.setdefault(n, set()).update(idx)
        # nodes no new job can share: one an exclusive job holds (or was promised), one with no CPU or memory
        # left; their GPUs that no job of ours runs on count as taken by others
        whole = {n for job_id, p in running.items() if job_id in exclusive for n in p.per_node}
        whole |= {n.name for n in nodes if n.full}
        for name in whole:
            ours = {g for p in running.values() for g in p.per_node.get(name, ())}
            foreign.setdefault(name, set()).update(set(range(by_name[name].num_gpus)) - ours)
        # jobs that cannot be planned stay held, flagged, out of the round; running ones count as others'
        types = sorted({n.gpu_type or "" for n in nodes})
        by_id = {j.job_id: j for j in mine}
        for job_id in [*queued, *running]:
            job = by_id[job_id]
            try:
                node_types = sorted(
                    {node_gpu_type(by_name[n], self.options.round.default_gpu_type) for n in allowed[job_id]}
                )
                reason = price_problem(
                    job_id,
                    specs[job_id],
                    num_gpus[job_id],
                    node_count[job_id],
                    node_types,
                    self.options.round,
                )
            except ValueError as err:
                reason = f"gres type: {err}"
            if reason is not None and not allowed[job_id]:
                reason += (
                    f" (gres {job.gpu_type or 'gpu'}, constraint '{job.constraint}'; node gres types {types})"
                )
            if reason is not None:
                self._unplannable(job, reason, fixes)
                if job_id in running:
                    for node, idx in running.pop(job_id).per_node.items():
                        foreign.setdefault(node, set()).update(idx)
                else:
                    queued.remove(job_id)
                for table in (specs, num_gpus, submit, allowed, node_count):
                    table.pop(job_id, None)  # type: ignore[attr-defined]
            else:
                self.unplannable.pop(job_id, None)
        for job_id in set(self.unplannable) - set(by_id):
            self.unplannable.pop(job_id)
        done, speed = self._progress(start)
        snap = Snapshot(
            now,
            nodes,
            running,
            tuple(queued),
            specs,
            num_gpus,
            submit,
            start,
            {k: tuple(sorted(v)) for k, v in foreign.items() if v},
            allowed,
            node_count,
            {k: v for k, v in done.items() if k in running or k in queued},
            {k: v for k, v in speed.items() if k in running},
            frozenset(exclusive & (set(running) | set(queued))),
        )
        return snap, fixes

    def round(self) -> list[Action]:
        """One round: read, solve, apply. Returns the actions taken (planned, with ``dry_run``)."""
        snap, actions = self.snapshot()
        if snap.queued or (self.options.preempt and snap.running):
            placements, self.warm = decide(
                snap, self.options.round, self.warm, pin_running=not self.options.preempt
            )
            signalled = {k: float(v.get("at", 0.0)) for k, v in self.preempting.items()}
            planned = plan_actions(
                snap,
                placements,
                preempt=self.options.preempt,
                signalled=signalled,
                grace_s=self.options.preempt_grace_s,
            )
            actions += [
                a
                for a in planned
                if not (a.kind == "requeue" and self.preempting.get(a.job_id, {}).get("requeued"))
            ]  # requeued once; Slurm has it now
        for action in actions:
            self.apply(action)
        self._save_state()
        return actions

    def apply(self, action: Action) -> None:
        """Carry out ``action``: run its Slurm commands and record it in the state and events files.

        A job about to start is recorded as released, and a job about to be signalled as preempting, before
        the commands run, so that a crash in between is recovered. A command Slurm refuses (the job finished
        or vanished meanwhile) is logged and forgotten; the next round reads Slurm's state again. With
        ``dry_run`` the commands are printed instead.

        Parameters
        ----------
        action
            The change to apply.
        """
        if self.options.dry_run:
            for cmd in action.commands(self.options.time_limit, self.options.preempt_signal):
                click.echo(" ".join(cmd))
            return
        if action.kind == "start":  # remembered before the release: a crash in between is recovered
            nodes = action.node.split(",")
            per: dict[str, list[int]] = {n: [] for n in nodes}
            each = len(action.gpus) // max(1, len(nodes))
            for i, n in enumerate(nodes):
                per[n] = list(action.gpus[i * each : (i + 1) * each])
            self.released[action.job_id] = {
                "node": action.node,
                "gpus": list(action.gpus),
                "nodes": per,
                "at": self.clock(),
                "restarts": self.restarts.get(action.job_id, 0),
            }
            self._save_state()
        elif action.kind == "signal":
            self.preempting[action.job_id] = {
                "at": self.clock(),
                "restarts": self.restarts.get(action.job_id, 0),
                "requeued": False,
            }
            self._save_state()
        try:
            for cmd in action.commands(self.options.time_limit, self.options.preempt_signal):
                self.run(cmd)
        except SlurmCommandError as err:  # the job finished or vanished meanwhile; Slurm's state decides
            log.warning("job %s: %s failed: %s", action.job_id, action.kind, err)
            self.released.pop(action.job_id, None)
            return
        if action.kind == "requeue" and action.job_id in self.preempting:
            self.preempting[action.job_id]["requeued"] = True
        log.info(
            "job %s: %s %s %s %s", action.job_id, action.kind, action.node, list(action.gpus), action.reason
        )
        self._event(
            time=self.clock(),
            action=action.kind,
            job=action.job_id,
            node=action.node,
            gpus=list(action.gpus),
            **({"reason": action.reason} if action.reason else {}),
        )

    def warm_up(self) -> None:
        """Load the predictors and the solver package now, so the first round that has jobs is not slowed
        by imports (seconds on a small machine)."""
        from dltsched.engine.app import api

        api.load_predictors(self.options.round.predictors)
        try:
            import dltsched.formulations  # noqa: F401
        except ImportError:
            log.warning("dltsched.formulations is not installed; rounds use the fallback policy")

    def run_forever(self, once: bool = False) -> None:
        """Rounds every ``poll_s`` until SIGTERM/SIGINT (or one round with ``once``, which raises when it
        fails). A round that fails, for whatever reason, is logged and skipped; the daemon does not exit on
        it."""

        def stop(signum: int, _frame: Any) -> None:
            self.stopping = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        while not self.stopping:
            try:
                self.round()
            except (SlurmCommandError, ValidationError) as err:
                if once:
                    raise
                log.warning("round skipped: %s", err)
            # a daemon outlives a bad round; the next one re-reads Slurm
            except Exception as err:  # noqa: BLE001
                if once:
                    raise
                log.exception("round skipped after an unexpected error: %s: %s", type(err).__name__, err)
            if once:
                return
            deadline = time.monotonic() + self.options.poll_s
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(min(0.2, self.options.poll_s))


def _placement(per: Mapping[str, tuple[int, ...]]) -> Placement:
    (node, gpus), *rest = sorted(per.items())
    return Placement(node, tuple(gpus), tuple((n, tuple(i)) for n, i in rest))


def _record_nodes(record: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Node -> GPU indices of a state-file record (version 1 records: one node)."""
    nodes = record.get("nodes")
    if isinstance(nodes, dict):
        return {str(n): tuple(int(g) for g in idx) for n, idx in nodes.items()}
    return {str(record["node"]): tuple(int(g) for g in record.get("gpus", ()))}


@click.command("slurm")
@click.option(
    "--partition", default="dltsched", show_default=True, help="Partition whose held jobs dltsched decides."
)
@click.option(
    "--poll",
    "poll_s",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds between rounds.",
)
@click.option(
    "--state-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("dltsched-slurm-state.json"),
    show_default=True,
    help="Where the daemon keeps what it released.",
)
@click.option(
    "--events",
    "events_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append one JSON line per action taken.",
)
@click.option(
    "--backend",
    type=BackendName(),
    default="cpsat",
    show_default=True,
    help="Round solver backend: cpsat | milp | greedy | greedy:<policy> | auto.",
)
@click.option("--objective", default="jct", show_default=True)
@click.option(
    "--solver-time-limit", "solver_s", type=click.FloatRange(min=0.01), default=5.0, show_default=True
)
@click.option(
    "--gpu-type", default="v100", show_default=True, help="GPU type of nodes whose gres names none."
)
@click.option(
    "--predictors",
    "predictor_set",
    default="default",
    show_default=True,
    help="Predictor bundle that prices jobs without their own step_s (default, crossfit, analytic).",
)
@click.option(
    "--calibration",
    type=click.Path(dir_okay=False),
    default=None,
    help="A calibration bundle (dltsched calibrate): the GPU types it covers are priced by it "
    "(CAL.json:mps: co-location under MPS).",
)
@click.option("--time-limit", default=None, help="Slurm TimeLimit set on each job it starts (e.g. 2:00:00).")
@click.option(
    "--preempt/--no-preempt",
    default=False,
    show_default=True,
    help="Requeue (held) running jobs the plan stops or moves; they restart from their checkpoint.",
)
@click.option(
    "--preempt-grace",
    "preempt_grace_s",
    type=click.FloatRange(min=0, max=86400),
    default=60.0,
    show_default=True,
    help="Seconds between the signal to a preempted job and its requeue (to checkpoint).",
)
@click.option(
    "--preempt-signal",
    default="USR1",
    show_default=True,
    help="Signal sent to a job before it is preempted (scancel --signal).",
)
@click.option(
    "--progress-file",
    type=click.Path(path_type=Path),
    default=None,
    help="Where jobs report progress: a folder of <job id>.json records (python -m "
    "dltsched.engine.app.adapters.slurm_job writes them), or one JSON {job id: iterations done}. "
    "Remaining work and running jobs' speed then come from it.",
)
@click.option(
    "--start-timeout",
    "start_timeout_s",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="A released job Slurm has not started after this many seconds is held and re-planned.",
)
@click.option(
    "--starvation-factor",
    type=click.FloatRange(min=0, max=1e6),
    default=0.0,
    show_default=True,
    help="A queued job that has waited this many times its predicted run time gets the nodes that free up "
    "first kept for it (backfill around it); 0: never.",
)
@click.option("--once", is_flag=True, help="One round, then exit.")
@click.option("--dry-run", is_flag=True, help="Print the scontrol commands instead of running them.")
@click.option(
    "--slurm-conf", default=None, help="SLURM_CONF for the Slurm commands (default: the environment's)."
)
def slurm(
    partition: str,
    poll_s: float,
    state_file: Path,
    events_file: Path | None,
    backend: str,
    objective: str,
    solver_s: float,
    gpu_type: str,
    predictor_set: str,
    calibration: str | None,
    time_limit: str | None,
    preempt: bool,
    preempt_grace_s: float,
    preempt_signal: str,
    progress_file: Path | None,
    start_timeout_s: float,
    starvation_factor: float,
    once: bool,
    dry_run: bool,
    slurm_conf: str | None,
) -> None:
    """Schedule a Slurm partition's held GPU jobs with dltsched, round by round."""
    from dltsched.engine.app.registry import check_predictors, with_calibration
    from dltsched.formulations.pipeline import ConfiguredSolver

    ConfiguredSolver.of(
        backend=backend, objective=objective, time_limit_s=solver_s
    )  # bad settings fail here, exit 2
    predictor_set = check_predictors(with_calibration(predictor_set, calibration))
    options = DaemonOptions(
        partition=partition,
        state_file=state_file,
        events_file=events_file,
        poll_s=poll_s,
        preempt=preempt,
        preempt_grace_s=preempt_grace_s,
        preempt_signal=preempt_signal,
        progress_file=progress_file,
        dry_run=dry_run,
        time_limit=time_limit,
        start_timeout_s=start_timeout_s,
        round=RoundConfig(
            backend=backend,
            objective=objective,
            time_limit_s=solver_s,
            default_gpu_type=gpu_type,
            predictors=predictor_set,
            starvation_factor=starvation_factor,
        ),
    )
    daemon = SlurmDaemon(options, SlurmCommands(slurm_conf))
    daemon.warm_up()
    daemon.run_forever(once=once)
