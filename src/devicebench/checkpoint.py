"""Trained models on disk, and predictions from them with exactly the preprocessing they were trained with.

S3's tutorial predicted on raw 0-255 pixels after training on pixels scaled to [0, 1] (so every answer leaned
to "dog") and tested `== 1` instead of `> 0.5`. Here the preprocessing travels with the weights: image size,
channels, resize filter, scaling or standardisation, class names and what the output means. The file is a
`torch.save` of tensors and plain data only, loaded with `weights_only=True`, so opening a checkpoint from
someone else cannot run their code.

    devicebench run catdog-original --devices cpu --data synthetic --epochs 1 --max-steps 5 --save model.pt && devicebench predict model.pt IMAGE.jpg
"""

from __future__ import annotations

import contextlib
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import torch
from torch import nn

from devicebench.data import ArrayDataset, DataFormatError, Dataset, ImageFolderDataset
from devicebench.data.augmentation import Preprocessing, describe, rebuild
from devicebench.data.images import decode_image
from devicebench.data.own import OwnData
from devicebench.data.sources import dataset_spec
from devicebench.errors import DevicebenchError
from devicebench.files import UnusableFile, require_regular_file
from devicebench.results.schema import RunRecord
from devicebench.results.transfer import printable
from devicebench.workloads import OutputKind, Workload, get_workload
from devicebench.workloads.outputs import class_probabilities

CHECKPOINT_FORMAT = "devicebench-checkpoint"
CHECKPOINT_VERSION = 1
# What `load_checkpoint` reads, and the type each must have: a file from someone else may hold anything.
PAYLOAD_TYPES = {
    "workload": str,
    "hyperparameters": dict,
    "state_dict": dict,
    "image_shape": list,
    "preprocessing": dict,
    "output": str,
    "class_names": list,
    "trained": dict,
}
SAVE_AGAIN = "save the model again with `devicebench run WORKLOAD --save FILE`"
# The most bytes `predict` reads from one image file: 64 MiB, some 10 times a 24-megapixel camera JPEG. A larger
# file (or a device such as /dev/zero, which never ends) is refused before its bytes are read.
MAX_IMAGE_BYTES = 64 * 1024 * 1024


class CheckpointError(DevicebenchError, ValueError):
    """A file is not a devicebench checkpoint this version can read; the message says which and why."""


class CheckpointNotSaved(OSError):
    """`save_checkpoint` could not write the file (a full disk, a read-only folder), or the model is not one
    `predict` can use; nothing partial is left."""


def saved_image_shape(workload: Workload) -> tuple[int, int, int] | None:
    """The (channels, height, width) `predict` decodes image files to for `workload`'s model; None for a model a
    checkpoint cannot serve: not a torch model, a model of token ids, or a user's own model on their own data."""
    if workload.trainer is not None or workload.load_data is not None:
        return None
    return workload.image_shape


@dataclass
class Checkpoint:
    model: nn.Module  # on the CPU, in evaluation mode
    workload: str
    image_shape: tuple[int, int, int]  # (channels, height, width) every image is resized to
    preprocessing: Preprocessing  # its `test` half is applied; training's random half never is
    output: OutputKind
    class_names: tuple[str, ...]
    trained: dict[str, Any]  # where and how: device, epochs, test accuracy, data source, run id


@dataclass(frozen=True)
class Prediction:
    path: str
    class_name: str | None = None
    probability: float | None = None  # of `class_name`
    probabilities: dict[str, float] | None = None
    error: str | None = None  # why this file got no prediction


def class_names_of(dataset: ArrayDataset | ImageFolderDataset) -> tuple[str, ...]:
    if isinstance(dataset, ImageFolderDataset):
        return dataset.class_names
    known = dataset_spec(dataset.name).class_names
    return known or tuple(str(index) for index in range(dataset.num_classes))


