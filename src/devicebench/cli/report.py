"""`devicebench report`: the stored runs as one self-contained HTML page of charts and tables.

devicebench report --out report.html --price cpu=0.10,cuda=2.50 --png charts/
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from devicebench.cli import (
    BaselineOption,
    DatabaseOption,
    LastFilter,
    MachineFilter,
    PoolInterruptedOption,
    PriceOption,
    WorkloadFilter,
    app,
    check_folder,
    check_output_file,
    check_outputs_or_fail,
    console,
    fail,
    open_store,
    prices_from,
)
from devicebench.estimate.against_measured import estimated_against_measured
from devicebench.report.html import write_report
from devicebench.results.compare import DEFAULT_BASELINE


@app.command()
def report(
    out: Annotated[Path, typer.Option(help="The HTML file to write.")] = Path("report.html"),
    workload: WorkloadFilter = None,
    machine: MachineFilter = None,
    last: LastFilter = None,
    baseline: BaselineOption = DEFAULT_BASELINE,
    price: PriceOption = None,
    png: Annotated[
        Optional[Path], typer.Option(help="Also write every chart as a PNG file into this folder.", show_default=False)
    ] = None,
    db: DatabaseOption = None,
    pool_interrupted: PoolInterruptedOption = False,
) -> None:
    """Write an HTML report: per workload, epoch time, samples/s, speedup and accuracy charts, and the numbers
    with the machine and software behind each. One file, images inlined: it opens offline and can be mailed.

    [bold]devicebench report[/]: every stored run, into report.html.

    [bold]devicebench report --workload 'mnist-*' --machine laptop --out mnist.html[/]: a part of them.
    """
    prices = prices_from(price)
    check_output_file("--out", out)  # as export and run --json do: a mistyped folder is not created behind your back
    check_folder("--png", png)
    try:
        price_file = Path(price) if price and Path(price).is_file() else None  # else prices written inline
    except OSError:  # a name too long to be a file's
        price_file = None
    check_outputs_or_fail({"--out": out}, db=db, reads={"the --price file": price_file})
    with open_store(db, writes=False) as store:
        results = store.results(workload=workload, machine=machine, last=last)
    try:
        written = write_report(
            results,
            out,
            baseline=baseline,
            prices=prices,
            png_dir=png,
            estimated=estimated_against_measured(results),
            pool_interrupted=pool_interrupted,
        )
    except OSError as error:
        raise fail(f"cannot write the report to {out}: {error}") from None
    runs = sum(len(result.runs) for result in results)
    machines = len({result.machine["machine_id"] for result in results})
    summary = (
        f"Wrote {written}: {runs} run{'' if runs == 1 else 's'} from {machines} "
        f"machine{'' if machines == 1 else 's'}"
        + (f"; charts in {png}" if png else "")
        + ("" if runs else " (no runs matched: the page says how to make some)")
    )
    console.print(escape(summary), highlight=False)
