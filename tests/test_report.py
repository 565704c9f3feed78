"""The HTML report as a user opens it: one offline file, every chart inlined, the table's numbers equal to the
comparison rows, everything from other machines escaped, and a real browser that draws it.

    python -m pytest tests/test_report.py -q
"""

from __future__ import annotations

import base64
import io
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image
from result_fixtures import machine, run, session, tuned
from rich.console import Console
from typer.testing import CliRunner

from devicebench.cli import EXIT_USAGE, app
from devicebench.report import workload_plots
from devicebench.report.charts import file_stem
from devicebench.report.html import ReportDependencyError, write_report
from devicebench.report.progress import RichReporter
from devicebench.report.workload_plots import steady_epoch_lengths, workload_charts
from devicebench.results.compare import Row, compare
from devicebench.results.prices import parse_prices
from devicebench.results.schema import Result
from devicebench.results.store import Store
from devicebench.workloads import get_workload

HOSTILE = "<script>alert(1)</script>"
HOSTILE_WORKLOAD = "<img src=x onerror=alert(2)>"  # a workload name as an imported file could carry it
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GPU = {"device": "cuda:0", "name": "GeForce Fake 860M", "driver": "550.54", "cuda_runtime": "12.4"}
cli = CliRunner()


@pytest.fixture
def results() -> list[Result]:
    """Two machines. The laptop: mnist-cnn2 on cpu and cuda:0, two repeats each, whose per-repeat medians make a
    speedup of exactly 10x, and a cpu run at batch 64 (its own row). The server, with a hostile hostname:
    cifar10-mlp on synthetic data with energy, a failed run with a hostile error, and an unknown workload."""
    laptop = {**machine("laptop", "aaa111"), "accelerators": [GPU], "memory_total_mib": 16384}
    server = {**machine("server", "bbb222"), "hostname": HOSTILE, "accelerators": [GPU]}
    failed = run("cuda:0", [9.5], workload="cifar10-mlp", repeat=1, status="failed")
    failed.error = f"CUDA error {HOSTILE}"
    return [
        session(
            laptop,
            [
                run("cpu", [20.0, 10.0, 10.0], data_source="real"),
                run("cpu", [22.0, 11.0, 11.0], data_source="real", repeat=1),
                run("cuda:0", [3.0, 1.0, 1.0], data_source="real"),
                run("cuda:0", [3.3, 1.1, 1.1], data_source="real", repeat=1),
                run("cpu", [24.0, 12.0, 12.0], data_source="real", batch_size=64),
            ],
        ),
        session(
            server,
            [
                run("cpu", [80.0, 40.0, 44.0], workload="cifar10-mlp", energy_j=7200.0),
                run("cuda:0", [9.0, 4.0, 4.4], workload="cifar10-mlp", energy_j=1800.0),
                failed,
                run("cpu", [4.0, 2.0, 2.0], workload=HOSTILE_WORKLOAD),
            ],
        ),
    ]


