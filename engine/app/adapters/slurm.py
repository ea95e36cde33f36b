"""``dltsched slurm``: a scheduling daemon that decides, round by round, where a Slurm cluster's GPU
jobs run, with :func:`dltsched.engine.app.api.solve_round`.

Convention. Jobs are submitted held, to a partition dltsched owns, with a comment that describes them::

    sbatch --hold -p dltsched --gres=gpu:2 --comment "dltsched:model=resnet50,batch=64,iters=1000,step_s=0.21" job.sh

(``model``, ``batch`` and ``iters`` are required; ``step_s`` is the job's own measured seconds per step on
its GPU count, used instead of the prediction; ``gpu_type`` names the GPU type it was measured on; ``weight``
as in :class:`~dltsched.engine.domain.model.Job`). GPU counts come from the job's gres request, node GPU counts
and types from the nodes' gres (``gpu:v100:4``).

One round: read jobs and nodes (``squeue --json``, ``sinfo --json``); running jobs keep the GPUs Slurm gave
them (``gres_detail`` indices); held jobs form the queue; solve; for each queued job the plan starts on GPUs
that are free now: ``scontrol update JobId=.. NodeList=<node>`` then ``scontrol release``. A running job
the plan stops or moves is requeued held (``scontrol requeuehold``) only with ``--preempt``: a job without
checkpoints loses its progress. Finished and failed jobs are Slurm's; drained, down or failed nodes give
no GPUs to new jobs.

Never losing a job: Slurm's state is authoritative. The daemon only holds, releases and requeues; it never
cancels. Its state file (written atomically) remembers the jobs it released; a released job that Slurm
has not started within ``start_timeout_s``, or that Slurm requeued by itself, is held again and re-planned;
a dltsched job found pending and not held that the daemon did not release (after a crash between release
and state write) is held again. So a crash at any point and a restart pick up where it was.

Slurm 22.05 (Debian 12) answers ``--json`` with OpenAPI v0.0.38 shapes, read by :mod:`.slurm_parse`.
Slurm GPU gres are exclusive, so rounds are solved with one job per GPU and no layer freezing.
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

from dltsched.engine.app.adapters.slurm_parse import (  # noqa: F401  (the daemon's vocabulary, re-exported)
    ACTIVE_STATES,
    COMMENT_PREFIX,
    JobSpec,
    SlurmJob,
    SlurmNode,
    expand_hostlist,
    format_comment,
    parse_comment,
    parse_gres,
    parse_sinfo_json,
    parse_squeue_json,
)
from dltsched.engine.app.cli.main import BackendName
from dltsched.engine.domain.errors import DltschedError, ValidationError, write_atomically

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- one round's decision

@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job runs or is to run: one node, GPU indices on it."""

    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The dltsched jobs and the partition's nodes at one instant, as the daemon sees them."""

    time_s: float
    nodes: tuple[SlurmNode, ...]
    running: Mapping[str, Placement]  # includes released jobs Slurm has not started yet
    queued: tuple[str, ...]
    specs: Mapping[str, JobSpec]
    num_gpus: Mapping[str, int]
    submit_time: Mapping[str, float]
    start_time: Mapping[str, float]
    #: node -> GPU indices taken by jobs that are not dltsched's
    foreign: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RoundConfig:
    """How the daemon solves a round (passed to :class:`~dltsched.engine.app.api.SolveConfig`)."""

    backend: str = "cpsat"
    objective: str = "jct"
    time_limit_s: float = 5.0
    default_gpu_type: str = "v100"
    predictors: str = "default"


