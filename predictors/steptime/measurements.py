"""Whole-iteration and kernel measurements used to calibrate and evaluate the step-time predictor.

- Gavel: isolated steps/s (consolidated placement). At scale n the throughput counts the
  iterations of all n workers (each with ``batch_size`` samples), so the step time of one worker is
  ``n / throughput``; at scale 1 it is ``1 / throughput``.
  Gavel's jobs run these optimizers (its workloads' training scripts): :data:`GAVEL_OPTIMIZERS`.
- Zeus: time per epoch at the highest power limit measured -> per-iteration time =
  ``time_per_epoch / ceil(dataset_size / batch_size)`` with the sizes of :data:`ZEUS_WORKLOADS`
  (Sentiment140: one 425,000-tweet training slice of Zeus's Capriccio dataset, as Zeus trains on).
- DeepBench: FP32 GEMM, convolution and LSTM TFLOPS of 8 GPUs -> achievable efficiency per GPU
  and kernel kind (median over the benchmark's shapes, divided by the spec FP32 peak).
- Orion: per-kernel durations of training iterations on a V100 -> their sum is the GPU time of one
  step without host or CPU-dispatch time (``Measurement.kernel_time``), for the zoo models Orion
  profiled (:data:`ORION_WORKLOADS`).
The CSV format written and read here is ``model,gpu,batch_size,num_gpus,step_time_s`` with optional
``amp,dataset,optimizer,source`` columns (``source``: the measurement setup, e.g. ``gavel``).
"""

from __future__ import annotations

import csv
import math
import os
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from dltsched.engine.domain.errors import ValidationError
from dltsched.instances.datadir import data_file

#: what a measured step time covers (kept equal to ``model.SCOPES``; not imported to keep this module light)
SCOPES = ("iteration", "compute", "fwd_bwd")

#: Zeus workload -> (model id, dataset id, training-set size used for iterations per epoch)
ZEUS_WORKLOADS: dict[tuple[str, str], tuple[str, str, int]] = {
    ("cifar100", "shufflenetv2"): ("shufflenet_v2", "cifar100", 50_000),
    ("imagenet", "resnet50"): ("resnet50", "imagenet", 1_281_167),
    ("librispeech", "deepspeech2"): ("deepspeech2", "librispeech", 281_241),
    ("movielens-1m", "ncf"): ("neumf", "movielens", 994_169),
    ("squad", "bert_base_uncased"): ("bert_base", "squad", 88_524),
    ("sentiment140", "bert_base_uncased"): ("bert_base", "sentiment140", 425_000),
}
#: Gavel job model -> optimizer of its training script (SGD with momentum unless listed)
GAVEL_OPTIMIZERS = {"transformer": "adam", "recoder": "adam", "a3c": "adam",
                    "cyclegan": "adam", "lstm_lm": "sgd"}
ZEUS_GPUS = {"a40": "a40", "p100": "p100", "rtx6000": "rtx6000", "v100": "v100"}
#: Orion training-iteration profile (V100) -> (model id, dataset id, batch size)
ORION_WORKLOADS = {"resnet50_32_fb1": ("resnet50", "imagenet", 32),
                   "resnet101_32_fb1": ("resnet101", "imagenet", 32),
                   "mobilenetv2_32_fb1": ("mobilenet_v2", "imagenet", 32),
                   "mobilenetv2_64_fb1": ("mobilenet_v2", "imagenet", 64),
                   "mobilenetv2_96_fb1": ("mobilenet_v2", "imagenet", 96)}
