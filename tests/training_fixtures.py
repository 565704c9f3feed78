"""Tiny, learnable training material for engine tests: a prototype-per-class image set and a small model."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from devicebench.data import ArrayDataset
from devicebench.data.text import TokenDataset
from devicebench.engine.loop import TrainingSetup


def learnable_dataset(train: int = 256, test: int = 64, classes: int = 4, seed: int = 0) -> ArrayDataset:
    """Each class is a fixed random 8x8 image; samples are it plus noise. A linear model separates them."""
    rng = np.random.default_rng(seed)
    prototypes = rng.integers(0, 256, size=(classes, 1, 8, 8))

    def split(count: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.arange(count) % classes
        noise = rng.normal(0, 30, size=(count, 1, 8, 8))
        return np.clip(prototypes[labels] + noise, 0, 255).astype(np.uint8), labels.astype(np.int64)

    train_images, train_labels = split(train)
    test_images, test_labels = split(test)
    return ArrayDataset("tiny", "synthetic", train_images, train_labels, test_images, test_labels, classes)


def linear_setup(classes: int = 4, learning_rate: float = 0.5) -> TrainingSetup:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, classes))
    return TrainingSetup(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=learning_rate))


class DelayedBatches:
    """Wraps batches so that `delay()` runs before each one is handed over: a slow input pipeline, in real
    time (a sleep) or on a test's fake clock."""

    def __init__(self, batches, delay: Callable[[], None]) -> None:
        self.batches, self.delay = batches, delay
        self.batch_size, self.workers = batches.batch_size, 0

    def __len__(self) -> int:
        return len(self.batches)

    def batch_sizes(self, steps: int) -> list[int]:
        return self.batches.batch_sizes(steps)

    def epoch(self, epoch: int, steps: int | None = None):
        for batch in self.batches.epoch(epoch, steps):
            self.delay()
            yield batch

    def close(self) -> None:
        self.batches.close()


def bf16_bilstm_run():
    """A tuned bf16 run of a tiny imdb-bilstm on 40 synthetic reviews (its LSTMs stay fp32 under autocast): the
    record, trained through the runner as a session would."""
    from devicebench import RunConfig, planning, runner  # the runner imports torch's heavier parts

    generator = np.random.default_rng(0)
    tokens = generator.integers(2, 500, (40, 12)).astype(np.int64)
    labels = generator.integers(0, 2, 40).astype(np.int64)
    vocabulary = ("<pad>", "<unk>") + tuple(f"word{index}" for index in range(2, 500))
    dataset = TokenDataset(
        "imdb", "synthetic", tokens[:32], labels[:32], tokens[32:], labels[32:], 2, ("neg", "pos"), vocabulary
    )
    config = RunConfig(
        workloads=("imdb-bilstm",),
        devices="cpu",
        data="synthetic",
        epochs=1,
        max_steps=2,
        mode="tuned",
        precision="bf16",
        compile="off",
        overrides=("vocab_size=500", "sequence_length=12", "batch_size=8"),
    )
    (job,) = planning.plan(config).jobs
    record = runner.new_record(job, dataset, 0)
    runner.train_record(record, job, dataset)
    return record
