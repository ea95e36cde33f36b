"""Peak memory of a training step: the caching allocator's model, the meta-device trace, the shipped file, and
the calibrated memory of jobs alone against the H200 profiles."""

from __future__ import annotations

import math

import pytest

from dltsched.predictors.zoo.allocator import CachingAllocator
from dltsched.predictors.zoo.memory import BATCHES, has_trace, traced_bytes

MIB = 1 << 20


def test_allocator_rounds_splits_merges_and_reserves_segments():
    a = CachingAllocator()
    a.malloc("x", 3 * MIB)  # large request under 10 MiB: a 20 MiB segment, split (17 MiB left free)
    a.malloc("y", 3 * MIB)  # best fit: the 17 MiB remainder, split again (14 MiB left)
    a.malloc("z", 12 * MIB)  # the 14 MiB block (2 MiB left)
    assert a.reserved == 20 * MIB
    a.malloc("w", 12 * MIB)  # nothing free fits: a segment of exactly 12 MiB (2 MiB multiple)
    assert a.reserved == 32 * MIB
    a.free("x")
    a.free("y")  # x and y merge into 6 MiB: too small for 7 MiB, so a third segment
    a.malloc("v", 7 * MIB)
    assert a.reserved == 52 * MIB
    a.free("z")  # z merges with the 6 MiB before it and the 2 MiB after it: the whole first segment
    a.malloc("u", 20 * MIB)
    assert a.reserved == 52 * MIB
    assert a.peak_allocated == (12 + 7 + 20) * MIB  # w, v and u live at once
    a.malloc("s", 100)  # small request: 512 bytes from a new 2 MiB small segment
    assert (a.reserved, a.allocated) == (54 * MIB, 39 * MIB + 512)


def test_shipped_trace_interpolates_between_traced_batches():
    assert has_trace("resnet18", "cifar10") and not has_trace("resnet18", "no-such-dataset")
    from dltsched.predictors.zoo.memory import read_traces

    # two neighbouring traced points
    b0, b1 = read_traces()["resnet18"]["cifar10"].get("batch", BATCHES)[-3:-1]
    lo, hi = (traced_bytes("resnet18", "cifar10", b) for b in (b0, b1))
    mid = traced_bytes("resnet18", "cifar10", (b0 + b1) / 2)
    assert mid["peak_bytes"] == pytest.approx((lo["peak_bytes"] + hi["peak_bytes"]) / 2)
    for got in (lo, mid, hi):
        assert got["static_bytes"] <= got["peak_bytes"] <= got["reserved_bytes"]


