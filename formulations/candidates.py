"""Pre-enumerated candidate placements: the decisions both backends choose from.

A candidate places one *unit* (a job alone or an allowed co-location group; all members share
the same ``num_gpus`` GPUs) on one GPU type at one location:

- ``type``: a one-GPU unit on any free GPU of the type (nodes do not matter for one GPU);
- ``node``: a multi-GPU unit inside node ``where`` (gang in one node whenever one fits);
- ``cross``: a multi-GPU unit larger than every node of the type, spread over nodes;
- ``stay``: a unit on the current GPUs of running slot ``where`` (its members from the slot
  do not migrate);
- ``class``: a multi-GPU unit on some node of aggregated node class ``where`` (interchangeable empty nodes,
  :mod:`~dltsched.formulations.aggregate`): it stands for the unit's ``node`` candidates on those nodes.

A multi-GPU unit is offered at most ``max_nodes_per_unit`` nodes per type: its members' current
nodes, the node with the most GPUs free of running jobs, and nodes that can host it without
preemption, spread over units deterministically (a restriction of the candidate set; rounds with
few nodes see every node); the offered nodes of an aggregated class become one candidate on the class.
Memory is a per-GPU filter, not a shared resource, so each (unit, type, location) keeps only its best
memory-feasible freeze levels. A co-location unit is not offered at a place (GPU type, kind and location, a
kept slot included) where one of its members alone is worth at least as much (except with the ``makespan``
objective, where each member's completion counts on its own): the member's candidate there uses the same
GPUs and a subset of the unit's rows, so an optimum without the unit's exists (about half the candidates
of the optimizing policy's rounds). Objectives are handled in maximisation form: a candidate's ``gain`` is
its score plus the migration penalty its staying members save; see :func:`objective_of`. Capacity is then
exact with per-node counts for multi-GPU units, per-class counts for aggregated classes and per-type counts
for everything (one-GPU units fit in any free GPU).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from itertools import product

from dltsched.engine.domain.model import Objective
from dltsched.formulations.aggregate import NodeClass, class_of, empty_node_classes
from dltsched.formulations.interference import simulate_stages
from dltsched.formulations.problem import JobOption, RoundProblem


class CandidateKind(StrEnum):
    """Where a candidate places its unit (see the module docstring); a ``str``: ``kind == "node"`` holds."""

    TYPE = "type"
    NODE = "node"
    CROSS = "cross"
    STAY = "stay"
    CLASS = "class"


#: the members the inner loops use, bound once (looking a member up on its enum class is slow)
_MAKESPAN, _WEIGHTED_COMPLETION = Objective.MAKESPAN, Objective.WEIGHTED_COMPLETION
_TYPE, _NODE, _CROSS, _STAY = CandidateKind.TYPE, CandidateKind.NODE, CandidateKind.CROSS, CandidateKind.STAY
_CLASS = CandidateKind.CLASS
_NO_GAIN = -math.inf


@dataclass(frozen=True, slots=True)
class Slot:
    """GPUs that running jobs ``members`` share now; ``node_gpus`` counts them per node."""

    gpus: tuple[int, ...]
    members: tuple[int, ...]
    gpu_type: str
    node_gpus: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One unit at one location (see module docstring); ``completion_s`` per member, predicted."""

    jobs: tuple[int, ...]
    freeze: tuple[int, ...]
    gpu_type: str
    kind: CandidateKind
    where: int
    num_gpus: int
    gain: float
    completion_s: tuple[float, ...]


