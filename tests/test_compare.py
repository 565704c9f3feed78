"""Comparison rows: what is pooled, what is kept apart, and speedups whose answers are known."""

from __future__ import annotations

import dataclasses

import pytest
from result_fixtures import machine, run, session, tuned

from devicebench.engine.tuning_choices import Tuning
from devicebench.report.tables import comparison_text
from devicebench.report.text import row_notes, speedup_text
from devicebench.results.compare import Row, compare, tuned_gains
from devicebench.results.prices import Prices
from devicebench.results.speed_settings import TUNED_CHOICES, setting_text
from devicebench.results.stats import CONFIDENCE, RunToRun, speedup, speedup_across_processes

LAPTOP, SERVER = machine("laptop", "aaaa1111"), machine("server", "bbbb2222")


def test_speedup_against_the_cpu_of_the_same_machine():
    # CPU steady epochs take 10 s, GPU 2 s: five times the samples per second
    rows = compare([session(LAPTOP, [run("cpu", [12, 10, 10, 10]), run("cuda:0", [5, 2, 2, 2])])])["mnist-cnn2"]
    cpu, gpu = rows
    assert cpu.baseline is cpu and cpu.speedup.ratio == pytest.approx(1.0)
    assert gpu.baseline is cpu
    assert gpu.speedup.ratio == pytest.approx(5.0)
    assert (gpu.speedup.low, gpu.speedup.high) == pytest.approx((5.0, 5.0))  # no spread, no width
    assert gpu.epoch_time_s.median == 2 and gpu.warmup_epoch_s.median == 5  # warm-up kept apart


def test_repeats_pool_into_one_row_and_the_interval_comes_from_them():
    runs = [
        run("cpu", [12, 10, 10], repeat=0),
        run("cpu", [12, 11, 11], repeat=1),
        run("cpu", [12, 9, 9], repeat=2),
        run("cuda:0", [5, 2, 2], repeat=0),
        run("cuda:0", [5, 2.5, 2.5], repeat=1),
        run("cuda:0", [5, 2, 2], repeat=2),
    ]
    cpu, gpu = compare([session(LAPTOP, runs)])["mnist-cnn2"]
    assert len(cpu.runs) == len(gpu.runs) == 3
    assert gpu.speedup.ratio == pytest.approx((1000 / 2) / (1000 / 10))
    assert gpu.speedup.low < gpu.speedup.ratio <= gpu.speedup.high
    assert gpu.speedup_note == "90% interval from repeats"  # three repeats a side hold no more


def test_runs_with_different_speed_settings_are_never_pooled_and_the_difference_is_named():
    runs = [run("cpu", [12, 10, 10]), run("cpu", [12, 6, 6], batch_size=200), run("cuda:0", [5, 2, 2], batch_size=200)]
    rows = compare([session(LAPTOP, runs)])["mnist-cnn2"]
    assert [(row.device, row.differs_by) for row in rows] == [("cpu", "batch 50"), ("cpu", "batch 200"), ("cuda:0", "")]
    gpu = rows[2]
    assert gpu.baseline is rows[1]  # the CPU run doing the same work, at batch 200
    assert gpu.speedup.ratio == pytest.approx(3.0)


def test_no_baseline_doing_the_same_work_means_no_number_and_a_reason():
    rows = compare([session(LAPTOP, [run("cpu", [12, 10, 10]), run("cuda:0", [5, 2, 2], batch_size=512)])])
    gpu = rows["mnist-cnn2"][1]
    assert gpu.speedup is None
    assert "no cpu run on laptop" in gpu.speedup_note and "batch_size=512" in gpu.speedup_note


def test_real_and_synthetic_data_are_different_work():
    rows = compare([session(LAPTOP, [run("cpu", [12, 10, 10], data_source="real"), run("cuda:0", [5, 2, 2])])])
    assert rows["mnist-cnn2"][1].speedup is None


