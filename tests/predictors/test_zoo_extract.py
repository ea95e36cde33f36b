"""Graph extraction with torch.export on the meta device agrees with the shipped graphs."""

from __future__ import annotations

import pytest

from dltsched.predictors.zoo import load_graph

pytest.importorskip("torch")


def _totals(g):
    return {k: sum(d[k] for _n, d in g.nodes(data=True))
            for k in ("fwd_flops", "activation_bytes", "param_bytes")}


def _check(model, dataset):
    from dltsched.predictors.zoo.extract import extract_graph

    fresh, shipped = extract_graph(model, dataset), load_graph(model, dataset)
    assert fresh.number_of_nodes() == shipped.number_of_nodes()
    assert fresh.graph["num_layers"] == shipped.graph["num_layers"]
    for key, value in _totals(fresh).items():
        assert value == pytest.approx(_totals(shipped)[key], rel=1e-3), key


@pytest.mark.parametrize(("model", "dataset"),
                         [("dqn", "atari"), ("td3", "bipedalwalker"), ("recoder", "ml-20m")])
def test_extraction_matches_shipped_graph(model, dataset):
    _check(model, dataset)


def test_batch_norm_and_linear_costs_from_shapes():
    from dltsched.predictors.zoo.opcost import backward_factor, forward_flops

    # linear 512 -> 10 on one sample: 2 * 10 * 512 FLOPs; layer norm: 5 per element
    assert forward_flops("linear", [(1, 512)], [(1, 10)], [(10, 512), (10,)]) == 2 * 10 * 512
    assert forward_flops("layer_norm", [(1, 8, 4)], [(1, 8, 4)], []) == 5 * 32
    # SDPA of 1 x 2 heads x 4 queries x 4 keys x 8 dims: QK^T and AV are 2*32*8 each, softmax 5*32
    assert forward_flops("scaled_dot_product_attention", [(1, 2, 4, 8)] * 3, [(1, 2, 4, 8)], []) == 2 * (
        2 * 32 * 8) + 5 * 32
    assert backward_factor("conv2d") == 2.0 and backward_factor("relu") == 1.0


@pytest.mark.slow
def test_extraction_of_every_zoo_model():
    from dltsched.engine.domain.catalog import model_catalog
    from dltsched.predictors.zoo import zoo_models

    for model in zoo_models():
        for dataset in model_catalog().get(model).datasets:
            _check(model, dataset)
