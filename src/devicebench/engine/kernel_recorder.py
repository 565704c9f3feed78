"""The recorder of a step's kernels: which aten calls launch a kernel on a GPU (views and pure allocations do not),
and each one's FLOPs and the bytes it reads and writes. engine/opcount.py runs a training step under it.

    python -c "import torch; from devicebench.engine.kernel_recorder import Recorder; r = Recorder('meta'); x = torch.ones(4, 4, device='meta'); r.__enter__(); x @ x; r.__exit__(None, None, None); print(r.kernels)"
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Operators that only reserve memory: no kernel runs (schema names, the same in every overload).
ALLOCATIONS = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::empty_permuted",
        "aten::new_empty",
        "aten::new_empty_strided",
    }
)
# Views whose schema declares no alias: _unsafe_view takes over its input's memory, as view does.
UNDECLARED_VIEWS = frozenset({"aten::_unsafe_view"})
# FLOP formulas keyed by overload packet (torch.ops.aten.mm), each called as formula(*args, **kwargs, out_val=out)
FLOP_FORMULAS: dict[Any, Any] = getattr(flop_counter, "flop_registry", {})
# More kernels in one training step than any model the roofline describes: the largest reference model launches
# about 1,400 (bert-large), and a recurrent layer that still runs per time step (a packed sequence, an LSTM with
# projections) about 37 per token, layer and direction. A size no one trains (a depth or a sequence of millions,
# typed or forged in a stored run) would otherwise be recorded for hours into gigabytes; this caps a profile at
# under 1 GB and its recording at a minute or two
MOST_KERNELS_PER_STEP = 100_000


class ProfileError(ValueError):
    """A training step that could not be run, neither on the meta device nor on the CPU: the message names the
    workload and the error."""


@dataclass(frozen=True)
class Kernel:
    """One operator call of the step: a kernel launch on a GPU."""

    operator: str  # the aten overload, e.g. "aten.addmm.default"
    flops: float  # floating-point operations (0 for element-wise work, as torch's flop counter counts)
    bytes_read: float  # tensor inputs, each distinct storage once
    bytes_written: float  # tensor outputs (for an in-place operator: the tensors it updates)
    dtype: str  # the dtype of its first floating-point tensor input or output, e.g. "float32"
    matrix: bool  # a matmul/convolution/attention kernel (tensor-core eligible): flops > 0


class Recorder(TorchDispatchMode):
    """Records each aten call that would launch a kernel on `device`, in call order."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.device = device  # "meta" or "cpu": a call with no tensor there is host work (Adam's step count)
        self.kernels: list[Kernel] = []
        self.recording = True  # False while paused()

    def record(self, kernel: Kernel) -> None:
        """Adds `kernel`, the next launch of the step; ProfileError past MOST_KERNELS_PER_STEP."""
        if len(self.kernels) == MOST_KERNELS_PER_STEP:
            raise ProfileError(
                f"one training step launches more than {MOST_KERNELS_PER_STEP:,} kernels: a "
                "model that large is no benchmark (check its sizes: depth, sequence length)"
            )
        self.kernels.append(kernel)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Lets calls through unrecorded: the zeros that stand in for a fused kernel's results launch nothing."""
        self.recording = False
        try:
            yield
        finally:
            self.recording = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.recording:
            return func(*args, **kwargs)
        if func._overloadpacket not in FLOP_FORMULAS and func is not torch.ops.prim.device.default:
            with self:  # an op torch can break into smaller ones runs as those, as FlopCounterMode counts them
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        out = func(*args, **kwargs)
        kernel = _kernel(func, args, kwargs, out, self.device)
        if kernel is not None:
            self.record(kernel)
        return out


def _kernel(func, args: tuple, kwargs: dict, out: Any, device: str) -> Kernel | None:
    """The kernel that the call `func(*args, **kwargs) -> out` launches, or None when it launches none."""
    schema = func._schema
    if schema.name in ALLOCATIONS or schema.name in UNDECLARED_VIEWS:
        return None
    if schema.returns and all(
        result.alias_info is not None and not result.alias_info.is_write for result in schema.returns
    ):
        return None  # a view or alias: new sizes and strides over the same memory
    inputs = _tensors((args, kwargs))
    outputs = _tensors(out) or list(_written_arguments(schema, args, kwargs))  # `-> ()`: in-place _foreach_*
    if not outputs:
        return None  # a query of sizes, or a number read back to the host (.item()): no kernel of its own
    if not any(tensor.device.type == device for tensor in inputs + outputs):
        return None  # work on host tensors only, such as the CPU step counts of Adam on CUDA
    formula = FLOP_FORMULAS.get(func._overloadpacket)
    flops = float(formula(*args, **kwargs, out_val=out)) if formula is not None else 0.0
    floating = [tensor.dtype for tensor in inputs + outputs if tensor.dtype.is_floating_point]
    dtype = (floating or [tensor.dtype for tensor in inputs + outputs])[0]
    return Kernel(
        operator=str(func),
        flops=flops,
        bytes_read=float(_distinct_bytes(inputs)),
        bytes_written=float(sum(_logical_bytes(tensor) for tensor in outputs)),
        dtype=str(dtype).removeprefix("torch."),
        matrix=flops > 0,
    )


def _tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in nested lists, tuples and dicts (the tensor lists of _foreach_* flattened)."""
    return [leaf for leaf in tree_flatten(tree)[0] if isinstance(leaf, torch.Tensor)]


def _written_arguments(schema, args: tuple, kwargs: dict) -> Iterator[torch.Tensor]:
    """The tensors an operator updates in place: its arguments marked `(a!)` in the schema."""
    for position, argument in enumerate(schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[position] if position < len(args) and not argument.kwarg_only else kwargs.get(argument.name)
        yield from _tensors(value)


def _logical_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()  # bytes of its elements as the kernel sees them


def _distinct_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes read from `tensors`, each storage once; no more than the storage holds (a stride-0 broadcast reads
    its few real elements)."""
    by_storage: dict[int, int] = {}
    for tensor in tensors:
        try:
            storage = tensor.untyped_storage()
            key, held = storage._cdata, storage.nbytes()  # _cdata: the storage's identity, also on meta
        except (RuntimeError, NotImplementedError):  # a tensor without a plain storage (sparse, nested)
            key, held = id(tensor), _logical_bytes(tensor)
        by_storage[key] = max(by_storage.get(key, 0), min(_logical_bytes(tensor), held))
    return sum(by_storage.values())