def save_checkpoint(
    path: Path, model: nn.Module, workload: Workload, record: RunRecord, dataset: Dataset | OwnData
) -> None:
    """Write `model`, trained as `record` says, with everything `predict` needs; atomically."""
    image_shape = saved_image_shape(workload)
    # `run --save` refuses these before training; this is for any other caller
    if image_shape is None or not isinstance(dataset, ArrayDataset | ImageFolderDataset):
        raise CheckpointNotSaved(
            f"could not save the model to {path}: {workload.name} is not an image model, and `devicebench predict` "
            "classifies images; the run itself finished and is kept"
        )
    hyperparameters = record.settings.hyperparameters
    payload = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "workload": workload.name,
        "hyperparameters": dict(hyperparameters),
        "state_dict": {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()},
        "image_shape": list(image_shape),
        "channel_order": "L" if image_shape[0] == 1 else "RGB",  # what Pillow converts images to
        "preprocessing": describe(workload.build_preprocessing(hyperparameters)),
        "output": workload.output,
        "class_names": list(class_names_of(dataset)),
        "trained": {
            "device": record.device_name,
            "epochs": len(record.epochs),
            "test_accuracy": record.summary().final_test_accuracy,
            "data_source": record.settings.data_source,
            "run_id": record.run_id,
        },
    }
    path = Path(path)
    partial = path.with_name(path.name + ".partial")  # a crash mid-write leaves the previous file whole
    try:
        # through a Python file: a full disk is then an OSError with its errno ("No space left on device"), not
        # the C++ writer's "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
        with open(partial, "wb") as file:
            torch.save(payload, file)
        partial.replace(path)
    except OSError as error:
        with contextlib.suppress(OSError):  # what could not be written is not left behind; if it can be removed
            partial.unlink(missing_ok=True)
        raise CheckpointNotSaved(
            f"could not save the model to {path}: {(error.strerror or str(error)).lower()}; "
            "the run itself finished and is kept"
        ) from None


def load_checkpoint(path: str | Path) -> Checkpoint:
    """The model in `path`, built and checked field by field: a file from someone else may hold anything, so every
    field is checked (a CheckpointError naming it) and the model's size is bounded before anything is built."""
    path = Path(path)
    payload = _read_payload(path)
    workload, image_shape = _image_workload(path, payload)
    model, preprocessing = _built_model(path, workload, payload)
    return Checkpoint(
        model=model.eval(),
        workload=workload.name,
        image_shape=image_shape,
        preprocessing=preprocessing,
        output=workload.output,  # the payload's, checked equal to it
        class_names=tuple(printable(payload["class_names"])),
        trained=printable(payload["trained"]),  # shown on the terminal: no escape sequence reaches it
    )


def _read_payload(path: Path) -> dict[str, Any]:
    """The plain data in `path`, read without running any code from it: a devicebench checkpoint of this version
    with every field of its type (PAYLOAD_TYPES), or a CheckpointError saying what it is instead."""
    try:
        require_regular_file(path, "the checkpoint")
    except FileNotFoundError:
        raise CheckpointError(
            f"{path}: no such file; write one with `devicebench run WORKLOAD --save {path}`"
        ) from None
    except UnusableFile as error:
        raise CheckpointError(str(error)) from None
    except OSError as error:  # a name the system refuses to look up: longer than it allows, say
        raise CheckpointError(f"{path}: {error.strerror or error}; name another file") from None
    try:
        # weights_only: tensors and plain data only; a pickled object that would run code is refused, never built
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{path}: refused: PyTorch's safe loader (weights_only), which never runs code from the file, stopped at "
            f"{_refusal_reason(error)!r}. A devicebench checkpoint holds only tensors and plain data, so this file "
            f"is damaged or was not written by devicebench; {SAVE_AGAIN}"
        ) from None
    # the safe unpickler meeting text or junk raises IndexError or KeyError as well
    except (RuntimeError, EOFError, OSError, ValueError, IndexError, KeyError) as error:
        raise CheckpointError(
            f"{path}: damaged, or not a PyTorch checkpoint ({_first_line(error)}); {SAVE_AGAIN}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a devicebench checkpoint (written by `devicebench run --save`?)")
    if payload.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint version {payload.get('version')}; this devicebench reads "
            f"version {CHECKPOINT_VERSION}: upgrade devicebench"
        )
    wrong = [
        f"{key} (want {kind.__name__})" for key, kind in PAYLOAD_TYPES.items() if not isinstance(payload.get(key), kind)
    ]
    if wrong:
        raise CheckpointError(f"{path}: missing or malformed {', '.join(wrong)}; {SAVE_AGAIN}")
    return payload