def _candidate_maker() -> Callable[[tuple[int, ...], tuple[int, ...], str, CandidateKind, int, int, float,
                                      tuple[float, ...]], Candidate]:
    """A function that makes the same :class:`Candidate` as its constructor, with the same arguments, without
    the frozen dataclass's ``object.__setattr__`` per field (a round makes thousands: 1.3 -> 0.5 us each)."""
    names = ("jobs", "freeze", "gpu_type", "kind", "where", "num_gpus", "gain", "completion_s")
    if tuple(f.name for f in fields(Candidate)) != names:  # pragma: no cover - kept in step with the class
        raise AssertionError("Candidate's fields changed: update _candidate_maker")
    new = object.__new__
    s_jobs, s_freeze, s_type, s_kind, s_where, s_gpus, s_gain, s_completion = (
        getattr(Candidate, name).__set__ for name in names)

    def make(jobs: tuple[int, ...], freeze: tuple[int, ...], gpu_type: str, kind: CandidateKind, where: int,
             num_gpus: int, gain: float, completion_s: tuple[float, ...]) -> Candidate:
        cand: Candidate = new(Candidate)
        s_jobs(cand, jobs)
        s_freeze(cand, freeze)
        s_type(cand, gpu_type)
        s_kind(cand, kind)
        s_where(cand, where)
        s_gpus(cand, num_gpus)
        s_gain(cand, gain)
        s_completion(cand, completion_s)
        return cand

    return make


_candidate = _candidate_maker()


@dataclass(frozen=True, slots=True)
class CandidateSet:
    """All candidates of a round plus the data the backends need to state constraints; ``classes``: the
    aggregated node classes that ``class`` candidates name (``None``: those of
    :func:`~dltsched.formulations.aggregate.empty_node_classes`, a function of the round; see
    :func:`node_classes_of`)."""

    problem: RoundProblem
    candidates: tuple[Candidate, ...]
    slots: tuple[Slot, ...]
    slot_conflicts: tuple[tuple[int, int], ...]
    by_job: tuple[tuple[int, ...], ...]
    unplaced_completion_s: tuple[float, ...]
    classes: tuple[NodeClass, ...] | None = None


def member_alone_as_good(alone: Mapping[tuple[int, str, str, int], float], cand: Candidate) -> bool:
    """Whether one of the co-location candidate ``cand``'s members alone, at the same GPU type and place
    (kind and location), is worth at least as much: ``alone`` maps (job, GPU type, kind, location) to the
    best gain of that job's own candidate there (the rule on dominated groups, see the module docstring).

    Parameters
    ----------
    alone
        The gains of one-job candidates by (job, GPU type, kind, location).
    cand
        The co-location candidate.

    Returns
    -------
    bool
        True when a member's own candidate there gains at least as much.
    """
    return alone_as_good(alone, cand.jobs, cand.gpu_type, cand.kind, cand.where, cand.gain)


def alone_as_good(alone: Mapping[tuple[int, str, str, int], float], jobs: tuple[int, ...], gpu_type: str,
                  kind: str, where: int, gain: float) -> bool:
    """:func:`member_alone_as_good` of a candidate given by its fields (asked before it is made)."""
    get = alone.get
    for j in jobs:  # a loop, not any() over a generator: asked for every co-location candidate of a round
        if get((j, gpu_type, kind, where), _NO_GAIN) >= gain:
            return True
    return False


def node_classes_of(cset: CandidateSet) -> tuple[NodeClass, ...]:
    """The aggregated node classes the ``class`` candidates of ``cset`` name (by index)."""
    return empty_node_classes(cset.problem) if cset.classes is None else cset.classes


def unplaced_completion_s(problem: RoundProblem) -> tuple[float, ...]:
    """A job left out waits one round, then runs alone at its reference rate."""
    return tuple(problem.options.round_s + j.remaining_iterations / j.reference_rate for j in problem.jobs)


def starvation_bonus(problem: RoundProblem, job: int) -> float:
    """What placing queued job ``job`` is worth for the time it waited: ``starvation_weight`` per hour of its
    age, in objective units."""
    return problem.options.starvation_weight * problem.jobs[job].age_s / 3600.0


