"""Where a run's in-memory data lives, and how a batch reaches the device from there (`pipeline.HostBatches`).

- Resident, in the device's memory: always on the CPU, where the arrays already are, and on a CUDA device when the
  preprocessed split fits in RESIDENT_SHARE of its free memory. On a CUDA device the split is preprocessed once,
  on the host (the very values a CPU run trains on), and moved; on the CPU it stays as it is and is preprocessed a
  chunk at a time: a float copy beside the uint8 arrays would more than double a big set's memory (CIFAR-10's
  training images: 614 MB of floats beside 154 MB).
- Staged, where the data does not fit: each batch gathered by numpy's `take`, on one thread, into page-locked
  memory, copied to the device asynchronously one batch ahead, and preprocessed there. No torch operation runs on
  the host's cores per step: a multi-threaded one would leave OpenMP's workers spinning between a GPU's steps.

    python -c "import torch; from devicebench.data.placement import fits_on; print(fits_on(torch.device('cpu'), 10**9))"
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from devicebench.data.augmentation import Preprocessing

Batch = tuple[torch.Tensor, torch.Tensor]  # (model inputs, labels), as pipeline.Batch
HOST_CHUNK_BYTES = 32 * 2**20  # preprocessed on the host at a time, on the way to the device: the host never holds all
RESIDENT_SHARE = 0.5  # of the device's free memory, the most a resident dataset may take: the rest is training's
STAGING_BUFFERS = 2  # page-locked batches: one being copied while the next is gathered


def fits_on(device: torch.device, size_bytes: int) -> bool:
    """Whether a dataset of `size_bytes` may live on `device`: always on the CPU (the arrays are in its memory)."""
    if device.type == "cpu":
        return True
    if device.type != "cuda":
        return False  # other accelerators report no free memory to check against
    free_bytes, _ = torch.cuda.mem_get_info(device)
    return size_bytes <= RESIDENT_SHARE * free_bytes


def preprocessed_on(device: torch.device, inputs: torch.Tensor, preprocessing: Preprocessing) -> torch.Tensor:
    """`inputs` preprocessed on the host a chunk at a time (the host never holds a whole float copy) and gathered
    into one tensor on `device`."""
    if len(inputs) == 0:
        return preprocessing.test(inputs).to(device)
    first = preprocessing.test(inputs[:1])
    moved = torch.empty((len(inputs), *first.shape[1:]), dtype=first.dtype, device=device)
    rows = max(1, HOST_CHUNK_BYTES // first.nbytes)
    for start in range(0, len(inputs), rows):
        moved[start : start + rows].copy_(preprocessing.test(inputs[start : start + rows]))
    return moved


class Stage:
    """Batches gathered on the host by numpy (one thread) and copied to the device: through page-locked buffers,
    asynchronously, on CUDA; into fresh arrays elsewhere (the CPU itself: the staged path as a test sees it)."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int, device: torch.device) -> None:
        self.inputs, self.labels, self.device = as_numpy(inputs), as_numpy(labels), device
        self.dtypes = inputs.dtype, labels.dtype
        self.pinned = device.type == "cuda"
        self.buffers = [
            (
                torch.empty((batch_size, *inputs.shape[1:]), dtype=inputs.dtype, pin_memory=True),
                torch.empty((batch_size, *labels.shape[1:]), dtype=labels.dtype, pin_memory=True),
            )
            for _ in range(STAGING_BUFFERS if self.pinned else 0)
        ]
        self.copies: list[torch.cuda.Event | None] = [None] * len(self.buffers)

    def batches(self, order: np.ndarray, sizes: list[int], preprocessing: Preprocessing) -> Iterator[Batch]:
        """Batches of `sizes` samples, taken in `order`, each preprocessed on the device; each copied while the step
        before it trains."""
        ahead: Batch | None = None
        taken = 0
        for step, size in enumerate(sizes):
            inputs, labels = self.copied(order[taken : taken + size], step % STAGING_BUFFERS)
            taken += size
            batch = preprocessing.test(inputs), labels  # queued on the device behind its copy
            if ahead is not None:
                yield ahead
            ahead = batch
        if ahead is not None:
            yield ahead

    def copied(self, rows: np.ndarray, slot: int) -> Batch:
        if not self.pinned:
            gathered = (np.take(array, rows, axis=0) for array in (self.inputs, self.labels))
            return tuple(  # type: ignore[return-value]  # two, as Batch says
                from_numpy(array, dtype).to(self.device) for array, dtype in zip(gathered, self.dtypes)
            )
        previous = self.copies[slot]
        if previous is not None:
            previous.synchronize()  # the buffer's last batch has reached the device: it may be overwritten
        inputs, labels = (buffer[: len(rows)] for buffer in self.buffers[slot])
        np.take(self.inputs, rows, axis=0, out=as_numpy(inputs))
        np.take(self.labels, rows, axis=0, out=as_numpy(labels))
        batch = inputs.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)
        copy = torch.cuda.Event()
        copy.record(torch.cuda.current_stream(self.device))
        self.copies[slot] = copy
        return batch


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A host tensor's memory as a numpy array (bfloat16, which numpy lacks, as the 16-bit integers it is in memory):
    numpy's `take` copies rows on one thread, whatever torch's thread count."""
    return (tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor).numpy()


def from_numpy(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    return tensor.view(dtype) if dtype == torch.bfloat16 else tensor