def test_each_machine_is_measured_against_its_own_cpu_by_default():
    laptop = session(LAPTOP, [run("cpu", [12, 10, 10]), run("cuda:0", [5, 2, 2])])
    server = session(SERVER, [run("cpu", [6, 4, 4], threads=16), run("cuda:0", [2, 1, 1], threads=16)])
    rows = compare([laptop, server])["mnist-cnn2"]
    assert [row.label for row in rows] == ["laptop/cpu", "laptop/cuda:0", "server/cpu", "server/cuda:0"]
    assert [round(row.speedup.ratio, 2) for row in rows] == [1.0, 5.0, 1.0, 4.0]


def test_a_fixed_baseline_on_another_machine():
    laptop = session(LAPTOP, [run("cpu", [12, 10, 10])])
    server = session(SERVER, [run("cpu", [6, 4, 4], threads=16), run("cuda:0", [2, 1, 1], threads=16)])
    rows = compare([laptop, server], baseline="laptop/cpu")["mnist-cnn2"]
    assert [round(row.speedup.ratio, 2) for row in rows] == [1.0, 2.5, 10.0]  # against the laptop's 100 samples/s
    assert all(row.baseline is rows[0] for row in rows)


def test_two_machines_of_one_name_are_told_apart_by_their_ids_and_either_can_be_the_baseline():
    """Two cloud VMs both called `vm`: one with a GPU, one a laptop-like CPU. Seen: `vm/cuda:0` and `vm/cpu` read
    as one machine's devices."""
    gpu_vm, cpu_vm = machine("vm", "aaaaaa111111"), machine("vm", "bbbbbb222222")
    gpu_side = session(gpu_vm, [run("cuda:0", [2, 1, 1])])
    cpu_side = session(cpu_vm, [run("cpu", [12, 10, 10])])
    rows = compare([gpu_side, cpu_side, session(LAPTOP, [run("cpu", [6, 5, 5])])], baseline="vm@bbbbbb/cpu")
    labels = [row.label for row in rows["mnist-cnn2"]]
    assert labels == ["vm@aaaaaa/cuda:0", "vm@bbbbbb/cpu", "laptop/cpu"]  # a name of its own keeps its plain label
    assert [round(row.speedup.ratio, 2) for row in rows["mnist-cnn2"]] == [10.0, 1.0, 2.0]
    by_id = compare([gpu_side, cpu_side], baseline="bbbbbb222222/cpu")["mnist-cnn2"]
    assert by_id[0].baseline is by_id[1]
    ambiguous = compare([gpu_side, cpu_side], baseline="vm/cpu")["mnist-cnn2"]  # which vm? none is picked unsaid
    assert all(row.speedup is None for row in ambiguous)
    assert "several machines are called vm: name one as the table does, vm@ID" in ambiguous[0].speedup_note
    alone = compare([gpu_side, session(gpu_vm, [run("cpu", [12, 10, 10])])])["mnist-cnn2"]
    assert [row.label for row in alone] == ["vm/cuda:0", "vm/cpu"]  # one machine: no id needed


def test_prices_make_cost_per_job_and_the_cost_ratio():
    # S5: "30 units of CPU time vs 1 of GPU time": a GPU 30x faster at 3x the hourly price costs a tenth per job
    rows = compare(
        [session(LAPTOP, [run("cpu", [31, 30, 30]), run("cuda:0", [2, 1, 1])])],
        prices=Prices(default={"cpu": 1.0, "cuda": 3.0}),
    )["mnist-cnn2"]
    cpu, gpu = rows
    assert cpu.cost_per_million_samples == pytest.approx(1.0 / 3600 / (1000 / 30) * 1e6)
    assert gpu.cost_vs_baseline == pytest.approx(0.1)
    assert gpu.cost_per_run == pytest.approx(3.0 / 3600 * (2 + 1 + 1 + 1.0))