def test_trace_of_a_linear_layer_counts_weights_gradients_and_saved_input():
    torch = pytest.importorskip("torch")
    from torch import nn

    from dltsched.predictors.zoo.memtrace import trace_built
    from dltsched.predictors.zoo.nets_base import Built

    class Square(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(1024, 1024, bias=False)

        def forward(self, x):
            return self.fc(x).square().mean()

    with torch.device("meta"):
        built = Built(Square(), lambda b: (torch.empty(b, 1024),), ("fc",))
    small, large = trace_built(built, 256), trace_built(built, 512)
    # 4 MiB of weights; at the peak the weight, its gradient, the input (saved by the matmul) and the
    # matmul's output (saved by square) are live: 4 + 4 + 1 + 1 MiB at batch 256, 2 MiB more at 512
    assert small["static_bytes"] == 4 * MIB
    assert small["peak_bytes"] >= 10 * MIB and large["peak_bytes"] - small["peak_bytes"] >= 2 * MIB
    assert small["reserved_bytes"] >= small["peak_bytes"]


def test_trace_of_a_three_channel_stem_holds_its_lowered_input(monkeypatch):
    torch = pytest.importorskip("torch")
    from torch import nn

    import dltsched.predictors.zoo.memtrace as memtrace
    from dltsched.predictors.zoo.nets_base import Built

    class Stem(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 7, padding=3, bias=False)

        def forward(self, x):
            return self.conv(x).square().mean()

    with torch.device("meta"):
        built = Built(Stem(), lambda b: (torch.empty(b, 3, 128, 128),), ("conv",))
    with_workspace = memtrace.trace_built(built, 32)
    monkeypatch.setattr(memtrace, "CONV_CHANNEL_ALIGN", 1)  # every channel count aligned: no workspace
    without = memtrace.trace_built(built, 32)
    lowered = 32 * 128 * 128 * 3 * 49 * 4  # output pixels x (channels x kernel) x 4 bytes: 294 MiB
    assert with_workspace["conv_col_bytes"] == without["conv_col_bytes"] == lowered
    assert with_workspace["reserved_bytes"] - without["reserved_bytes"] >= lowered
    assert with_workspace["static_bytes"] == without["static_bytes"]


def test_shipped_trace_matches_a_fresh_one():
    pytest.importorskip("torch")
    from dltsched.predictors.zoo.memtrace import trace_step

    fresh = trace_step("td3", "bipedalwalker", BATCHES[1])
    shipped = traced_bytes("td3", "bipedalwalker", BATCHES[1])
    for name, value in fresh.items():
        assert shipped[name] == pytest.approx(value, rel=1e-4), name


@pytest.mark.data
def test_memory_of_models_never_profiled_on_h200(data_dir):
    """Leave-one-model-out on the H200 jobs alone: the traced reserve with a fitted context is within 5%
    MAPE, better than the graph form of the engine's memory model (weights, gradients and saved activations
    plus a workspace) and the constant on the same rows."""
    import statistics

    from dltsched.engine.domain.model import Job
    from dltsched.predictors.calibration import resources
    from dltsched.predictors.calibration.data import read_datasets
    from dltsched.predictors.calibration.model import fit_rows
    from dltsched.predictors.steptime.model import DeletePopStepTime

    datasets = read_datasets([data_dir / "h200"])
    rows = [r for d in datasets for r in fit_rows(d.gpu, d.tf32, d.isolated)]
    timeslice = next(d for d in datasets if d.sharing == "timeslice")
    held_rows = fit_rows(timeslice.gpu, timeslice.tf32, timeslice.isolated)
    ape, constant = [], []
    for held in held_rows:
        train = [r for r in rows if r.model != held.model]
        params = resources.fit_memory(train)
        ape.append(abs(resources.memory_mib(params, held.features) / held.gmem_mib - 1.0))
        constant.append(abs(statistics.median(r.gmem_mib for r in train) / held.gmem_mib - 1.0))
    engine = DeletePopStepTime(traced_memory=False)
    default = [abs(engine.memory_mib(Job(id="j", model=r.model, dataset=r.dataset, batch_size=r.batch_size,
                                         total_iterations=1.0), timeslice.gpu) / r.gmem_mib - 1.0)
               for r in timeslice.isolated]
    mape = 100.0 * statistics.fmean(ape)
    assert len(held_rows) == 16 and not math.isnan(mape)
    assert mape <= 5.0
    assert mape < 100.0 * statistics.fmean(default) and mape < 100.0 * statistics.fmean(constant)


def test_a_bundle_of_the_earlier_memory_form_keeps_its_meaning():
    from dltsched.predictors.calibration import resources

    f = {"weights_mib": 100.0, "activations_mib": 1000.0, "reserved_mib": 5000.0, "rnn_reserve_mib": 0.0}
    old = {"context_mib": 1500.0, "weights": 1.0, "activations": 1.5}
    assert resources.memory_mib(old, f) == pytest.approx(1500.0 + 100.0 + 1500.0)
    assert resources.memory_mib({"context_mib": 1500.0, "scale": 1.0, "rnn": 0.0}, f) == pytest.approx(6500.0)


def test_engine_memory_is_the_traced_reserve_plus_the_context():
    """With ``traced_memory`` the engine's memory model prices a traced zoo model as its caching-allocator
    reserve plus the default context; freezing layers, Adam's state and the graph form move it the way they
    should."""
    from dataclasses import replace

    from dltsched.engine.domain.model import Job
    from dltsched.predictors.steptime.model import DeletePopStepTime
    from dltsched.predictors.zoo.memory import DEFAULT_CONTEXT_MIB, reserve_mib

    job = Job(id="j", model="resnet50", dataset="imagenet", batch_size=64, total_iterations=1.0)
    engine = DeletePopStepTime(traced_memory=True)
    got = engine.memory_mib(job, "h200")
    assert got == pytest.approx(reserve_mib("resnet50", "imagenet", 64) + DEFAULT_CONTEXT_MIB)
    assert engine.memory_mib(job, "h200", freeze_level=2) < got
    assert engine.memory_mib(replace(job, optimizer="adam"), "h200") > got
    graph = DeletePopStepTime().memory_mib(job, "h200")  # the default: the graph form
    assert graph != pytest.approx(got, rel=0.05)