def build_candidates(problem: RoundProblem) -> CandidateSet:
    """Enumerate every candidate of ``problem`` (deterministic order)."""
    slots = find_slots(problem)
    units: list[tuple[tuple[int, ...], str | None]] = [((j,), None) for j in range(len(problem.jobs))]
    units += [(g.jobs, g.gpu_type) for g in problem.groups if g.allowed]
    waiting = unplaced_completion_s(problem)
    free_now = _free_now(problem)
    slots_of_job: dict[int, list[int]] = defaultdict(list)  # slots a running job sits in (only they keep it)
    for p, slot in enumerate(slots):
        for j in slot.members:
            slots_of_job[j].append(p)
    out: list[Candidate] = []
    fitting: dict[tuple[str, int], _Fitting] = {}  # per (GPU type, gang size), the same for every unit
    job_types = [tuple(dict.fromkeys(o.gpu_type for o in job.options)) for job in problem.jobs]
    asks = [(jobs, gpu_type) for jobs, group_type in units
            for gpu_type in ((group_type,) if group_type else job_types[jobs[0]])]
    found = iter(best_freeze_levels(problem, asks, waiting))
    classes = empty_node_classes(problem)
    aggregated = class_of(classes)
    largest = {t: problem.max_node_gpus(t) for t in problem.gpu_types()}
    round_jobs = problem.jobs
    # a slot's (GPU type, GPUs): a unit stays only in slots of its type and size
    slot_shape = [(slot.gpu_type, len(slot.gpus)) for slot in slots]
    # (job, GPU type, kind, place) -> the gain of the job alone there, for the rule on dominated groups
    alone: dict[tuple[int, str, str, int], float] | None = \
        None if problem.options.objective is _MAKESPAN else {}
    for u, (jobs, group_type) in enumerate(units):
        types = (group_type,) if group_type else job_types[jobs[0]]
        size = round_jobs[jobs[0]].num_gpus
        single = len(jobs) == 1
        if single:
            mine = slots_of_job.get(jobs[0], ())
        else:
            held = [slots_of_job[j] for j in jobs if j in slots_of_job]
            mine = (held[0] if len(held) == 1 else sorted({p for ps in held for p in ps})) if held else ()
        for gpu_type in types:
            best = next(found)
            if best is None:
                continue
            freeze, score, completion = best
            gain = score + 0.0
            # the unit's places on the type: (kind, location, gain)
            places: list[tuple[CandidateKind, int, float]]
            if size == 1 or size > largest[gpu_type]:
                places = [(_TYPE if size == 1 else _CROSS, -1, gain)]
            else:
                nodes = _offered_nodes(problem, jobs, gpu_type, free_now, u, fitting)
                if aggregated:
                    places = [(kind, where, gain) for kind, where in dict.fromkeys(
                        (_CLASS, aggregated[n]) if n in aggregated else (_NODE, n) for n in nodes)]
                else:
                    places = [(_NODE, n, gain) for n in nodes]
            if mine:
                shape = (gpu_type, size)
                for p in mine:
                    if slot_shape[p] == shape:
                        places += _stays(problem, jobs, gpu_type, size, slots, mine, score)
                        break
            if alone is not None:
                if single:
                    j = jobs[0]
                    for kind, where, value in places:
                        alone[(j, gpu_type, kind, where)] = value
                else:  # not offered where a member alone is worth as much (see the module docstring)
                    places = [place for place in places if not alone_as_good(alone, jobs, gpu_type, *place)]
            for kind, where, value in places:
                out.append(_candidate(jobs, freeze, gpu_type, kind, where, size, value, completion))
    by_job: list[list[int]] = [[] for _ in problem.jobs]
    for c, cand in enumerate(out):
        for j in cand.jobs:
            by_job[j].append(c)
    on_gpu: dict[int, list[int]] = defaultdict(list)
    for p, slot in enumerate(slots):
        for g in slot.gpus:
            on_gpu[g].append(p)
    conflicts = tuple(sorted({(a, b) for held in on_gpu.values()
                              for i, a in enumerate(held) for b in held[i + 1:]}))
    return CandidateSet(problem, tuple(out), slots, conflicts, tuple(tuple(b) for b in by_job), waiting,
                        classes)


