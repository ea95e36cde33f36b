"""The E-GGAT in numpy: parity with the torch model, no torch at schedule time, the blend in the profile
model."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.colocation.egat_numpy import NumpyEggat, group_graph_arrays, shipped_eggat
from dltsched.predictors.colocation.features import Group
from dltsched.predictors.colocation.profiled import EGGAT_WEIGHT, shipped_profile_predictor
from dltsched.predictors.colocation.samples import ColocDataset, IsolatedProfile, JobSpec

A, B, C = JobSpec("resnet18", 32), JobSpec("resnet50", 64), JobSpec("lstm_lm", 20)
D = JobSpec("transformer", 64)  # no profile anywhere below
ISO = {(g, j): IsolatedProfile(0.05 * (i + 1), 1000.0 * (i + 1), 30.0 * (i + 1))
       for g in ("k80", "p100", "v100") for i, j in enumerate((A, B, C))}
#: 2- and 3-job groups; pairs with profiles (utilisation measured), without any (D), mixed, repeated members
GROUPS = [Group("k80", (A, B)), Group("p100", (A, D)), Group("v100", (D, D)), Group("k80", (A, B, C)),
          Group("p100", (C, C, D)), Group("a100-40gb", (B, C))]


_PACKAGE = Path(__import__("dltsched.predictors.colocation", fromlist=["x"]).__file__).parent


def _views(groups: list[Group]) -> list[dict]:
    return [ISO] * len(groups)


def test_two_layer_road_gives_the_plain_forward_pass() -> None:
    net = shipped_eggat()
    plain = net.forward([group_graph_arrays(g, ISO) for g in GROUPS])[0]
    memo: dict = {}
    assert net.log_speeds(GROUPS, _views(GROUPS), memo) == pytest.approx(plain, abs=1e-5)
    # the kept per-job parts give the same numbers again, in another order
    again = net.log_speeds(GROUPS[::-1], _views(GROUPS), memo)
    sizes = [len(g.jobs) for g in GROUPS[::-1]]
    parts = np.split(again, np.cumsum(sizes)[:-1])
    assert np.concatenate(parts[::-1]) == pytest.approx(plain, abs=1e-5)


def test_shipped_network_loads_without_torch_and_names_its_training() -> None:
    net = shipped_eggat()
    assert net.num_layers == 2 and net.gpus == ("k80", "p100") and not net.has_memory
    pred = net.predict(GROUPS, ColocDataset((), ISO))
    assert [len(p.speeds) for p in pred] == [2, 2, 2, 3, 3, 2]
    assert all(0.0 < v < 2.0 for p in pred for v in p.speeds) and all(p.memory_mib is None for p in pred)
    with pytest.raises(ValidationError, match="lucid"):
        net.predict([Group("lucid", (A, B))], ColocDataset((), ISO))


def test_importing_and_predicting_needs_no_torch() -> None:
    code = ("import sys\n"
            "from dltsched.predictors.colocation.egat_numpy import shipped_eggat\n"
            "from dltsched.predictors.colocation.features import Group\n"
            "from dltsched.predictors.colocation.samples import ColocDataset, JobSpec\n"
            "from dltsched.predictors.colocation import default_colocation_predictor\n"
            "from dltsched.engine.domain.model import Job\n"
            "g = Group('k80', (JobSpec('resnet18', 32), JobSpec('lstm_lm', 20)))\n"
            "shipped_eggat().predict([g], ColocDataset(()))\n"
            "model = default_colocation_predictor(eggat=True)\n"
            "assert model.eggat is not None and default_colocation_predictor().eggat is None\n"
            "model.colocated_speeds([Job('a', 'resnet50', 64, 1.0), Job('b', 'vgg16', 128, 1.0)], 'v100')\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.') or "
            "m.startswith('torch_')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_shipped_file_blends_the_network_within_the_bounds() -> None:
    model = shipped_profile_predictor()
    assert model.eggat is not None and model.eggat_weight == EGGAT_WEIGHT
    alone = model.without_eggat()
    assert alone.eggat is None and model.eggat is not None  # the original keeps it
    specs = sorted({j for g, j in model.profiles if g == "k80"})
    groups = [Group("k80", (specs[0], specs[7])), Group("k80", (specs[2], specs[9])),
              Group("v100", (specs[1], specs[5], JobSpec("vgg16", 128)))]
    both, rest = model.estimate_groups(groups), alone.estimate_groups(groups)
    net = model.eggat.predict(groups[:2], ColocDataset((), model.profiles))
    for e, r, n in zip(both[:2], rest[:2], net, strict=True):
        for got, base, direct in zip(e.speeds, r.speeds, n.speeds, strict=True):
            # measured pairs: the geometric mean of the two opinions at weight 1/2, capped at 1
            assert got == pytest.approx(min(1.0, math.sqrt(base * direct)), rel=1e-5)
    assert any(a != b for e, r in zip(both, rest, strict=True)
               for a, b in zip(e.speeds, r.speeds, strict=True))
    for e, r in zip(both, rest, strict=True):
        assert all(0.0 < v <= 1.0 for v in e.speeds)
        assert (e.memory_mib, e.gpu_util, e.sources) == (r.memory_mib, r.gpu_util, r.sources)  # speeds only


def test_groups_the_network_cannot_read_keep_the_profile_model_and_are_counted() -> None:
    model = shipped_profile_predictor()
    alone = model.without_eggat()
    lucid = Group("lucid", (A, B))
    got = model.estimate_groups([lucid], ISO | {("lucid", A): ISO[("k80", A)], ("lucid", B): ISO[("k80", B)]})
    ref = alone.estimate_groups([lucid], ISO | {("lucid", A): ISO[("k80", A)], ("lucid", B): ISO[("k80", B)]})
    assert got[0].speeds == ref[0].speeds
    assert model.fallbacks["eggat_unreadable_group"] == 1


def test_one_group_at_a_time_predicts_as_the_batch_path_with_the_network() -> None:
    from dltsched.engine.domain.model import Job

    model = shipped_profile_predictor()
    groups = [Group("p100", (JobSpec("resnet18", 64), JobSpec("transformer", 128))),
              Group("k80", (JobSpec("lstm_lm", 20), JobSpec("resnet50", 64), JobSpec("a3c", 4)))]
    batch = shipped_profile_predictor().estimate_groups(groups)
    for g, e in zip(groups, batch, strict=True):
        jobs = [Job(f"j{i}", j.model, j.batch_size, 1.0, amp=j.amp, dataset=j.dataset)
                for i, j in enumerate(g.jobs)]
        assert model.colocated_speeds(jobs, g.gpu) == pytest.approx(e.speeds, rel=1e-6)  # float32 sums


def test_model_file_keeps_its_network_beside_it(tmp_path: Path) -> None:
    from dltsched.predictors.colocation.profiled import ProfileColocation

    model = shipped_profile_predictor()
    model.save(tmp_path / "table_profile_gavel.json")
    assert json.loads((tmp_path / "table_profile_gavel.json").read_text())["eggat"] == {
        "checkpoint": "eggat_gavel.safetensors", "weight": EGGAT_WEIGHT}
    loaded = ProfileColocation.load(tmp_path / "table_profile_gavel.json")  # the packaged network
    assert loaded.estimate_groups(GROUPS[:1],
                                  ISO)[0].speeds == model.estimate_groups(GROUPS[:1], ISO)[0].speeds
    raw = json.loads((tmp_path / "table_profile_gavel.json").read_text())
    raw["eggat"]["checkpoint"] = "eggat_other.safetensors"
    with pytest.raises(ValidationError, match="eggat_other"):
        ProfileColocation.from_json(raw, tmp_path)
    src = _PACKAGE / "eggat_gavel.safetensors"
    shutil.copy(src, tmp_path / "eggat_other.safetensors")
    assert ProfileColocation.from_json(raw, tmp_path).eggat is not None
    with pytest.raises(ValidationError, match="eggat_weight"):
        model.attach_eggat(model.eggat, 1.5)


# ------------------------------------------------------------------------------- parity with torch
def _torch_and_numpy(config: dict) -> tuple:
    pytest.importorskip("torch_geometric")
    import torch

    from dltsched.predictors.colocation.egat import EGGAT, collate, group_graph
    from dltsched.predictors.colocation.train import EggatConfig, EggatPredictor

    torch.manual_seed(3)
    pred = EggatPredictor(EggatConfig(**config), has_memory=True, has_util=True, gpus=("k80", "p100"))
    pred.net = EGGAT(pred.config.hidden, pred.config.heads, pred.config.num_layers)
    graphs = [group_graph(g, ISO) for g in GROUPS]
    pred.net.set_normalization(torch.cat([g.x for g in graphs]), torch.cat([g.glob for g in graphs]))
    with torch.no_grad():  # heads away from their zero start, so every output depends on every weight
        for p in pred.net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    pred.net.eval()
    with torch.no_grad():
        ref = [t.numpy() for t in pred.net(collate(graphs))]
    return pred, ref


@pytest.mark.parametrize("config", [{}, {"hidden": 16, "heads": 2, "num_layers": 3}])
def test_numpy_forward_matches_the_torch_model(config: dict, tmp_path: Path) -> None:
    pred, ref = _torch_and_numpy(config)
    net = pred.to_numpy()
    got = net.forward([group_graph_arrays(g, ISO) for g in GROUPS])
    for a, b in zip(got, ref, strict=True):
        assert np.abs(a - b).max() < 1e-5
    assert np.abs(net.log_speeds(GROUPS, _views(GROUPS)) - ref[0]).max() < 1e-5
    pred.save(tmp_path / "m.safetensors")  # the checkpoint read back by the numpy API
    loaded = NumpyEggat.load(tmp_path / "m.safetensors")
    data = ColocDataset((), ISO)
    for a, b in zip(loaded.predict(GROUPS, data), pred.predict(GROUPS, data), strict=True):
        assert a.speeds == pytest.approx(b.speeds, rel=1e-5)
        assert (a.memory_mib is None) == (b.memory_mib is None)  # memory needs every member's isolated memory
        assert a.memory_mib == pytest.approx(b.memory_mib, rel=1e-5) if b.memory_mib is not None else True
        assert a.gpu_util == pytest.approx(b.gpu_util, rel=1e-5)
    assert sum(p.memory_mib is not None for p in loaded.predict(GROUPS, data)) == 2  # k80 (A, B), (A, B, C)


def test_shipped_checkpoint_gives_the_torch_models_predictions() -> None:
    pytest.importorskip("torch_geometric")
    from dltsched.predictors.colocation.egat_numpy import SHIPPED_EGGAT
    from dltsched.predictors.colocation.train import EggatPredictor

    path = _PACKAGE / SHIPPED_EGGAT
    data = ColocDataset((), ISO)
    for a, b in zip(shipped_eggat().predict(GROUPS, data), EggatPredictor.load(path).predict(GROUPS, data),
                    strict=True):
        assert a.speeds == pytest.approx(b.speeds, rel=1e-5)


def test_the_shipped_network_never_sees_measured_memory_or_utilisation() -> None:
    # trained on Gavel, where neither was measured: a caller's measured values stay out of its inputs
    model = shipped_profile_predictor()
    alone = model.without_eggat()
    specs = sorted({j for g, j in model.profiles if g == "p100"})
    a, b = specs[1], specs[6]
    measured = dict(model.profiles)
    # b: no util
    measured[("p100", a)] = IsolatedProfile(model.profiles[("p100", a)].step_time_s, 5000.0, 70.0)
    group = Group("p100", (a, b))
    stripped = {k: IsolatedProfile(p.step_time_s) for k, p in measured.items()}
    direct = model.eggat.predict([group], ColocDataset((), stripped))[0].speeds
    got = model.estimate_groups([group], measured)[0].speeds
    rest = alone.estimate_groups([group], measured)[0].speeds
    assert got == pytest.approx([min(1.0, math.sqrt(r * d)) for r, d in zip(rest, direct, strict=True)],
                                rel=1e-5)
    assert not model.eggat.saw("iso_util") and model.eggat.saw("log_iso_step_s")


def test_cli_predicts_with_and_without_the_network(capsys: pytest.CaptureFixture[str]) -> None:
    from dltsched.engine.app.cli.main import main

    args = ["predict", "colocation", "--gpu", "k80", "--job", "resnet18:64", "--job", "lstm_lm:20", "--json"]
    assert main([*args, "--eggat"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert main(args) == 0  # the default: the engine's, without the network
    alone = json.loads(capsys.readouterr().out)
    assert main([*args, "--no-eggat"]) == 0
    assert json.loads(capsys.readouterr().out) == alone
    assert [r["speed"] for r in both["jobs"]] != [r["speed"] for r in alone["jobs"]]
    assert both["memory_mib"] == alone["memory_mib"]
    # the shipped file names its network: read as written it blends it in
    shipped = str(_PACKAGE / "table_profile_gavel.json")
    assert main([*args, "--model", shipped]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == both["jobs"]
    table = str(_PACKAGE / "default_table.json")  # the older ensemble table: no network to take or leave out
    assert main([*args, "--no-eggat", "--model", table]) == 2
    assert "--eggat/--no-eggat apply to table_profile" in capsys.readouterr().err
    assert main(["predict", "train-colocation", "--eggat-weight", "2", "--out", "/nonexistent"]) == 2
    assert "eggat-weight" in capsys.readouterr().err


def test_cli_reads_a_checkpoint_without_torch() -> None:
    code = ("import sys, json\n"
            "from dltsched.engine.app.cli.main import main\n"
            "code = main(['predict', 'colocation', '--gpu', 'p100', '--job', 'resnet50:64', "
            "'--job', 'lm:20', "
            f"'--model', {str(_PACKAGE / 'eggat_gavel.safetensors')!r}, '--json'])\n"
            "print(code, any(m == 'torch' or m.startswith('torch.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "0 False"
    assert json.loads(out.stdout[out.stdout.index("{"):out.stdout.rindex("}") + 1])["jobs"][0]["speed"] > 0


def test_the_default_bundle_leaves_the_network_out_and_default_plus_eggat_blends_it() -> None:
    from dltsched.engine.app import registry

    assert registry.predictors("default").colocation.eggat is None
    with_net = registry.predictors("default+eggat")
    assert with_net.colocation.eggat is not None and with_net.colocation.eggat_weight == EGGAT_WEIGHT
    assert registry.bundle_fields("default+eggat")["predictors_fit"] == "in-sample"