def decide(snap: Snapshot, config: RoundConfig, warm_start: Any = None) -> tuple[dict[str, Placement], Any]:
    """Solve the round of ``snap`` with :func:`~dltsched.engine.app.api.solve_round`: job -> placement for every
    job the plan runs, and the plan itself (the next round's warm start). The only function here that
    touches dltsched's domain types."""
    from dltsched.engine.app import api
    from dltsched.engine.domain.model import Assignment, Cluster, ClusterState, Job, JobState, Node
    from dltsched.engine.domain.predictors import Predictors

    nodes = [n for n in snap.nodes if n.num_gpus > 0]
    cluster = Cluster(tuple(Node(n.name, n.gpu_type or config.default_gpu_type, n.num_gpus) for n in nodes))
    first = {n.name: cluster.node_first_gpu[i] for i, n in enumerate(nodes)}
    where = {g: (n.name, g - first[n.name]) for n in nodes for g in range(first[n.name], first[n.name] + n.num_gpus)}
    jobs, measured = {}, {}
    for job_id, spec in snap.specs.items():
        jobs[job_id] = Job(job_id, spec.model, spec.batch_size, spec.iterations, num_gpus=snap.num_gpus[job_id],
                           arrival_time_s=float(snap.submit_time[job_id]), weight=spec.weight)
        if spec.step_time_s is not None:
            measured[job_id] = (spec.step_time_s, spec.gpu_type)
    base = api.load_predictors(config.predictors)
    preds = Predictors(_MeasuredStepTime(base.step_time, measured, jobs), base.colocation, base.freezing)
    held: set[int] = set()
    states = []
    for job_id, p in snap.running.items():
        gpus = tuple(first[p.node] + i for i in p.gpus)
        held.update(gpus)
        spec, elapsed = snap.specs[job_id], max(0.0, snap.time_s - snap.start_time.get(job_id, snap.time_s))
        done = elapsed / preds.step_time.step_time_s(jobs[job_id], cluster.gpu_type_of(gpus[0]))
        left = max(spec.iterations * 0.01, spec.iterations - done)
        states.append(JobState(jobs[job_id], left, attained_service_s=elapsed * len(gpus),
                               assignment=Assignment(job_id, gpus), first_start_s=snap.start_time.get(job_id),
                               queued_since_s=float(snap.submit_time[job_id])))
    states += [JobState(jobs[j], jobs[j].total_iterations, queued_since_s=jobs[j].arrival_time_s) for j in snap.queued]
    down = {first[n.name] + i for n in nodes for i in range(n.num_gpus) if not n.usable}
    down |= {first[name] + i for name, idx in snap.foreign.items() if name in first for i in idx}
    state = ClusterState(snap.time_s, cluster, tuple(states), down_gpus=frozenset(down - held))
    solve = api.SolveConfig(backend=config.backend, objective=config.objective, max_jobs_per_gpu=1,
                            freeze_levels=(0,), time_limit_s=config.time_limit_s)
    plan = api.solve_round(state, solve, warm_start=warm_start, predictors=preds)
    out: dict[str, Placement] = {}
    for a in plan.assignments:
        on = {where[g][0] for g in a.gpus}
        if len(on) != 1:  # a Slurm job with --gres per node runs on one node here
            log.info("job %s: plan spreads it over nodes %s; it waits", a.job_id, sorted(on))
            continue
        out[a.job_id] = Placement(on.pop(), tuple(sorted(where[g][1] for g in a.gpus)))
    log.info("round: %d running, %d queued -> plan %s (%s, %.2fs)", len(snap.running), len(snap.queued),
             plan.status, plan.backend, plan.solve_time_s)
    return out, plan


class _MeasuredStepTime:
    """Step times from the jobs' own measurements where they have them, scaled to other GPU counts and
    types by the ratio of the predictions; the wrapped predictor for everything else."""

    def __init__(self, inner: Any, measured: Mapping[str, tuple[float, str | None]], jobs: Mapping[str, Any]) -> None:
        self.inner, self.measured, self.jobs = inner, measured, jobs

    def step_time_s(self, job: Any, gpu_type: str, num_gpus: int | None = None, *, freeze_level: int = 0,
                    num_nodes: int = 1) -> float:
        predicted: float = self.inner.step_time_s(job, gpu_type, num_gpus, freeze_level=freeze_level,
                                                  num_nodes=num_nodes)
        if job.id not in self.measured:
            return predicted
        step, on_type = self.measured[job.id]
        same = (on_type is None or on_type == gpu_type) and num_gpus in (None, job.num_gpus) \
            and freeze_level == 0 and num_nodes == 1
        if same:
            return step
        reference: float = self.inner.step_time_s(job, on_type or gpu_type, job.num_gpus)
        return step * predicted / reference

    def memory_mib(self, job: Any, gpu_type: str, *, freeze_level: int = 0) -> float:
        return self.inner.memory_mib(job, gpu_type, freeze_level=freeze_level)  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- plan -> scontrol

