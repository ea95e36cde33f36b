"""Hostile checkpoints: every corrupted, truncated, foreign or inconsistent checkpoint file is refused with
one :class:`~dltsched.engine.sim.checkpoint.CheckpointError` from the API, and one line with exit code 2 from
``dltsched simulate --checkpoint`` - never a traceback, never a silent resume.

The base checkpoint is a real mid-run one (a faulted FIFO run of a small instance, written by the CLI);
each case damages a copy of it. Cases that must reach the schema and invariant checks re-seal the
damaged state with a valid checksum (otherwise the checksum would catch them first)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.app.registry import make_policy, predictors
from dltsched.engine.domain.model import Cluster, Instance, Job, Node
from dltsched.engine.sim.checkpoint import CheckpointError, read_checkpoint, seal
from dltsched.engine.sim.faults import FaultConfig
from dltsched.engine.sim.simulator import SimulationConfig, Simulator
from dltsched.engine.sim.truth import MeasuredTruth
from dltsched.instances.schema import save_instance

SEED = 3
FAULTS = "900:300:120"


def small_instance() -> Instance:
    cluster = Cluster((Node("v0", "v100", 2), Node("v1", "v100", 2), Node("k0", "k80", 2)))
    models = (("resnet18", 32), ("resnet50", 32), ("lstm_lm", 20), ("transformer", 64))
    jobs = tuple(Job(f"j{i}", *models[i % 4], 20_000 + 5_000 * (i % 5), num_gpus=(1, 1, 2)[i % 3],
                     arrival_time_s=10.0 * i) for i in range(12))
    return Instance("hostile-checkpoints", cluster, jobs)


def cli_args(instance: Path) -> list[str]:
    return ["simulate", "--instance", str(instance), "--policy", "fifo", "--seed", str(SEED), "--memory",
            "oom", "--predictors", "analytic", "--faults", FAULTS, "--json"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, Any]:
    """A mid-run checkpoint written by the CLI, with running and waiting jobs."""
    folder = tmp_path_factory.mktemp("hostile-checkpoints")
    instance = save_instance(small_instance(), folder / "instance.json")
    reference = folder / "reference.json"
    assert main([*cli_args(instance), "-o", str(reference)]) == 0
    rounds = json.loads(reference.read_text())["rows"][0]["num_rounds"]
    every = rounds // 2 + 1  # one save, mid-run
    ckpt = folder / "base.ckpt.json"
    assert main([*cli_args(instance), "--checkpoint", str(ckpt), "--checkpoint-every", str(every)]) == 0
    envelope = json.loads(ckpt.read_text())
    state = envelope["state"]
    assert state["rounds"] == every
    assert state["running"] and any(a["assignment"] is None for a in state["active"]) and state["finished"]
    return {"instance": instance, "raw": ckpt.read_bytes(), "envelope": envelope, "every": every}


def resealed(change: Callable[[dict[str, Any]], None]) -> Callable[[bytes, dict[str, Any]], bytes]:
    """A case that edits the state (or fingerprint) and re-seals it with a valid checksum."""

    def make(_raw: bytes, env: dict[str, Any]) -> bytes:
        change(env)
        return json.dumps(seal(env["fingerprint"], env["state"])).encode()

    return make


def edited(change: Callable[[dict[str, Any]], None]) -> Callable[[bytes, dict[str, Any]], bytes]:
    """A case that edits the envelope and writes it back as is (NaN allowed, checksum untouched)."""

    def make(_raw: bytes, env: dict[str, Any]) -> bytes:
        change(env)
        return json.dumps(env).encode()

    return make


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(env: dict[str, Any]) -> None:
        *head, last = path.split(".")
        target: Any = env
        for key in head:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return change


def _running(env: dict[str, Any]) -> dict[str, Any]:
    state = env["state"]
    return next(a for a in state["active"] if a["id"] == state["running"][0])


def _queued(env: dict[str, Any]) -> dict[str, Any]:
    return next(a for a in env["state"]["active"] if a["assignment"] is None)


def _finish_twice(env: dict[str, Any]) -> None:
    env["state"]["finished"].append(dict(env["state"]["finished"][0]))


def _finished_and_active(env: dict[str, Any]) -> None:
    record = env["state"]["finished"][0]
    env["state"]["finished"].append(dict(record, job_id=_queued(env)["id"]))


def _lose_a_job(env: dict[str, Any]) -> None:
    queued = _queued(env)
    env["state"]["active"].remove(queued)


def _unknown_job(env: dict[str, Any]) -> None:
    _queued(env)["id"] = "nobody"


def _negative_remaining(env: dict[str, Any]) -> None:
    _running(env)["remaining"] = -5.0


def _too_much_remaining(env: dict[str, Any]) -> None:
    _queued(env)["remaining"] = 1e12


def _gpu_lists_stranger(env: dict[str, Any]) -> None:
    free = next(i for i, on in enumerate(env["state"]["gpu_jobs"]) if not on)
    env["state"]["gpu_jobs"][free].append(_queued(env)["id"])


def _gpu_out_of_range(env: dict[str, Any]) -> None:
    a = _running(env)
    a["assignment"]["gpus"][0] = 999


def _not_in_running(env: dict[str, Any]) -> None:
    env["state"]["running"].pop(0)


def _heap_names_queued(env: dict[str, Any]) -> None:
    env["state"]["finish_heap"].append([env["state"]["time"] + 10.0, 0, _queued(env)["id"], 0])


def _gang_mismatch(env: dict[str, Any]) -> None:
    a = _running(env)
    a["assignment"]["gpus"].append(a["assignment"]["gpus"][0])


def _deep(depth: int) -> Callable[[bytes, dict[str, Any]], bytes]:
    return lambda _raw, _env: b"[" * depth + b"]" * depth


def _deep_in_state(env: dict[str, Any]) -> None:
    nested: Any = 0
    for _ in range(900):  # deep, yet still JSON the standard library reads and writes
        nested = {"x": nested}
    env["state"]["policy_state"] = nested


def _truncate(fraction: float) -> Callable[[bytes, dict[str, Any]], bytes]:
    return lambda raw, _env: raw[: max(1, int(len(raw) * fraction))]


CASES: dict[str, Callable[[bytes, dict[str, Any]], bytes]] = {
    # damaged files
    "empty": lambda _raw, _env: b"",
    "whitespace": lambda _raw, _env: b" \n\t ",
    "truncated-1-byte": _truncate(0.0),
    "truncated-10pct": _truncate(0.10),
    "truncated-50pct": _truncate(0.50),
    "truncated-90pct": _truncate(0.90),
    "truncated-last-byte": lambda raw, _env: raw[:-1],
    "binary-garbage": lambda _raw, _env: random.Random(7).randbytes(4096),
    "nul-bytes": lambda raw, _env: b"\x00" * len(raw),
    "utf16": lambda raw, _env: raw.decode().encode("utf-16"),
    "deep-nesting-100k": _deep(100_000),
    "deep-nesting-in-state": resealed(_deep_in_state),
    "deep-nesting-100k-in-state": lambda raw, _env: raw.replace(
        b'"policy_state":null', b'"policy_state":' + b"[" * 100_000 + b"]" * 100_000),
    "json-null": lambda _raw, _env: b"null",
    "json-list": lambda _raw, _env: b"[1, 2, 3]",
    "json-number": lambda _raw, _env: b"42",
    "nan-clock": edited(_set("state.time", float("nan"))),
    "infinite-clock": edited(_set("state.time", float("inf"))),
    # another file or version
    "wrong-format": edited(_set("format", "dltsched-round/1")),
    "old-version": edited(_set("version", 1)),
    "future-version": edited(_set("version", 3)),
    "version-as-text": edited(_set("version", "2")),
    "extra-top-level-field": edited(_set("note", "hello")),
    "checksum-missing": edited(lambda env: env.pop("checksum")),
    "checksum-wrong": edited(_set("checksum", "sha256:" + "0" * 64)),
    "state-edited-without-checksum": edited(_set("state.rounds", 1)),
    "fingerprint-not-an-object": edited(_set("fingerprint", [])),
    # foreign checkpoints (a valid checksum, another run's fingerprint)
    "foreign-instance": resealed(_set("fingerprint.instance", "0" * 24)),
    "foreign-policy": resealed(_set("fingerprint.policy", "tiresias")),
    "foreign-policy-options": resealed(_set("fingerprint.policy_options", "0" * 24)),
    "foreign-predictor-weights": resealed(_set("fingerprint.predictors", "0" * 24)),
    "foreign-seed": resealed(_set("fingerprint.seed", "99")),
    "foreign-faults": resealed(_set("fingerprint.faults", "0" * 24)),
    "foreign-memory-mode": resealed(_set("fingerprint.memory", "reject")),
    "foreign-ground-truth": resealed(_set("fingerprint.truth", "0" * 24)),
    "fingerprint-missing-a-part": resealed(lambda env: env["fingerprint"].pop("truth")),
    # wrong shape (valid checksum)
    "state-missing-field": resealed(lambda env: env["state"].pop("gpu_jobs")),
    "state-extra-field": resealed(_set("state.surprise", 1)),
    "rounds-as-text": resealed(_set("state.rounds", "5")),
    "count-as-bool": resealed(_set("state.oom_events", True)),
    "huge-clock": resealed(_set("state.time", 1e308)),
    "penalty-above-one": resealed(lambda env: _running(env).__setitem__("penalty", 2.0)),
    # broken invariants (valid checksum and shape)
    "job-finished-twice": resealed(_finish_twice),
    "job-finished-and-active": resealed(_finished_and_active),
    "job-lost": resealed(_lose_a_job),
    "unknown-job": resealed(_unknown_job),
    "negative-remaining-work": resealed(_negative_remaining),
    "more-work-than-the-job": resealed(_too_much_remaining),
    "more-arrivals-than-jobs": resealed(_set("state.next_arrival", 10_000)),
    "gpu-count-mismatch": resealed(lambda env: env["state"]["gpu_jobs"].pop()),
    "gpu-lists-a-waiting-job": resealed(_gpu_lists_stranger),
    "gpu-out-of-range": resealed(_gpu_out_of_range),
    "gang-size-mismatch": resealed(_gang_mismatch),
    "placed-job-not-running": resealed(_not_in_running),
    "completion-of-a-waiting-job": resealed(_heap_names_queued),
    "decision-times-mismatch": resealed(lambda env: env["state"]["decision_times"].pop()),
    "last-round-in-the-future": resealed(
        lambda env: env["state"].__setitem__("last_round", env["state"]["time"] + 1)),
    "clock-before-first-arrival": resealed(_set("state.time", -100.0)),
    "faults-state-dropped": resealed(_set("state.faults", None)),
    "failed-node-outside-cluster": resealed(_set("state.faults.down", [99])),
    "policy-state-for-stateless-policy": resealed(_set("state.policy_state", {"x": 1})),
}


def write_case(base: dict[str, Any], name: str, folder: Path) -> Path:
    env = json.loads(json.dumps(base["envelope"]))
    path = folder / f"{name}.ckpt.json"
    path.write_bytes(CASES[name](base["raw"], env))
    return path


def simulator_for(base: dict[str, Any]) -> Simulator:
    policy = make_policy("fifo", predictors=predictors("analytic"))
    config = SimulationConfig(seed=SEED, memory="oom", faults=FaultConfig(900.0, 300.0, 120.0))
    return Simulator(small_instance(), policy, MeasuredTruth(), config)


def test_corpus_is_large_enough():
    assert len(CASES) >= 25


@pytest.mark.parametrize("name", sorted(CASES))
def test_api_raises_one_checkpoint_error(base, name, tmp_path):
    path = write_case(base, name, tmp_path)
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(path, simulator_for(base), expected=base["envelope"]["fingerprint"])
    message = str(caught.value)
    assert message.startswith(f"checkpoint '{path}': ") and "\n" not in message


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_prints_one_line_and_exits_2(base, name, tmp_path, capsys):
    path = write_case(base, name, tmp_path)
    capsys.readouterr()
    code = main([*cli_args(base["instance"]), "--checkpoint", str(path), "--checkpoint-every",
                 str(base["every"])])
    out, err = capsys.readouterr()
    assert code == 2, out[-500:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "checkpoint '" in lines[0] and "Traceback" not in err, err


def test_the_untouched_base_resumes(base, tmp_path, capsys):
    path = tmp_path / "base.ckpt.json"
    path.write_bytes(base["raw"])
    assert main([*cli_args(base["instance"]), "--checkpoint", str(path), "--checkpoint-every",
                 str(base["every"])]) == 0
    assert read_checkpoint(path, simulator_for(base), expected=base["envelope"]["fingerprint"])["rounds"] > 0


def test_a_folder_or_a_path_under_a_file_exits_2(base, tmp_path, capsys):
    folder = tmp_path / "a-folder.ckpt.json"
    folder.mkdir()
    assert main([*cli_args(base["instance"]), "--checkpoint", str(folder)]) == 2
    assert "Traceback" not in capsys.readouterr().err
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main([*cli_args(base["instance"]), "--checkpoint", str(afile / "x.json"), "--checkpoint-every",
                 "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be written" in err[0], err
