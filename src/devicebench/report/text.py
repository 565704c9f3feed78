"""Each figure of a result as text, the same in every report: numbers, rates, durations and ratios, a row's figures
(speedup, TFLOP/s, how busy, waiting), its length and steps, and the notes under its table. The terminal's tables,
the HTML report, the charts and the progress lines all write a figure through here.

    python -c "from devicebench.report import text; print(text.rate_text(0.213), text.duration_text(125))"
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

from devicebench.engine.tuning_choices import Tuning
from devicebench.results.compare import NOISY_EPOCH_TIME_CV, Row
from devicebench.results.schema import RunRecord
from devicebench.results.stats import CONFIDENCE, Speedup, Spread, level_text

if TYPE_CHECKING:  # it imports torch: the tables of history and compare must load without it
    from devicebench.workloads import Workload


def number_text(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.{digits}f}{unit}"


def rate_text(value: float | None) -> str:
    """A throughput: whole numbers from 10 up (`1,732`), two significant figures below (`9.4`, `0.21`), so that a
    reference model on a laptop reads 0.21 samples/s, not 0."""
    if value is None:
        return "—"
    if value >= 10 or value == 0:
        return f"{value:,.0f}"
    return f"{value:.2g}" if value >= 1 else f"{value:.2g}".replace("e-0", "e-")


def percent_text(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def duration_text(seconds: float) -> str:
    """`45 s`, `2 min 05 s`, `3 h 07 min`: a duration as a person reads it."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def epoch_time_text(row: Row) -> str:
    epoch = row.epoch_time_s
    return "—" if epoch is None else f"{epoch.median:,.2f} [{epoch.low:,.2f}–{epoch.high:,.2f}]"


def target_text(row: Row) -> str:
    """`41.2`: median training seconds to --target-accuracy; `not reached`; `41.2 (1 of 2)` when some runs were
    not there by their last epoch; `—` without a target."""
    targeted = row.targeted_runs
    if not targeted:
        return "—"
    reached = [run for run in targeted if run.time_to_target_train_s is not None]
    time_to_target = row.time_to_target_s  # the spread of `reached`: None exactly when it is empty
    if time_to_target is None:
        return "not reached"
    return number_text(time_to_target.median, 1) + (
        "" if len(reached) == len(targeted) else f" ({len(reached)} of {len(targeted)})"
    )


def cost_vs_baseline_text(row: Row) -> str:
    ratio = row.cost_vs_baseline
    return "—" if ratio is None else f"{ratio:.3g}x"


def batch_text(batch_size: int) -> str:
    """`batch 32`, or what a batch size of 0 means: boosted trees read every row in every round."""
    return f"batch {batch_size}" if batch_size else "every row each round"


def device_kind(device: str) -> str:
    return "cpu" if device == "cpu" else "gpu"


def known_workload(name: str) -> Workload | None:
    """The workload called `name`, or None for one this devicebench does not have (an imported result, a
    plugin not installed here, a user's model of another session)."""
    from devicebench.workloads import get_workload  # the registry imports torch: only the tables that show it

    try:
        return get_workload(name)
    except KeyError:
        return None


def span_text(values: Iterable[int]) -> str:
    """`60`, or `7–30` when the values differ."""
    ordered = sorted(set(values))
    return f"{ordered[0]:,}" if len(ordered) == 1 else f"{ordered[0]:,}–{ordered[-1]:,}"


def steps_label(row: Row) -> str:
    """The row's label, and how many steps its epochs had where the label does not say: for a chart or a line that
    sets rows whose epochs differ in length side by side. `laptop/cuda:0, 25-step epochs`."""
    if "max_steps" in row.differs_in or not row.epoch_steps:
        return row.label
    return f"{row.label}, {span_text(row.epoch_steps)}-step epochs"


