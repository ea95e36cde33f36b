"""NeuSight's transformers in the zoo: names, sequence-length datasets, graphs and step times."""

from __future__ import annotations

import pytest

from dltsched.engine.domain.catalog import model_spec
from dltsched.engine.domain.model import Job
from dltsched.predictors.steptime import DeletePopStepTime
from dltsched.predictors.steptime import measurements as ms
from dltsched.predictors.steptime.calibrate import job_of
from dltsched.predictors.zoo import load_graph, zoo_models


def test_label_names_resolve_to_zoo_ids():
    assert model_spec("gpt3_27").id == "gpt3_2.7b"
    assert model_spec("opt_13").id == "opt_1.3b"
    assert model_spec("BERT-Large").default_dataset == "seq512"


def test_bert_large_graph_and_sequence_length():
    assert "bert_large" in zoo_models()
    g = load_graph("bert_large", "seq512")
    assert g.graph["num_layers"] == 26  # embeddings, 24 encoder layers, MLM head
    p = DeletePopStepTime()
    long = p.step_time_s(Job(id="a", model="bert_large", batch_size=8, total_iterations=1.0,
                             dataset="seq512"),
                         "v100", scope="fwd_bwd")
    short = p.step_time_s(Job(id="b", model="bert_large", batch_size=8, total_iterations=1.0,
                              dataset="seq128"),
                          "v100", scope="fwd_bwd")
    assert long > 3.0 * short


@pytest.mark.parametrize(("seq", "dataset"), [(512, "seq512"), (128, "seq128"), (333, None)])
def test_seq_len_column_picks_the_dataset(seq, dataset):
    m = ms.Measurement("bert_large", "v100", 8, 1, 0.5, seq_len=seq)
    assert job_of(m).dataset == dataset


NEUSIGHT_MODELS = ("bert_large", "gpt2_large", "gpt3_xl", "gpt3_2.7b", "opt_1.3b", "switch_xl")


@pytest.mark.parametrize("model", [m for m in NEUSIGHT_MODELS if m in zoo_models()])
def test_shipped_graphs_cover_every_block_and_dataset(model):
    spec = model_spec(model)
    for dataset in spec.datasets:
        g = load_graph(model, dataset)
        assert g.graph["num_layers"] == spec.layers
        assert {d["layer"] for _n, d in g.nodes(data=True)} == set(range(spec.layers))
        params = sum(d["param_bytes"] for _n, d in g.nodes(data=True))
        assert params >= 0.99 * g.graph["param_bytes_total"]