def find_slots(problem: RoundProblem) -> tuple[Slot, ...]:
    """Current GPU sets of running jobs that a plan may keep (one type, gang rule respected)."""
    node_of = problem.node_of
    down = problem.down_gpus()
    members: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for j, job in enumerate(problem.jobs):
        if job.current_gpus:
            members[job.current_gpus].append(j)
    slots = []
    for gpus, jobs in sorted(members.items()):
        types = {problem.nodes[node_of[g]].gpu_type for g in gpus}
        counts: dict[int, int] = defaultdict(int)
        for g in gpus:
            counts[node_of[g]] += 1
        gpu_type = types.pop()
        if types or (len(counts) > 1 and problem.max_node_gpus(gpu_type) >= len(gpus)) or down & set(gpus):
            continue
        slots.append(Slot(gpus, tuple(jobs), gpu_type, tuple(sorted(counts.items()))))
    return tuple(slots)


def _free_now(problem: RoundProblem) -> list[int]:
    """Usable GPUs of each node that no running job holds now."""
    node_of = problem.node_of
    held = {g for job in problem.jobs for g in job.current_gpus} - problem.down_gpus()
    free = [node.usable_gpus for node in problem.nodes]
    for g in held:
        free[node_of[g]] -= 1
    return free


#: nodes of a type where a gang fits, as a set, the roomy ones (those free now, else all) and the most free
_Fitting = tuple[list[int], set[int], list[int], int | None]


def _offered_nodes(problem: RoundProblem, jobs: tuple[int, ...], gpu_type: str, free_now: Sequence[int],
                   unit: int, fitting: dict[tuple[str, int], _Fitting] | None = None) -> list[int]:
    """Nodes a multi-GPU unit may use on ``gpu_type`` (see module docstring); ``fitting`` keeps what every
    unit of the same type and gang size shares (the list returned for one-GPU units is shared: do not change
    it)."""
    size = problem.jobs[jobs[0]].num_gpus
    found = None if fitting is None else fitting.get((gpu_type, size))
    if found is None:
        fits = [n for n in problem.nodes_of_type(gpu_type) if problem.nodes[n].usable_gpus >= size]
        most = max(fits, key=lambda n: (free_now[n], -n)) if fits else None
        found = (fits, set(fits), [n for n in fits if free_now[n] >= size] or fits, most)
        if fitting is not None:
            fitting[(gpu_type, size)] = found
    fits, fit_set, roomy, most = found
    limit = problem.options.max_nodes_per_unit
    if size == 1 or len(fits) <= limit:
        return fits
    node_of = problem.node_of
    chosen = dict.fromkeys(node_of[g] for j in jobs for g in problem.jobs[j].current_gpus
                           if node_of[g] in fit_set)
    assert most is not None  # more nodes fit than the limit
    chosen[most] = None
    start = (unit * limit) % len(roomy)
    for i in range(len(roomy)):
        if len(chosen) >= limit:
            break
        chosen[roomy[(start + i) % len(roomy)]] = None
    return sorted(chosen)


def _stays(problem: RoundProblem, jobs: tuple[int, ...], gpu_type: str, size: int, slots: Sequence[Slot],
           mine: Sequence[int], score: float) -> list[tuple[CandidateKind, int, float]]:
    """The ``stay`` places (kind, slot, gain) of one unit on one type at its best freeze levels' ``score``;
    ``mine``: the slots (ascending) holding any of its jobs now (the unit's staying members save their
    migration penalty)."""
    running: set[int] | None = None
    out = []
    for p in mine:
        slot = slots[p]
        if slot.gpu_type != gpu_type or len(slot.gpus) != size:
            continue
        if running is None:
            running = {j for j in jobs if problem.jobs[j].running}
        stayers = running & set(slot.members)
        if stayers:
            saved = sum(problem.migration_cost(j) for j in stayers)
            out.append((_STAY, p, score + saved))
    return out


#: a unit's best freeze levels on a type: (levels, score, completion per member; empty when maximising)
_Best = tuple[tuple[int, ...], float, tuple[float, ...]]