@dataclass(frozen=True, slots=True)
class Action:
    """One change to apply: ``start`` a held job on a node, ``requeue`` a running one (held), ``hold`` a
    job that is pending unheld without dltsched's release."""

    kind: str
    job_id: str
    node: str = ""
    gpus: tuple[int, ...] = ()

    def commands(self, time_limit: str | None = None) -> list[list[str]]:
        """The ``scontrol`` calls of this action, in order."""
        if self.kind == "start":
            update = ["scontrol", "update", f"JobId={self.job_id}", f"NodeList={self.node}"]
            update += [f"TimeLimit={time_limit}"] if time_limit else []
            return [update, ["scontrol", "release", self.job_id]]
        if self.kind == "requeue":
            return [["scontrol", "requeuehold", self.job_id]]
        if self.kind == "hold":
            return [["scontrol", "hold", self.job_id]]
        raise ValueError(f"action kind '{self.kind}' not understood; one of start, requeue, hold")


def plan_actions(snap: Snapshot, placements: Mapping[str, Placement], *, preempt: bool) -> list[Action]:
    """The actions that carry out ``placements``: start each queued job the plan places on GPUs that are
    free now (not held, not on an unusable node, not taken by others); with ``preempt``, requeue (held)
    each running job the plan stops or moves to another node. Jobs whose GPUs are not free yet wait."""
    busy: dict[str, set[int]] = {n.name: set(snap.foreign.get(n.name, ())) for n in snap.nodes}
    usable = {n.name for n in snap.nodes if n.usable}
    actions = []
    for job_id, p in snap.running.items():
        new = placements.get(job_id)
        if preempt and (new is None or new.node != p.node):
            actions.append(Action("requeue", job_id))
        else:
            busy.setdefault(p.node, set()).update(p.gpus)
    for job_id in snap.queued:
        place = placements.get(job_id)
        if place is None or place.node not in usable or busy.get(place.node, set()) & set(place.gpus):
            continue
        busy[place.node].update(place.gpus)
        actions.append(Action("start", job_id, place.node, place.gpus))
    return actions


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
            done = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=self.timeout_s,
                                  check=False)
        except FileNotFoundError:
            raise DltschedError(f"slurm: '{args[0]}' not found; install Slurm's client commands "
                                "(bash scripts/slurm-sandbox.sh sets up a local Slurm)") from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"{' '.join(args)}: no answer within {self.timeout_s:g} s") from None
        if done.returncode != 0:
            raise SlurmCommandError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[:300]}")
        return done.stdout


@dataclass
class DaemonOptions:
    partition: str = "dltsched"
    state_file: Path = Path("dltsched-slurm-state.json")
    events_file: Path | None = None
    poll_s: float = 5.0
    preempt: bool = False
    dry_run: bool = False
    time_limit: str | None = None
    start_timeout_s: float = 60.0
    round: RoundConfig = field(default_factory=RoundConfig)


