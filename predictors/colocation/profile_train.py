"""Training the shipped profile co-location model (:mod:`.profiled`) and timing it.

:func:`train_profile_table` fits a :class:`~.profiled.ProfileColocation` on every valid sample of a
dataset and writes ``table_profile_<dataset>.json`` (a Lucid-trained file, non-commercial data, is refused
inside the package); :func:`time_profile_colocation` times 10,000 group predictions of the shipped model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.predictors.colocation.features import Group
from dltsched.predictors.colocation.profiled import ProfileColocation, shipped_profile_predictor
from dltsched.predictors.colocation.samples import JobSpec, without_absent


def train_profile_table(out_dir: str | os.PathLike[str], dataset: str = "gavel",
                        data_dir: str | os.PathLike[str] | None = None, seed: int = 0,
                        figures: dict[str, Any] | None = None,
                        eggat_weight: float | None | str = "off") -> dict[str, Any]:
    """Fit a :class:`ProfileColocation` on every valid sample of ``dataset``, keep its isolated profiles, and
    write ``table_profile_<dataset>.json`` into ``out_dir``; returns the record. A Lucid-trained file
    (non-commercial data) is refused inside the package folder. ``eggat_weight`` (a float, or ``None``: chosen
    by leave-one-model-out inside the data) also fits the E-GGAT (needs torch;
    :class:`~.train.ProfileWithEggat`), writes its checkpoint ``eggat_<dataset>.safetensors`` beside the file
    and blends it in; ``"off"``: no E-GGAT."""
    import time

    from dltsched.predictors.colocation.samples import read_dataset

    out = Path(out_dir).resolve()
    package = Path(__file__).resolve().parents[2]  # the folder holding engine/, predictors/, instances/
    inside = any(out == package / sub or (package / sub) in out.parents
                 for sub in ("engine", "formulations", "predictors", "instances"))
    if dataset != "gavel" and inside:
        raise ValidationError("out",
                              f"'{out}' is inside the package; a model trained on {dataset} data may not be "
                                     "shipped (non-commercial licence): write it elsewhere")
    data = read_dataset(dataset, data_dir)
    start = time.perf_counter()
    if eggat_weight == "off":
        model = ProfileColocation(seed=seed).fit(data)
    else:
        from dltsched.predictors.colocation.train import EggatConfig, ProfileWithEggat

        blend = ProfileWithEggat(eggat_weight, EggatConfig(seed=seed)).fit(data)  # type: ignore[arg-type]
        assert blend.model is not None and blend.eggat is not None
        model = blend.model
    model.profiles = dict(data.isolated)
    model.record = {"data": dataset, "samples": len(without_absent(data)), "dropped_absent": len(data) - len(
        without_absent(data)), "seed": seed, "train_s": round(time.perf_counter() - start, 1),
        "gpus_trained": list(data.gpus()), "profiles": len(data.isolated),
        "groups_over_2": "the same model: physics base over the whole group plus pair-learned corrections; "
                         "no group of three was measured",
        "figures": figures or {},
        "license": "Gavel data, MIT" if dataset == "gavel"
                    else f"{dataset} data, non-commercial: do not ship"}
    if not model.measured_util_trained:
        model.record["measured_util"] = (f"no {dataset.capitalize()} utilisation is measured: groups whose "
                                         "every utilisation is measured get the rule min(1, 100 / sum of "
                                         "measured util), not the "
                                         f"{dataset.capitalize()}-fitted corrections")
    out.mkdir(parents=True, exist_ok=True)
    if eggat_weight != "off":
        checkpoint = f"eggat_{dataset}.safetensors"
        blend.eggat.record = {**model.record, "figures": {},
                              "blended": f"weight {model.eggat_weight} in {path_name(dataset)}",
                              **({"inner_choice": blend.chosen} if blend.chosen else {})}
        blend.eggat.save(out / checkpoint)
        model.eggat_checkpoint = checkpoint
        model.record["eggat"] = {"checkpoint": checkpoint, "weight": model.eggat_weight,
                                 "config": blend.eggat.config_dict(),
                                 **({"inner_choice": blend.chosen} if blend.chosen else {})}
    path = out / path_name(dataset)
    model.save(path)
    return {**model.record, "path": str(path)}


def path_name(dataset: str) -> str:
    """File name of the profile model trained on ``dataset``.

    Parameters
    ----------
    dataset
        The dataset's name.

    Returns
    -------
    str
        ``table_profile_<dataset>.json``.
    """
    return f"table_profile_{dataset}.json"


def time_profile_colocation(groups: int = 10_000, seed: int = 0) -> dict[str, float]:
    """Seconds for ``groups`` predictions of the shipped profile model: 2- and 3-job groups of Gavel's job
    types and of jobs without a profile, on K80/P100/V100/A100, in one batch call and one call per group (the
    engine's ``colocated_speeds`` + ``group_memory_mib``), each on a fresh model (nothing remembered);
    wall-clock and CPU seconds of this process (the CPU figure is the steadier one on a shared machine).
    ``profile_*``: the engine's default (without the E-GGAT); ``profile_eggat_*``: the same groups with the
    E-GGAT blended in, run in numpy (bundle ``default+eggat``)."""
    import random

    model = shipped_profile_predictor()
    specs = sorted({job for _, job in model.profiles} | {JobSpec("mobilenet_v2", 64), JobSpec("vgg16", 128)})
    gpus = ("k80", "p100", "v100", "a100-40gb")
    rng = random.Random(seed)
    work = [Group(rng.choice(gpus), tuple(rng.choice(specs) for _ in range(rng.choice((2, 3)))))
            for _ in range(groups)]
    out: dict[str, float] = {"profile_groups": groups,
                             "profile_distinct_groups": len({(g.gpu, g.jobs) for g in work})}
    for prefix, fresh in (("profile", lambda: shipped_profile_predictor(eggat=False)),
                          ("profile_eggat", shipped_profile_predictor)):
        out |= {f"{prefix}_{k}": v for k, v in _time_groups(fresh, work).items()}
    return out


def _time_groups(fresh: Any, work: list[Group]) -> dict[str, float]:
    import time

    model = fresh()
    start, cpu = time.perf_counter(), time.process_time()
    model.estimate_groups(work)
    batch_s, batch_cpu = time.perf_counter() - start, time.process_time() - cpu
    model = fresh()
    jobs = [(tuple(Job(f"j{i}", j.model, j.batch_size, 1.0, amp=j.amp, dataset=j.dataset)
                   for i, j in enumerate(g.jobs)), g.gpu) for g in work]
    start, cpu = time.perf_counter(), time.process_time()
    for members, gpu in jobs:
        model.colocated_speeds(members, gpu)
        model.group_memory_mib(members, gpu)
    single_s, single_cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"batch_seconds": batch_s, "per_call_seconds": single_s, "batch_cpu_seconds": batch_cpu,
            "per_call_cpu_seconds": single_cpu}
