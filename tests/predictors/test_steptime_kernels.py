"""Operator-level kernel model: roofline bound, tree export, math modes, NeuSight traces and kernels."""

from __future__ import annotations

import numpy as np
import pytest

from dltsched.engine.domain.catalog import gpu_spec
from dltsched.predictors.steptime import kernels as kn
from dltsched.predictors.steptime import neusight as ns

GPU = kn.KernelGpu("test", 80, 15.0, 900.0, tf32_tflops=60.0, fp16_tflops=120.0)


def _gemms(n=200, seed=0):
    rng = np.random.default_rng(seed)
    return [kn.gemm_kernel("bmm", *rng.integers(1, 2048, 4)) for _ in range(n)]


def test_tree_export_matches_sklearn():
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    x = np.random.default_rng(1).normal(size=(600, 4))
    y = np.sin(x[:, 0]) + x[:, 1] ** 2
    ens = kn.fit_ensemble(x, y, max_iter=15)
    with threadpool_limits(1):
        ref = HistGradientBoostingRegressor(**(kn.GBM_PARAMS | {"max_iter": 15})).fit(x, y).predict(x)
    assert np.allclose(ens.predict(x), ref, atol=1e-6)
    again = kn.TreeEnsemble.from_json(ens.to_json())
    assert np.allclose(again.predict(x), ens.predict(x), atol=1e-5)


def test_never_faster_than_roofline():
    kernels = _gemms()
    x = kn.features(kernels, GPU)
    # a model that wants 7x faster than physics
    fast = kn.fit_ensemble(x, np.full(len(kernels), -2.0), max_iter=5)
    model = kn.KernelModel({"bmm": fast})
    roof = np.array([max(kn.roofline_s(k, GPU)) for k in kernels])
    assert np.all(model.predict_s(kernels, GPU) >= roof * (1 - 1e-12))
    slow = kn.KernelModel({"bmm": kn.fit_ensemble(x, np.full(len(kernels), np.log(2.0)), max_iter=5)})
    assert np.allclose(slow.predict_s(kernels, GPU), 2.0 * roof, rtol=1e-6)


def test_convolutions_bounded_at_winograd_count_and_floor_is_additive():
    convs = [kn.conv_kernel(b, 64, 128, 3, 56, 1, 1) for b in (1, 4, 16, 64)]
    x = kn.features(convs, GPU)[:, [kn.FEATURES.index(f) for f in kn.CLASS_FEATURES["conv"]]]
    fast = kn.KernelModel({"conv": kn.fit_ensemble(x, np.full(len(convs), -3.0),
                                                   max_iter=5, min_samples_leaf=1)},
                          class_features={"conv": kn.CLASS_FEATURES["conv"]}, floor_s={"conv": 2e-5})
    body = fast.predict_s(convs, GPU, floor=False)
    bound = np.array([kn.lower_bound_s(k, GPU) for k in convs])
    assert np.allclose(body, bound, rtol=1e-9)
    assert np.allclose(bound, [max(kn.roofline_s(k, GPU)) / 2.25 for k in convs])
    assert np.allclose(fast.predict_s(convs, GPU), body + 2e-5)


def test_fit_separates_the_per_call_floor():
    rng = np.random.default_rng(3)
    gpus = {"a": GPU, "b": kn.KernelGpu("b", 40, 8.0, 320.0)}
    samples = []
    for gid, g in gpus.items():
        for _ in range(400):
            k = kn.vector_kernel("layernorm", "ln", float(rng.integers(1, 1 << 14)), 1024.0)
            samples.append(kn.KernelSample(gid, k, 3e-5 + 1.5 * max(kn.roofline_s(k, g))))
    model = kn.fit(samples, gpus)
    assert 2.5e-5 < model.floor_s["layernorm"] < 3.5e-5
    again = kn.KernelModel.from_json(model.to_json())
    assert again.floor_s == model.floor_s and again.class_features == model.class_features
    big = [kn.vector_kernel("layernorm", "ln", 1 << 14, 1024.0)]
    roof = max(kn.roofline_s(big[0], GPU))
    assert again.predict_s(big, GPU, floor=False)[0] == pytest.approx(1.5 * roof, rel=0.1)