class PageParser(HTMLParser):
    """Every tag's attributes, the page's text as a reader sees it (entities decoded), and the text of each
    `numbers` table's cells, a list per row keyed by the row label; a cell's small print follows after a space."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text = ""
        self.table_rows: dict[str, list[str]] = {}
        self._row: list[list[str]] | None = None  # each cell's text pieces
        self._in_numbers = False
        self._in_cell = False

    def handle_starttag(self, tag: str, attributes: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attributes)))
        if tag == "table":
            self._in_numbers = dict(attributes).get("class") == "numbers"
        elif tag == "tr" and self._in_numbers:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._row.append([])
            self._in_cell = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_cell = False
        elif tag == "tr" and self._row:
            self.table_rows[self._row[0][0]] = [" ".join(pieces) for pieces in self._row]
            self._row = None

    def handle_data(self, data: str) -> None:
        self.text += data
        if self._in_cell and data.strip():
            self._row[-1].append(data.strip())


def parse(html: str) -> PageParser:
    parser = PageParser()
    parser.feed(html)
    return parser


def images(parser: PageParser) -> list[bytes]:
    prefix = "data:image/png;base64,"
    sources = [attributes["src"] for tag, attributes in parser.tags if tag == "img"]
    assert all(source.startswith(prefix) for source in sources), "every image is an inlined PNG"
    return [base64.b64decode(source[len(prefix) :], validate=True) for source in sources]


def assert_valid_png(data: bytes) -> None:
    assert data.startswith(PNG_SIGNATURE)
    with Image.open(io.BytesIO(data)) as image:
        image.verify()


def row_by_label(rows_by_workload: dict[str, list[Row]], workload: str, label: str) -> Row:
    return next(row for row in rows_by_workload[workload] if row.label == label)


def test_one_offline_file_with_every_chart_inlined(results, tmp_path):
    out = write_report(results, tmp_path / "report.html")
    assert out == tmp_path / "report.html" and [path.name for path in tmp_path.iterdir()] == ["report.html"]
    parser = parse(out.read_text())
    references = [
        value
        for _, attributes in parser.tags
        for name, value in attributes.items()
        if name in ("src", "href") and value
    ]
    assert not [value for value in references if "://" in value or value.startswith("//")]
    assert not [tag for tag, _ in parser.tags if tag in ("script", "link", "iframe")]
    charts = images(parser)
    # the summary; mnist-cnn2 and cifar10-mlp: epoch time, samples/s, speedup, accuracy; the unknown workload has
    # only a baseline row, so no speedup chart
    assert len(charts) == 1 + 4 + 4 + 3
    for chart in charts:
        assert_valid_png(chart)


def test_table_numbers_are_the_comparison_rows(results, tmp_path):
    prices = parse_prices("cpu=0.10,cuda=2.50")
    html = write_report(results, tmp_path / "report.html", prices=prices).read_text()
    table = parse(html).table_rows
    rows = compare(results, prices=prices)

    gpu = row_by_label(rows, "mnist-cnn2", "laptop/cuda:0")
    assert gpu.speedup.ratio == pytest.approx(10.0)  # per-repeat medians: 1000 and 909.1 over 100 and 90.9
    speedup_cell = table["laptop/cuda:0"][10]
    assert speedup_cell.startswith(f"10.00x [{gpu.speedup.low:.2f}–{gpu.speedup.high:.2f}]")
    assert (
        "vs laptop/cpu (batch 50)" in speedup_cell
        and "[9.09–11.00] 67% vs" in speedup_cell
        and "67% interval from repeats" in speedup_cell
    )

    cpu = table["laptop/cpu (batch 50)"]
    assert cpu[0] == "laptop/cpu (batch 50) seed mode, batch 50, 2 threads"
    assert cpu[1] == "laptop cpu model (cpu)"  # the machine, then its device's name in small print
    assert cpu[2] == "10.50 [10.00–11.00]"  # steady epochs 10, 10, 11, 11
    assert cpu[3] == "95" and cpu[4] == "1,050.00"  # median of 100 and 90.9 samples/s; 10.5 s / 10 steps in ms
    assert cpu[5] == "—"  # TFLOP/s: these fixture runs carry no FLOPs per sample
    assert cpu[6] == "—"  # busy: these fixture epochs carry no monitor figures
    assert cpu[7] == "21.00" and cpu[8] == "43.0"  # warm-up 20 and 22 s; end to end 20+10+10+1 and 22+11+11+1
    assert cpu[9] == "80.0%" and cpu[10] == "1.00x (baseline)"
    assert cpu[11:13] == ["real", "2 2 repeats; ok 2"]

    wide_batch = table["laptop/cpu (batch 64)"]
    assert wide_batch[0].endswith("seed mode, batch 64, 2 threads") and wide_batch[2] == "12.00 [12.00–12.00]"

    server_gpu_row = row_by_label(rows, "cifar10-mlp", "server/cuda:0")
    server_gpu = table["server/cuda:0"]
    assert server_gpu[11] == "SYNTHETIC"
    assert server_gpu[12] == "2 2 repeats; failed 1, ok 1"
    assert server_gpu[13] == f"{server_gpu_row.cost_per_million_samples:,.3f} at 2.5/h"
    assert server_gpu[14] == f"{server_gpu_row.cost_per_run:,.4f}"
    assert server_gpu[15] == f"{server_gpu_row.cost_vs_baseline:.3g}x" == "2.5x"  # 25 times the price, 10x as fast
    assert server_gpu[16] == "0.50"  # 1800 J = 0.5 Wh
    assert "SYNTHETIC DATA" in html


def test_everything_from_other_machines_is_escaped(results, tmp_path):
    html = write_report(results, tmp_path / "report.html").read_text()
    parser = parse(html)
    for hostile in (HOSTILE, HOSTILE_WORKLOAD, f"CUDA error {HOSTILE}"):  # a hostname, a workload, an error
        assert hostile not in html and hostile in parser.text  # shown as text, never as markup
    assert not [tag for tag, _ in parser.tags if tag == "script"]
    assert not [attributes for _, attributes in parser.tags if "onerror" in attributes]


def test_published_figures_come_from_the_workloads(results, tmp_path):
    text = parse(write_report(results, tmp_path / "report.html").read_text()).text
    for name in ("mnist-cnn2", "cifar10-mlp"):
        published = get_workload(name).published
        assert published.hardware in text and f"{published.speedup:g}x ({published.basis})" in text
    assert "CPU 847, GPU 5,556" in text  # cifar10-mlp's published samples/s: 50,000 images in 59 s and in 9 s
    assert f"no published figures for {HOSTILE_WORKLOAD}" in text


def test_zero_runs_is_a_page_that_says_how_to_make_some(tmp_path):
    parser = parse(write_report([], tmp_path / "report.html").read_text())
    assert "No runs matched" in parser.text and "devicebench run" in parser.text
    assert not images(parser)


def test_png_dir_gets_every_chart_with_a_readable_name(results, tmp_path):
    out = write_report(results, tmp_path / "report.html", png_dir=tmp_path / "charts")
    written = sorted(path.name for path in (tmp_path / "charts").iterdir())
    unknown = file_stem(HOSTILE_WORKLOAD)
    assert written == sorted(
        [
            "summary-speedup.png",
            *(
                f"{name}-{kind}.png"
                for name in ("mnist-cnn2", "cifar10-mlp")
                for kind in ("epoch-time", "samples-per-s", "speedup", "test-accuracy")
            ),
            *(f"{unknown}-{kind}.png" for kind in ("epoch-time", "samples-per-s", "test-accuracy")),
        ]
    )
    inlined = images(parse(out.read_text()))
    for path in (tmp_path / "charts").iterdir():
        assert path.read_bytes() in inlined


def test_missing_report_extra_names_the_install_command(results, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 now raises ImportError
    with pytest.raises(ReportDependencyError, match=r"jinja2.*pip install 'devicebench\[report\]'"):
        write_report(results, tmp_path / "report.html")


def cpu_only() -> list[Result]:
    """A machine without a GPU: seed mode in 3-step epochs (200 samples/s) and tuned mode in 25-step ones (500
    samples/s). Each tuned epoch takes longer, 5 s against 1.5 s, though tuned mode trains 2.5 times as fast."""
    return [
        session(
            machine("vm", "ccc333"),
            [run("cpu", [2.0, 1.5, 1.5], steps=3), tuned(run("cpu", [6.0, 5.0, 5.0], steps=25), "channels_last")],
        )
    ]


def page_text(path: Path) -> str:
    return " ".join(parse(path.read_text()).text.split())  # as a reader sees it: one space between words


def test_a_cpu_only_report_says_why_there_is_no_speedup_and_what_tuned_mode_gained(tmp_path):
    text = page_text(write_report(cpu_only(), tmp_path / "report.html"))
    assert "CPU only: every run here trained on the CPU, the speedup baseline, so there is no speedup to show." in text
    assert "devicebench estimate mnist-cnn2 predicts the samples/s, speedup and cost of named GPUs" in text
    assert "No row has a speedup" not in text
    assert (
        "mnist-cnn2: vm/cpu (tuned, 25 steps) trained 2.50x [2.50–2.50] 67% in one process the samples/s of vm/cpu "
        "(seed, 3 steps): "
        "500 against 200."
    ) in text

    gpu_alone = [session(machine("box", "ddd444"), [run("cuda:0", [2.0, 1.0, 1.0])])]  # a baseline is missing
    text = page_text(write_report(gpu_alone, tmp_path / "gpu.html"))
    assert "No row has a speedup: each needs a baseline run (cpu)" in text and "CPU only" not in text
    assert "Tuned mode against seed mode" not in text


def test_a_report_of_runs_that_ended_in_their_warm_up_epoch_is_written_and_says_so(tmp_path):
    """`run --epochs 1` trains the warm-up epoch alone: no steady epoch, so no throughput, and still a report."""
    warm_up_only = [session(machine("vm", "aaa111"), [run("cpu", [2.0])])]
    text = page_text(write_report(warm_up_only, tmp_path / "report.html"))
    assert "mnist-cnn2" in text and "No steady-state figures: epoch 1 is warm-up, so run at least 2 epochs" in text


@pytest.fixture
def figures(monkeypatch) -> list:
    """Every matplotlib figure a chart is made from, kept as it is turned into PNG."""
    kept = []
    to_png = workload_plots.png

    def keep(figure):
        kept.append(figure)
        return to_png(figure)

    monkeypatch.setattr(workload_plots, "png", keep)
    return kept


def test_epochs_of_different_lengths_are_set_side_by_side_in_samples_per_s_never_in_epoch_time(figures):
    rows = compare(cpu_only())["mnist-cnn2"]
    assert steady_epoch_lengths(rows) == [(3, 300), (25, 2500)]
    charts = workload_charts("mnist-cnn2", rows, None)
    assert [chart.slug for chart in charts] == ["mnist-cnn2-samples-per-s", "mnist-cnn2-test-accuracy"]
    assert charts[0].caption.startswith("Epochs here had 3–25 steps, so their times are not set side by side")
    throughput, accuracy = figures
    assert [bar.get_width() for bar in throughput.axes[0].patches] == pytest.approx([200, 500])  # tuned: longer
    assert throughput.axes[0].get_xlabel().startswith("training throughput, samples/s")
    assert [text.get_text() for text in accuracy.legends[0].get_texts()] == [
        "vm/cpu (seed, 3 steps)",
        "vm/cpu (tuned, 25 steps)",
    ]

    figures.clear()  # labels that do not name the steps get them where lengths differ
    on_two_devices = [
        session(
            machine("vm", "ccc333"), [run("cpu", [2.0, 1.5, 1.5], steps=3), run("cuda:0", [1.0, 0.5, 0.5], steps=25)]
        )
    ]
    workload_charts("mnist-cnn2", compare(on_two_devices)["mnist-cnn2"], None)
    assert [text.get_text() for text in figures[-1].legends[0].get_texts()] == [
        "vm/cpu, 3-step epochs",
        "vm/cuda:0, 25-step epochs",
    ]

    figures.clear()  # epochs of one length: their times compare, and the title says how long they were
    same_length = [
        session(
            machine("vm", "ccc333"), [run("cpu", [2.0, 1.5, 1.5], steps=3), run("cuda:0", [1.0, 0.5, 0.5], steps=3)]
        )
    ]
    charts = workload_charts("mnist-cnn2", compare(same_length)["mnist-cnn2"], None)
    assert "mnist-cnn2-epoch-time" in [chart.slug for chart in charts] and not charts[0].caption
    epoch_time = figures[[chart.slug for chart in charts].index("mnist-cnn2-epoch-time")]
    assert epoch_time.axes[0].get_title() == "mnist-cnn2: steady 3-step epoch time (shorter is faster)"
    assert [bar.get_width() for bar in epoch_time.axes[0].patches] == pytest.approx([1.5, 0.5])


def test_nothing_a_chart_draws_reaches_outside_its_picture(results, figures, tmp_path):
    """The accuracy chart's axis label was cut off once its legend, a line or more per row, squeezed the plot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    choices = ("channels_last", "fused_optimizer", "allocator_keeps_memory", "compiled", "cudnn_benchmark")
    crowded = [
        tuned(
            run("cpu", [2.0, 1.0 + index / 10, 1.0], workload="crowded", steps=3 + index, batch_size=32 * (index + 1)),
            *choices[:index],
        )
        for index in range(len(choices) + 1)
    ]
    write_report([*results, session(machine("crowded", "eee555"), crowded)], tmp_path / "report.html")
    legends = {figure.axes[0].get_title(): len(figure.legends[0].get_texts()) for figure in figures if figure.legends}
    assert legends["crowded: test accuracy per epoch (dashed: synthetic data)"] == 6  # a curve per row
    for figure in figures:
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        drawn = figure.get_tightbbox(canvas.get_renderer())  # inches, around every text, tick and legend
        width, height = figure.get_size_inches()
        slack = 1 / figure.dpi  # a pixel
        title = figure.axes[0].get_title()
        assert drawn.x0 >= -slack and drawn.y0 >= -slack, title
        assert drawn.x1 <= width + slack and drawn.y1 <= height + slack, title


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="headless render needs Debian's chromium (apt-get install chromium)")
def test_a_real_browser_draws_the_report(results, tmp_path):
    out = write_report(results, tmp_path / "report.html")
    screenshot = tmp_path / "screenshot.png"
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={screenshot}",
            "--window-size=1400,2400",
            out.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with Image.open(screenshot) as image:
        assert image.size == (1400, 2400)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 500  # text, charts and table bands, not a blank page


