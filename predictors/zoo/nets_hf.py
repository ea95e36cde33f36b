"""Transformer zoo models built from ``transformers`` configs (no weights, no downloads).

BERT-base (SQuAD question answering, seq 384; Sentiment140 classification, seq 128), GPT-2 small
(WikiText-103 language modelling, seq 1024) and ViT-B/16 (ImageNet 224 px). Blocks: embeddings,
each encoder/decoder layer, the task head.
"""

from __future__ import annotations

import torch
from torch import nn

from dltsched.predictors.zoo.nets_base import Built, register

_BERT_SEQ = {"squad": 384, "sentiment140": 128}


class _HfLoss(nn.Module):
    """Calls a transformers model with keyword inputs and returns its loss."""

    def __init__(self, model: nn.Module, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.keys = keys

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.keys, inputs, strict=True))).loss


@register("bert_base", "squad", "sentiment140")
def bert_base(dataset: str) -> Built:
    from transformers import BertConfig, BertForQuestionAnswering, BertForSequenceClassification

    config = BertConfig(attn_implementation="sdpa")
    seq = _BERT_SEQ[dataset]
    if dataset == "squad":
        model: nn.Module = BertForQuestionAnswering(config)
        keys: tuple[str, ...] = ("input_ids", "start_positions", "end_positions")
        head = "qa_outputs"

        def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
            return (torch.randint(0, config.vocab_size, (batch, seq)), torch.randint(0, seq, (batch,)),
                    torch.randint(0, seq, (batch,)))
    else:
        config.num_labels = 2
        model = BertForSequenceClassification(config)
        keys = ("input_ids", "labels")
        head = "classifier"

        def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
            return torch.randint(0, config.vocab_size, (batch, seq)), torch.randint(0, 2, (batch,))

    blocks = ("model.bert.embeddings",
              *(f"model.bert.encoder.layer.{i}" for i in range(config.num_hidden_layers)), f"model.{head}")
    return Built(_HfLoss(model, keys), make_inputs, blocks)


@register("gpt2", "wikitext103")
def gpt2(dataset: str) -> Built:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(attn_implementation="sdpa")
    seq = 1024

    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        ids = torch.randint(0, config.vocab_size, (batch, seq))
        return ids, ids

    blocks = ("transformer.wte", *(f"transformer.h.{i}" for i in range(config.n_layer)), "transformer.ln_f")
    return Built(_HfLoss(GPT2LMHeadModel(config), ("input_ids", "labels")), make_inputs,
                 tuple(f"model.{b}" for b in blocks))


@register("vit_b16", "imagenet")
def vit_b16(dataset: str) -> Built:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(num_labels=1000, attn_implementation="sdpa")

    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,))

    model = ViTForImageClassification(config)
    names = dict(model.named_modules())
    stack = "vit.layers" if "vit.layers" in names else "vit.encoder.layer"  # transformers >= 5 renamed it
    blocks = ("vit.embeddings", *(f"{stack}.{i}" for i in range(config.num_hidden_layers)), "classifier")
    return Built(_HfLoss(model, ("pixel_values", "labels")), make_inputs, tuple(f"model.{b}" for b in blocks))
