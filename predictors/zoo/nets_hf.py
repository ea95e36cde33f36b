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
    """BERT-base (Hugging Face, SDPA attention): question answering or sentence classification. ``dataset``:
    ``squad`` (question answering) or ``sentiment140`` (classification); each has its sequence length."""
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
    """GPT-2 small (Hugging Face) language modelling on 1024-token sequences. ``dataset``: ``wikitext103``."""
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
    """ViT-B/16 (Hugging Face) on 224x224 images, 1000 classes. ``dataset``: ``imagenet``."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(num_labels=1000, attn_implementation="sdpa")

    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,))

    model = ViTForImageClassification(config)
    names = dict(model.named_modules())
    stack = "vit.layers" if "vit.layers" in names else "vit.encoder.layer"  # transformers >= 5 renamed it
    blocks = ("vit.embeddings", *(f"{stack}.{i}" for i in range(config.num_hidden_layers)), "classifier")
    return Built(_HfLoss(model, ("pixel_values", "labels")), make_inputs, tuple(f"model.{b}" for b in blocks))


# --- NeuSight's transformers (configs of ../shared/data/neusight/model_configs), one dataset per
# sequence length: ``seq<N>`` (synthetic token ids; pre-training loss: masked LM / causal LM) ------

#: model id -> (sequence lengths, default first)
NEUSIGHT_SEQS = {"bert_large": (512, 128), "gpt2_large": (1024,), "gpt3_xl": (2048, 1024),
                 "gpt3_2.7b": (2048, 1024), "opt_1.3b": (2048, 1024)}


def _seqs(model: str) -> tuple[str, ...]:
    return tuple(f"seq{s}" for s in NEUSIGHT_SEQS[model])


def _causal(model: nn.Module, vocab: int, seq: int, stack: str, layers: int, first: str, last: str) -> Built:
    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        ids = torch.randint(0, vocab, (batch, seq))
        return ids, ids

    blocks = (first, *(f"{stack}.{i}" for i in range(layers)), last)
    return Built(_HfLoss(model, ("input_ids", "labels")), make_inputs, tuple(f"model.{b}" for b in blocks))


@register("bert_large", *_seqs("bert_large"))
def bert_large(dataset: str) -> Built:
    """BERT-large (24 layers, 1024 hidden) masked language modelling. ``dataset``: ``seq<N>``: the sequence
    length in tokens."""
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                        intermediate_size=4096, attn_implementation="sdpa")
    seq = int(dataset.removeprefix("seq"))

    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        ids = torch.randint(0, config.vocab_size, (batch, seq))
        return ids, ids

    blocks = ("bert.embeddings", *(f"bert.encoder.layer.{i}" for i in range(config.num_hidden_layers)), "cls")
    return Built(_HfLoss(BertForMaskedLM(config), ("input_ids", "labels")), make_inputs,
                 tuple(f"model.{b}" for b in blocks))


def _gpt(dataset: str, embd: int, layers: int, heads: int) -> Built:
    from transformers import GPT2Config, GPT2LMHeadModel

    seq = int(dataset.removeprefix("seq"))
    config = GPT2Config(n_embd=embd, n_layer=layers, n_head=heads, n_positions=max(seq, 1024),
                        attn_implementation="sdpa")
    return _causal(GPT2LMHeadModel(config), config.vocab_size, seq, "transformer.h", layers,
                   "transformer.wte", "transformer.ln_f")


@register("gpt2_large", *_seqs("gpt2_large"))
def gpt2_large(dataset: str) -> Built:
    """GPT-2 large (36 layers, 1280 hidden) causal language modelling. ``dataset``: ``seq<N>``: the sequence
    length in tokens."""
    return _gpt(dataset, 1280, 36, 20)


@register("gpt3_xl", *_seqs("gpt3_xl"))
def gpt3_xl(dataset: str) -> Built:
    """GPT-3 XL shape (24 layers, 3072 hidden) causal language modelling. ``dataset``: ``seq<N>``: the
    sequence length in tokens."""
    return _gpt(dataset, 3072, 24, 24)


@register("gpt3_2.7b", *_seqs("gpt3_2.7b"))
def gpt3_27b(dataset: str) -> Built:
    """GPT-3 2.7B shape (32 layers, 2560 hidden) causal language modelling. ``dataset``: ``seq<N>``: the
    sequence length in tokens."""
    return _gpt(dataset, 2560, 32, 32)


@register("opt_1.3b", *_seqs("opt_1.3b"))
def opt_13b(dataset: str) -> Built:
    """OPT-1.3B (24 layers, 2048 hidden) causal language modelling. ``dataset``: ``seq<N>``: the sequence
    length in tokens."""
    from transformers import OPTConfig, OPTForCausalLM

    seq = int(dataset.removeprefix("seq"))
    config = OPTConfig(hidden_size=2048, num_hidden_layers=24, num_attention_heads=32, ffn_dim=8192,
                       max_position_embeddings=2048, word_embed_proj_dim=2048, attn_implementation="sdpa")
    return _causal(OPTForCausalLM(config), config.vocab_size, seq, "model.decoder.layers", 24,
                   "model.decoder.embed_tokens", "lm_head")

