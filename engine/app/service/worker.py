"""Deadline-bounded solving for the HTTP service: one forked process per request, killed at its deadline.

A request's time limit bounds the whole request, round and model building included. Building a round
of a few thousand jobs takes seconds (measured: 0.35 s for 200 jobs, 2 s for 1,000, 11 s for 5,000 on
one core) and cannot be interrupted from outside a thread, so each solve runs in a process forked from
a fork server that has the predictors loaded. The process decides through the one round pipeline
(:func:`dltsched.formulations.pipeline.decide_round`, which builds before it solves): the solver's time limit
is a share of what is left of the deadline after the building time expected for the round's size
(:data:`BUILD_S_PER_JOB`), and the process is killed when the deadline passes. The caller then answers with
the fallback policy's plan, marked ``fallback`` and ``partial``. Killing the process also returns its memory,
so one request costs at most ``time_limit_s`` of one core and the memory of one solve
(``max_worker_memory_mib``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

from dltsched.engine.app.api import load_predictors
from dltsched.engine.app.measured import Measurements
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import ClusterState, Plan
from dltsched.formulations.pipeline import ConfiguredSolver

log = logging.getLogger(__name__)

#: share of the time left after building that the solver may use; the rest returns the plan to the server
SOLVE_SHARE = 0.8
#: plan status of a solver stopped by its time limit before proving optimality: the best plan so far
#: (``feasible`` is a solver stopped by its gap limit: done, not cut short)
STOPPED_BY_LIMIT = ("timeout",)
#: building time expected per active job, seconds (measured on one core: 0.35 s for 200 jobs, 2 s for
#: 1,000, 11 s for 5,000), kept out of the solver's share of the deadline
BUILD_S_PER_JOB = 0.0025


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a worker decided: the plan, whether the deadline cut the request short, and why."""

    plan: Plan
    partial: bool
    reason: str = ""  # "" | "deadline" | "solver_failed" | "checker" | "worker_died"


def solve_until(state: ClusterState, config: ConfiguredSolver, deadline: float,
                measurements: Measurements | None = None) -> Outcome:
    """Decide the round of ``state`` by ``deadline`` (``time.monotonic()``), in this process.

    The one round pipeline (:meth:`ConfiguredSolver.solve`, i.e.
    :func:`dltsched.formulations.pipeline.decide_round`: build, solve, check, fall back), the caller's
    ``measurements`` first, with the solver's time limit set to
    :data:`SOLVE_SHARE` of what is left of the deadline after the expected building time
    (:data:`BUILD_S_PER_JOB`; past the deadline the process is killed and the server answers with the
    fallback plan). A solver failure or a plan the checker
    rejects gives the fallback policy's plan; a :class:`ValidationError` propagates (the client's fault).
    """
    from dltsched.engine.app.vocabulary import BackendChoice

    left = deadline - time.monotonic()
    if left <= 0:
        return fallback(state, config, "deadline",
                        f"time limit {config.time_limit_s:g} s reached before solving",
                        measurements)
    share = SOLVE_SHARE * (left - BUILD_S_PER_JOB * len(state.jobs))
    solver = config.with_options(time_limit_s=max(1e-3, min(config.time_limit_s, share)))
    plan = solver.solve(state, measurements=measurements)
    # the fallback's plan
    if plan.fallback and plan.backend == str(BackendChoice.baseline(config.fallback_policy)):
        return Outcome(plan, False, "checker" if "failed the checker" in plan.message else "solver_failed")
    partial = plan.status in STOPPED_BY_LIMIT or (plan.fallback and plan.status == "fallback")
    return Outcome(plan, partial, "deadline" if plan.fallback else "")


def fallback(state: ClusterState, config: ConfiguredSolver, reason: str, message: str,
             measurements: Measurements | None = None) -> Outcome:
    """The fallback policy's plan, marked ``fallback`` (and ``partial`` when the deadline caused it)."""
    return Outcome(config.fallback_plan(state, message, measurements=measurements),
                   reason == "deadline", reason)