def _image_workload(path: Path, payload: dict[str, Any]) -> tuple[Workload, tuple[int, int, int]]:
    """The image workload the payload names and the image shape its model takes, once the payload's shape, output
    kind and class names are checked against it."""
    try:
        workload = get_workload(payload["workload"])
    except KeyError as error:
        raise CheckpointError(f"{path}: {error.args[0]}") from None
    image_shape = saved_image_shape(workload)
    if image_shape is None:
        raise CheckpointError(f"{path}: workload {workload.name} is not an image model devicebench saves; {SAVE_AGAIN}")
    if tuple(payload["image_shape"]) != image_shape:  # images are resized to it: a made-up size could be any size
        raise CheckpointError(
            f"{path}: images of shape {tuple(payload['image_shape'])}, but {workload.name} takes {image_shape}; "
            f"{SAVE_AGAIN}"
        )
    if payload["output"] not in get_args(OutputKind) or payload["output"] != workload.output:
        raise CheckpointError(
            f"{path}: output {payload['output']!r}, but {workload.name}'s output is "
            f"{workload.output!r} (known kinds: {', '.join(get_args(OutputKind))}); {SAVE_AGAIN}"
        )
    bad_names = [name for name in payload["class_names"] if not isinstance(name, str)]
    if bad_names:
        raise CheckpointError(
            f"{path}: class_names holds {type(bad_names[0]).__name__} {bad_names[0]!r}, not text; {SAVE_AGAIN}"
        )
    return workload, image_shape


def _built_model(path: Path, workload: Workload, payload: dict[str, Any]) -> tuple[nn.Module, Preprocessing]:
    """The payload's model with its weights, and its preprocessing: the hyperparameters checked and the size
    bounded before anything is built, the weights checked against a model built on the meta device."""
    try:
        hyperparameters = workload.typed_hyperparameters(payload["hyperparameters"])
    except ValueError as error:
        raise CheckpointError(f"{path}: hyperparameters: {error}; {SAVE_AGAIN}") from None
    try:
        workload.parameter_count(hyperparameters)  # size bounds first, then the count, on the meta device only
        with torch.device("meta"):  # shapes only: the weights it should hold, and how many classes it answers
            shapes = workload.build_model(hyperparameters).eval()
            expected = shapes.state_dict()
            outputs = shapes(torch.empty(1, *payload["image_shape"]))
    except (RuntimeError, TypeError, ValueError, KeyError) as error:
        raise CheckpointError(f"{path}: hyperparameters: {_first_line(error)}; {SAVE_AGAIN}") from None
    classes = 2 if workload.output == "binary_logit" else outputs.shape[1]  # a binary logit answers one of two
    if len(payload["class_names"]) != classes:
        raise CheckpointError(
            f"{path}: {len(payload['class_names'])} class names for a model of {classes} classes; {SAVE_AGAIN}"
        )
    _check_weights(path, workload, payload["state_dict"], expected)
    try:
        model = workload.build_model(hyperparameters)
        model.load_state_dict(payload["state_dict"])
        preprocessing = rebuild(payload["preprocessing"])
    except (RuntimeError, TypeError, ValueError, KeyError) as error:
        raise CheckpointError(
            f"{path}: its settings or weights do not fit {workload.name} as this devicebench "
            f"builds it ({_first_line(error)}); {SAVE_AGAIN}"
        ) from None
    return model, preprocessing