def test_model_floor_is_the_fastest_hosts_floor():
    """Hosts add to the per-call floor (no spec sheet tells it): the model takes the lowest GPU's floor."""
    rng = np.random.default_rng(4)
    gpus = {"a": GPU, "b": kn.KernelGpu("b", 40, 8.0, 320.0)}
    samples = []
    for (gid, g), host in zip(gpus.items(), (2e-5, 5e-5), strict=True):
        for _ in range(300):
            k = kn.vector_kernel("softmax", "softmax", float(rng.integers(1, 1 << 14)), 1024.0)
            samples.append(kn.KernelSample(gid, k, host + 1.5 * max(kn.roofline_s(k, g))))
    own = kn.floors(samples)
    assert own[("softmax", "b")] > 2.0 * own[("softmax", "a")]
    assert kn.fit(samples, gpus).floor_s["softmax"] == pytest.approx(own[("softmax", "a")])


def test_math_modes_change_only_gemm_like_peaks():
    gemm = kn.gemm_kernel("linear", 1, 4096, 4096, 4096)
    soft = kn.vector_kernel("softmax", "softmax", 4096, 4096)
    assert kn.roofline_s(gemm, GPU, "tf32")[0] == pytest.approx(kn.roofline_s(gemm, GPU)[0] / 4.0)
    assert kn.roofline_s(soft, GPU, "fp16") == kn.roofline_s(soft, GPU)
    with pytest.raises(ValueError, match="math"):
        kn.roofline_s(gemm, GPU, "int8")


def test_catalog_gpu_gets_tf32_on_ampere_only():
    assert kn.kernel_gpu(gpu_spec("a100")).tf32_tflops == pytest.approx(156.0)
    assert kn.kernel_gpu(gpu_spec("v100")).tf32_tflops == 0.0
    assert (kn.kernel_gpu(gpu_spec("v100")).peak_flops("tf32")
            == kn.kernel_gpu(gpu_spec("v100")).peak_flops("fp32"))


def test_conv_counts_implicit_gemm():
    k = kn.conv_kernel(8, 64, 128, 3, 56, 1, 1)
    assert (k.m, k.n, k.k) == (8 * 56 * 56, 128, 64 * 9)
    assert k.flops == pytest.approx(2 * 8 * 56 * 56 * 128 * 64 * 9)


def test_shipped_kernel_model_bounded_on_unseen_gpus():
    model = kn.load_kernel_model()
    kernels = [*_gemms(50), kn.conv_kernel(32, 64, 64, 3, 56, 1, 1),
               kn.vector_kernel("layernorm", "ln", 4096, 1024)]
    for gpu in ("h100", "l4", "a10"):
        g = kn.kernel_gpu(gpu_spec(gpu))
        pred = model.predict_s(kernels, g, floor=False)
        bound = np.array([kn.lower_bound_s(k, g) for k in kernels])
        assert np.all(pred >= bound * (1 - 1e-12)) and np.all(np.isfinite(pred))


def test_trace_backward_gemms_have_their_own_shapes():
    row = {"op": "call_module", "input_shapes": "[[2, 512, 1024]]", "output_shape": "(2, 512, 4096)",
           "meta": "{'nn_module_stack': OrderedDict([('l', <class 'torch.nn.modules.linear.Linear'>)])}",
           "Name": "dense", "target": "dense"}
    fw, dx, dw, _bias = ns.op_kernels(row, train=True)
    assert (fw.m, fw.n, fw.k) == (1024, 4096, 1024)
    assert (dx.m, dx.n, dx.k) == (1024, 1024, 4096)
    assert (dw.m, dw.n, dw.k) == (1024, 4096, 1024)
    assert len(ns.op_kernels(row, train=False)) == 1


@pytest.mark.data
@pytest.mark.slow
def test_kernel_model_beats_roofline_leave_one_gpu_out(data_dir):
    gpus = {g.id: g for g in kn.neusight_gpus(data_dir).values()}
    samples = kn.neusight_kernels(data_dir, ("softmax", "layernorm"))
    out = kn.leave_one_gpu_out(samples, gpus)
    for cls in ("softmax", "layernorm"):
        assert out[cls]["mape"] < 0.6 * out[cls]["roofline_mape"]
        assert len(out[cls]["per_gpu"]) == 5


