"""Sequence, recommendation and point-cloud zoo models.

- transformer: the base WMT translation Transformer (6+6 layers, d=512) on Multi30k (32 tokens,
  vocab 10k, as in Gavel's job) or WMT16 (64 tokens, shared vocab 32k);
- lstm_lm: PyTorch's word language model with its default arguments, as Gavel's LM job runs it
  (embedding 200, 2-layer LSTM 200, untied decoder, dropout 0.2, bptt 35) on WikiText-2;
- deepspeech2: DeepSpeech2 as deepspeech.pytorch builds it. Two variants, chosen by the dataset:
  ``librispeech`` (Zeus's workload, deepspeech.pytorch's defaults): 2 conv layers, 5 bidirectional
  LSTM 1024 (directions summed, batch norm between layers), CTC over 161-bin spectrograms of 12.3 s
  (LibriSpeech's mean utterance, 10 ms hop); ``cmu_arctic`` (the Pollux and Sia traces' workload):
  the same network with 5 bidirectional GRU 800 over short clips, 3.3 s (CMU-ARCTIC's utterances are
  single read sentences of about 2-4 s; 330 frames at a 10 ms hop);
- neumf: NeuMF (GMF + MLP 256-128-64) on MovieLens-1M or MovieLens-20M (Lucid's, Zeus's, Pollux's NCF);
- recoder: Gavel's "Recommendation" job (its ``workloads/pytorch/recommendation/train.py``): Recoder's
  ``DynamicAutoencoder(hidden_layers=[200], activation_type='tanh', noise_prob=0.5)`` trained with Adam
  and a summed logistic loss over each user's interaction vector (BCE with logits, averaged over users).
  One sample is one user's row of the user-item matrix; the model L2-normalises it, drops inputs with
  p = 0.5, encodes it into 200 tanh units and decodes logits for the items: two dense GEMMs against
  the item matrices (Recoder keeps them as embeddings, ``sparse=False``, so gradients and Adam are
  dense). Items: 20,108, the movies of ML-20M that Gavel's ``scripts/ml-20m/preprocess.py`` keeps
  (ratings > 3.5, users with >= 5 of them; VAE-CF's preprocessing). Gavel trains with mini-batch
  negative sampling, which narrows both GEMMs to the items present in the batch (at most 20,108);
  the graph uses the whole item vector, so its per-sample cost is the upper end;
- pointnet: PointNet classification over 2,048 points (ShapeNet, 16 classes).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from dltsched.predictors.zoo.nets_base import Built, register, sequential_blocks

#: dataset -> (sequence length, vocabulary)
_WMT = {"multi30k": (32, 10_000), "wmt16": (64, 32_000)}


class Translation(nn.Module):
    """Encoder-decoder Transformer with separate source and target embeddings.

    Parameters
    ----------
    vocab
        Vocabulary size (source and target).
    d
        Model width.
    layers
        Encoder and decoder layers each.
    """

    def __init__(self, vocab: int, d: int = 512, layers: int = 6) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(vocab, d)
        self.tgt_embed = nn.Embedding(vocab, d)
        self.encoder = nn.ModuleList(nn.TransformerEncoderLayer(d, 8, 2048, batch_first=True)
                                     for _ in range(layers))
        self.decoder = nn.ModuleList(nn.TransformerDecoderLayer(d, 8, 2048, batch_first=True)
                                     for _ in range(layers))
        self.generator = nn.Linear(d, vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Encode the source, decode the target, cross-entropy of the next tokens. Returns the training loss
        (a scalar)."""
        memory = self.src_embed(src)
        for layer in self.encoder:
            memory = layer(memory)
        out = self.tgt_embed(tgt)
        for layer in self.decoder:
            out = layer(out, memory)
        logits = self.generator(out)
        return F.cross_entropy(logits.flatten(0, 1), tgt.flatten())


@register("transformer", "multi30k", "wmt16")
def transformer(dataset: str) -> Built:
    """Transformer base (6 encoder and 6 decoder layers, d=512) for translation. ``dataset``: ``multi30k`` or
    ``wmt16`` (sequence length and vocabulary follow it)."""
    seq, vocab = _WMT[dataset]

    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randint(0, vocab, (batch, seq)), torch.randint(0, vocab, (batch, seq))

    blocks = ("src_embed", *(f"encoder.{i}" for i in range(6)), "tgt_embed",
              *(f"decoder.{i}" for i in range(6)), "generator")
    return Built(Translation(vocab), make_inputs, blocks)