def _check_weights(path: Path, workload: Workload, weights: dict, expected: dict[str, torch.Tensor]) -> None:
    """Every tensor the model has, of its shape and type, finite, and nothing else; a CheckpointError naming the
    first that is not."""
    unfit = f"{path}: its settings or weights do not fit {workload.name}: state_dict"
    missing = [name for name in expected if name not in weights]
    extra = [str(name) for name in weights if name not in expected]
    if missing or extra:
        first = f"lacks {missing[0]!r}" if missing else f"holds {extra[0]!r}, which the model does not have"
        raise CheckpointError(f"{unfit} {first} ({len(missing)} missing, {len(extra)} unexpected); {SAVE_AGAIN}")
    for name, want in expected.items():
        tensor = weights[name]
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{unfit} {name!r} is {type(tensor).__name__}, not a tensor; {SAVE_AGAIN}")
        if tensor.shape != want.shape or tensor.dtype != want.dtype:
            raise CheckpointError(
                f"{unfit} {name!r} is {tensor.dtype} {tuple(tensor.shape)}, where the model has "
                f"{want.dtype} {tuple(want.shape)}; {SAVE_AGAIN}"
            )
    # A file holds every weight's bytes: a few KB cannot hold a 500 MB model, unless its tensors are views of a few
    # bytes (stride 0, one storage shared), which would be built, copied and run at the model's full size
    weight_bytes = sum(weights[name].numel() * weights[name].element_size() for name in expected)
    file_bytes = path.stat().st_size
    if weight_bytes > file_bytes:
        raise CheckpointError(
            f"{unfit} declares {weight_bytes:,} bytes of weights in a file of {file_bytes:,} bytes: its tensors are "
            f"not the weights of a trained model; {SAVE_AGAIN}"
        )
    for name in expected:
        tensor = weights[name]
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{unfit} {name!r} holds NaN or infinite values; {SAVE_AGAIN}")


def read_image_file(path: str | Path) -> bytes:
    """The bytes of one image file for `predict`: a regular file of at most MAX_IMAGE_BYTES, else UnusableFile (or
    an OSError when it cannot be read)."""
    require_regular_file(path, "image")
    with open(path, "rb") as file:
        data = file.read(MAX_IMAGE_BYTES + 1)  # never more, whatever the file grows to while it is read
    if len(data) > MAX_IMAGE_BYTES:
        raise UnusableFile(
            f"{path}: larger than {MAX_IMAGE_BYTES // 2**20} MiB, the most devicebench reads from "
            "one image; is it an image?"
        )
    return data


def prepare(checkpoint: Checkpoint, data: bytes, name: str) -> torch.Tensor:
    """One image file's bytes as the model input it was trained on: (1, C, H, W) float."""
    channels, height, width = checkpoint.image_shape
    pixels = torch.from_numpy(decode_image(data, channels=channels, size=(height, width), name=name))
    return checkpoint.preprocessing.test(pixels[None])


def predict(checkpoint: Checkpoint, paths: list[str | Path], *, inputs=prepare) -> list[Prediction]:
    """A prediction, or the reason there is none, for every path, in order. `inputs` turns bytes into a
    model input; tests swap it to show what skipping the scaling does."""
    predictions = []
    for path in paths:
        try:
            data = read_image_file(path)
            batch = inputs(checkpoint, data, str(path))
        except (OSError, DataFormatError, UnusableFile) as error:
            predictions.append(Prediction(str(path), error=_first_line(error)))
            continue
        with torch.inference_mode():
            probabilities = class_probabilities(checkpoint.model(batch), checkpoint.output)[0].tolist()
        best = max(range(len(probabilities)), key=probabilities.__getitem__)
        names = _names(checkpoint, len(probabilities))
        predictions.append(
            Prediction(
                str(path),
                class_name=names[best],
                probability=probabilities[best],
                probabilities=dict(zip(names, probabilities)),
            )
        )
    return predictions


def _names(checkpoint: Checkpoint, count: int) -> list[str]:
    names = list(checkpoint.class_names[:count])
    return names + [f"class {index}" for index in range(len(names), count)]  # outputs the data never used


def _refusal_reason(error: pickle.UnpicklingError) -> str:
    """What the weights-only loader objected to ("Unsupported global: GLOBAL posix.system ..."), without PyTorch's
    advice around it, which is to load the file unsafely or to allow what it objected to."""
    text = str(error)
    _, marker, detail = text.partition("WeightsUnpickler error:")  # where PyTorch puts it, when it names it
    lines = [line.strip() for line in (detail if marker else text.partition("\n")[2]).splitlines()]
    reasons = [line for line in lines if line and not line.startswith("Check the documentation")]
    return reasons[0].split(". ")[0].rstrip(".") if reasons else "a pickled object it does not allow"


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
