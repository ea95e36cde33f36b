"""Shipped operator graphs: contract attributes, consistency with the catalog, no torch needed."""

from __future__ import annotations

import subprocess
import sys

import networkx as nx
import pytest

from dltsched.engine.domain.catalog import model_catalog
from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.zoo import load_graph, zoo_models
from dltsched.predictors.zoo.opcost import OP_CLASSES

REQUIRED = ("resnet18", "resnet50", "resnet101", "vgg16", "vgg19", "mobilenet_v2", "mobilenet_v3",
            "efficientnet_b0", "shufflenet_v2", "bert_base", "gpt2", "vit_b16", "transformer", "lstm_lm",
            "neumf", "recoder", "cyclegan", "dcgan", "a3c", "a2c", "dqn", "ppo", "td3", "pointnet",
            "deepspeech2", "yolov3")
NODE_KEYS = ("op", "op_class", "layer", "fwd_flops", "bwd_flops", "bytes_read", "bytes_written",
             "activation_bytes", "param_bytes")


def test_every_required_model_has_a_graph():
    assert set(REQUIRED) <= set(zoo_models())


@pytest.mark.parametrize("model", REQUIRED)
def test_graph_contract(model):
    spec = model_catalog().get(model)
    for dataset in spec.datasets:
        g = load_graph(model, dataset)
        assert nx.is_directed_acyclic_graph(g)
        assert g.graph["model"] == model and g.graph["dataset"] == dataset
        assert g.graph["num_layers"] == spec.layers
        layers = set()
        for _n, d in g.nodes(data=True):
            assert all(k in d for k in NODE_KEYS)
            assert d["op_class"] in OP_CLASSES
            assert d["fwd_flops"] >= 0 and d["bwd_flops"] >= 0 and d["activation_bytes"] >= 0
            layers.add(d["layer"])
        assert layers == set(range(spec.layers)), "every block owns at least one op"
        assert all(d["tensor_bytes"] >= 0 for _u, _v, d in g.edges(data=True))
        params = sum(d["param_bytes"] for _n, d in g.nodes(data=True))
        assert params >= 0.99 * g.graph["param_bytes_total"]  # shared weights may be counted twice


def test_resnet_flops_match_published_counts():
    # ResNet-50 on ImageNet: 4.1 GMACs forward = 8.2 GFLOPs; ResNet-18 on CIFAR: 0.56 GMACs
    for model, dataset, gflops in (("resnet50", "imagenet", 8.2), ("resnet18", "cifar10", 1.11)):
        g = load_graph(model, dataset)
        conv = sum(d["fwd_flops"] for _n, d in g.nodes(data=True) if d["op_class"] in ("conv", "matmul"))
        assert conv / 1e9 == pytest.approx(gflops, rel=0.03)


def test_workload_configurations_match_the_measured_jobs():
    # parameters of the configurations the calibration data ran (millions): Gavel's LM (PyTorch
    # word_language_model defaults: 200-d, untied), deepspeech.pytorch's DeepSpeech2 (86.6M),
    # CycleGAN with two 9-block ResNet generators and two PatchGANs
    for model, millions in (("lstm_lm", 13.99), ("deepspeech2", 86.6), ("cyclegan", 28.29)):
        assert load_graph(model).graph["param_bytes_total"] / 4e6 == pytest.approx(millions, rel=0.01)
    # a CycleGAN step runs each generator three times (fake, cycle, identity): 6 x 107 GFLOPs
    g = load_graph("cyclegan")
    conv = sum(d["fwd_flops"] for _n, d in g.nodes(data=True) if d["op_class"] == "conv")
    assert conv / 1e9 == pytest.approx(632, rel=0.03)


def test_recoder_is_gavels_item_autoencoder():
    # Gavel's Recommendation job: Recoder's DynamicAutoencoder([200]) over ML-20M's 20,108 items:
    # encoder and decoder item matrices (20,108 x 200 each) and biases; one GEMM each way per user
    g = load_graph("Recommendation")
    assert g.graph["model"] == "recoder" and g.graph["dataset"] == "ml-20m"
    assert g.graph["param_bytes_total"] / 4 == pytest.approx(2 * 20_108 * 200 + 200 + 20_108, rel=1e-3)
    gemms = [d for _n, d in g.nodes(data=True) if d["op_class"] == "matmul"]
    assert [d["layer"] for d in gemms] == [0, 1]
    assert sum(d["fwd_flops"] for d in gemms) == pytest.approx(2 * 2 * 20_108 * 200, rel=1e-3)
    assert load_graph("NeuMF").graph["model"] == "neumf"  # Lucid's / Zeus's NCF stays NeuMF


def test_aliases_and_default_dataset():
    g = load_graph("ResNet-50")
    assert g.graph["model"] == "resnet50" and g.graph["dataset"] == "imagenet"


def test_unknown_names_are_clear_errors():
    with pytest.raises(ValidationError, match="model: unknown model 'resnet5000'"):
        load_graph("resnet5000")
    with pytest.raises(ValidationError, match="dataset: 'mnist' not known for model 'resnet18'"):
        load_graph("resnet18", "mnist")


def test_loading_graphs_does_not_import_torch():
    code = ("import sys; from dltsched.predictors.zoo import load_graph; load_graph('gpt2'); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_deepspeech2_variant_follows_the_dataset():
    """Zeus's DeepSpeech2 (LibriSpeech) is the 1024-wide LSTM on 12.3 s clips; the Pollux/Sia traces' one
    (CMU-ARCTIC) the 800-wide GRU on 3.3 s clips: its graph has GRU ops only and far less work per sample."""
    long, short = load_graph("deepspeech2", "librispeech"), load_graph("deepspeech2", "cmu_arctic")
    ops = {name: {a["op"] for _, a in g.nodes(data=True) if a["op_class"] == "rnn"}
           for name, g in (("librispeech", long), ("cmu_arctic", short))}
    assert ops == {"librispeech": {"lstm"}, "cmu_arctic": {"gru"}}
    flops = [sum(a["fwd_flops"] for _, a in g.nodes(data=True)) for g in (long, short)]
    assert 0.05 < flops[1] / flops[0] < 0.3
    assert "cmu_arctic" in model_catalog().get("deepspeech2").datasets