def stored(tmp_path: Path, results: list[Result]) -> Path:
    database = tmp_path / "results.sqlite"
    with Store(database) as store:
        store.import_results(results)
    return database


def test_cli_reports_the_stored_runs(results, tmp_path):
    database = stored(tmp_path, results)
    out, charts = tmp_path / "out" / "report.html", tmp_path / "charts"
    out.parent.mkdir()  # the report's folder must exist; the charts' folder is made for them
    outcome = cli.invoke(
        app, ["report", "--db", str(database), "--out", str(out), "--png", str(charts), "--price", "cpu=0.10,cuda=2.50"]
    )
    assert outcome.exit_code == 0, outcome.output
    assert f"Wrote {out}: 9 runs from 2 machines" in " ".join(outcome.stdout.split())
    parser = parse(out.read_text())
    assert len(images(parser)) == 12 == len(list(charts.iterdir()))
    assert "Cost/1M samples" in parser.text and "laptop/cuda:0" in parser.table_rows


def test_cli_filters_and_an_empty_selection(results, tmp_path):
    database = stored(tmp_path, results)
    out = tmp_path / "laptop.html"
    outcome = cli.invoke(app, ["report", "--db", str(database), "--out", str(out), "--machine", "laptop"])
    assert outcome.exit_code == 0, outcome.output
    assert set(parse(out.read_text()).table_rows) == {"laptop/cpu (batch 50)", "laptop/cuda:0", "laptop/cpu (batch 64)"}
    outcome = cli.invoke(app, ["report", "--db", str(database), "--out", str(out), "--workload", "resnet*"])
    assert outcome.exit_code == 0 and "0 runs" in outcome.stdout
    assert "No runs matched" in parse(out.read_text()).text


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--price", "tpu=3"], "unknown device 'tpu'"),
        (["--last", "0"], "--last"),
    ],
)
def test_cli_refuses_bad_options(tmp_path, arguments, message):
    outcome = cli.invoke(
        app, ["report", "--db", str(tmp_path / "results.sqlite"), "--out", str(tmp_path / "report.html"), *arguments]
    )
    assert outcome.exit_code == EXIT_USAGE and message in outcome.output
    assert not (tmp_path / "report.html").exists()