def _child(conn: Connection, state: ClusterState, config: ConfiguredSolver, deadline: float,
           memory_mib: int | None, measurements: Measurements | None = None) -> None:
    """Entry point of a worker process: solve, send ``("ok", Outcome)`` or ``("invalid", (path,
    problem))``."""
    if memory_mib:
        limit = memory_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        conn.send(("ok", solve_until(state, config, deadline, measurements)))
    except ValidationError as err:
        conn.send(("invalid", (err.path, err.problem)))
    except MemoryError:
        conn.send(("memory", None))
    finally:
        conn.close()


_CONTEXT: Any = None
_FORK_SERVER_ENV = "DLTSCHED_SERVICE_FORK_SERVER"


def context(predictors: str = "default") -> Any:
    """The fork-server multiprocessing context, its server started: the server imports this module and
    loads the ``predictors`` set once (the first caller's), so a forked worker starts in milliseconds with
    them in memory."""
    global _CONTEXT
    if _CONTEXT is None:
        from multiprocessing import forkserver

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([__name__])
        os.environ[_FORK_SERVER_ENV] = predictors  # seen by the fork server only: it copies the environment
        try:
            forkserver.ensure_running()
        finally:
            del os.environ[_FORK_SERVER_ENV]
        _CONTEXT = ctx
    return _CONTEXT


def solve_in_worker(state: ClusterState, config: ConfiguredSolver, deadline: float, *,
                    memory_mib: int | None = None, measurements: Measurements | None = None) -> Outcome:
    """Solve in a forked worker process and wait until ``deadline``; past it, kill the worker and answer
    with the fallback policy's plan (``partial``). A worker that dies (out of memory, crash) also gives the
    fallback plan. Blocks: call it from a worker thread."""
    parent, child = context().Pipe(duplex=False)
    proc = context().Process(target=_child, args=(child, state, config, deadline, memory_mib, measurements),
                                 daemon=True)
    try:
        proc.start()
    except OSError as err:  # no process to be had (fork server gone, out of PIDs): the fallback answers
        log.warning("could not start a solver worker (%s); answering with the %s "
                    "plan", err, config.fallback_policy)
        parent.close()
        child.close()
        return fallback(state, config, "worker_died", f"no solver worker could start ({type(err).__name__})",
                        measurements)
    child.close()
    try:
        # made while the worker solves: ready at the deadline
        backup = fallback(state, config, "deadline", "", measurements)
        ready = parent.poll(max(0.0, deadline - time.monotonic()))
        message = parent.recv() if ready else None
    except (EOFError, OSError):
        message = ("died", None)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()
    if message is None:
        return Outcome(replace(backup.plan, message=f"time limit {config.time_limit_s:g} s reached before "
                               f"the {config.backend_for(len(state.jobs))} solve finished"), True, "deadline")
    kind, payload = message
    if kind == "ok":
        return payload  # type: ignore[no-any-return]
    if kind == "invalid":
        raise ValidationError(*payload)
    what = "ran out of memory" if kind == "memory" else f"died (exit code {proc.exitcode})"
    log.warning("solver worker %s; answering with the %s plan", what, config.fallback_policy)
    return Outcome(replace(backup.plan, message=f"solver worker {what}"), False, "worker_died")


def warm(predictors: str) -> None:
    """Load ``predictors`` and the round pipeline with its CP-SAT backend (in the fork server, so every
    worker inherits them instead of loading them per request)."""
    import dltsched.formulations
    import dltsched.formulations.backends.cpsat  # noqa: F401

    load_predictors(predictors)


if os.environ.get(_FORK_SERVER_ENV):  # imported by the fork server at its start (see context())
    try:
        warm(os.environ[_FORK_SERVER_ENV])
    except Exception as err:  # workers then load what they need themselves; the fork server must live
        log.warning("fork server could not preload predictors: %s", err)