def length_text(rows: list[Row]) -> str:
    """`3 epochs of 60 steps`: what the epochs really had (a cap above an epoch's length changes nothing); `7–30
    steps` when rows differ (a sweep over batch sizes); boosting rounds for trees, which read every row each round."""
    runs = [run for row in rows for run in row.runs]
    unit = "rounds" if all(run.settings.batch_size == 0 for run in runs) else "steps"
    steps = [steps for row in rows for steps in row.epoch_steps]
    if steps:
        length = f"{span_text(steps)} {unit}"
    else:  # no epoch finished: what was asked for
        caps = [run.settings.max_steps for run in runs]
        capped = [cap for cap in caps if cap is not None]
        length = f"at most {span_text(capped)} {unit} (none finished)" if len(capped) == len(caps) else "full length"
    return f"{span_text(run.settings.epochs for run in runs)} epochs of {length}"


def median_text(value: Spread | None, digits: int) -> str:
    return number_text(value.median if value else None, digits)


def busy_text(row: Row) -> str:
    """How busy the device was while training: `73% GPU, 98% CPU`, or `190% CPU` (100% = one core); with several
    processes, their GPUs' mean and the least busy one's, and the CPU use of them all: `71% GPU (low 40%), 390% CPU`."""
    parts = []
    if row.device_utilization_percent is not None:
        lowest = row.lowest_rank_utilization_percent
        low = "" if lowest is None else f" (low {lowest.median:.0f}%)"
        parts.append(f"{row.device_utilization_percent.median:.0f}% GPU{low}")
    if row.process_cpu_percent is not None:
        parts.append(f"{row.process_cpu_percent.median:.0f}% CPU")
    return ", ".join(parts) or "—"


def tflops_text(row: Row) -> str:
    """Achieved TFLOP/s, to three significant digits (CPUs reach hundredths, GPUs hundreds), and the MFU where the
    device is calibrated: `0.23 (31% MFU)`; `implausible` beside a figure above the device's peak."""
    value, mfu = row.tflops, row.mfu
    if value is None:
        return "—"
    text = f"{value.median:.3g}" + (f" ({mfu.median:.0%} MFU)" if mfu is not None else "")
    return text + (" implausible" if any(flag.code == "above-peak" for flag in row.flags) else "")


def flagged_text(row: Row) -> str:
    """`flagged: above-peak, device-idle`: what the notes under the table explain; "" when nothing is flagged."""
    return "flagged: " + ", ".join(flag.code for flag in row.flags) if row.flags else ""


def waiting_text(row: Row) -> str:
    """`72% input-bound`: the median share of training spent waiting for batches, and the runs' verdict."""
    share, verdict = row.input_wait_share, row.input_verdict
    if share is None:
        return "—"
    text = f"{share.median:.0%}"
    if verdict == "input-bound":
        return f"[bold red]{text} input-bound[/]"
    return f"{text} {verdict}" if verdict else text


def speedup_text(row: Row) -> str:
    if row.baseline is row:
        return "1.00x (baseline)"
    if row.speedup is None:
        return "—"
    return ratio_text(row.speedup, " vs seed" if row.against_seed_mode else "")  # tuned mode's gain on its device


def ratio_text(value: Speedup, after: str = "") -> str:
    """`2.10x [1.90–2.31]`: a ratio of samples/s with its interval at CONFIDENCE (95%), `2.10x [1.90–2.31] 67%`
    with the lower level its few samples hold, `2.10x [1.90–2.31] 67% in one process` where it holds only for the
    processes measured, or `2.10x` where one sample gave none; `after` follows the ratio (` vs seed`)."""
    text = f"{value.ratio:.2f}x{after}"
    if value.low is None or value.high is None:
        return text
    below = f" {level_text(value.level)}" if value.level is not None and value.level < CONFIDENCE else ""
    if value.within_one_process:
        below = f" {level_text(value.level or 0.0)} in one process"
    return f"{text} [{value.low:.2f}–{value.high:.2f}]{below}"


