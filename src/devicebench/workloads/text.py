"""S5: text classification, "198.2 s without GPU, 14.4 s with GPU" (13.76x) on Google Colab.

The S5 overview names neither the data nor the model. Our reading: IMDB sentiment (25,000 training and 25,000
test reviews) with the two models the Keras examples of the time trained on it, in Keras' own settings:
- `imdb-bilstm` (Keras "Bidirectional LSTM on IMDB"): the 20,000 most frequent words, reviews cut to their last
  200 tokens, Embedding 128 → bidirectional LSTM 64 (returning sequences) → bidirectional LSTM 64 → Dense 1
  sigmoid; Adam, binary cross-entropy, batch 32, 2 epochs.
- `imdb-transformer` (Keras "Text classification with Transformer"): the same vocabulary and length, token +
  position embeddings of 32, one Transformer block (2 heads of key size 32, feed-forward 32, dropout 0.1,
  layer norm epsilon 1e-6), average over positions → Dropout 0.1 → Dense 20 ReLU → Dropout 0.1 → Dense 2
  softmax; Adam, sparse categorical cross-entropy, batch 32, 2 epochs.

Initialisation is Keras': embeddings uniform in ±0.05, kernels Glorot-uniform, LSTM recurrent kernels orthogonal,
biases zero except each LSTM forget gate's, which starts at 1 (`unit_forget_bias`). Keras' attention keeps a
key size of 32 per head (64 for two heads) and projects back to 32, which PyTorch's MultiheadAttention (head size
= width / heads) cannot express, so the block is written out. No padding mask, as in both examples.

    devicebench run imdb-bilstm imdb-transformer --devices cpu --data synthetic --max-steps 50
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from devicebench.data.augmentation import Unchanged
from devicebench.data.text import check_sequence_length, check_vocab_size
from devicebench.workloads import Hyperparameters, Published, QuickSettings, workload
from devicebench.workloads.optimizers import adam
from devicebench.workloads.outputs import BinaryCrossEntropy

EMBEDDING_INIT = 0.05  # Keras' Embedding: uniform in ±0.05
KERAS_EPSILON = 1e-7  # Adam's epsilon in Keras

TEXT = {
    "vocab_size": 20_000,  # words kept: the most frequent in the training reviews, plus padding and unknown
    "sequence_length": 200,  # tokens per review: the last 200, padded at the front
    "batch_size": 32,
    "epochs": 2,
    "learning_rate": 1e-3,  # Keras Adam defaults
    "adam_epsilon": KERAS_EPSILON,
}
# The longest review devicebench reads: 20 times the seed's 200 tokens, more than IMDB's longest review holds.
# `sequence_length` multiplies the LSTM's steps (each a handful of kernels) and the tensors a step unbinds into, so
# a larger value, from `--set`, a checkpoint or a stored run, is refused before anything is built, even on meta.
MOST_TOKENS = 4_096
imdb_workload = partial(  # what both classifiers share: the seed, the data, the optimizer, the figures
    workload,
    size_bounds={"sequence_length": MOST_TOKENS},
    seed="S5",
    dataset="imdb",
    optimizer=adam,
    preprocessing=lambda hyperparameters: Unchanged(),  # token ids go to the model as they are
    data_options=lambda h: {"vocab_size": h["vocab_size"], "sequence_length": h["sequence_length"]},
    published=Published(
        speedup=13.76,
        basis="a text classifier on Google Colab, 198.2 s without a GPU, 14.4 s with one (model not named)",
        hardware="Google Colab CPU vs its GPU (then a Tesla K80 or T4)",
        end_to_end_s={"cpu": 198.2, "gpu": 14.4},
    ),
    quick=QuickSettings(max_steps=30, max_eval_steps=5),
)


def _keras_embedding(vocab_size: int, width: int) -> nn.Embedding:
    embedding = nn.Embedding(vocab_size, width)
    nn.init.uniform_(embedding.weight, -EMBEDDING_INIT, EMBEDDING_INIT)
    return embedding


def _keras_dense(width_in: int, width_out: int) -> nn.Linear:
    linear = nn.Linear(width_in, width_out)
    nn.init.xavier_uniform_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


def _keras_lstm(width_in: int, units: int) -> nn.LSTM:
    """A bidirectional LSTM started as Keras starts one: Glorot input kernels, orthogonal recurrent kernels,
    zero biases but the forget gate's at 1 (PyTorch's gates are ordered input, forget, cell, output)."""
    lstm = nn.LSTM(width_in, units, batch_first=True, bidirectional=True)
    for name, parameter in lstm.named_parameters():
        if name.startswith("weight_ih"):
            nn.init.xavier_uniform_(parameter)
        elif name.startswith("weight_hh"):
            nn.init.orthogonal_(parameter)
        else:
            nn.init.zeros_(parameter)
            if name.startswith("bias_ih"):  # one of the two PyTorch biases carries Keras' single bias
                parameter.data[units : 2 * units] = 1.0
    return lstm


class BiLSTMClassifier(nn.Module):
    def __init__(self, vocab_size: int, embedding_width: int = 128, units: int = 64) -> None:
        super().__init__()
        self.embedding = _keras_embedding(vocab_size, embedding_width)
        self.first = _keras_lstm(embedding_width, units)
        self.second = _keras_lstm(2 * units, units)
        self.output_layer = _keras_dense(2 * units, 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        sequence, _ = self.first(self.embedding(tokens))
        _, (final_states, _) = self.second(sequence)  # (2 directions, N, units): each direction's last state
        return self.output_layer(torch.cat([final_states[0], final_states[1]], dim=1))  # one logit


class KerasAttention(nn.Module):
    """Keras' MultiHeadAttention(num_heads, key_dim) on one sequence: each head of size key_dim, then back to width."""

    def __init__(self, width: int, heads: int, key_size: int) -> None:
        super().__init__()
        self.heads, self.key_size = heads, key_size
        self.query, self.key, self.value = (_keras_dense(width, heads * key_size) for _ in range(3))
        self.output = _keras_dense(heads * key_size, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        split = [
            projection(x).view(batch, length, self.heads, self.key_size).transpose(1, 2)
            for projection in (self.query, self.key, self.value)
        ]
        attended = F.scaled_dot_product_attention(*split)  # (batch, heads, length, key_size), scaled by 1/sqrt(key)
        return self.output(attended.transpose(1, 2).reshape(batch, length, self.heads * self.key_size))


class TransformerClassifier(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        sequence_length: int,
        width: int = 32,
        heads: int = 2,
        feed_forward: int = 32,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.tokens = _keras_embedding(vocab_size, width)
        self.positions = _keras_embedding(sequence_length, width)
        self.attention = KerasAttention(width, heads, key_size=width)
        self.feed_forward = nn.Sequential(
            _keras_dense(width, feed_forward), nn.ReLU(), _keras_dense(feed_forward, width)
        )
        self.norm_attention = nn.LayerNorm(width, eps=1e-6)
        self.norm_feed_forward = nn.LayerNorm(width, eps=1e-6)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Sequential(
            nn.Dropout(dropout), _keras_dense(width, 20), nn.ReLU(), nn.Dropout(dropout), _keras_dense(20, 2)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        x = self.norm_attention(x + self.dropout(self.attention(x)))
        x = self.norm_feed_forward(x + self.dropout(self.feed_forward(x)))
        return self.head(x.mean(dim=1))  # logits: the softmax lives in the loss


@imdb_workload(
    name="imdb-bilstm",
    summary="IMDB: Embedding 128 → BiLSTM 64 → BiLSTM 64 → Dense 1 sigmoid; 20k words, 200 tokens; Adam",
    loss=BinaryCrossEntropy,
    output="binary_logit",
    defaults=TEXT,
)
def imdb_bilstm(hyperparameters: Hyperparameters) -> nn.Module:
    return BiLSTMClassifier(_checked(hyperparameters)["vocab_size"])


@imdb_workload(
    name="imdb-transformer",
    summary="IMDB: token + position embedding 32 → Transformer block (2 heads) → mean → Dense 20 → Dense 2; Adam",
    loss=nn.CrossEntropyLoss,
    defaults=TEXT,
)
def imdb_transformer(hyperparameters: Hyperparameters) -> nn.Module:
    sizes = _checked(hyperparameters)
    return TransformerClassifier(sizes["vocab_size"], sizes["sequence_length"])


def _checked(hyperparameters: Hyperparameters) -> Hyperparameters:
    """Sizes the data could not be made to, refused when the model is built (so `--set` fails before training)."""
    check_vocab_size(hyperparameters["vocab_size"])
    check_sequence_length(hyperparameters["sequence_length"])
    return hyperparameters