#: DeepBench file label -> catalog GPU id
DEEPBENCH_GPUS = {"V100": "v100", "T4": "t4", "P100": "p100", "TitanXp": "titanxp", "1080Ti": "gtx1080ti",
                  "M40": "m40"}


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured iteration time (``batch_size`` per GPU).

    ``kernel_time``: ``step_time_s`` is the sum of the step's GPU kernel durations (no host time).
    ``scope``: what the measured time covers (:data:`model.SCOPES`): ``iteration`` (with the input
    pipeline: Gavel, Zeus), ``compute`` (input excluded) or ``fwd_bwd`` (forward and backward only:
    NeuSight's labels). ``seq_len``: sequence length of a transformer workload, where given.
    """

    model: str
    gpu: str
    batch_size: int
    num_gpus: int
    step_time_s: float
    amp: bool = False
    dataset: str | None = None
    optimizer: str = "sgd"
    source: str = ""
    kernel_time: bool = False
    scope: str = "iteration"
    seq_len: int | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "num_gpus"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValidationError(name, f"{value!r} not understood; must be an integer >= 1")
        if self.scope not in SCOPES:
            raise ValidationError("scope", f"{self.scope!r} not understood; one of {', '.join(SCOPES)}")
        if self.seq_len is not None and (not isinstance(self.seq_len, int) or self.seq_len < 1):
            raise ValidationError("seq_len", f"{self.seq_len!r} not understood; must be an integer >= 1")
        if not self.step_time_s > 0:
            raise ValidationError("step_time_s", f"{self.step_time_s!r} not understood; must be > 0 seconds")


def gavel_measurements(data_dir: str | os.PathLike[str] | None = None, *,
                       max_scale: int = 1) -> list[Measurement]:
    """Gavel's isolated throughputs (consolidated placements, scale <= ``max_scale``)."""
    from dltsched.instances.readers.gavel_throughputs import read_gavel_throughputs

    out = []
    for (gpu, jt, scale, consolidated), steps_per_s in read_gavel_throughputs(
            data_dir=data_dir).isolated.items():
        if consolidated and scale <= max_scale and steps_per_s > 0:
            out.append(Measurement(jt.model, gpu, jt.batch_size, scale, scale / steps_per_s, False,
                                   jt.dataset, GAVEL_OPTIMIZERS.get(jt.model, "momentum"), "gavel"))
    return sorted(out, key=lambda m: (m.gpu, m.model, m.batch_size, m.num_gpus))


def zeus_measurements(data_dir: str | os.PathLike[str] | None = None) -> list[Measurement]:
    """Zeus per-iteration times at each config's highest power limit (optimizer kept)."""
    out = []
    for label, gpu in ZEUS_GPUS.items():
        best: dict[tuple[str, str, int, str], tuple[float, float]] = {}
        with data_file("zeus", f"summary_power_{label}.csv", data_dir=data_dir).open() as fh:
            for row in csv.DictReader(fh):
                key = (row["dataset"], row["network"], int(row["batch_size"]), row["optimizer"].lower())
                power, t = float(row["power_limit"]), float(row["time_per_epoch"])
                if key not in best or power > best[key][0]:
                    best[key] = (power, t)
        for (ds, net, bs, opt), (_p, epoch_s) in best.items():
            model, dataset, size = ZEUS_WORKLOADS[(ds, net)]
            out.append(Measurement(model, gpu, bs, 1, epoch_s / math.ceil(size / bs), False, dataset,
                                   opt if opt in _OPTIMIZERS else "adam", "zeus"))
    return sorted(out, key=lambda m: (m.gpu, m.model, m.dataset or "", m.batch_size))


_OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "adagrad", "adadelta", "rmsprop", "lamb")


def orion_measurements(data_dir: str | os.PathLike[str] | None = None) -> list[Measurement]:
    """GPU time of one training step on a V100: the sum of Orion's per-kernel durations (ns)."""
    out = []
    for name, (model, dataset, batch) in ORION_WORKLOADS.items():
        with data_file("orion", "model_kernels", name, data_dir=data_dir).open() as fh:
            total_ns = sum(float(row["Duration"]) for row in csv.DictReader(fh))
        out.append(Measurement(model, "v100", batch, 1, total_ns * 1e-9, False,
                               dataset, "sgd", "orion", True))
    return out


#: DeepBench section title prefix -> kernel kind of :data:`model.KERNEL_KIND`
DEEPBENCH_SECTIONS = {"Dense Matrix": "gemm", "Convolution": "conv", "Recurrent Layers - LSTM": "lstm"}


def _deepbench_tflops(path: Path) -> dict[str, list[float]]:
    """Forward TFLOPS of every kernel row, by kernel kind (first TFLOPS column of each section)."""
    out: dict[str, list[float]] = {}
    kind, col = None, None
    with path.open() as fh:
        for row in csv.reader(fh):
            if row and row[0]:  # a section title (its header may sit on the same or the next row)
                kind = next((k for prefix, k in DEEPBENCH_SECTIONS.items() if row[0].startswith(prefix)),
                            None)
                col = None
            if kind and col is None:
                col = next((i for i, h in enumerate(row) if "TERAFLOPS" in h.upper()), None)
                continue
            if kind and col is not None and len(row) > col:
                try:
                    out.setdefault(kind, []).append(float(row[col]))
                except ValueError:
                    continue
    return out