def test_cli_without_the_report_extra_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    outcome = cli.invoke(
        app, ["report", "--db", str(tmp_path / "results.sqlite"), "--out", str(tmp_path / "report.html")]
    )
    assert outcome.exit_code == EXIT_USAGE
    assert "matplotlib" in outcome.output and "pip install 'devicebench[report]'" in outcome.output


def test_the_busy_column_of_several_processes_shows_their_mean_gpu_the_least_busy_one_and_all_their_cpu():
    from devicebench.report.html import comparison_html
    from devicebench.report.text import busy_text

    record = run("cuda:0", [2.0, 1.0])
    record.settings.world_size = 3
    steady = record.epochs[1]
    steady.rank_device_utilization_percent, steady.device_utilization_percent = [90.0, 40.0, 83.0], 71.0
    steady.process_cpu_percent = 300.0  # three processes, a core each
    result = session(machine("box", "m1"), [record])
    (row,) = compare([result])["mnist-cnn2"]
    assert busy_text(row) == "71% GPU (low 40%), 300% CPU"
    assert "<td>71% GPU (low 40%), 300% CPU</td>" in comparison_html([result])
    single = run("cuda:0", [2.0, 1.0])
    single.epochs[1].device_utilization_percent = 71.0
    (one_process,) = compare([session(machine("box", "m1"), [single])])["mnist-cnn2"]
    assert busy_text(one_process) == "71% GPU"  # one GPU: nothing lower to show


