"""What a model's outputs mean, by their kind (`Workload.output`): the class each output row stands for, its class
probabilities, and the losses of the kinds torch's own losses do not read as they are (token logits, one binary logit).

    python -c "import torch; from devicebench.workloads.outputs import predicted_classes as p; print(p(torch.tensor([[0.1, 2.0]]), 'logits'))"
"""

from __future__ import annotations

import torch
from torch import nn

from devicebench.workloads import OutputKind


def predicted_classes(outputs: torch.Tensor, output: OutputKind) -> torch.Tensor:
    """The class index each output row stands for."""
    if output == "binary_logit":
        return (outputs.squeeze(1) > 0).long()  # a logit above 0 is a sigmoid above 0.5
    if output == "token_logits":
        return outputs.argmax(dim=-1)  # (N, positions): a class at each position
    return outputs.argmax(dim=1)


def class_probabilities(outputs: torch.Tensor, output: OutputKind) -> torch.Tensor:
    """(N, classes) probabilities summing to 1 per row."""
    if output == "binary_logit":
        positive = torch.sigmoid(outputs.squeeze(1))
        return torch.stack([1 - positive, positive], dim=1)
    if output == "probabilities":
        return outputs / outputs.sum(dim=1, keepdim=True)  # how Keras' cross-entropy reads sigmoid outputs
    return torch.softmax(outputs, dim=1)


class SequenceCrossEntropy(nn.Module):
    """Cross-entropy of "token_logits" outputs (N, positions, classes) against (N, positions) targets, averaged over
    every position: a language model's loss, and a span's (start and end) as BERT's question answering averages it."""

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


class BinaryCrossEntropy(nn.Module):
    """Keras' `binary_crossentropy` after a sigmoid, computed from the logit for numerical stability."""

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.binary_cross_entropy_with_logits(logits.squeeze(1), labels.float())
