"""The language reference models of the published GPU tables: BERT-base and BERT-large fine-tuned on SQuAD v1.1,
GPT-2 small trained on OpenWebText. Plain PyTorch, in the shapes of the published implementations.

BERT (Devlin et al. 2018, arXiv:1810.04805): a post-layer-norm Transformer encoder. Base: 12 layers of width 768,
12 heads, feed-forward 3,072; large: 24 layers of width 1,024, 16 heads, feed-forward 4,096. The uncased WordPiece
vocabulary of 30,522 tokens, 512 learned positions, 2 token types, GELU (erf), layer norm epsilon 1e-12, dropout 0.1
(attention probabilities too), weights normal(0, 0.02), biases 0. The task is SQuAD v1.1 fine-tuning, as NVIDIA's
and Lambda's GPU tables measure it: a span head Linear(width, 2) gives each position a start and an end score, and
the loss is the mean of the start's and the end's cross-entropy over the positions. Settings:
- bert-large: sequences of 384 tokens, batch 4 a GPU, AdamW lr 3e-5, 2 epochs: NVIDIA DeepLearningExamples,
  PyTorch/LanguageModeling/BERT/README.md (fine-tuning defaults lr 3e-5 and 2 epochs; its FP32 fine-tuning
  results and throughput tables on V100 16 GB run at a batch of 4 a GPU).
- bert-base: sequences of 384, batch 12, lr 3e-5, 2 epochs: google-research/bert README.md, "SQuAD 1.1" (the run
  for one 12 GB GPU; 12 is the largest batch of 384 tokens it fits).
- weight decay 0.01 on every matrix (not on biases and layer norms), Adam epsilon 1e-6: BERT's optimizer as both
  implementations configure it.
The model is built without the pre-training pooler, which SQuAD does not use: bert-base-uncased has 109,482,240
parameters and bert-large-uncased 335,141,888 as common implementations count them, the pooler (width² + width)
included; ours have those minus the pooler plus the head (2 x width + 2). Every sequence is one token type and
unpadded, so there is no attention mask: a padded position costs the same arithmetic as a real one.

GPT-2 small (Radford et al. 2019): a pre-layer-norm Transformer decoder with a final layer norm, 12 layers of
width 768, 12 heads, feed-forward 3,072, context 1,024, the byte-pair vocabulary of 50,257 tokens, learned positions,
GELU (tanh approximation), layer norm epsilon 1e-5, causal attention, the output layer tied to the token embedding;
weights normal(0, 0.02), the residual projections' scaled by 1/sqrt(2 x layers) as GPT-2 does. 124,439,808
parameters: the paper's "117M" was a miscount (openai/gpt-2 README). Next-token language modelling on sequences of
1,024 tokens, batch 12 a GPU, AdamW lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on matrices, no dropout:
karpathy/nanoGPT config/train_gpt2.py ("12 batch size * 1024 block size * 5 gradaccum * 8 GPUs") and train.py.

None of them runs with its learning-rate warm-up and decay, gradient clipping or gradient accumulation: they change
no step's arithmetic (clipping adds one pass over the gradients). SQuAD and OpenWebText need tokenizers devicebench
does not ship, so these train on synthetic sequences of the same shapes (data/sequences.py), and say so. They run
only when named: hours a CPU epoch.

    devicebench run bert-base gpt2-small --devices cpu --data synthetic --batch-size 1 --epochs 2 --max-steps 2
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from devicebench.data.augmentation import Unchanged
from devicebench.data.sequences import check_sequence_request
from devicebench.workloads import DataOptions, Hyperparameters, workload
from devicebench.workloads.outputs import SequenceCrossEntropy

INIT_STD = 0.02  # BERT's and GPT-2's initializer_range
FEED_FORWARD_RATIO = 4  # the feed-forward layer's width over the model's: 3,072 / 768, 4,096 / 1,024
BERT_POSITIONS = 512  # learned position embeddings: the longest sequence BERT reads
BERT_TOKEN_TYPES = 2  # segment A (question) and B (paragraph)
GPT2_CONTEXT = 1_024  # learned position embeddings: the longest sequence GPT-2 reads
# The largest value of each size: past them a model is no benchmark on any machine (and MAX_PARAMETERS holds too)
SIZE_BOUNDS = {"layers": 128, "width": 16_384, "heads": 256, "vocab_size": 262_144}

BERT_SQUAD = {
    "vocab_size": 30_522,  # uncased WordPiece tokens
    "sequence_length": 384,  # tokens a question and its paragraph are cut or padded to (max_seq_length)
    "dropout": 0.1,  # probability, on embeddings, attention probabilities and each sublayer's output
    "epochs": 2,
    "learning_rate": 3e-5,
    "weight_decay": 0.01,  # AdamW's, on matrices only
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
}
GPT2_SMALL = {
    "layers": 12,
    "width": 768,
    "heads": 12,
    "vocab_size": 50_257,  # byte-pair tokens
    "sequence_length": GPT2_CONTEXT,  # tokens a sample holds: the whole context
    "dropout": 0.0,  # nanoGPT's for training from scratch
    "batch_size": 12,  # sequences a GPU (nanoGPT accumulates 40 of these batches over 8 GPUs per update)
    "epochs": 2,  # a warm-up epoch and a measured one over the synthetic stand-in
    "learning_rate": 6e-4,
    "weight_decay": 0.1,  # AdamW's, on matrices only
    "adam_beta2": 0.95,
    "adam_epsilon": 1e-8,  # torch's AdamW default, which nanoGPT keeps
}


def adamw(model: nn.Module, hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
    """AdamW decaying the matrices (weights, embeddings) and not the biases or layer norms, as BERT and GPT-2 do."""
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    return torch.optim.AdamW(
        [
            {"params": [p for p in parameters if p.dim() >= 2], "weight_decay": hyperparameters["weight_decay"]},
            {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=hyperparameters["learning_rate"],
        betas=(0.9, hyperparameters["adam_beta2"]),
        eps=hyperparameters["adam_epsilon"],
    )


def _initialised(module: nn.Module, std: float = INIT_STD) -> nn.Module:
    """Weights normal(0, std), biases 0, layer norms the identity: BERT's and GPT-2's start."""
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Embedding)):
            nn.init.normal_(layer.weight, mean=0.0, std=std)
        if isinstance(layer, nn.Linear) and layer.bias is not None:
            nn.init.zeros_(layer.bias)
        if isinstance(layer, nn.LayerNorm):
            nn.init.ones_(layer.weight)
            nn.init.zeros_(layer.bias)
    return module


class SelfAttention(nn.Module):
    """Multi-head self-attention: one projection for queries, keys and values, one back to the width."""

    def __init__(self, width: int, heads: int, dropout: float, causal: bool) -> None:
        super().__init__()
        self.heads, self.dropout, self.causal = heads, dropout, causal
        self.query_key_value = nn.Linear(width, 3 * width)
        self.output = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        query, key, value = self.query_key_value(x).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(
            query, key, value, is_causal=self.causal, dropout_p=self.dropout if self.training else 0.0
        )
        return self.output(attended.transpose(1, 2).reshape(batch, length, width))


class TransformerBlock(nn.Module):
    """Attention and a feed-forward layer, each in a residual branch: layer-normed after the sum (BERT) or at the
    branch's input (GPT-2's `pre_norm`)."""

    def __init__(
        self, width: int, heads: int, dropout: float, *, causal: bool, pre_norm: bool, epsilon: float, gelu: str
    ) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.attention = SelfAttention(width, heads, dropout, causal)
        self.feed_forward = nn.Sequential(
            nn.Linear(width, FEED_FORWARD_RATIO * width),
            nn.GELU(approximate=gelu),
            nn.Linear(FEED_FORWARD_RATIO * width, width),
        )
        self.attention_norm = nn.LayerNorm(width, eps=epsilon)
        self.feed_forward_norm = nn.LayerNorm(width, eps=epsilon)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.dropout(self.attention(self.attention_norm(x)))
            return x + self.dropout(self.feed_forward(self.feed_forward_norm(x)))
        x = self.attention_norm(x + self.dropout(self.attention(x)))
        return self.feed_forward_norm(x + self.dropout(self.feed_forward(x)))

    @property
    def residual_projections(self) -> tuple[nn.Linear, nn.Linear]:
        """The layers whose outputs are added to the residual stream (GPT-2 starts them smaller)."""
        contract = self.feed_forward[2]
        assert isinstance(contract, nn.Linear)  # the feed-forward's last layer, as __init__ builds it
        return self.attention.output, contract


class BertForQuestionAnswering(nn.Module):
    """BERT's encoder and a span head: (N, L) token ids in, (N, 2, L) start and end scores over the positions out."""

    def __init__(self, vocab_size: int, layers: int, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, width)
        self.positions = nn.Embedding(BERT_POSITIONS, width)
        self.token_types = nn.Embedding(BERT_TOKEN_TYPES, width)
        self.embedding_norm = nn.LayerNorm(width, eps=1e-12)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(width, heads, dropout, causal=False, pre_norm=False, epsilon=1e-12, gelu="none")
            for _ in range(layers)
        )
        self.span = nn.Linear(width, 2)  # a start and an end score per position
        _initialised(self)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        # one token type (0) for the whole sequence: the synthetic sequences have no question and paragraph halves
        x = self.tokens(tokens) + self.positions(positions) + self.token_types.weight[0]
        x = self.dropout(self.embedding_norm(x))
        for block in self.blocks:
            x = block(x)
        return self.span(x).transpose(1, 2)  # (N, 2, L): the positions are the classes of each end


