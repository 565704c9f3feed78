"""What `run` leads its end with: per workload, how much faster a GPU would train it here, what that rests on, and
whether this machine's own figure is steady enough to carry it.

A GPU measured here answers with its speedup over this CPU and its rank interval (results/stats.py). Without one, where the
post published its CPU's and its GPU's samples/s, the post's GPU is carried to this CPU (reproduce.carried_speedup):
its samples/s over this CPU's, with the range this CPU's fastest and slowest steady epochs give (the post's figures
are single numbers). A reference model has no post: the slowest and the fastest GPU of the public record's
single-GPU figures of it (results/record/) over this CPU bound the answer, those at this CPU's precision and data
where there are any. A ratio of figures at another batch, precision or data than this CPU's says so in its cell: not
a speedup (reproduce.unlike); a model changed by --set is set beside no published figure. Nothing is guessed where a
post gave less: the row says so, and `devicebench estimate` is named.
The estimate is not run here: beyond a second of fitting, it profiles each workload and loads and times its data
again, 15 s of CPU time for the quick suite's 11 torch workloads on the 2-core development VM, where the whole job
has 2 minutes.

    devicebench run mnist-cnn2 cifar10-mlp --data synthetic --budget 40s
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import RenderableType
from rich.markup import escape
from rich.text import Text

from devicebench.budget import FEWEST_BUDGETED_STEPS
from devicebench.report.fitting import FittedColumn, FittedTable, label_column, longest_word
from devicebench.report.text import rate_text, speedup_text
from devicebench.reproduce import (
    CarriedSpeedup,
    carried_speedup,
    changed_model,
    factor_text,
    figure_precision,
    in_unit,
    not_a_speedup,
    outlook_row,
    post_figures,
    post_work,
    record_comparison,
    row_precision,
    row_work,
    rows_outlook,
    unlike,
)
from devicebench.results.compare import NOISY_EPOCH_TIME_CV, Row
from devicebench.results.record import PublishedFigure
from devicebench.results.stats import INTERVAL_NOTE
from devicebench.workloads import Workload, get_workload
from devicebench.workloads.own import ORIGIN as OWN_MODEL

STEADIER_RUN = "--budget 5m"  # what gives every epoch more steps (the quick suite's budget is 2 minutes)


@dataclass(frozen=True)
class Answer:
    """One workload's answer and what it rests on."""

    workload: str
    cpu: Row | None  # the CPU row every figure is over (reproduce.outlook_row)
    measured: list[Row]  # accelerators measured here against that CPU
    carried: CarriedSpeedup | None  # the post's GPU over that CPU, where the post's figures allow it
    basis: str  # what the answer rests on, or why there is none
    # a reference model's: the slowest and the fastest of the record's GPUs over that CPU, (ratio, GPU) each
    recorded: tuple[tuple[float, str], tuple[float, str]] | None = None
    unlike: str = ""  # where the published figures did other work than this CPU (reproduce.unlike): no speedup
    gpu_rates: str = "—"  # the GPU figures the answer sets beside this CPU's: published, or measured here

    @property
    def rows(self) -> list[Row]:
        """The rows whose own figures the answer rests on."""
        return ([self.cpu] if self.cpu is not None else []) + self.measured

    @property
    def noisy(self) -> list[tuple[Row, float]]:
        """Rows whose steady epoch time varies more than NOISY_EPOCH_TIME_CV, with that variation (a fraction)."""
        return [
            (row, row.epoch_time_cv)
            for row in self.rows
            if row.epoch_time_cv is not None and row.epoch_time_cv > NOISY_EPOCH_TIME_CV
        ]

    @property
    def short_steps(self) -> int | None:
        """The steps of the steady epochs when some had no more than FEWEST_BUDGETED_STEPS (the fewest a budget
        gives): each such rate rests on that many steps. None when every steady epoch was longer."""
        steps = [epoch.steps for row in self.rows for epoch in row.steady_epochs]
        return min(steps) if steps and min(steps) <= FEWEST_BUDGETED_STEPS else None