def test_energy_in_watt_hours_when_known():
    rows = compare([session(LAPTOP, [run("cpu", [2, 1, 1], energy_j=7200.0)])])["mnist-cnn2"]
    assert rows[0].energy_wh.median == pytest.approx(2.0)
    assert compare([session(LAPTOP, [run("cpu", [2, 1, 1])])])["mnist-cnn2"][0].energy_wh is None


def test_runs_with_set_overrides_are_their_own_rows_and_need_a_baseline_with_the_same_overrides():
    changed = run("cuda:0", [5, 2, 2])
    changed.settings.overrides = {"learning_rate": 0.1}
    rows = compare([session(LAPTOP, [run("cpu", [12, 10, 10]), run("cuda:0", [5, 2, 2]), changed])])["mnist-cnn2"]
    assert [row.label for row in rows] == ["laptop/cpu", "laptop/cuda:0", "laptop/cuda:0 (learning_rate=0.1)"]
    assert rows[1].speedup.ratio == pytest.approx(5.0)
    assert rows[2].speedup is None  # no CPU run trained with learning_rate=0.1


def test_tuned_devices_are_compared_at_their_own_precision_and_auto_batch_sizes_at_their_own_size():
    cpu, gpu = run("cpu", [2.0, 2.0, 2.0]), run("cuda:0", [2.0, 0.5, 0.5])
    for record in (cpu, gpu):
        record.settings.mode = "tuned"
    gpu.settings.precision = "bf16"  # the GPU's trial kept bf16, the CPU's fp32: still the same work
    rows = compare([session(machine("box", "m1"), [cpu, gpu])])["mnist-cnn2"]
    assert rows[1].speedup.ratio == pytest.approx(4.0)

    cpu, gpu = run("cpu", [2.0, 2.0, 2.0], batch_size=64), run("cuda:0", [2.0, 0.5, 0.5], batch_size=1024)
    for record in (cpu, gpu):
        record.settings.batch_size_auto = True
    rows = compare([session(machine("box", "m1"), [cpu, gpu])])["mnist-cnn2"]
    assert rows[1].speedup.ratio == pytest.approx(4.0)

    cpu, gpu = run("cpu", [2.0, 2.0, 2.0], batch_size=64), run("cuda:0", [2.0, 0.5, 0.5], batch_size=1024)
    rows = compare([session(machine("box", "m1"), [cpu, gpu])])["mnist-cnn2"]  # fixed sizes that differ
    assert rows[1].speedup is None and "batch_size=1024" in rows[1].speedup_note


def test_tuned_runs_that_chose_differently_are_separate_rows_named_by_the_choice():
    # Two tuned sessions on one CPU: one kept channels_last and a fused step (3 s epochs), one neither (6 s epochs)
    chose, did_not = run("cpu", [4.0, 3.0, 3.0]), run("cpu", [7.0, 6.0, 6.0], repeat=1)
    for record in (chose, did_not):
        record.settings.mode = "tuned"
    chose.settings.channels_last = chose.settings.fused_optimizer = True
    chose.tuning_s, did_not.tuning_s = 12.5, 0.0
    rows = compare([session(LAPTOP, [chose, did_not])])["mnist-cnn2"]
    assert [(len(row.runs), row.epoch_time_s.median) for row in rows] == [(1, 3.0), (1, 6.0)]  # never pooled to 4.5
    assert [row.label for row in rows] == ["laptop/cpu (channels last, fused optimizer)", "laptop/cpu"]
    notes = row_notes(rows)
    assert sum("choosing before training" in note for note in notes) == 1  # the row that spent the 12.5 s
    assert any("12.5 s choosing before training" in note for note in notes)