def test_an_error_that_looks_like_markup_is_shown_as_it_is(make_run):
    """gloo's errors name C++ source files in brackets; printed as rich markup they raised MarkupError."""
    screen = io.StringIO()
    error = "RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer"
    RichReporter(Console(file=screen, width=200), quiet=True).run_finished(make_run(status="failed", error=error))
    assert f"mnist-cnn2 on cpu: failed: {error}" in screen.getvalue()


def test_the_accuracy_axis_ends_at_100_percent_however_close_the_curves_come(figures):
    """Autoscaling put a tick at 102% above a run that reached 100%: an accuracy no run can have. The point at 100%
    is still drawn, on the axis's edge."""
    perfect = run("cpu", [2.0, 1.5, 1.5])
    for epoch in perfect.epochs:
        epoch.test_accuracy = 1.0
    workload_charts("mnist-cnn2", compare([session(machine("vm", "aaa111"), [perfect])])["mnist-cnn2"], None)
    accuracy = figures[-1].axes[0]
    bottom, top = accuracy.get_ylim()
    assert top == 100 and bottom < 100
    assert max(tick for tick in accuracy.get_yticks() if bottom <= tick <= top) <= 100
    assert [list(line.get_ydata()) for line in accuracy.get_lines()] == [[100.0, 100.0, 100.0]]
    assert not accuracy.get_lines()[0].get_clip_on()  # the markers on the edge are not cut in half

    figures.clear()  # curves far from 100% keep the axis that fits them
    workload_charts(
        "mnist-cnn2", compare([session(machine("vm", "aaa111"), [run("cpu", [2.0, 1.5, 1.5])])])["mnist-cnn2"], None
    )
    assert figures[-1].axes[0].get_ylim()[1] < 100
