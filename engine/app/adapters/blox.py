"""A Blox-style scheduling and placement policy backed by dltsched.

Blox (Agarwal et al., EuroSys 2024) composes a scheduler from a scheduling policy and a placement policy
that both receive its job and cluster state each round: ``job_dict`` (``job_state.active_jobs``: job id ->
dict with ``num_GPUs``, ``job_total_iteration``, ``job_executed_iteration``, ``job_iteration_time`` and
``tracked_metrics`` such as ``per_iter_time`` and ``attained_service``, ``job_arrival_time``,
``job_priority``), ``node_info`` (``cluster_state.server_map``: node id -> ``{"numGPUs", "ipaddr", ...}``)
and ``gpu_df`` (``cluster_state.gpu_df``: one row per GPU with ``GPU_ID``, ``Local_GPU_ID``, ``Node_ID``,
``IP_addr``, ``IN_USE``, ``JOB_IDS``; a pandas DataFrame or its ``to_dict("records")``). The scheduling
policy answers ``{"job_order": [(job_id, job), ...], "run_all_jobs": bool}``; the placement policy
``(jobs_to_terminate, jobs_to_launch)`` with ``jobs_to_launch = {job_id: [GPU_ID, ...]}``.

:class:`BloxPolicy` does both from one dltsched round: :meth:`BloxPolicy.schedule` solves it (the job
order puts the jobs the plan runs first, and the placement is kept in the answer under ``"placement"``);
:meth:`BloxPolicy.place` turns that placement into Blox's terminate / launch lists. A job's measured time
per iteration (``tracked_metrics["per_iter_time"]`` when > 0, else ``job_iteration_time``) is its step
time on every GPU type of the cluster, its memory is trusted, and it needs no model-zoo entry; a job whose
dict names a zoo model (``job_model`` or ``model``, with ``batch_size``) has its co-location predicted.
GPU types come from ``node_info[node]["gpu_type"]`` (else ``default_gpu_type``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from dltsched.engine.app.api import DEFAULT_OPTIONS, RoundOptions, solve_round
from dltsched.engine.app.measured import JobMeasurement, Measurements
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import (
    MEASURED_ONLY,
    Assignment,
    Cluster,
    ClusterState,
    Job,
    JobState,
    Node,
    Plan,
    resolve_model,
)
from dltsched.formulations.pipeline import ConfiguredSolver


def gpu_rows(gpu_df: Any) -> list[dict[str, Any]]:
    """``gpu_df`` as a list of row dicts (a pandas DataFrame, or rows already)."""
    if hasattr(gpu_df, "to_dict"):
        return list(gpu_df.to_dict("records"))
    if isinstance(gpu_df, Sequence):
        return [dict(r) for r in gpu_df]
    raise ValidationError("gpu_df", f"{type(gpu_df).__name__} not understood; a DataFrame or a list of rows")


def _number(job: Mapping[str, Any], name: str, job_id: Any, *, default: float | None = None) -> float:
    value = job.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        raise ValidationError(f"job_dict[{job_id}].{name}", f"{value!r} not understood; a number >= 0")
    return float(value)


class BloxPolicy:
    """dltsched as Blox's scheduling and placement policy.

    Parameters
    ----------
    options
        Round settings (default :data:`~dltsched.engine.app.api.DEFAULT_OPTIONS`, 2 s time limit).
    backend
        The round solver (``cpsat`` default).
    default_gpu_type
        GPU type of nodes whose ``node_info`` names none.
    round_s
        Blox's round length in seconds (sets ``options.round_s``).
    """

    def __init__(self, options: RoundOptions | None = None, *, backend: str = "cpsat",
                 default_gpu_type: str = "v100", round_s: float = 300.0) -> None:
        options = options or replace(DEFAULT_OPTIONS, time_limit_s=2.0)
        self.solver = ConfiguredSolver(replace(options, round_s=round_s), backend=backend)
        self.default_gpu_type = default_gpu_type
        self.last_plan: Plan | None = None

    def schedule(self, job_dict: Mapping[Any, Mapping[str, Any]], node_info: Mapping[Any, Mapping[str, Any]],
                 gpu_df: Any, global_placement_policy: str | None = None) -> dict[str, Any]:
        """Blox's scheduling-policy call.

        Returns
        -------
        dict
            ``job_order`` (the jobs the plan runs first, then the others by arrival), ``run_all_jobs``
            (``False``), ``placement`` (job id -> Blox ``GPU_ID`` list) and ``plan`` (the dltsched plan).

        Raises
        ------
        ValidationError
            When a field is not understood (the message names it).
        """
        state, measured, gpu_ids = self.round_of(job_dict, node_info, gpu_df)
        plan = solve_round(state, self.solver, measurements=measured, warm_start=self.last_plan)
        self.last_plan = plan
        placement = {a.job_id: [gpu_ids[g] for g in a.gpus] for a in plan.assignments}
        by_str = {str(k): k for k in job_dict}
        placed = [by_str[j] for j in placement]
        waiting = sorted((k for k in job_dict if str(k) not in placement),
                         key=lambda k: (job_dict[k].get("job_arrival_time", 0), str(k)))
        return {"job_order": [(k, job_dict[k]) for k in placed + waiting], "run_all_jobs": False,
                "placement": {by_str[j]: gpus for j, gpus in placement.items()}, "plan": plan}

    def place(self, active_jobs: Mapping[Any, Mapping[str, Any]], new_job_schedule: Mapping[str, Any],
              node_info: Mapping[Any, Mapping[str, Any]], gpu_df: Any,
              **kwargs: Any) -> tuple[list[Any], dict[Any, list[Any]]]:
        """Blox's placement-policy call: ``(jobs_to_terminate, jobs_to_launch)`` for the plan of
        :meth:`schedule` (passed back as ``new_job_schedule``): running jobs the plan stops or moves are
        terminated; jobs it starts or moves are launched on their ``GPU_ID`` list."""
        placement = new_job_schedule.get("placement")
        if not isinstance(placement, Mapping):
            raise ValidationError("new_job_schedule.placement",
                                  "missing; pass the answer of BloxPolicy.schedule")
        current = self.current_gpus(gpu_rows(gpu_df))
        terminate = [j for j, gpus in current.items() if sorted(placement.get(j, ())) != sorted(gpus)]
        launch = {j: list(gpus) for j, gpus in placement.items()
                  if sorted(current.get(j, ())) != sorted(gpus)}
        by_str = {str(k): k for k in active_jobs}
        return [by_str.get(str(j), j) for j in terminate], launch

    @staticmethod
    def current_gpus(rows: Sequence[Mapping[str, Any]]) -> dict[Any, list[Any]]:
        """Job id -> the ``GPU_ID`` s it holds now (rows in use; ``JOB_IDS`` one id or a list)."""
        out: dict[Any, list[Any]] = {}
        for row in rows:
            if not row.get("IN_USE"):
                continue
            ids = row.get("JOB_IDS")
            for job in ids if isinstance(ids, list | tuple | set) else [ids]:
                if job is not None:
                    out.setdefault(job, []).append(row["GPU_ID"])
        return out

    def round_of(self, job_dict: Mapping[Any, Mapping[str, Any]], node_info: Mapping[Any, Mapping[str, Any]],
                 gpu_df: Any) -> tuple[ClusterState, Measurements, dict[int, Any]]:
        """The dltsched round of Blox's state: the snapshot, the measurements and global GPU -> ``GPU_ID``."""
        rows = gpu_rows(gpu_df)
        for i, row in enumerate(rows):
            for name in ("GPU_ID", "Node_ID", "Local_GPU_ID"):
                if name not in row:
                    raise ValidationError(f"gpu_df[{i}].{name}", "missing")
        node_ids = sorted({r["Node_ID"] for r in rows}, key=lambda n: (str(type(n)), n))
        if not node_ids:
            raise ValidationError("gpu_df", "no GPUs; the cluster needs at least one")
        nodes: list[Node] = []
        gpu_ids: dict[int, Any] = {}
        index: dict[Any, int] = {}
        for n in node_ids:
            mine = sorted((r for r in rows if r["Node_ID"] == n), key=lambda r: r["Local_GPU_ID"])
            info = node_info.get(n, node_info.get(str(n), {})) or {}
            first = len(gpu_ids)
            for k, r in enumerate(mine):
                gpu_ids[first + k] = r["GPU_ID"]
                index[r["GPU_ID"]] = first + k
            nodes.append(Node(f"node-{n}", str(info.get("gpu_type", self.default_gpu_type)), len(mine)))
        cluster = Cluster(tuple(nodes))
        running = self.current_gpus(rows)
        now = max((_number(j, "job_arrival_time", k, default=0.0) for k, j in job_dict.items()), default=0.0)
        states, measured = [], {}
        for k, job in job_dict.items():
            job_id = str(k)
            gpus = int(_number(job, "num_GPUs", k))
            if gpus < 1:
                raise ValidationError(f"job_dict[{k}].num_GPUs", f"{gpus} not understood; at least 1")
            total = _number(job, "job_total_iteration", k)
            left = max(1.0, total - _number(job, "job_executed_iteration", k, default=0.0))
            metrics = job.get("tracked_metrics") or {}
            step = metrics.get("per_iter_time") if isinstance(metrics.get("per_iter_time"),
                                                              int | float) else 0.0
            if not step or step <= 0:
                step = _number(job, "job_iteration_time", k)
            if step <= 0:
                raise ValidationError(f"job_dict[{k}].job_iteration_time",
                                      "0; a measured time per iteration > 0")
            model = job.get("job_model", job.get("model"))
            try:
                name = resolve_model(str(model)) if model else MEASURED_ONLY
            except ValueError:
                name = MEASURED_ONLY  # a model the zoo does not know: described by its numbers
            batch = int(job.get("batch_size", 1) or 1)
            arrival = _number(job, "job_arrival_time", k, default=0.0)
            spec = Job(job_id, name, batch, max(total, left), num_gpus=gpus, arrival_time_s=arrival,
                       weight=1.0 / (1.0 + float(job.get("job_priority", 0) or 0)))
            held = running.get(k, running.get(job_id))
            assignment = None
            if held:
                try:
                    assignment = Assignment(job_id, tuple(index[g] for g in held))
                except KeyError:
                    raise ValidationError(f"gpu_df.JOB_IDS[{k}]", f"GPU(s) {held} not in gpu_df") from None
                if len(held) != gpus:
                    raise ValidationError(f"gpu_df.JOB_IDS[{k}]",
                                          f"{len(held)} GPUs in use for num_GPUs={gpus}")
            attained = float(metrics.get("attained_service", 0.0) or 0.0)
            states.append(JobState(spec, left, attained_service_s=attained, assignment=assignment,
                                   queued_since_s=arrival))
            measured[job_id] = JobMeasurement(step_time_s={"*": float(step)})
        state = ClusterState(now, cluster, tuple(states))
        return state, Measurements(measured, (), unknown_memory="trust"), gpu_ids