def test_a_label_names_only_what_sets_its_row_apart_and_never_a_switch_that_is_off():
    """The issue's label, `vm/cpu (mode=seed, channels_last=False, fused_optimizer=False, allocator_keeps_memory=False,
    max_steps=3)`: a seed and a tuned row set apart by their mode and their steps; what tuned mode chose follows from
    `tuned` (the notes list it), unless two tuned rows chose differently."""
    seed = run("cpu", [2.0, 1.5, 1.5], steps=3)
    tuned_run = tuned(
        run("cpu", [6.0, 5.0, 5.0], steps=25), "channels_last", "fused_optimizer", "allocator_keeps_memory"
    )
    gpu = run("cuda:0", [1.0, 0.5, 0.5], steps=3)
    results = [session(LAPTOP, [seed, tuned_run, gpu])]
    assert [row.label for row in compare(results)["mnist-cnn2"]] == [
        "laptop/cpu (seed, 3 steps)",
        "laptop/cpu (tuned, 25 steps)",
        "laptop/cuda:0",
    ]
    assert "cpu (seed, 3 steps)" in comparison_text(results)  # the terminal's tables say the same

    plain_tuned = tuned(run("cpu", [6.0, 5.5, 5.5], steps=25))  # a tuned run that kept nothing
    rows = compare([session(LAPTOP, [seed, tuned_run, plain_tuned])])["mnist-cnn2"]
    assert [row.differs_by for row in rows] == [
        "seed, 3 steps",
        "tuned, channels last, fused optimizer, allocator keeps memory, 25 steps",
        "tuned, 25 steps",
    ]


def test_the_choices_a_label_leaves_to_the_mode_are_tuned_mode_s_choices():
    assert set(TUNED_CHOICES) == {field.name for field in dataclasses.fields(Tuning)}


@pytest.mark.parametrize(
    ("name", "value", "text"),
    [
        ("mode", "tuned", "tuned"),
        ("precision", "bf16", "bf16"),
        ("data_source", "real", "real"),
        ("batch_size", 1024, "batch 1,024"),
        ("threads", 1, "1 thread"),
        ("threads", 16, "16 threads"),
        ("workers", 0, "0 workers"),
        ("world_size", 1, "1 process"),
        ("world_size", 4, "4 processes"),
        ("max_steps", 1, "1 step"),
        ("max_steps", 25, "25 steps"),
        ("max_steps", None, "full epochs"),
        ("batch_size_auto", True, "auto batch"),
        ("channels_last", True, "channels last"),
        ("compiled", False, ""),
        ("overrides", {"learning_rate": 0.1, "depth": 3}, "learning_rate=0.1, depth=3"),
        ("overrides", {}, ""),
    ],
)
def test_a_setting_reads_in_a_word_or_two(name, value, text):
    assert setting_text(name, value) == text


def test_tuned_mode_s_gain_is_taken_in_samples_per_s_against_the_seed_row_of_the_same_work():
    """A 25-step tuned epoch takes longer than a 3-step seed one, yet trains 2.5 times the samples per second."""
    seed = run("cpu", [2.0, 1.5, 1.5], steps=3)  # 300 samples an epoch: 200 samples/s
    longer_seed = run("cpu", [6.0, 12.5, 12.5], steps=25)  # 2,500 samples an epoch: 200 samples/s
    faster = tuned(run("cpu", [6.0, 5.0, 5.0], steps=25), "channels_last")  # 500 samples/s
    other_batch = tuned(run("cpu", [1.0, 1.0, 1.0], steps=3, batch_size=64))  # no seed row at batch 64
    gpu = tuned(run("cuda:0", [1.0, 0.5, 0.5], steps=3))  # no seed row on the GPU
    rows = compare([session(LAPTOP, [seed, longer_seed, faster, other_batch, gpu])])["mnist-cnn2"]
    (gain,) = tuned_gains(rows)
    assert (gain.tuned.runs, gain.seed.runs) == ([faster], [longer_seed])  # the seed row of the same length first
    assert gain.gain.ratio == pytest.approx(2.5) and (gain.gain.low, gain.gain.high) == pytest.approx((2.5, 2.5))
    (gain,) = tuned_gains([row for row in rows if row.runs != [longer_seed]])
    assert gain.seed.runs == [seed] and gain.gain.ratio == pytest.approx(2.5)
    assert gain.tuned.epoch_time_s.median > gain.seed.epoch_time_s.median  # longer epochs, yet faster


