"""Job profiles: validation, lookup, and the readers (hand-made files; the shared data where present)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.profiles import (
    LUCID_GPU,
    JobProfile,
    ProfileKey,
    ProfileSet,
    read_gavel_profiles,
    read_harness_profiles,
    read_lucid_profiles,
)

KEY = ProfileKey("v100", "resnet18", 64, False, "cifar10")


def test_profile_validates_every_field() -> None:
    assert JobProfile(KEY, 0.05, 2000.0, 80.0, 40.0).throughput == pytest.approx(64 / 0.05)
    for kwargs, field in (({"step_time_s": 0.0}, "step_time_s"),
                          ({"step_time_s": float("nan")}, "step_time_s"),
                          ({"memory_mib": -1.0}, "memory_mib"), ({"gpu_util": 101.0}, "gpu_util"),
                          ({"mem_bw_util": -0.5}, "mem_bw_util"), ({"source": "guessed"}, "source")):
        with pytest.raises(ValidationError, match=field):
            JobProfile(KEY, **{"step_time_s": 0.05, **kwargs})  # type: ignore[arg-type]


def test_profile_set_finds_a_job_without_its_dataset_only_when_unique() -> None:
    other = ProfileKey("v100", "resnet18", 64, False, "imagenet")
    one = ProfileSet([JobProfile(KEY, 0.05)])
    assert one.find("v100", "resnet18", 64) is one[KEY]
    assert one.find("v100", "resnet18", 64, dataset="imagenet") is None
    two = one.merged([JobProfile(other, 0.2)])
    assert len(two) == 2 and two.find("v100", "resnet18", 64) is None  # ambiguous: which dataset?
    assert two.find("v100", "resnet18", 64, dataset="imagenet").step_time_s == 0.2  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="two profiles"):
        ProfileSet([JobProfile(KEY, 0.05), JobProfile(KEY, 0.06)])


def test_lucid_layout_reader(tmp_path: Path) -> None:
    path = tmp_path / "single_data.csv"
    path.write_text("model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label\n"
                    "ResNet18,CIFAR-10,64,1,3200.0,62.0,34.0,3642.0,2\n")
    (p,) = read_lucid_profiles(path).values()
    assert p.key == ProfileKey(LUCID_GPU, "resnet18", 64, True, "cifar10")
    assert p.step_time_s == pytest.approx(64 / 3200.0)
    assert (p.memory_mib, p.gpu_util, p.mem_bw_util, p.source) == (3642.0, 62.0, 34.0, "measured")


def test_harness_readers_both_layouts(tmp_path: Path) -> None:
    steptime = tmp_path / "steptime.csv"
    steptime.write_text("model,dataset,gpu,batch_size,num_gpus,step_time_s,amp,optimizer,peak_memory_mib,gpu_util,"
                        "gmem_used_mib\n"
                        # NVML memory missing: torch's
                        "resnet18,cifar10,v100,32,1,0.02,0,sgd,1500,71.5,nan\n"
                        # two GPUs: not a profile
                        "resnet18,cifar10,v100,32,2,0.03,0,sgd,1500,70,1900\n"
                        "resnet18,cifar10,cpu,32,1,0.9,0,sgd,nan,nan,nan\n"           # smoke run: skipped
                        "lstm_lm,wikitext2,v100,20,1,0.04,0,sgd,900,55,1300\n")
    profiles = read_harness_profiles(steptime)
    assert len(profiles) == 2
    r18 = profiles.find("v100", "resnet18", 32)
    assert r18 is not None and (r18.step_time_s, r18.memory_mib, r18.gpu_util) == (0.02, 1500.0, 71.5)
    assert profiles.find("v100", "lstm_lm", 20).memory_mib == 1300.0  # type: ignore[union-attr]
    single = tmp_path / "single_data.csv"
    single.write_text("model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,gpu\n"
                      "resnet18,cifar10,32,0,1600,71.5,nan,1800,a100\n")
    (p,) = read_harness_profiles(single).values()
    assert p.key.gpu == "a100-40gb" or p.key.gpu.startswith("a100")
    assert p.mem_bw_util is None and p.step_time_s == pytest.approx(0.02)
    bad = tmp_path / "other.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValidationError, match="not a profile file"):
        read_harness_profiles(bad)


@pytest.mark.data
def test_shared_data_profiles(data_dir: Path) -> None:
    gavel = read_gavel_profiles(data_dir=data_dir)
    assert gavel.gpus() == ("k80", "p100", "v100")
    assert all(p.memory_mib is None and p.gpu_util is None and p.step_time_s > 0 for p in gavel.values())
    lucid = read_lucid_profiles(data_dir=data_dir)
    assert len(lucid) == 66 and lucid.gpus() == (LUCID_GPU,)
    assert all(p.memory_mib and p.gpu_util is not None and p.mem_bw_util is not None for p in lucid.values())