def answer_for(workload: Workload | None, name: str, rows: list[Row]) -> Answer:
    cpu = outlook_row(rows)
    if cpu is None:
        return Answer(name, None, [], None, "no CPU samples/s here")  # no CPU run, or none with steady epochs
    measured = [row for row in rows if row.device != "cpu" and row.baseline is cpu and row.speedup is not None]
    if measured:
        rates = "; ".join(rate_text(row.samples_per_s.median) for row in measured if row.samples_per_s)
        return Answer(name, cpu, measured, None, "measured here", gpu_rates=rates)
    published = workload.published if workload is not None else None
    changed = changed_model(workload, [cpu]) if workload is not None else []
    if changed:  # a figure of the published model says nothing of another one
        return Answer(name, cpu, [], None, f"the published model, not this one ({', '.join(changed)})")
    carried = carried_speedup(workload, cpu) if workload is not None and published is not None else None
    seed = f"{workload.seed}'s" if workload is not None and workload.seed else "the post's"
    recorded = _recorded(workload, cpu, rows) if published is None and workload is not None else None
    if recorded is not None:
        figures, span = recorded
        return Answer(
            name,
            cpu,
            [],
            None,
            f"the public record: devicebench reproduce {name}",
            span,
            unlike(
                [(figure.batch_per_gpu, figure_precision(figure), figure.data) for figure in figures], row_work(cpu)
            ),
            _published_rates(figures),
        )
    if carried is not None:
        assert workload is not None  # carried_speedup needs one
        post_gpu = post_figures(workload)
        return Answer(
            name,
            cpu,
            [],
            carried,
            f"{seed} GPU over this CPU",
            unlike=unlike([post_work(workload)], row_work(cpu)),
            gpu_rates=rate_text(post_gpu[1]) if post_gpu else "—",
        )
    if published is not None and published.speedup is not None and "cpu" not in published.samples_per_s:
        basis = f"{seed} {published.speedup:g}x: no CPU samples/s to carry it"
    else:
        basis = "nothing published to carry"
    return Answer(name, cpu, [], None, basis)


def _recorded(
    workload: Workload, cpu: Row, rows: list[Row]
) -> tuple[list[PublishedFigure], tuple[tuple[float, str], tuple[float, str]]] | None:
    """The figures the answer rests on and, of them, the slowest and the fastest GPU, each over this CPU in the unit
    it was published in: the record's single-GPU figures of `workload` (record_comparison's: at the sequence length
    trained here), only those at this CPU's precision, then data, where there are any. None without such figures."""
    figures = [figure for figure in record_comparison(workload, rows).figures if in_unit(workload, cpu, figure.unit)]
    figures = [figure for figure in figures if figure_precision(figure) == row_precision(cpu)] or figures
    figures = [figure for figure in figures if figure.data == cpu.settings["data_source"]] or figures
    ratios = []
    for figure in figures:
        here = in_unit(workload, cpu, figure.unit)
        assert here  # figures holds only those it gives
        ratios.append((figure.throughput / here, figure.gpu))
    return (figures, (min(ratios), max(ratios))) if ratios else None


def _published_rates(figures: list[PublishedFigure]) -> str:
    """`1,200–9,800` (images/s and sequences/s are samples/s), or `310,000–1,100,000 tokens/s`; `—` for figures in
    several units."""
    rates = sorted(figure.throughput for figure in figures)
    units = {figure.unit for figure in figures}
    if len(units) > 1:  # tokens/s beside sequences/s: no one range
        return "—"
    shown = rate_text(rates[0]) if rates[0] == rates[-1] else f"{rate_text(rates[0])}–{rate_text(rates[-1])}"
    return shown + (" tokens/s" if units == {"tokens/s"} else "")


def answers(rows_by_workload: dict[str, list[Row]]) -> list[Answer]:
    return [answer_for(_registered(name), name, rows) for name, rows in rows_by_workload.items()]


def _registered(name: str) -> Workload | None:
    try:
        return get_workload(name)
    except KeyError:  # a model of the user's: nothing published
        return None


def _torch_model(name: str) -> bool:
    """Whether `devicebench estimate NAME` can count `name`'s kernels: a registered torch model, not boosted trees,
    nor a model of the user's (which `estimate --model MODULE:FUNCTION` takes, not by its name)."""
    workload = _registered(name)
    return workload is not None and workload.trainer is None and workload.origin != OWN_MODEL


def gpu_text(answer: Answer) -> str:
    """`7.00x [6.50–7.40]` per accelerator measured here, `about 90x (66–170x)` carried, `—` without either."""
    if answer.measured:
        several = len(answer.measured) > 1
        return "; ".join((f"{row.device} " if several else "") + speedup_text(row) for row in answer.measured)
    if answer.recorded is not None:
        (low, slowest), (high, fastest) = answer.recorded
        return not_a_speedup(f"{factor_text(low)} ({slowest}) to {factor_text(high)} ({fastest})", answer.unlike)
    carried = answer.carried
    if carried is None:
        return "—"
    if carried.low is None or carried.high is None:
        return not_a_speedup(f"about {factor_text(carried.ratio)}", answer.unlike) + " (one steady epoch: no range)"
    return not_a_speedup(
        f"about {factor_text(carried.ratio)} ({factor_text(carried.low).removesuffix('x')}–{factor_text(carried.high)})",
        answer.unlike,
    )