def deepbench_kernel_efficiency(
        data_dir: str | os.PathLike[str] | None = None) -> dict[str, dict[str, float]]:
    """Achieved / peak FP32 throughput per catalog GPU id and kernel kind (median over DeepBench shapes)."""
    from dltsched.engine.domain.catalog import gpu_spec

    out = {}
    base = data_file("deepbench", "csv", data_dir=data_dir)
    for label, gpu in DEEPBENCH_GPUS.items():
        path = next(iter(sorted(base.glob(f"NV_{label}__*FP32.csv"))), None)
        if path is None:
            continue
        peak = gpu_spec(gpu).fp32_tflops
        out[gpu] = {kind: statistics.median(v) / peak for kind, v in _deepbench_tflops(path).items() if v}
    return out


def write_csv(rows: Iterable[Measurement], path: str | os.PathLike[str]) -> int:
    """Write measurements in the evaluator's CSV format; returns the number of rows."""
    rows = list(rows)
    fields = ("model", "gpu", "batch_size", "num_gpus", "step_time_s", "amp",
              "dataset", "optimizer", "source")
    with Path(path).open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({**asdict(r), "dataset": r.dataset or "", "amp": int(r.amp)})
    return len(rows)


REQUIRED_COLUMNS = ("model", "gpu", "batch_size", "num_gpus", "step_time_s")
OPTIONAL_COLUMNS = ("seq_len", "scope", "dataset", "optimizer", "amp", "source")


#: the device the profiling harness's CPU smoke runs record: readable, though no GPU model predicts it
CPU_DEVICE = "cpu"


def _check_names(row: dict[str, str], where: str) -> None:
    """One line naming the unknown model or GPU and its close matches (the catalogs' difflib hints)."""
    from dltsched.engine.domain.catalog import gpu_catalog, model_catalog

    for column, catalog in (("model", model_catalog()), ("gpu", gpu_catalog())):
        if column == "gpu" and row[column] == CPU_DEVICE:
            continue
        try:
            catalog.resolve(row[column])
        except ValueError as err:
            raise ValidationError(f"{where}.{column}", str(err).split(" (known:")[0]) from None


def profile_record(path: str | os.PathLike[str]) -> dict[str, object] | None:
    """The ``measurement.json`` beside ``path`` when it is the record of the ``dltsched profile`` run that
    wrote ``path`` (it lists the file, or its command is a profile command), else ``None``."""
    import json

    record_path = Path(path).with_name("measurement.json")
    if not record_path.is_file():
        return None
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    files = record.get("files") or []
    command = str(record.get("command") or "").split()
    if Path(path).name in files or (len(command) > 1 and command[1] == "profile"):
        return record
    return None


def default_scope(path: str | os.PathLike[str]) -> str:
    """The scope of rows of ``path`` without a ``scope`` cell: the profile record's (``compute`` for a file
    ``dltsched profile`` wrote: synthetic inputs already on the device), else ``iteration``."""
    record = profile_record(path)
    if record is None:
        return "iteration"
    scope = str(record.get("scope") or "compute")
    return scope if scope in SCOPES else "compute"


def read_csv(path: str | os.PathLike[str]) -> list[Measurement]:
    """Read ``model,gpu,batch_size,num_gpus,step_time_s`` rows with optional ``seq_len, scope``,
    ``dataset, optimizer, amp, source`` columns.

    A row without a ``scope`` cell gets :func:`default_scope`: ``compute`` for a file ``dltsched profile``
    wrote (its ``measurement.json`` beside it), else ``iteration``. ``source`` defaults to the file name. A
    bad row raises one :class:`ValidationError` naming the file, row and column (unknown models and GPUs
    with their close matches).
    """
    out = []
    name = Path(path).name
    scope_default = default_scope(path)
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ValidationError(name, f"missing columns {missing}; need {','.join(REQUIRED_COLUMNS)} "
                                        f"(optional {','.join(OPTIONAL_COLUMNS)})")
        for i, row in enumerate(reader, start=2):
            where = f"{name}:{i}"
            _check_names(row, where)
            try:
                seq = (row.get("seq_len") or "").strip()
                out.append(Measurement(row["model"], row["gpu"], int(row["batch_size"]), int(row["num_gpus"]),
                                       float(row["step_time_s"]), (row.get("amp") or "0").strip().lower() in
                                       ("1", "true", "yes"), row.get("dataset") or None,
                                       row.get("optimizer") or "sgd", row.get("source") or name,
                                       scope=(row.get("scope") or "").strip() or scope_default,
                                       seq_len=int(seq) if seq else None))
            except ValidationError as err:
                raise err.under(where) from None
            except ValueError as err:
                raise ValidationError(where, f"{err}; check the row's columns") from None
    return out