class WordLM(nn.Module):
    """Word-level two-layer LSTM language model.

    Parameters
    ----------
    vocab
        Vocabulary size.
    d
        Embedding and hidden size.
    dropout
        Dropout probability.
    """

    def __init__(self, vocab: int = 33_278, d: int = 200, dropout: float = 0.2) -> None:
        super().__init__()
        self.dropout = dropout
        self.encoder = nn.Embedding(vocab, d)
        self.rnn1 = nn.LSTM(d, d)
        self.rnn2 = nn.LSTM(d, d)
        self.decoder = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Embed, two LSTM layers with dropout, cross-entropy of the next words. Returns the training loss (a
        scalar)."""
        x = F.dropout(self.encoder(tokens), self.dropout, self.training)
        x, _ = self.rnn1(x)
        x, _ = self.rnn2(F.dropout(x, self.dropout, self.training))
        x = F.dropout(x, self.dropout, self.training)
        return F.cross_entropy(self.decoder(x).flatten(0, 1), target.flatten())


@register("lstm_lm", "wikitext2")
def lstm_lm(dataset: str) -> Built:
    """Two-layer word LSTM language model (200 units) on 35-token sequences. ``dataset``: ``wikitext2``."""
    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randint(0, 33_278, (35, batch)), torch.randint(0, 33_278, (35, batch))

    return Built(WordLM(), make_inputs, ("encoder", "rnn1", "rnn2", "decoder"))


class _BatchRNN(nn.Module):
    """Batch norm over features (except the first layer), bidirectional LSTM or GRU, directions summed."""

    def __init__(self, cin: int, hidden: int, norm: bool, cell: type[nn.Module] = nn.LSTM) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(cin) if norm else None
        self.rnn = cell(cin, hidden, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (T, B, C)
        if self.norm is not None:
            x = self.norm(x.flatten(0, 1)).view(x.shape)
        x, _ = self.rnn(x)
        return x.view(x.shape[0], x.shape[1], 2, -1).sum(2)


class DeepSpeech2(nn.Module):
    """DeepSpeech2 acoustic model.

    Parameters
    ----------
    freq
        Spectrogram frequency bins.
    hidden
        Recurrent hidden size.
    layers
        Recurrent layers.
    chars
        Output characters (CTC blank included).
    cell
        Recurrent cell type.
    """

    def __init__(self, freq: int = 161, hidden: int = 1024, layers: int = 5, chars: int = 29,
                 cell: type[nn.Module] = nn.LSTM) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(1, 32, (41, 11), (2, 2), (20, 5)), nn.BatchNorm2d(32),
                                   nn.Hardtanh(0, 20))
        self.conv2 = nn.Sequential(nn.Conv2d(32, 32, (21, 11), (2, 1), (10, 5)), nn.BatchNorm2d(32),
                                   nn.Hardtanh(0, 20))
        feat = 32 * ((freq + 1) // 2 + 1) // 2
        self.rnns = nn.ModuleList(_BatchRNN(feat if not i else hidden, hidden, i > 0, cell)
                                  for i in range(layers))
        self.fc = nn.Sequential(nn.BatchNorm1d(hidden), nn.Linear(hidden, chars, bias=False))

    def forward(self, spec: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Convolutions, recurrent layers and CTC loss against the transcripts. Returns the training loss (a
        scalar)."""
        x = self.conv2(self.conv1(spec))  # (B, C, F, T)
        x = x.flatten(1, 2).permute(2, 0, 1)  # (T, B, C*F)
        for rnn in self.rnns:
            x = rnn(x)
        logp = self.fc(x.flatten(0, 1)).log_softmax(-1)
        return F.nll_loss(logp, target.flatten())


#: dataset -> (spectrogram frames per clip, RNN width, RNN cell): the variant each workload trains
_DEEPSPEECH2 = {"librispeech": (1230, 1024, nn.LSTM), "cmu_arctic": (330, 800, nn.GRU)}