def test_a_tuned_row_shows_its_gain_over_seed_mode_on_its_own_device():
    """Seed and tuned runs on one CPU: the tuned row is set against the seed-mode row, not a second baseline;
    a tuned GPU is still set against the tuned CPU (each device at its best)."""
    seed = run("cpu", [3.0, 2.0, 2.2, 1.8])
    tuned_cpu, tuned_gpu = run("cpu", [2.0, 1.4, 1.5, 1.3]), run("cuda:0", [1.0, 0.2, 0.2, 0.2])
    for record in (tuned_cpu, tuned_gpu):
        record.settings.mode = "tuned"
    tuned_cpu.settings.channels_last = True
    rows = compare([session(LAPTOP, [seed]), session(LAPTOP, [tuned_cpu, tuned_gpu])])["mnist-cnn2"]
    seed_row, tuned_row, gpu_row = rows
    assert seed_row.baseline is seed_row and speedup_text(seed_row) == "1.00x (baseline)"
    assert tuned_row.baseline is seed_row and tuned_row.against_seed_mode
    expected = speedup([1000 / 2.0, 1000 / 2.2, 1000 / 1.8], [1000 / 1.4, 1000 / 1.5, 1000 / 1.3])
    expected = dataclasses.replace(expected, within_one_process=True)  # one process a side, no machine term
    assert tuned_row.speedup == expected and expected.ratio == pytest.approx(2.0 / 1.4)
    assert speedup_text(tuned_row) == f"1.43x vs seed [{expected.low:.2f}–{expected.high:.2f}] 90% in one process"
    assert gpu_row.baseline is tuned_row and not gpu_row.against_seed_mode
    assert speedup_text(gpu_row).startswith("7.00x [")  # 1.4 s against 0.2 s, no "vs seed"


def test_a_tuned_row_without_a_seed_row_of_the_same_work_stays_its_own_baseline():
    seed, tuned_run = run("cpu", [3.0, 2.0, 2.0], batch_size=64), run("cpu", [2.0, 1.4, 1.4])
    tuned_run.settings.mode = "tuned"
    rows = compare([session(LAPTOP, [seed, tuned_run])])["mnist-cnn2"]
    assert [speedup_text(row) for row in rows] == ["1.00x (baseline)", "1.00x (baseline)"]  # batch 64 against 50


def cpu_row(epoch_times_per_repeat: list[list[float]]) -> Row:
    """The one row of laptop CPU runs, repeat i with epoch times epoch_times_per_repeat[i] (epoch 1 warm-up)."""
    runs = [run("cpu", times, repeat=index) for index, times in enumerate(epoch_times_per_repeat)]
    (row,) = compare([session(LAPTOP, runs)])["mnist-cnn2"]
    return row


def test_epoch_time_cv_is_taken_over_each_repeat_s_median_steady_epoch_time():
    # per-repeat medians 10, 10, 10, 10, 12 (the 30 s epoch is one repeat's outlier, not its median): mean 10.4,
    # sample standard deviation sqrt((4 x 0.4² + 1.6²) / 4) = sqrt(0.8)
    row = cpu_row([[20, 10, 10], [20, 10, 10, 30], [20, 9, 11], [20, 10, 10], [20, 12, 12]])
    assert row.epoch_time_cv == pytest.approx(0.8**0.5 / 10.4)  # 8.6%
    assert row.epoch_time_cv_basis == "5 repeats"
    assert (
        "laptop/cpu: noisy: steady epoch time varies 8.6% across 5 repeats (more than 5%): close other programs "
        "or use more repeats before trusting this row"
    ) in row_notes([row])