class GPT2(nn.Module):
    """GPT-2: (N, L) token ids in, (N, L, vocabulary) scores for each position's next token out."""

    def __init__(self, vocab_size: int, layers: int, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, width)
        self.positions = nn.Embedding(GPT2_CONTEXT, width)
        self.dropout = nn.Dropout(dropout)
        blocks = [
            TransformerBlock(width, heads, dropout, causal=True, pre_norm=True, epsilon=1e-5, gelu="tanh")
            for _ in range(layers)
        ]
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = nn.LayerNorm(width, eps=1e-5)
        self.head = nn.Linear(width, vocab_size, bias=False)
        _initialised(self)
        self.head.weight = self.tokens.weight  # tied: one matrix reads tokens in and scores them out
        for block in blocks:  # each block adds two branches to the residual stream: keep its sum's variance
            for projection in block.residual_projections:
                nn.init.normal_(projection.weight, mean=0.0, std=INIT_STD / math.sqrt(2 * layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.dropout(self.tokens(tokens) + self.positions(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))


def _sizes(hyperparameters: Hyperparameters, task: str) -> dict[str, Any]:
    """The model's sizes, refused with a clear ValueError when they cannot make a model or its data."""
    check_sequence_request(hyperparameters["vocab_size"], hyperparameters["sequence_length"], task)
    width, heads, layers = hyperparameters["width"], hyperparameters["heads"], hyperparameters["layers"]
    if layers < 1 or heads < 1 or width < heads or width % heads:  # width 0: every head 0 wide, nothing to train
        raise ValueError(
            f"a Transformer needs at least one layer, one head and a width its heads divide into parts of 1 or more: got "
            f"layers={layers} width={width} heads={heads}"
        )
    return {
        "vocab_size": hyperparameters["vocab_size"],
        "layers": layers,
        "width": width,
        "heads": heads,
        "dropout": hyperparameters["dropout"],
    }


def _sequence_data(task: str) -> DataOptions:
    return lambda h: {"vocab_size": h["vocab_size"], "sequence_length": h["sequence_length"], "task": task}


bert_workload = partial(  # what both BERTs share: SQuAD spans, the loss, AdamW, the bounds
    workload,
    dataset="squad",
    loss=SequenceCrossEntropy,
    optimizer=adamw,
    output="token_logits",
    preprocessing=lambda hyperparameters: Unchanged(),  # token ids go to the model as they are
    data_options=_sequence_data("spans"),
    size_bounds={**SIZE_BOUNDS, "sequence_length": BERT_POSITIONS},
    in_suites=False,
    tokens_per_sample=lambda hyperparameters: hyperparameters["sequence_length"],
    budget_lengths=("sequence_length",),  # a laptop's time budget may shorten the sequence
)


@bert_workload(
    name="bert-base",
    summary="BERT-base (12 layers, 768 wide, 12 heads, 110M) + span head: SQuAD v1.1 fine-tuning, 384 tokens; AdamW",
    defaults={"layers": 12, "width": 768, "heads": 12, **BERT_SQUAD, "batch_size": 12},
)
def bert_base(hyperparameters: Hyperparameters) -> nn.Module:
    return BertForQuestionAnswering(**_sizes(hyperparameters, "spans"))


@bert_workload(
    name="bert-large",
    summary="BERT-large (24 layers, 1024 wide, 16 heads, 340M) + span head: SQuAD v1.1 fine-tuning, 384 tokens; AdamW",
    defaults={"layers": 24, "width": 1_024, "heads": 16, **BERT_SQUAD, "batch_size": 4},
)
def bert_large(hyperparameters: Hyperparameters) -> nn.Module:
    return BertForQuestionAnswering(**_sizes(hyperparameters, "spans"))


@workload(
    name="gpt2-small",
    dataset="openwebtext",
    summary="GPT-2 small (12 layers, 768 wide, 12 heads, 124M, tied embeddings): next tokens of 1,024; AdamW",
    defaults=GPT2_SMALL,
    loss=SequenceCrossEntropy,
    optimizer=adamw,
    output="token_logits",
    preprocessing=lambda hyperparameters: Unchanged(),
    data_options=_sequence_data("next-token"),
    size_bounds={**SIZE_BOUNDS, "sequence_length": GPT2_CONTEXT},
    in_suites=False,
    tokens_per_sample=lambda hyperparameters: hyperparameters["sequence_length"],
    budget_lengths=("sequence_length",),  # a laptop's time budget may shorten the sequence
)
def gpt2_small(hyperparameters: Hyperparameters) -> nn.Module:
    return GPT2(**_sizes(hyperparameters, "next-token"))
