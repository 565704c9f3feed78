"""GNMT v2, the recurrent translation model whose GPU training throughput NVIDIA publishes in tokens/s
(NVIDIA/DeepLearningExamples, PyTorch/Translation/GNMT), written here in plain PyTorch from its README.

What its README ("Default configuration", "Parameters", "Getting the data") and train.py's defaults say, as built:
- one embedding shared by encoder and decoder ("encoder and decoder are using shared embeddings", --share-embedding
  on), as wide as the LSTMs (--hidden-size 1024), over the shared BPE vocabulary of 32,000 tokens that
  scripts/wmt16_en_de.sh builds for WMT16 English-German;
- encoder: 4 LSTM layers of 1024 (--num-layers 4), the first bidirectional, the rest unidirectional, with residual
  connections from the 3rd layer; dropout 0.2 (--dropout) on the input of every LSTM layer;
- decoder: 4 unidirectional LSTM layers of 1024 and a fully connected classifier. The first layer's outputs are the
  queries of normalized Bahdanau attention over the encoder's outputs, and the attention's context is concatenated
  with the input of every later layer at the same time step; residual connections from the 3rd layer; dropout 0.2 on
  the input of every LSTM layer (the context itself is not: dropout comes before the concatenation in NVIDIA's
  seq2seq/models/decoder.py, the order its changelog of February 2019 switched to);
- initialisation: LSTM weights and biases, the classifier and the attention's key and query transforms and its
  vector uniform in ±0.1; the attention's normalization scalar 1/sqrt(1024), its normalization bias 0. The README
  gives none for the shared embedding: PyTorch's default (standard normal) is kept;
- training: batch 128 per GPU (--train-batch-size), sentences of at most 50 tokens (--train-max-length, BOS and EOS
  included), 6 epochs (--epochs), Adam (train.py's --optimizer default) at a learning rate of 2e-3 (--lr).

Attention is computed from the first decoder layer's outputs, not fed back into that layer's next step as in the
GNMT paper, so the first layer runs over the whole target sequence before the attention does, and every LSTM layer
is one nn.LSTM call over the whole sequence (cuDNN on a GPU): the only loop is over layers, never over time steps.
Teacher forcing: the decoder reads the target shifted right, a start token first.

The model takes one tensor, (N, source_length + target_length) token ids: the source sentence, then the decoder's
input; it returns (N, target_length, vocab_size) logits, one distribution at each target position.

Where this training differs from NVIDIA's (the engine's step is forward, loss, backward, optimizer step, the same for
every workload): plain cross-entropy averaged over positions instead of label smoothing 0.1 (the same matrix
products); no gradient clipping at norm 5 and no learning-rate warm-up or decay; float32 unless a run asks for
another precision (NVIDIA's default is mixed precision; its tables give FP32 too); every sentence pair exactly
source_length and target_length tokens long, with no padding to mask, where NVIDIA's batches are bucketed WMT16
sentences of up to 50 tokens, most of them shorter.

Tokens per sample: NVIDIA's training meter (seq2seq/train/trainer.py) counts, per batch, the source tokens plus the
target tokens the decoder reads (each sentence's length without padding), "total tokens per second" in the README's
words; `tokens_per_sample` counts the same, source_length + target_length. (NVIDIA's longest pair reads 50 + 49:
the decoder reads a 50-token target but its last, EOS; 50 + 50 here keeps the two lengths the README's one.)

    devicebench run gnmt --devices cuda --data synthetic --max-steps 50
"""

from __future__ import annotations

import torch
from torch import nn

from devicebench.data.augmentation import Unchanged
from devicebench.workloads import Hyperparameters, workload
from devicebench.workloads.optimizers import adam
from devicebench.workloads.outputs import SequenceCrossEntropy

GNMT = {
    "vocab_size": 32_000,  # tokens: the shared English-German BPE vocabulary of scripts/wmt16_en_de.sh
    "source_length": 50,  # tokens of a source sentence: --train-max-length, BOS and EOS included
    "target_length": 50,  # tokens the decoder reads: a start token, then the target sentence
    "layers": 4,  # LSTM layers in the encoder and again in the decoder (--num-layers)
    "width": 1024,  # LSTM units, and the width of the embedding and the attention (--hidden-size)
    "dropout": 0.2,  # probability, on the input of every LSTM layer (--dropout)
    "batch_size": 128,  # sentence pairs per GPU (--train-batch-size)
    "epochs": 6,
    "learning_rate": 2e-3,  # Adam's (--lr)
    "adam_epsilon": 1e-8,  # torch.optim.Adam's default, which train.py keeps
}
INIT_RANGE = 0.1  # the README's uniform(-0.1, 0.1) for the LSTMs, the classifier and the attention
RESIDUAL_FROM = 2  # the index of the 3rd layer, from which each LSTM layer's input is added to its output
# The least of each size that still makes a GNMT: a bidirectional layer and a unidirectional one after it, in both
# encoder and decoder (the decoder's first layer only attends, so a second is needed to read the context).
SMALLEST = {"layers": 2, "width": 1, "source_length": 1, "target_length": 1, "vocab_size": 2}
# The largest: 16 layers is twice the deepest GNMT published (the paper's 8); 1,024 tokens is 7 times NVIDIA's
# longest test sentence (--test-max-length 150), and the attention holds batch x target x source x width numbers;
# 262,144 tokens is more than any BPE vocabulary in use. Checked before anything is built, even on the meta device.
LARGEST = {"layers": 16, "width": 8_192, "source_length": 1_024, "target_length": 1_024, "vocab_size": 262_144}


