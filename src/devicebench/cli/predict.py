"""`devicebench predict`: classify images with a model saved by `devicebench run --save`.

devicebench predict --help
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from devicebench.checkpoint import load_checkpoint, predict
from devicebench.cli import EXIT_FAILED_RUN, app, console, errors
from devicebench.report.fitting import fitted


@app.command(name="predict")
def predict_command(
    model: Annotated[
        Path, typer.Argument(help="A checkpoint written by `devicebench run ... --save FILE`.", show_default=False)
    ],
    images: Annotated[list[Path], typer.Argument(help="Image files (JPEG, PNG, ...) to classify.", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON list instead of a table.")] = False,
) -> None:
    """Print the class and its probability for each image, preprocessed exactly as in training (size,
    channels, scaling), with the 0.5 threshold for two-class models.

    A file that is not a readable image gets its own error line; the others are still classified.
    Exit status: 0 every image classified, 1 some could not be read, 2 the model file is unusable.
    """
    checkpoint = load_checkpoint(model)
    predictions = predict(checkpoint, [*images])  # a list of its own, typed as predict takes it
    if as_json:
        console.print_json(json.dumps([dataclasses.asdict(prediction) for prediction in predictions]))
    else:
        trained = checkpoint.trained
        accuracy = trained.get("test_accuracy")
        # escaped: what a checkpoint says of its training is whatever the file holds, shown as text, never markup
        title = (
            f"{checkpoint.workload} trained on {trained.get('device')}, {trained.get('epochs')} epochs, "
            f"{trained.get('data_source')} data"
            + (f", test accuracy {accuracy:.1%}" if isinstance(accuracy, float) else "")
        )
        table = Table(title=escape(title), title_justify="left")
        for column in ("Image", "Class", "Probability"):
            table.add_column(column, justify="right" if column == "Probability" else "left")
        for prediction in predictions:
            if prediction.error is None and prediction.class_name is not None:  # a prediction without error names one
                table.add_row(escape(prediction.path), escape(prediction.class_name), f"{prediction.probability:.1%}")
        console.print(fitted(table))
    for prediction in predictions:
        if prediction.error is not None:
            errors.print(f"[bold red]error:[/] {escape(prediction.error)}", highlight=False)
    if any(prediction.error is not None for prediction in predictions):
        raise typer.Exit(EXIT_FAILED_RUN)
