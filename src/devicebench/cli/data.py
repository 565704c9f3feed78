"""`devicebench data`: the datasets devicebench downloads, and what of them this machine has.

List them with their size and state, fetch them (resumably), verify them against their pinned checksums, show
their folder, remove them. Only the registry (data/sources.py) is read here: nothing imports torch.

    devicebench data list
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from devicebench.cli import EXIT_FAILED_RUN, app, check_folder, confirmed, console, errors, fail, stopped
from devicebench.data.connection import LONGEST_DEADLINE_S
from devicebench.data.download import (
    DOWNLOAD_DEADLINE_S,
    STALL_TIMEOUT_S,
    DataUnavailable,
    fetch,
    kept_download_in_words,
)
from devicebench.data.sources import (
    DATASETS,
    SYNTHETIC_ONLY,
    data_root,
    dataset_folder,
    dataset_status,
    managed_paths,
    megabytes,
    remove_dataset,
    verify_dataset,
)
from devicebench.report.fitting import fitted

ALL = "all"  # the name that means every dataset

data_app = typer.Typer(
    help="List, download, verify and remove the datasets the workloads train on.\n\n"
    "Files live in <data folder>/<dataset>/; the folder is --data-dir, else $DEVICEBENCH_DATA, else the user cache.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(data_app, name="data")

DataDirOption = Annotated[
    Optional[Path],
    typer.Option(
        "--data-dir",
        help="The data folder (default: $DEVICEBENCH_DATA, else the user cache folder).",
        show_default=False,
    ),
]
NamesArgument = Annotated[
    list[str], typer.Argument(help="Dataset names (see `devicebench data list`), or 'all'.", show_default=False)
]


@data_app.command("list")
def list_datasets(
    data_dir: DataDirOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the datasets as JSON.")] = False,
) -> None:
    """Every dataset: its size, and whether it is cached, partly downloaded or missing here (sizes only: fast)."""
    check_folder("--data-dir", data_dir)
    statuses = [dataset_status(name, data_dir) for name in DATASETS]
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "name": status.spec.name,
                        "title": status.spec.title,
                        "size_bytes": status.spec.size_bytes,
                        "folder": str(status.folder),
                        "state": status.state,
                        "present_bytes": status.present_bytes,
                        "files": [remote.filename for remote in status.spec.files],
                    }
                    for status in statuses
                ],
                indent=2,
            )
        )
        return
    table = Table()
    table.add_column("name", no_wrap=True)
    table.add_column("title")
    table.add_column("MB", justify="right", no_wrap=True)
    table.add_column("state", no_wrap=True)
    styles = {
        "cached": "green",
        "missing": "dim",
        "partial": "yellow",
        "wrong size": "red",
        SYNTHETIC_ONLY: "dim",
        "not downloadable": "dim",
    }
    for status in statuses:
        size = megabytes(status.spec.size_bytes) if status.spec.files else "-"  # nothing devicebench downloads
        table.add_row(
            status.spec.name, escape(status.spec.title), size, f"[{styles[status.state]}]{escape(status.describe())}[/]"
        )
    console.print(f"Datasets in {escape(str(data_root(data_dir)))}/<name>/", highlight=False, soft_wrap=True)
    console.print(fitted(table))
    console.print(
        "States come from file sizes; `devicebench data verify` checks their sha256.\n"
        "`devicebench data fetch NAME` downloads one, or 'all'.",
        highlight=False,
    )


@data_app.command("fetch")
def fetch_datasets(
    names: NamesArgument,
    data_dir: DataDirOption = None,
    timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            max=LONGEST_DEADLINE_S,
            help=f"Seconds a URL has to deliver a file, retries included; "
            f"one that sends nothing for {STALL_TIMEOUT_S:g} s (or this, if less) is "
            "given up sooner.",
        ),
    ] = DOWNLOAD_DEADLINE_S,
) -> None:
    """Download datasets, verified against their pinned checksums; what is cached already is not downloaded again.

    A download stopped by Ctrl-C is kept: the next fetch takes it up where it stopped.
    """
    check_folder("--data-dir", data_dir)
    failed = []
    for name in _resolved(names):
        folder = dataset_folder(name, data_dir)
        spec = DATASETS[name]
        if spec.real_data_needs:  # nothing to download: asked by name it is an error, within 'all' a note
            line = (
                f"{name}: nothing to download; devicebench cannot read the real {spec.title} (that needs "
                f"{spec.real_data_needs}), so its runs train on synthetic data"
            )
            if ALL in names:
                console.print(escape(line), highlight=False)
            else:
                errors.print(f"[bold red]error:[/] {escape(line)}", highlight=False)
                failed.append(name)
            continue
        if spec.not_downloadable:  # an error when named, a note within 'all'
            errors.print(
                f"{'[bold red]error:[/] ' * (ALL not in names)}{name}: devicebench cannot download it; "
                f"{escape(spec.not_downloadable)}",
                highlight=False,
            )
            failed += [] if ALL in names else [name]
            continue
        before = dataset_status(name, data_dir)
        try:
            for remote in spec.files:
                fetch(remote, folder, progress=True, timeout_s=min(timeout, STALL_TIMEOUT_S), deadline_s=timeout)
        except DataUnavailable as error:
            errors.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False)
            failed.append(name)
            continue
        except KeyboardInterrupt:
            raise stopped(kept_download_in_words(name, folder, spec.files)) from None
        done = "was cached already" if before.state == "cached" else "downloaded and verified"
        console.print(f"{name}: {megabytes(spec.size_bytes)} MB {done}, in {escape(str(folder))}", highlight=False)
    if failed:
        raise fail(f"could not fetch {', '.join(failed)} (see above)", EXIT_FAILED_RUN)


@data_app.command("verify")
def verify_datasets(
    names: Annotated[
        Optional[list[str]], typer.Argument(help="Dataset names, or 'all' (the default).", show_default=False)
    ] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Hash every cached file against its pinned sha256 (seconds for the large ones); exit 1 if any fails."""
    check_folder("--data-dir", data_dir)
    failed = []
    for name in _resolved(names or [ALL]):
        checked = verify_dataset(name, data_dir)
        if not checked:
            console.print(f"{name}: not cached, nothing to verify", highlight=False)
            continue
        problems = {filename: problem for filename, problem in checked.items() if problem is not None}
        missing = len(DATASETS[name].files) - len(checked)
        for filename, problem in problems.items():
            errors.print(f"[bold red]{escape(name)}: {escape(filename)}[/]: {escape(problem)}", highlight=False)
        if problems:
            failed.append(name)
        else:
            rest = f"; {missing} not downloaded yet" if missing else ""
            console.print(f"{name}: {len(checked)} file(s) verified{rest}", highlight=False)
    if failed:
        fixes = "; ".join(f"`devicebench data remove {name}` then `devicebench data fetch {name}`" for name in failed)
        raise fail(
            f"{', '.join(failed)} failed verification: their files are not the pinned release. Download again: {fixes}",
            EXIT_FAILED_RUN,
        )