class SlurmDaemon:
    """The scheduling loop. ``run`` executes a Slurm command and returns its stdout (raises
    :class:`SlurmCommandError` on failure)."""

    def __init__(self, options: DaemonOptions, run: Callable[[Sequence[str]], str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.options, self.run, self.clock = options, run or SlurmCommands(), clock
        self.released: dict[str, dict[str, Any]] = self._load_state()
        self.warm: Any = None
        self.bad_comments: set[str] = set()
        self.stopping = False

    # --- state file: the jobs this daemon released, written atomically
    def _load_state(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.options.state_file.read_text())
            return {str(k): dict(v) for k, v in data.get("released", {}).items()}
        except FileNotFoundError:
            return {}
        except (json.JSONDecodeError, AttributeError, TypeError, ValueError) as err:
            log.warning("state file %s unreadable (%s); starting from Slurm's state alone", self.options.state_file, err)
            return {}

    def _save_state(self) -> None:
        if self.options.dry_run:
            return
        path = self.options.state_file
        write_atomically(path, json.dumps({"version": 1, "released": self.released}, indent=1, sort_keys=True).encode())

    def _event(self, **record: Any) -> None:
        if self.options.events_file is not None and not self.options.dry_run:
            with self.options.events_file.open("a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")

    # --- one round
    def snapshot(self) -> tuple[Snapshot, list[Action]]:
        """Read Slurm; the round's snapshot, and the holds that restore dltsched's control first."""
        part = self.options.partition
        jobs = parse_squeue_json(self.run(["squeue", "--json", "--partition", part]))
        nodes = tuple(n for n in parse_sinfo_json(self.run(["sinfo", "--json", "--partition", part]))
                      if part in n.partitions)
        now = self.clock()
        running: dict[str, Placement] = {}
        queued, specs, fixes = [], {}, []
        num_gpus: dict[str, int] = {}
        submit: dict[str, float] = {}
        start: dict[str, float] = {}
        foreign: dict[str, set[int]] = {n.name: set(n.used_gpus) for n in nodes}
        promised: list[tuple[str, Mapping[str, Any]]] = []
        seen = set()
        for j in jobs:
            try:
                spec = parse_comment(j.comment) if j.partition == part else None
            except ValidationError as err:
                if j.job_id not in self.bad_comments:
                    log.warning("job %s stays held: %s", j.job_id, err)
                    self.bad_comments.add(j.job_id)
                continue
            if spec is None:
                continue
            seen.add(j.job_id)
            if j.state in ACTIVE_STATES:
                if len(j.gpus) != 1:
                    if len(j.gpus) > 1:
                        log.warning("job %s runs on %d nodes; its GPUs count as others'", j.job_id, len(j.gpus))
                    continue
                (node, idx), = j.gpus.items()
                for_node = foreign.setdefault(node, set())
                for_node.difference_update(idx)
                running[j.job_id] = Placement(node, idx)
                self.released.pop(j.job_id, None)
            elif j.state == "PENDING":
                mine = self.released.get(j.job_id)
                if j.held:
                    self.released.pop(j.job_id, None)
                    queued.append(j.job_id)
                elif mine is None or mine.get("restarts", 0) != j.restart_count \
                        or now - float(mine.get("at", now)) > self.options.start_timeout_s:
                    fixes.append(Action("hold", j.job_id))  # not started as planned: back under our control
                    self.released.pop(j.job_id, None)
                    continue
                else:
                    promised.append((j.job_id, mine))
            else:
                self.released.pop(j.job_id, None)
                continue
            specs[j.job_id] = spec
            num_gpus[j.job_id] = max(1, j.num_gpus)
            submit[j.job_id] = float(j.submit_time)
            if j.start_time and j.state in ACTIVE_STATES:
                start[j.job_id] = float(j.start_time)
        for job_id in set(self.released) - seen:  # gone from Slurm: finished long ago or cancelled
            self.released.pop(job_id)
        # released, not started yet: Slurm will give them GPUs of their node that nobody holds now (which
        # ones is Slurm's choice); when too few are left, the job is taken back and re-planned
        size = {n.name: n.num_gpus for n in nodes}
        taken = {name: set(idx) for name, idx in foreign.items()}
        for p in running.values():
            taken.setdefault(p.node, set()).update(p.gpus)
        for job_id, record in promised:
            node, count = str(record["node"]), len(record["gpus"])
            free = [g for g in range(size.get(node, 0)) if g not in taken.setdefault(node, set())]
            if len(free) < count:
                fixes.append(Action("hold", job_id))
                self.released.pop(job_id, None)
                for table in (specs, num_gpus, submit):
                    table.pop(job_id, None)  # type: ignore[attr-defined]
                continue
            running[job_id] = Placement(node, tuple(free[:count]))
            taken[node].update(free[:count])
        snap = Snapshot(now, nodes, running, tuple(queued), specs, num_gpus, submit, start,
                        {k: tuple(sorted(v)) for k, v in foreign.items() if v})
        return snap, fixes

    def round(self) -> list[Action]:
        """One round: read, solve, apply. Returns the actions taken (planned, with ``dry_run``)."""
        snap, actions = self.snapshot()
        if snap.queued or (self.options.preempt and snap.running):
            placements, self.warm = decide(snap, self.options.round, self.warm)
            actions += plan_actions(snap, placements, preempt=self.options.preempt)
        for action in actions:
            self.apply(action)
        self._save_state()
        return actions

    def apply(self, action: Action) -> None:
        if self.options.dry_run:
            for cmd in action.commands(self.options.time_limit):
                click.echo(" ".join(cmd))
            return
        if action.kind == "start":  # remembered before the release: a crash in between is recovered
            self.released[action.job_id] = {"node": action.node, "gpus": list(action.gpus), "at": self.clock(),
                                            "restarts": 0}
            self._save_state()
        try:
            for cmd in action.commands(self.options.time_limit):
                self.run(cmd)
        except SlurmCommandError as err:  # the job finished or vanished meanwhile; Slurm's state decides
            log.warning("job %s: %s failed: %s", action.job_id, action.kind, err)
            self.released.pop(action.job_id, None)
            return
        log.info("job %s: %s %s %s", action.job_id, action.kind, action.node, list(action.gpus))
        self._event(time=self.clock(), action=action.kind, job=action.job_id, node=action.node, gpus=list(action.gpus))

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
        """Rounds every ``poll_s`` until SIGTERM/SIGINT (or one round with ``once``, which raises when it fails).
        A round that cannot reach Slurm is logged and retried; the daemon does not exit on it."""
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
            if once:
                return
            deadline = time.monotonic() + self.options.poll_s
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(min(0.2, self.options.poll_s))


@click.command("slurm")
@click.option("--partition", default="dltsched", show_default=True, help="Partition whose held jobs dltsched decides.")
@click.option("--poll", "poll_s", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds between rounds.")
@click.option("--state-file", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("dltsched-slurm-state.json"), show_default=True, help="Where the daemon keeps what it released.")
@click.option("--events", "events_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Append one JSON line per action taken.")
@click.option("--backend", type=BackendName(), default="cpsat", show_default=True,
              help="Round solver backend: cpsat | milp | greedy | greedy:<policy> | auto.")
@click.option("--objective", default="jct", show_default=True)
@click.option("--solver-time-limit", "solver_s", type=click.FloatRange(min=0.01), default=5.0, show_default=True)
@click.option("--gpu-type", default="v100", show_default=True, help="GPU type of nodes whose gres names none.")
@click.option("--time-limit", default=None, help="Slurm TimeLimit set on each job it starts (e.g. 2:00:00).")
@click.option("--preempt/--no-preempt", default=False, show_default=True,
              help="Requeue (held) running jobs the plan stops or moves; they restart from their checkpoint.")
@click.option("--start-timeout", "start_timeout_s", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="A released job Slurm has not started after this many seconds is held and re-planned.")
@click.option("--once", is_flag=True, help="One round, then exit.")
@click.option("--dry-run", is_flag=True, help="Print the scontrol commands instead of running them.")
@click.option("--slurm-conf", default=None, help="SLURM_CONF for the Slurm commands (default: the environment's).")
def slurm(partition: str, poll_s: float, state_file: Path, events_file: Path | None, backend: str, objective: str,
          solver_s: float, gpu_type: str, time_limit: str | None, preempt: bool, start_timeout_s: float, once: bool,
          dry_run: bool, slurm_conf: str | None) -> None:
    """Schedule a Slurm partition's held GPU jobs with dltsched, round by round."""
    from dltsched.engine.app.api import SolveConfig

    SolveConfig(backend=backend, objective=objective, time_limit_s=solver_s)  # bad settings fail here, exit 2
    options = DaemonOptions(partition=partition, state_file=state_file, events_file=events_file, poll_s=poll_s,
                            preempt=preempt, dry_run=dry_run, time_limit=time_limit, start_timeout_s=start_timeout_s,
                            round=RoundConfig(backend=backend, objective=objective, time_limit_s=solver_s,
                                              default_gpu_type=gpu_type))
    daemon = SlurmDaemon(options, SlurmCommands(slurm_conf))
    daemon.warm_up()
    daemon.run_forever(once=once)