@pytest.mark.data
def test_neusight_labels_read(data_dir):
    labels = ns.read_labels(data_dir)
    train = [lb for lb in labels if lb.train]
    assert {lb.model for lb in train} == {"bert_large", "gpt2_large"}
    assert all(lb.gpu == "v100-pcie-32gb" and lb.layer and lb.other for lb in train)
    assert len({lb.gpu for lb in labels}) == 5


def test_trace_no_op_copies_and_inference_dropout_launch_nothing():
    def call(fn, ins, out, contiguous="[True]", node="x", dtype="torch.float32"):
        return {"op": "call_method", "target": fn, "input_shapes": ins, "output_shape": out, "meta": "{}",
                "Name": fn, "_input_nodes": f"{{{node}: None}}", "input_contiguous": contiguous,
                "dtype": dtype}

    shape, out = "[[4, 20, 1024, 1024]]", "(4, 20, 1024, 1024)"
    same = {"x": "torch.float32"}
    assert ns.op_kernels(call("to", shape, out), False, same) == []
    assert len(ns.op_kernels(call("to", shape, out), False, {"x": "torch.bool"})) == 1  # a real conversion
    assert len(ns.op_kernels(call("to", shape, out), False)) == 1  # dtypes unknown: counted
    assert ns.op_kernels(call("contiguous", shape, out), False, same) == []
    assert len(ns.op_kernels(call("contiguous", shape, out, contiguous="[False]"), False, same)) == 1
    drop = {"op": "call_module", "input_shapes": shape, "output_shape": out, "Name": "drop", "target": "drop",
            "meta": "{'nn_module_stack': OrderedDict([('d', <class 'torch.nn.modules.dropout.Dropout'>)])}"}
    assert ns.op_kernels(drop, train=False) == []
    assert len(ns.op_kernels(drop, train=True)) == 2


@pytest.mark.data
def test_p4_has_its_twenty_sms(data_dir):
    gpus = {g.id: g for g in kn.neusight_gpus(data_dir).values()}
    assert gpus["p4"].sm_count == gpu_spec("p4").sm_count == 20
    assert gpus["t4"].sm_count == 40 and gpus["t4"].l2_mib == 4


def test_extra_kernels_join_the_fit_with_their_own_floor():
    rng = np.random.default_rng(5)
    gpus = {"a": GPU, "b": kn.KernelGpu("b", 40, 8.0, 320.0)}
    bench, extra = [], []
    for gid, g in gpus.items():
        for _ in range(300):
            k = kn.vector_kernel("layernorm", "ln", float(rng.integers(1, 1 << 14)), 1024.0)
            bench.append(kn.KernelSample(gid, k, 3e-5 + 2.0 * max(kn.roofline_s(k, g))))
        for _ in range(300):  # kernels of whole models: 1.0x the roofline above a 1e-5 s floor
            k = kn.vector_kernel("layernorm", "ln", float(rng.integers(1 << 14, 1 << 16)), 1024.0)
            extra.append(kn.KernelSample(gid, k, 1e-5 + max(kn.roofline_s(k, g)), floor_s=1e-5))
    big = [kn.vector_kernel("layernorm", "ln", 1 << 15, 1024.0)]
    roof = max(kn.roofline_s(big[0], GPU))
    without = kn.fit(bench, gpus).predict_s(big, GPU, floor=False)[0]
    with_extra = kn.fit(bench, gpus, extra=extra).predict_s(big, GPU, floor=False)[0]
    assert without == pytest.approx(2.0 * roof, rel=0.1)
    assert with_extra == pytest.approx(1.0 * roof, rel=0.1)
    assert kn.fit(bench, gpus, extra=extra).floor_s == kn.fit(bench, gpus).floor_s  # floors: benchmarks only


@pytest.mark.data
def test_trace_kernels_are_single_kernel_ops_of_the_label_gpus(data_dir):
    traced = ns.trace_kernel_samples(data_dir)
    assert {s.gpu for s in traced} == set(ns.LABEL_GPUS.values())
    assert {s.kernel.op_class for s in traced} >= {"linear", "bmm", "elementwise"}
    assert all(s.latency_s >= ns.TRACE_MIN_S and s.floor_s == ns.TRACE_FLOOR_S for s in traced)