def test_a_repeatable_row_gets_no_noise_warning():
    # per-repeat medians 10, 10.2, 9.8, 10, 10: standard deviation sqrt(0.08 / 4) = 0.141 on a mean of 10: 1.4%
    row = cpu_row([[20, median, median] for median in (10, 10.2, 9.8, 10, 10)])
    assert row.epoch_time_cv == pytest.approx(0.02**0.5 / 10)
    assert not [note for note in row_notes([row]) if "noisy" in note]


def test_with_one_repeat_the_cv_comes_from_its_steady_epochs_and_says_so():
    # steady epochs 10, 12, 10, 12 (the 20 s warm-up left out): mean 11, standard deviation sqrt(4 / 3)
    row = cpu_row([[20, 10, 12, 10, 12]])
    assert row.epoch_time_cv == pytest.approx((4 / 3) ** 0.5 / 11)  # 10.5%
    assert row.epoch_time_cv_basis == "4 steady epochs of one repeat, between processes not measured"
    assert any(
        "varies 10.5% across 4 steady epochs of one repeat, between processes not measured (more than 5%)" in note
        for note in row_notes([row])
    )


def test_epochs_a_time_budget_shortened_are_as_repeatable_as_their_steps():
    # 18, 8 and 4 steps at 1 s a step: the epochs' times vary by their lengths, not by noise
    paced = run("cpu", [20, 18, 8, 4])
    for epoch in paced.epochs[1:]:
        epoch.steps, epoch.step_time_ms = int(epoch.train_time_s), 1000.0
    (row,) = compare([session(LAPTOP, [paced])])["mnist-cnn2"]
    assert row.epoch_time_cv == 0.0
    assert not [note for note in row_notes([row]) if "noisy" in note]


def test_one_steady_epoch_has_no_cv():
    row = cpu_row([[20, 10]])
    assert row.epoch_time_cv is None
    assert not [note for note in row_notes([row]) if "noisy" in note]


def test_mfu_of_several_processes_is_taken_against_the_peak_of_every_device():
    one, four = run("cuda:0", [2.0, 1.0, 1.0]), run("cuda:0", [2.0, 0.25, 0.25])  # 1,000 and 4,000 samples/s
    four.settings.world_size = 4
    for record in (one, four):
        record.flops_per_sample, record.peak_tflops = 1e9, 10.0  # 1 GFLOP a sample; 10 TFLOP/s per GPU
    single, data_parallel = compare([session(LAPTOP, [one, four])])["mnist-cnn2"]
    assert single.tflops.median == pytest.approx(1.0) and single.mfu.median == pytest.approx(0.1)
    assert data_parallel.tflops.median == pytest.approx(4.0)  # four GPUs' global rate
    assert data_parallel.mfu.median == pytest.approx(0.1)  # of four peaks: 40 TFLOP/s, not 10 (that would be 40%)


def test_the_utilisation_of_several_processes_is_their_mean_and_the_least_busy_one_s():
    record = run("cuda:0", [2.0, 1.0, 1.0])
    record.settings.world_size = 3
    for entry, ranks in zip(record.epochs, ([10.0, 10.0, 10.0], [90.0, 40.0, 83.0], [80.0, 44.0, 80.0])):
        entry.rank_device_utilization_percent = ranks
        entry.device_utilization_percent = sum(ranks) / 3
    (row,) = compare([session(LAPTOP, [record])])["mnist-cnn2"]
    assert row.device_utilization_percent.median == pytest.approx(69.5)  # steady epochs' means: 71 and 68
    assert row.lowest_rank_utilization_percent.median == pytest.approx(42.0)  # their lowest: 40 and 44
    record.epochs[2].rank_device_utilization_percent = [80.0, None, 80.0]  # a rank NVML could not read
    (row,) = compare([session(LAPTOP, [record])])["mnist-cnn2"]
    assert row.lowest_rank_utilization_percent.median == 40.0  # only where every rank's is known


# --- the process is the unit of the interval (issue 42) ---------------------------------------------------------