def flags_text(answer: Answer) -> str:
    """`noisy 34%, 3-step epochs`: why this machine's own figures cannot carry the answer yet; `—`: no flag."""
    flags = [f"noisy {max(cv for _, cv in answer.noisy):.0%}"] if answer.noisy else []
    if answer.short_steps is not None:
        flags.append(f"{answer.short_steps}-step epochs")
    return ", ".join(flags) or "—"


def answer_parts(rows_by_workload: dict[str, list[Row]]) -> list[RenderableType]:
    """The table that leads `run`'s end, one row per workload, then what its figures rest on and what to do where
    this machine's figures are too noisy or too short to carry them."""
    found = answers(rows_by_workload)
    if not found:
        return []
    cpu_rows = [answer.cpu for answer in found if answer.cpu is not None]
    cpu_rates = [  # outlook_row picks a CPU row with steady epochs: its samples/s is there
        rate_text(answer.cpu.samples_per_s.median) if answer.cpu and answer.cpu.samples_per_s else "—"
        for answer in found
    ]
    here = f" (this CPU: {escape(cpu_rows[0].device_name)})" if cpu_rows else ""
    columns = [
        ("CPU samples/s", cpu_rates, {"justify": "right"}),
        ("GPU samples/s", [answer.gpu_rates for answer in found], {"justify": "right"}),
        ("GPU over this CPU", [gpu_text(answer) for answer in found], {}),
        ("Flags", [flags_text(answer) for answer in found], {}),
    ]
    table = FittedTable(
        f"[bold]How much faster would a GPU train these here?[/]{here}",
        [label_column("Workload", [escape(answer.workload) for answer in found])],
        [
            FittedColumn(heading, cells, longest_word([heading, *cells]), {"overflow": "fold", **options})
            for heading, cells, options in columns
        ],
    )
    # what each rests on beneath, a line each: in a fifth column of 80 it wrapped over five lines a workload
    rests_on = [f"{answer.workload} rests on {answer.basis}." for answer in found]
    return [table, *(Text(line) for line in rests_on + answer_notes(found))]


def answer_notes(found: list[Answer]) -> list[str]:
    """What the table's figures rest on, and what to do where this machine's own figures cannot carry them."""
    notes = []
    if any(answer.measured for answer in found):
        notes.append(f"Measured here: the ratio of median steady samples/s [{INTERVAL_NOTE}].")
    if any(answer.carried for answer in found):
        notes.append(
            "About: the post's GPU samples/s over this CPU's median; in brackets, over its fastest and its "
            "slowest steady epoch (the post's figures are single numbers). What each rests on:"
        )
        notes += [
            outlook
            for answer in found
            if answer.carried
            and answer.cpu
            and (outlook := rows_outlook(get_workload(answer.workload), [answer.cpu])) is not None
        ]
    noisy = [(answer.workload, cv) for answer in found for _, cv in answer.noisy[:1]]
    if noisy:
        listed = ", ".join(f"{name} {cv:.0%}" for name, cv in noisy)
        notes.append(
            f"Noisy: steady epoch time varied more than {NOISY_EPOCH_TIME_CV:.0%} ({listed}), and every "
            "figure above moves with it: close other programs, or add --repeats 3, and run again."
        )
    short = sorted({answer.short_steps for answer in found if answer.short_steps is not None})
    if short:
        steps = " or ".join(str(count) for count in short)
        notes.append(
            f"Short: steady epochs of {steps} steps, the fewest a budget gives: each rate rests on that "
            "many steps, and what an epoch starts with (its first batch) weighs on all of them. "
            f"{STEADIER_RUN} gives every epoch more steps."
        )
    unanswered = [
        answer.workload
        for answer in found
        if not answer.measured and answer.carried is None and answer.cpu is not None and _torch_model(answer.workload)
    ]
    if unanswered:
        notes.append(
            f"`devicebench estimate {' '.join(unanswered)}` predicts named GPUs (T4, L4, A100, H100) from "
            "this CPU, with an interval."
        )
    return notes