@register("deepspeech2", *_DEEPSPEECH2)
def deepspeech2(dataset: str) -> Built:
    """DeepSpeech2: two convolutions, five bidirectional recurrent layers, CTC loss. ``dataset``: One of the
    speech datasets (frames, hidden size and cell type follow it)."""
    frames, hidden, cell = _DEEPSPEECH2[dataset]

    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, 1, 161, frames), torch.randint(0, 29, (frames // 2, batch))

    blocks = ("conv1", "conv2", *(f"rnns.{i}" for i in range(5)), "fc")
    return Built(DeepSpeech2(hidden=hidden, cell=cell), make_inputs, blocks)


#: dataset -> (users, items)
_MOVIELENS = {"movielens": (6_040, 3_706), "ml-20m": (138_493, 26_744)}


class NeuMF(nn.Module):
    """Neural matrix factorization.

    Parameters
    ----------
    users
        Number of users.
    items
        Number of items.
    factors
        Size of the factorization embeddings.
    """

    def __init__(self, users: int, items: int, factors: int = 64) -> None:
        super().__init__()
        self.embed = nn.ModuleDict({"gmf_u": nn.Embedding(users, factors),
                                    "gmf_i": nn.Embedding(items, factors), "mlp_u": nn.Embedding(users, 128),
                                    "mlp_i": nn.Embedding(items, 128)})
        self.mlp1 = nn.Sequential(nn.Linear(256, 128), nn.ReLU())
        self.mlp2 = nn.Sequential(nn.Linear(128, 64), nn.ReLU())
        self.out = nn.Linear(64 + factors, 1)

    def forward(self, user: torch.Tensor, item: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """Binary cross-entropy of the predicted interaction. Returns the training loss (a scalar)."""
        e = self.embed
        gmf = e["gmf_u"](user) * e["gmf_i"](item)
        mlp = self.mlp2(self.mlp1(torch.cat((e["mlp_u"](user), e["mlp_i"](item)), -1)))
        logit = self.out(torch.cat((gmf, mlp), -1)).squeeze(-1)
        return F.binary_cross_entropy_with_logits(logit, label)


@register("neumf", "movielens", "ml-20m")
def neumf(dataset: str) -> Built:
    """NeuMF: generalized matrix factorization beside an MLP over user and item embeddings. ``dataset``:
    ``movielens`` or ``ml-20m`` (user and item counts follow it)."""
    users, items = _MOVIELENS[dataset]

    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randint(0, users, (batch,)), torch.randint(0, items, (batch,)), torch.rand(batch)

    return Built(NeuMF(users, items), make_inputs, ("embed", "mlp1", "mlp2", "out"))


#: items of ML-20M as Gavel's preprocessing keeps them (the autoencoder's input and output width)
_RECODER_ITEMS = {"ml-20m": 20_108}


class ItemAutoencoder(nn.Module):
    """Recoder's DynamicAutoencoder with one hidden layer, on whole interaction vectors."""

    def __init__(self, items: int, hidden: int = 200, noise: float = 0.5) -> None:
        super().__init__()
        self.noise = noise
        self.encoder = nn.Linear(items, hidden)
        self.decoder = nn.Linear(hidden, items)

    def forward(self, interactions: torch.Tensor) -> torch.Tensor:
        """Reconstruct the normalised, noised interactions; cross-entropy per user. Returns the training loss
        (a scalar)."""
        z = F.dropout(F.normalize(interactions, p=2.0, dim=1), self.noise, self.training)
        logits = self.decoder(torch.tanh(self.encoder(z)))
        loss = F.binary_cross_entropy_with_logits(logits, interactions, reduction="sum")
        return loss / interactions.shape[0]


@register("recoder", "ml-20m")
def recoder(dataset: str) -> Built:
    """Recoder: a denoising item autoencoder over users' interaction vectors. ``dataset``: ``ml-20m``."""
    items = _RECODER_ITEMS[dataset]

    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return (torch.rand(batch, items),)

    return Built(ItemAutoencoder(items), make_inputs, ("encoder", "decoder"))


class PointNet(nn.Module):
    """PointNet classifier (without the input transforms).

    Parameters
    ----------
    classes
        Number of classes.
    """

    def __init__(self, classes: int = 16) -> None:
        super().__init__()

        def pconv(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv1d(cin, cout, 1), nn.BatchNorm1d(cout), nn.ReLU())

        def fc(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Linear(cin, cout), nn.BatchNorm1d(cout), nn.ReLU())

        self.layers = nn.ModuleList([pconv(3, 64), pconv(64, 64), pconv(64, 64), pconv(64, 128),
                                     pconv(128, 1024),
                                     nn.Sequential(nn.AdaptiveMaxPool1d(1), nn.Flatten(), fc(1024, 512)),
                                     nn.Sequential(fc(512, 256), nn.Dropout(0.3)), nn.Linear(256, classes)])

    def forward(self, points: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """Shared point MLPs, max pooling, classifier, cross-entropy. Returns the training loss (a scalar)."""
        x = points
        for layer in self.layers:
            x = layer(x)
        return F.cross_entropy(x, label)


@register("pointnet", "shapenet")
def pointnet(dataset: str) -> Built:
    """PointNet classification on 2048-point clouds (16 classes). ``dataset``: ``shapenet``."""
    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, 3, 2048), torch.randint(0, 16, (batch,))

    return Built(PointNet(), make_inputs, sequential_blocks(8))
