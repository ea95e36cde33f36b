"""The co-location sample type and readers for measured co-location data (Gavel, Lucid).

One :class:`ColocSample` is one GPU shared by 2..K jobs with its labels: each job's normalized
speed (co-located throughput / isolated throughput), and, where measured, the group's memory
(MiB) and GPU utilisation (%). A :class:`ColocDataset` adds the isolated profile of every job type
(step time, memory, utilisation alone on the GPU): predictors may use it as input, the way a
profiler measures a job alone before it is ever packed (Lucid, Gavel).

Some of Lucid's pairs are measurement failures: the group's memory equals its partner's isolated
memory (and its utilisation the partner's alone), so one job evidently never shared the GPU
(39 pairs, all with MobileNetV3). :func:`absent_member` finds them, :func:`idle_member` the pairs whose
utilisation is too low for the speeds recorded; :func:`without_absent` drops both (training uses it;
evaluations report figures on all pairs and, under ``valid``, on the rest).

Lucid's GPU model is not recorded in its repository. Its samples use the pseudo GPU id
``"lucid"``; GPU features map it to :data:`LUCID_PROXY_GPU` (a documented assumption) plus an
"unrecorded GPU" flag, so a model trained on Lucid never claims to know a real GPU from it.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dltsched.engine.domain.catalog import model_catalog, normalize_name
from dltsched.engine.domain.errors import ValidationError
from dltsched.instances.datadir import data_file

#: pseudo GPU id of Lucid's measurements (GPU model not recorded)
LUCID_GPU = "lucid"
#: catalog GPU whose spec stands in for Lucid's unrecorded GPU (assumption; flagged in features)
LUCID_PROXY_GPU = "v100-32gb"


@dataclass(frozen=True, slots=True, order=True)
class JobSpec:
    """A job type as co-location sees it: model id, batch size, mixed precision, dataset."""

    model: str
    batch_size: int
    amp: bool = False
    dataset: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValidationError("batch_size",
                                  f"{self.batch_size!r} not understood; must be an integer >= 1")

    @property
    def label(self) -> str:
        """``model:batch`` with ``:amp`` for mixed precision, e.g. ``resnet50:64:amp``."""
        return f"{self.model}:{self.batch_size}{':amp' if self.amp else ''}"


@dataclass(frozen=True, slots=True)
class IsolatedProfile:
    """A job type measured alone on one GPU; ``None`` where not measured (utilisations in %)."""

    step_time_s: float | None = None
    memory_mib: float | None = None
    gpu_util: float | None = None
    mem_bw_util: float | None = None


@dataclass(frozen=True, slots=True)
class ColocSample:
    """One measured co-location: ``jobs`` share one GPU of type ``gpu`` by ``sharing`` (``timeslice``: several
    processes time-sliced by the driver; ``mps``: CUDA MPS)."""

    gpu: str
    jobs: tuple[JobSpec, ...]
    speeds: tuple[float, ...]
    memory_mib: float | None = None
    gpu_util: float | None = None
    source: str = ""
    sharing: str = "timeslice"

    def __post_init__(self) -> None:
        if len(self.jobs) < 2:
            raise ValidationError("jobs", f"{len(self.jobs)} job(s); a co-location sample needs >= 2")
        if len(self.speeds) != len(self.jobs):
            raise ValidationError("speeds",
                                  f"{len(self.speeds)} speeds for {len(self.jobs)} jobs; one per job")

    @property
    def models(self) -> frozenset[str]:
        """The models in the group."""
        return frozenset(j.model for j in self.jobs)


@dataclass(frozen=True, slots=True)
class ColocDataset:
    """Samples plus the isolated profile of every (GPU, job type) they use."""

    samples: tuple[ColocSample, ...]
    isolated: Mapping[tuple[str, JobSpec], IsolatedProfile] = field(default_factory=dict)
    name: str = ""

    def subset(self, samples: Iterable[ColocSample]) -> ColocDataset:
        """A dataset of ``samples`` with this one's isolated profiles and name.

        Parameters
        ----------
        samples
            The samples to keep.

        Returns
        -------
        ColocDataset
            The subset.
        """
        return ColocDataset(tuple(samples), self.isolated, self.name)

    def gpus(self) -> tuple[str, ...]:
        """The GPU types the samples were measured on.

        Returns
        -------
        tuple[str, ...]
            Sorted GPU types.
        """
        return tuple(sorted({s.gpu for s in self.samples}))

    def models(self) -> tuple[str, ...]:
        """The models the samples hold.

        Returns
        -------
        tuple[str, ...]
            Sorted model ids.
        """
        return tuple(sorted({m for s in self.samples for m in s.models}))

    def __len__(self) -> int:
        return len(self.samples)


def canonical(jobs: Iterable[JobSpec],
              values: Iterable[float]) -> tuple[tuple[JobSpec, ...], tuple[float, ...]]:
    """Jobs sorted (with their values), so that (a, b) and (b, a) are one group."""
    pairs = sorted(zip(jobs, values, strict=True), key=lambda p: p[0])
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def absent_member(sample: ColocSample, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile], *,
                  rel: float = 0.02, tol_mib: float = 50.0) -> int | None:
    """Index of a job that evidently did not run during the measurement of ``sample``, else ``None``.

    Job ``i`` counts as absent when the group's memory is within ``rel`` x + ``tol_mib`` of the other
    jobs' summed isolated memory (what the GPU holds without job ``i``). Needs measured group memory
    and every job's isolated memory; otherwise ``None`` (nothing to check against).
    """
    if sample.memory_mib is None:
        return None
    mems = [isolated.get((sample.gpu, j)) for j in sample.jobs]
    if any(m is None or m.memory_mib is None for m in mems):
        return None
    values = [float(m.memory_mib) for m in mems]  # type: ignore[union-attr,arg-type]
    for i, own in enumerate(values):
        rest = sum(values) - own
        if own > tol_mib and abs(sample.memory_mib - rest) <= rel * rest + tol_mib:
            return i
    return None


def idle_member(sample: ColocSample, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile], *,
                factor: float = 0.5) -> int | None:
    """Index of a job whose measured speed the group's utilisation cannot hold, else ``None``.

    Under time slicing job ``i`` alone keeps the GPU busy ``u_i x min(1, s_i)`` of the time (its isolated
    utilisation times its co-located speed), so the group's utilisation is at least that; a group measured
    below ``factor`` times it evidently did not run job ``i`` as recorded (Lucid: 40 pairs, all with
    MobileNetV3, e.g. MobileNetV3 at 80% alone and speed 1.25 in a group at 13%). Needs measured group and
    isolated utilisation; otherwise ``None``.
    """
    if sample.gpu_util is None:
        return None
    profiles = [isolated.get((sample.gpu, j)) for j in sample.jobs]
    if any(p is None or p.gpu_util is None for p in profiles):
        return None
    busy = [p.gpu_util * min(1.0, v)
            for p, v in zip(profiles, sample.speeds, strict=True)]  # type: ignore[union-attr,operator]
    i = max(range(len(busy)), key=busy.__getitem__)
    return i if sample.gpu_util < factor * busy[i] else None


def suspect(sample: ColocSample, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> bool:
    """Whether a job evidently did not run as recorded (:func:`absent_member` or :func:`idle_member`)."""
    return absent_member(sample, isolated) is not None or idle_member(sample, isolated) is not None


def without_absent(data: ColocDataset) -> ColocDataset:
    """``data`` without the samples in which a job evidently did not run as recorded (see :func:`suspect`)."""
    return data.subset(s for s in data.samples if not suspect(s, data.isolated))


# ---------------------------------------------------------------------------------------- Gavel


def _gavel_spec(jt: object) -> JobSpec:
    return JobSpec(jt.model, jt.batch_size, False, jt.dataset)  # type: ignore[attr-defined]


def read_gavel_samples(path: str | os.PathLike[str] | None = None, *,
                       data_dir: str | os.PathLike[str] | None = None) -> ColocDataset:
    """Gavel pairs (K80, P100 here) with speeds normalized by the isolated throughput on the same GPU.

    Ordered pairs (a, b) and (b, a) are one group; when both were measured their speeds are averaged.
    Isolated profiles carry the step time (1 / steps per second) on every GPU, V100 included.
    """
    from dltsched.instances.readers.gavel_throughputs import read_gavel_throughputs

    raw = read_gavel_throughputs(path, data_dir=data_dir)
    isolated: dict[tuple[str, JobSpec], IsolatedProfile] = {}
    for (gpu, jt, scale, consolidated), steps_per_s in raw.isolated.items():
        if scale == 1 and consolidated and steps_per_s > 0:
            isolated[(gpu, _gavel_spec(jt))] = IsolatedProfile(step_time_s=1.0 / steps_per_s)
    groups: dict[tuple[str, tuple[JobSpec, ...]], list[tuple[float, ...]]] = {}
    for (gpu, jt_a, jt_b), (tp_a, tp_b) in raw.pairs.items():
        a, b = _gavel_spec(jt_a), _gavel_spec(jt_b)
        iso_a, iso_b = isolated.get((gpu, a)), isolated.get((gpu, b))
        if iso_a is None or iso_b is None or iso_a.step_time_s is None or iso_b.step_time_s is None:
            continue
        jobs, speeds = canonical((a, b), (tp_a * iso_a.step_time_s, tp_b * iso_b.step_time_s))
        groups.setdefault((gpu, jobs), []).append(speeds)
    samples = tuple(
        ColocSample(gpu, jobs, tuple(sum(v) / len(v) for v in zip(*runs, strict=True)), source="gavel")
        for (gpu, jobs), runs in sorted(groups.items())
    )
    return ColocDataset(samples, isolated, "gavel")


# ---------------------------------------------------------------------------------------- Lucid


def lucid_job(model: str, dataset: str, batch_size: str | int, amp: str | int | bool) -> JobSpec:
    """A Lucid job row as a :class:`JobSpec` (model names resolve through the model catalog)."""
    try:
        spec = model_catalog().get(model)
    except ValueError as err:
        raise ValidationError("model", str(err)) from None
    key = normalize_name(dataset)
    ds = next((d for d in spec.datasets if normalize_name(d) == key), None)
    return JobSpec(spec.id, int(batch_size), bool(int(amp)), ds)


def _number(text: str | None) -> float | None:
    """A CSV cell as a float; ``None`` for an empty or ``nan`` cell (not measured)."""
    if text is None or not text.strip():
        return None
    value = float(text)
    return None if math.isnan(value) else value


def _row_gpu(row: Mapping[str, str]) -> str:
    """The row's ``gpu`` column as a catalog GPU id (the profiling harness writes one); :data:`LUCID_GPU` when
    the column is absent (Lucid's own files) or names no catalog GPU (a CPU smoke run)."""
    from dltsched.engine.domain.catalog import gpu_catalog

    name = (row.get("gpu") or "").strip()
    if not name:
        return LUCID_GPU
    try:
        return gpu_catalog().resolve(name)
    except ValueError:
        return LUCID_GPU


def _read_lucid_isolated(path: Path) -> dict[tuple[str, JobSpec], IsolatedProfile]:
    out: dict[tuple[str, JobSpec], IsolatedProfile] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            job = lucid_job(row["model"], row["dataset"], row["batchsize"], row["amp"])
            speed = _number(row["speed"])
            bw = _number(row.get("gmem_util"))
            out[(_row_gpu(row), job)] = IsolatedProfile(
                step_time_s=job.batch_size / speed if speed else None,
                memory_mib=_number(row["gmem"]),
                gpu_util=_number(row["gpu_util"]),
                # memory-controller busy %, see predictors.profiles
                mem_bw_util=min(100.0, bw) if bw is not None else None,
            )
    return out


def _group_size(header: Sequence[str]) -> int:
    size = 0
    while f"model{size + 1}" in header:
        size += 1
    return size


def read_lucid_samples(path: str | os.PathLike[str] | None = None, *,
                       isolated_path: str | os.PathLike[str] | None = None,
                       data_dir: str | os.PathLike[str] | None = None) -> ColocDataset:
    """Measured groups in Lucid's layout (``colocate_info.csv``: pairs; the profiling harness's
    ``colocate3_info.csv``: ``model3 ... speed3`` too) with isolated profiles (``single_data.csv`` beside it).

    A ``gpu`` column naming a catalog GPU (the harness's files) keys samples and profiles by that GPU; without
    one every sample's GPU is :data:`LUCID_GPU` (Lucid's GPU model is unrecorded). ``nan`` cells are
    unmeasured (``None``). Lucid's data is licensed for non-commercial use only: read it at run time, never
    ship a model trained on it.
    """
    pairs = Path(path) if path is not None else data_file("lucid", "colocate_info.csv", data_dir=data_dir)
    single = (Path(isolated_path) if isolated_path is not None
              else pairs.with_name("single_data.csv") if pairs.with_name("single_data.csv").exists()
              else data_file("lucid", "single_data.csv", data_dir=data_dir))
    isolated = _read_lucid_isolated(single)
    groups: dict[tuple[str, str, tuple[JobSpec, ...]],
                 list[tuple[tuple[float, ...], float | None, float | None]]] = {}
    with pairs.open(newline="") as fh:
        reader = csv.DictReader(fh)
        size = _group_size(reader.fieldnames or ())
        if size < 2:
            raise ValidationError("colocation file",
                                  f"'{pairs}' has no model1, model2 columns; Lucid's layout "
                                                     "(see predictors/profiling/dataset.py)")
        for row in reader:
            members = [lucid_job(row[f"model{i}"], row[f"dataset{i}"], row[f"batchsize{i}"], row[f"amp{i}"])
                       for i in range(1, size + 1)]
            jobs, speeds = canonical(members, [float(row[f"speed{i}"]) for i in range(1, size + 1)])
            sharing = (row.get("sharing") or "").strip() or "timeslice"
            groups.setdefault((_row_gpu(row), sharing, jobs), []).append((speeds, _number(row.get("gmem")),
                                                                          _number(row.get("gpu_util"))))
    samples = []
    for (gpu, sharing, jobs), runs in sorted(groups.items()):
        n = len(runs)
        speeds = tuple(sum(r[0][i] for r in runs) / n for i in range(len(jobs)))
        memory = [r[1] for r in runs if r[1] is not None]
        util = [r[2] for r in runs if r[2] is not None]
        samples.append(ColocSample(gpu, jobs, speeds, sum(memory) / len(memory) if memory else None,
                                   sum(util) / len(util) if util else None,
                                   source="lucid" if gpu == LUCID_GPU else "profiled", sharing=sharing))
    return ColocDataset(tuple(samples), isolated, "lucid")


def read_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> ColocDataset:
    """``gavel`` or ``lucid`` from the shared data folder."""
    return read_gavel_samples(data_dir=data_dir) if name == "gavel" else read_lucid_samples(data_dir=data_dir)