@data_app.command("path")
def path(
    name: Annotated[
        Optional[str], typer.Argument(help="A dataset name; without one, the data folder itself.", show_default=False)
    ] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Print the folder a dataset's files live in (or the data folder): `cd $(devicebench data path mnist)`."""
    check_folder("--data-dir", data_dir)
    folder = dataset_folder(_resolved([name])[0], data_dir) if name else data_root(data_dir)
    print(folder)  # plain, never wrapped: scripts read it


@data_app.command("remove")
def remove(
    names: NamesArgument,
    data_dir: DataDirOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a dataset's downloaded files, kept partial downloads and what was extracted from them.

    Any other file in its folder is left alone. Asks first, unless --yes.
    """
    check_folder("--data-dir", data_dir)
    doomed = {name: managed_paths(name, data_dir) for name in _resolved(names)}
    doomed = {name: paths for name, paths in doomed.items() if paths}
    if not doomed:
        console.print("Nothing to remove: none of these datasets has files here.", highlight=False)
        return
    for name, paths in doomed.items():
        console.print(
            f"{name}: {', '.join(path.name for path in paths)} in {escape(str(paths[0].parent))}", highlight=False
        )
    if not confirmed(f"Delete these files of {', '.join(doomed)}?", yes=yes):
        console.print("Nothing removed.")
        return
    for name in doomed:
        freed = remove_dataset(name, data_dir)
        console.print(f"{name}: removed, {megabytes(freed)} MB ({freed:,} bytes) freed", highlight=False)


def _resolved(names: list[str]) -> list[str]:
    """The dataset names asked for, in registry order for 'all'; a usage error naming the known ones otherwise."""
    if ALL in names:
        return list(DATASETS)
    unknown = [name for name in names if name not in DATASETS]
    if unknown:
        raise fail(
            f"unknown dataset{'s' * (len(unknown) > 1)} {', '.join(unknown)}; known datasets: "
            f"{', '.join(DATASETS)}, or '{ALL}'"
        )
    return list(dict.fromkeys(names))