def test_with_one_process_a_side_and_no_machine_term_the_interval_says_it_holds_within_one_process():
    rows = compare([session(LAPTOP, [run("cpu", [12, 10, 10.4]), run("cuda:0", [5, 2, 2.1])])])["mnist-cnn2"]
    gpu = rows[1]
    assert gpu.speedup.within_one_process and gpu.speedup.level == pytest.approx(2 / 3)
    assert gpu.speedup_note.startswith("67% interval from epochs, within one process a side")
    assert "`devicebench calibrate` measures this machine's" in gpu.speedup_note
    assert speedup_text(gpu).endswith("] 67% in one process")


def test_with_the_machine_term_measured_the_interval_includes_it_and_says_so():
    cpu_runs = [run("cpu", [12, 10, 10.4], run_to_run_cv=0.05, run_to_run_freedom=3.0)]
    gpu_runs = [run("cuda:0", [5, 2, 2.1], run_to_run_cv=0.02, run_to_run_freedom=4.0)]
    gpu = compare([session(LAPTOP, cpu_runs + gpu_runs)])["mnist-cnn2"][1]
    expected = speedup_across_processes(
        [100.0, 1000 / 10.4], [500.0, 1000 / 2.1], RunToRun(0.05, 3.0), RunToRun(0.02, 4.0)
    )
    assert gpu.speedup == expected and not gpu.speedup.within_one_process and expected.level == CONFIDENCE
    assert gpu.speedup_note == (
        "95% interval from epochs and this machine's run-to-run variation between processes (5.0% on laptop/cpu, "
        "2.0% on laptop/cuda:0)"
    )
    assert "process" not in speedup_text(gpu)  # 95% is the level printed by default
    cpu_runs[0].run_to_run_cv = None  # one side not measured: the interval may not claim fresh processes
    assert compare([session(LAPTOP, cpu_runs + gpu_runs)])["mnist-cnn2"][1].speedup.within_one_process


def test_repeats_stored_before_processes_were_recorded_shared_one_process_and_are_not_its_unit():
    runs = [
        run(device, [12, times, times], repeat=repeat, process_id=None)
        for repeat, times in enumerate([10, 11, 9])
        for device in ("cpu",)
    ]
    runs += [
        run("cuda:0", [5, times, times], repeat=repeat, process_id=None) for repeat, times in enumerate([2, 2.5, 2])
    ]
    gpu = compare([session(LAPTOP, runs)])["mnist-cnn2"][1]
    assert gpu.speedup.within_one_process and gpu.speedup_note.startswith("95% interval from epochs, within one")
    separate_sessions = [session(LAPTOP, [cpu, gpu_run]) for cpu, gpu_run in zip(runs[:3], runs[3:], strict=True)]
    gpu = compare(separate_sessions)["mnist-cnn2"][1]  # one session each: one process each
    assert gpu.speedup_note == "90% interval from repeats" and not gpu.speedup.within_one_process


def test_the_noisy_flag_of_one_process_adds_the_machine_s_run_to_run_cv_to_its_epochs():
    # steady epochs 10, 10.2, 9.8, 10 s: 1.6% on their own, under the 5% flag; with a 6% machine term 6.2%
    steady = run("cpu", [20, 10, 10.2, 9.8, 10])
    (row,) = compare([session(LAPTOP, [steady])])["mnist-cnn2"]
    epochs_cv = row.epoch_time_cv
    assert epochs_cv == pytest.approx(0.0163, abs=1e-4) and not [n for n in row_notes([row]) if "noisy" in n]
    steady.run_to_run_cv, steady.run_to_run_freedom = 0.06, 4.0
    (row,) = compare([session(LAPTOP, [steady])])["mnist-cnn2"]
    assert row.epoch_time_cv == pytest.approx((epochs_cv**2 + 0.06**2) ** 0.5)
    assert any(
        "noisy: steady epoch time varies 6.2% across 4 steady epochs of one repeat and this machine's run-to-run "
        "6.0% (more than 5%)" in note
        for note in row_notes([row])
    )