def _lstm(input_width: int, units: int, bidirectional: bool = False) -> nn.LSTM:
    lstm = nn.LSTM(input_width, units, batch_first=True, bidirectional=bidirectional)
    for parameter in lstm.parameters():
        nn.init.uniform_(parameter, -INIT_RANGE, INIT_RANGE)
    return lstm


class Encoder(nn.Module):
    def __init__(self, width: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.bidirectional = _lstm(width, width, bidirectional=True)
        # the 2nd layer reads both directions of the 1st: twice as wide an input
        self.unidirectional = nn.ModuleList(
            _lstm(2 * width if index == 1 else width, width) for index in range(1, layers)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, embedded: torch.Tensor) -> torch.Tensor:
        x, _ = self.bidirectional(self.dropout(embedded))
        for index, lstm in enumerate(self.unidirectional, start=1):
            output, _ = lstm(self.dropout(x))
            x = output + x if index >= RESIDUAL_FROM else output
        return x  # (N, source_length, width)


class NormalizedBahdanauAttention(nn.Module):
    """Additive attention with a normalized score vector: score(q, k) = g * (v / |v|) . tanh(W_q q + W_k k + b),
    a softmax over the source positions, and the context a weighted sum of the encoder's outputs."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.query = nn.Linear(width, width, bias=False)
        self.key = nn.Linear(width, width, bias=False)
        self.vector = nn.Parameter(torch.empty(width))  # v
        self.scale = nn.Parameter(torch.full((1,), width**-0.5))  # g
        self.bias = nn.Parameter(torch.zeros(width))  # b
        for weight in (self.query.weight, self.key.weight, self.vector):
            nn.init.uniform_(weight, -INIT_RANGE, INIT_RANGE)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        # (N, target, 1, width) + (N, 1, source, width): every target position against every source position
        energies = torch.tanh(self.query(queries).unsqueeze(2) + self.key(keys).unsqueeze(1) + self.bias)
        scores = energies @ (self.scale * self.vector / self.vector.norm())  # (N, target, source)
        return torch.softmax(scores, dim=-1) @ keys  # (N, target, width)


class Decoder(nn.Module):
    def __init__(self, width: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.attending = _lstm(width, width)
        self.attention = NormalizedBahdanauAttention(width)
        self.with_context = nn.ModuleList(_lstm(2 * width, width) for _ in range(1, layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, embedded: torch.Tensor, encoded: torch.Tensor) -> torch.Tensor:
        x, _ = self.attending(self.dropout(embedded))
        context = self.attention(x, encoded)
        for index, lstm in enumerate(self.with_context, start=1):
            output, _ = lstm(torch.cat([self.dropout(x), context], dim=-1))
            x = output + x if index >= RESIDUAL_FROM else output
        return x  # (N, target_length, width)


class GNMTv2(nn.Module):
    def __init__(self, vocab_size: int, source_length: int, width: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.source_length = source_length
        self.embedding = nn.Embedding(vocab_size, width)  # shared by the source and the target
        self.encoder = Encoder(width, layers, dropout)
        self.decoder = Decoder(width, layers, dropout)
        self.classifier = nn.Linear(width, vocab_size)  # the last Linear: the registry reads the classes from it
        for parameter in self.classifier.parameters():
            nn.init.uniform_(parameter, -INIT_RANGE, INIT_RANGE)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] <= self.source_length:  # shapes only: no device synchronisation
            raise ValueError(
                f"gnmt takes {self.source_length} source tokens then the target's, got "
                f"{tokens.shape[1]} tokens a sample"
            )
        source, target = tokens[:, : self.source_length], tokens[:, self.source_length :]
        encoded = self.encoder(self.embedding(source))
        return self.classifier(self.decoder(self.embedding(target), encoded))  # (N, target_length, vocab) logits


@workload(
    name="gnmt",
    dataset="wmt16",
    summary="GNMT v2 (NVIDIA's PyTorch recipe): shared embedding, 4 LSTM 1024 encoder (1st bidirectional), "
    "4 LSTM 1024 decoder with normalized Bahdanau attention; 32k BPE, 50 tokens; Adam 2e-3, batch 128",
    defaults=GNMT,
    loss=SequenceCrossEntropy,
    optimizer=adam,
    output="token_logits",
    preprocessing=lambda hyperparameters: Unchanged(),  # token ids go to the model as they are
    data_options=lambda h: {
        "vocab_size": h["vocab_size"],
        "sequence_length": h["source_length"] + h["target_length"],
        "task": "translation",
        "target_length": h["target_length"],
    },
    size_bounds=LARGEST,
    in_suites=False,  # about 160 million parameters: hours an epoch on a CPU
    tokens_per_sample=lambda h: h["source_length"] + h["target_length"],
    budget_lengths=("source_length", "target_length"),  # a laptop's time budget may shorten both
)
def gnmt(hyperparameters: Hyperparameters) -> nn.Module:
    for name, least in SMALLEST.items():
        if hyperparameters[name] < least:
            raise ValueError(f"gnmt: {name} must be at least {least}, got {hyperparameters[name]}")
    if not 0 <= hyperparameters["dropout"] < 1:
        raise ValueError(f"gnmt: dropout is a probability below 1, got {hyperparameters['dropout']}")
    return GNMTv2(
        hyperparameters["vocab_size"],
        hyperparameters["source_length"],
        hyperparameters["width"],
        hyperparameters["layers"],
        hyperparameters["dropout"],
    )