def best_freeze_levels(problem: RoundProblem, asks: Sequence[tuple[tuple[int, ...], str]],
                       waiting: Sequence[float], *, bulk: bool = True) -> list[_Best | None]:
    """:func:`_best_freeze` of every (unit, GPU type) in ``asks``, in their order (``None``: no
    memory-feasible levels). For the maximised objectives, one-job and two-job units are decided together in
    numpy with the same floating-point operations, in the same order, as :func:`_best_progress` (the same
    levels and scores to the bit; the first best combination in product order); larger groups and the
    minimised objectives take :func:`_best_freeze` one by one (every unit with ``bulk=False``: the reference
    the numpy path is tested against)."""
    largest = {t: problem.max_node_gpus(t) for t in problem.gpu_types()}
    out: list[_Best | None] = [None] * len(asks)
    if problem.options.minimize or not bulk:
        for i, (jobs, gpu_type) in enumerate(asks):
            cross = problem.jobs[jobs[0]].num_gpus > largest[gpu_type]
            out[i] = _best_freeze(problem, jobs, gpu_type, cross, waiting)
        return out
    table = _OptionTable(problem, largest)
    singles = [i for i, (jobs, _) in enumerate(asks) if len(jobs) == 1]
    pairs = [i for i, (jobs, _) in enumerate(asks) if len(jobs) == 2]
    for i, (jobs, gpu_type) in enumerate(asks):
        if len(jobs) > 2:
            cross = problem.jobs[jobs[0]].num_gpus > largest[gpu_type]
            out[i] = _best_freeze(problem, jobs, gpu_type, cross, waiting)
    for chosen in (singles, pairs):
        if chosen:
            for i, best in zip(chosen, table.best([asks[i] for i in chosen]), strict=True):
                out[i] = best
    return out