def row_notes(rows: list[Row]) -> list[str]:
    notes = []
    if any(row.settings["data_source"] == "synthetic" for row in rows):
        notes.append("SYNTHETIC DATA: speeds are real; accuracies cannot be compared with the published ones.")
    if all(run.settings.epochs < 2 for row in rows for run in row.runs):
        notes.append("No steady-state figures: epoch 1 is warm-up, so run at least 2 epochs (--epochs 2).")
    for note in dict.fromkeys(run.monitor_note for row in rows for run in row.runs if run.monitor_note):
        notes.append(f"Device utilisation and energy unknown: {note}")
    for row in rows:
        for note in row.pooling_notes:  # what the row pools or is set against that its figures do not show
            notes.append(f"{row.label}: {note}")
        if row.speedup is None and row.baseline is not row and row.speedup_note:
            notes.append(f"{row.label}: no speedup: {row.speedup_note}")
        for run in row.runs:
            if run.error:
                notes.append(f"{row.label} repeat {run.repeat + 1}: {run.status}: {run.error}")
        for diagnosis in dict.fromkeys(run.input_diagnosis for run in row.runs if run.input_verdict == "input-bound"):
            notes.append(f"{row.label}: input-bound: {diagnosis}")
        cv = row.epoch_time_cv
        if cv is not None and cv > NOISY_EPOCH_TIME_CV:
            notes.append(
                f"{row.label}: noisy: steady epoch time varies {cv:.1%} across {row.epoch_time_cv_basis} "
                f"(more than {NOISY_EPOCH_TIME_CV:.0%}): close other programs or use more repeats before "
                f"trusting this row"
            )
        if row.scaling_efficiency is not None and row.speedup is not None:  # an efficiency is a speedup's share
            world = row.settings["world_size"]
            notes.append(
                f"{row.label}: scaling efficiency {row.scaling_efficiency:.0%}: {world} processes gave "
                f"{row.speedup.ratio:.2f}x the throughput of one ({world:.0f}x would be perfect)"
                + (
                    ": above 100%, so check that both rows were measured alike before trusting it"
                    if row.scaling_efficiency > 1
                    else ""
                )
            )
        elif row.scaling_note:
            notes.append(f"{row.label}: no scaling efficiency against one process: {row.scaling_note}")
        if row.speedup is not None and "capped at" in row.speedup_note:
            notes.append(f"{row.label}: speedup {row.speedup_note.partition('; ')[2]}")
        for flag in row.flags:
            notes.append(f"{row.label}: FLAGGED {flag.code}: {flag.text}")
        for choices in dict.fromkeys(tuning_text(run) for run in row.runs if run.settings.mode == "tuned"):
            notes.append(f"{row.label}: tuned: {choices}")
        choosing_s = sum(run.tuning_s or 0.0 for run in row.runs)
        if choosing_s > 0:  # time that is in no figure of the table: say how much there was
            notes.append(
                f"{row.label}: {choosing_s:.1f} s choosing before training (tuned trial, --batch-size auto "
                "search), in none of the times above"
            )
    return notes


def tuning_text(run: RunRecord) -> str:
    """What tuned mode chose for a run, and what its trial measured: 'bf16, channels last, fused optimizer
    (trial samples/s: fp32 1,953, bf16 2,810; kept bf16)'."""
    settings = run.settings
    chosen = [settings.precision] + [name.replace("_", " ") for name in TUNING_CHOICES if getattr(settings, name)]
    return ", ".join(chosen) + (f" ({run.tuning_note})" if run.tuning_note else "")


TUNING_CHOICES = tuple(field.name for field in dataclasses.fields(Tuning) if field.name != "precision")  # on/off


def swept_value(row: Row, name: str) -> str:
    """The value of a swept setting (batch_size, workers, or a --set parameter) in `row`."""
    if name in ("batch_size", "workers", "mode"):
        return str(row.settings[name])
    overrides = row.settings["overrides"]
    if name in overrides:
        return str(overrides[name])
    entry = known_workload(row.workload)
    return "—" if entry is None else str(entry.defaults.get(name, "—"))  # the point kept the workload's default