class _OptionTable:
    """Every job's options per GPU type as padded numpy rows (rate at the unit's cross-node setting, memory,
    level), and per job the factors of its progress term; :meth:`best` decides units of one size at once."""

    def __init__(self, problem: RoundProblem, largest: dict[str, int]) -> None:
        import numpy as np

        self.problem = problem
        self.row: dict[tuple[int, str], int] = {}
        rates: list[list[float]] = []
        memory: list[list[float]] = []
        levels: list[list[int]] = []
        for j, job in enumerate(problem.jobs):
            of_type: dict[str, int] = {}
            for o in job.options:
                r = of_type.get(o.gpu_type)
                if r is None:
                    r = of_type[o.gpu_type] = len(rates)
                    self.row[(j, o.gpu_type)] = r
                    rates.append([])
                    memory.append([])
                    levels.append([])
                rates[r].append(o.rate(job.num_gpus > largest[o.gpu_type]))
                memory[r].append(o.memory_mib)
                levels[r].append(o.freeze_level)
        width = max((len(r) for r in rates), default=1)
        self.width = width
        self.rate = np.zeros((len(rates) + 1, width))  # the last row: no option (a job without the type)
        self.memory = np.full((len(rates) + 1, width), np.inf)
        self.level = np.zeros((len(rates) + 1, width), dtype=np.int64)
        for r, (rate, mem, level) in enumerate(zip(rates, memory, levels, strict=True)):
            self.rate[r, :len(rate)] = rate
            self.memory[r, :len(mem)] = mem
            self.level[r, :len(level)] = level
        self.missing = len(rates)
        self.weight = np.array([job.weight for job in problem.jobs])
        self.reference = np.array([job.reference_rate for job in problem.jobs])
        self.scale = np.array([problem.value_scale(j) for j in range(len(problem.jobs))])
        self.bonus = np.array([starvation_bonus(problem, j) for j in range(len(problem.jobs))])

    def best(self, asks: Sequence[tuple[tuple[int, ...], str]]) -> list[_Best | None]:
        """The best levels of units of one size (one or two jobs), as :func:`_best_progress` finds them."""
        import numpy as np

        problem = self.problem
        size = len(asks[0][0])
        members = np.array([jobs for jobs, _ in asks], dtype=np.int64).reshape(len(asks), size)
        rows = np.array([[self.row.get((j, t), self.missing) for j in jobs] for jobs, t in asks],
                        dtype=np.int64).reshape(len(asks), size)
        capacity = np.array([problem.memory_mib_of(t) for _, t in asks])
        if size == 1:
            speeds = np.ones((len(asks), 1))
            overhead = np.zeros(len(asks))
        else:
            groups = [problem.group(jobs, t) for jobs, t in asks]
            speeds = np.array([problem.value_speeds(g) if g else (1.0,) * size for g in groups])
            overhead = np.array([g.overhead_mib if g else 0.0 for g in groups])
        # per member and option: weight x speed x rate / reference rate x value scale, left to right
        terms = ((self.weight[members] * speeds)[:, :, None] * self.rate[rows]) \
            / self.reference[members][:, :, None] * self.scale[members][:, :, None]
        memory = self.memory[rows]
        bonus = self.bonus[members[:, 0]]
        if size == 1:
            score = terms[:, 0, :] + bonus[:, None]
            need = memory[:, 0, :] + overhead[:, None]
        else:
            bonus = bonus + self.bonus[members[:, 1]]
            score = ((terms[:, 0, :, None] + terms[:, 1, None, :]) + bonus[:, None, None]).reshape(
                len(asks), -1)
            need = ((memory[:, 0, :, None] + memory[:, 1, None, :]) + overhead[:, None, None]).reshape(
                len(asks), -1)
        feasible = ~(need > capacity[:, None])
        score = np.where(feasible, score, -np.inf)
        pick = np.argmax(score, axis=1)
        fits = feasible[np.arange(len(asks)), pick]
        value = score[np.arange(len(asks)), pick].tolist()
        width = self.width
        first = (pick // width if size == 2 else pick).tolist()
        second = (pick % width).tolist()
        level = self.level
        first_level = level[rows[:, 0], first].tolist()
        out: list[_Best | None] = []
        if size == 1:
            for u, ok in enumerate(fits.tolist()):
                out.append(((first_level[u],), value[u], ()) if ok else None)
            return out
        second_level = level[rows[:, 1], second].tolist()
        for u, ok in enumerate(fits.tolist()):
            out.append(((first_level[u], second_level[u]), value[u], ()) if ok else None)
        return out


def _best_freeze(problem: RoundProblem, jobs: tuple[int, ...], gpu_type: str, cross: bool,
                 waiting: Sequence[float]) -> _Best | None:
    """Best memory-feasible freeze levels of a unit: (levels, score, completion per member)."""
    group = problem.group(jobs, gpu_type) if len(jobs) > 1 else None
    memory_mib = problem.memory_mib_of(gpu_type)
    overhead = group.overhead_mib if group else 0.0
    choices = [[o for o in problem.jobs[j].options if o.gpu_type == gpu_type] for j in jobs]
    if not problem.options.minimize:  # one term per member and option, summed per combination (as unit_score)
        speeds = problem.value_speeds(group) if group else (1.0,)
        return _best_progress(problem, jobs, speeds, choices, cross, overhead, memory_mib)
    makespan = problem.options.objective is _MAKESPAN
    best: tuple[tuple[float, float], tuple[int, ...], float, tuple[float, ...]] | None = None
    for combo in product(*choices):
        if sum(o.memory_mib for o in combo) + overhead > memory_mib:
            continue
        score, completion = unit_score(problem, jobs, combo, cross, waiting)
        key = (-max(completion), score) if makespan else (score, 0.0)
        if best is None or key > best[0]:
            best = (key, tuple(o.freeze_level for o in combo), score, completion)
    return None if best is None else best[1:]


def _best_progress(problem: RoundProblem, jobs: tuple[int, ...], speeds: Sequence[float],
                   choices: Sequence[Sequence[JobOption]], cross: bool, overhead_mib: float,
                   memory_mib: float) -> tuple[tuple[int, ...], float, tuple[float, ...]] | None:
    """:func:`_best_freeze` for the maximised objectives: each member's progress term per option computed once
    (the same floating-point operations as :func:`unit_score`), the first best combination in product
    order."""
    terms = []
    for j, speed, options in zip(jobs, speeds, choices, strict=True):
        job, scale = problem.jobs[j], problem.value_scale(j)
        terms.append([(job.weight * speed * o.rate(cross) / job.reference_rate * scale, o.memory_mib,
                       o.freeze_level) for o in options])
    bonus = sum(starvation_bonus(problem, j) for j in jobs)
    best: tuple[float, tuple[int, ...]] | None = None
    for combo in product(*terms):
        if sum(t[1] for t in combo) + overhead_mib > memory_mib:
            continue
        score = sum(t[0] for t in combo) + bonus
        if best is None or score > best[0]:
            best = (score, tuple(t[2] for t in combo))
    return None if best is None else (best[1], best[0], ())


def unit_score(problem: RoundProblem, jobs: tuple[int, ...], combo: Sequence[JobOption], cross: bool,
               waiting: Sequence[float]) -> tuple[float, tuple[float, ...]]:
    """Score (maximisation form, without migration) and completion times of a placed unit."""
    objective = problem.options.objective
    gpu_type = combo[0].gpu_type
    group = problem.group(jobs, gpu_type) if len(jobs) > 1 else None
    speeds = problem.value_speeds(group) if group is not None else (1.0,)
    rates = [o.rate(cross) for o in combo]
    bonus = sum(starvation_bonus(problem, j) for j in jobs)
    if not problem.options.minimize:
        progress = sum(problem.jobs[j].weight * s * r / problem.jobs[j].reference_rate
                       * problem.value_scale(j) for j, s, r in zip(jobs, speeds, rates, strict=True))
        return progress + bonus, ()
    completion = stage_completion_s(problem, jobs, gpu_type, rates)
    if objective is _WEIGHTED_COMPLETION:
        saved = sum(problem.jobs[j].weight * (waiting[j] - c) for j, c in zip(jobs, completion, strict=True))
        return saved + bonus, completion
    return bonus, completion


def stage_completion_s(problem: RoundProblem, jobs: tuple[int, ...], gpu_type: str,
                       rates: Sequence[float]) -> tuple[float, ...]:
    """Multi-stage completion time of each member when the unit starts now."""

    def speeds(active: tuple[int, ...]) -> Sequence[float]:
        group = problem.group(tuple(jobs[a] for a in active), gpu_type)
        if group is None:
            raise ValueError(f"round has no co-location speeds for jobs {[jobs[a] for a in active]} "
                             f"on {gpu_type}")
        order = {j: i for i, j in enumerate(group.jobs)}
        return [group.speeds[order[jobs[a]]] for a in active]

    remaining = [problem.jobs[j].remaining_iterations for j in jobs]
    return simulate_stages(remaining, rates, speeds).completion_s


def objective_of(cset: CandidateSet, selected: Sequence[int]) -> float:
    """The round's objective (in its own sense) of a set of chosen candidates."""
    problem = cset.problem
    chosen = [cset.candidates[c] for c in selected]
    value = sum(c.gain for c in chosen) - problem.running_migration_cost
    objective = problem.options.objective
    if not problem.options.minimize:
        return value
    if objective is _WEIGHTED_COMPLETION:
        waiting = zip(problem.jobs, cset.unplaced_completion_s, strict=True)
        return sum(j.weight * w for j, w in waiting) - value
    finish = list(cset.unplaced_completion_s)
    for cand in chosen:
        for j, c in zip(cand.jobs, cand.completion_s, strict=True):
            finish[j] = c
    return max(finish, default=0.0) - value


def to_reported(cset: CandidateSet, max_form: float) -> float:
    """A maximisation-form value (``sum gain - penalties [- makespan]``) in the objective's sense."""
    problem = cset.problem
    value = max_form - problem.running_migration_cost
    objective = problem.options.objective
    if not problem.options.minimize:
        return value
    if objective is _WEIGHTED_COMPLETION:
        waiting = zip(problem.jobs, cset.unplaced_completion_s, strict=True)
        return sum(j.weight * w for j, w in waiting) - value
    return -value
