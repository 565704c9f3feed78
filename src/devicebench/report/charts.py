"""What every chart of the report shares: its size, its palette, titles and labels wrapped to fit, the PNG it
becomes and the Chart that carries it to the page; and the Row tests the charts agree on.

matplotlib is imported inside the functions: `import devicebench` stays light, and figures are built with
`matplotlib.figure.Figure` rather than pyplot, so no global backend or figure registry is touched (nothing to
`plt.close`, nothing left open in a notebook that imports us). Titles are wrapped here (`wrapped_title`): a
workload's name from an imported file can be longer than a chart is wide, and nothing drawn may leave the picture.
Not with matplotlib's own `wrap=True`, which measures the text as mathtext whatever `text.parse_math` says, so a name
such as `$\\frac$` would stop the report. The charts themselves are workload_plots.py's (a workload's and the
summary), sweep_plots.py's and estimate_plots.py's.

    python -c "from devicebench.report.charts import Chart; help(Chart)"
"""

from __future__ import annotations

import functools
import io
import os
import re
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from devicebench.results.compare import Row

if TYPE_CHECKING:
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

T = TypeVar("T")
_MATPLOTLIB_FOLDER: list[tempfile.TemporaryDirectory] = []  # the process's own matplotlib folder, when it needs one
Colour = tuple[float, float, float]  # red, green, blue in 0..1, as matplotlib takes them

DPI = 110  # dots per inch: a 7-inch chart is 770 pixels wide, sharp on screen and small inlined
CHART_WIDTH_IN = 7.0
CHART_MARGIN_HEIGHT_IN = 1.5  # title, axis label and legend
LABEL_WIDTH_CHARS = 34  # longer row labels wrap instead of squeezing the plot
TITLE_WIDTH_CHARS = 70  # a title's characters that fit a chart's width at the title's size
LEGEND_LINE_HEIGHT_IN = 0.2  # a line of small legend text
CURVE_MARKERS = "osv^PX"  # one shape per accuracy curve, so curves that coincide still show each row
SWEEP_PANEL_HEIGHT_IN = 3.2  # throughput, and the ratio panel under it


@dataclass(frozen=True)
class Chart:
    slug: str  # file stem for --png: "mnist-cnn2-epoch-time"
    title: str  # the image's alt text: what a reader without the picture is missing
    png: bytes
    caption: str = ""  # how to read the chart, where its title alone does not say


def keep_matplotlib_out_of_a_guessed_home() -> None:
    """Give matplotlib a temporary folder of this process's (removed at exit) for its font cache where it would
    otherwise write into a home folder Python guessed: HOME unset, and neither MPLCONFIGDIR nor the XDG folders
    matplotlib reads set (files.user_folder says why a guessed home is not written to). Call before importing it."""
    if os.name != "posix" or os.environ.get("HOME", "").strip() or _MATPLOTLIB_FOLDER:
        return
    if any(os.environ.get(name, "").strip() for name in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")):
        return
    _MATPLOTLIB_FOLDER.append(tempfile.TemporaryDirectory(prefix="devicebench-matplotlib-"))
    os.environ["MPLCONFIGDIR"] = _MATPLOTLIB_FOLDER[0].name


def text_as_given(draw: Callable[..., T]) -> Callable[..., T]:
    """Names come from other machines' files: a `$` in one is a dollar sign, never mathtext (which a name such as
    `$\\frac$` would make fail). Text takes the setting when it is created, so it holds while charts are built."""

    @functools.wraps(draw)
    def drawn(*arguments: Any, **options: Any) -> T:
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*arguments, **options)

    return drawn


def file_stem(name: str) -> str:
    """`name` as a safe, readable file name part: workload names from imported files may hold anything."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "workload"


def has_speedup(row: Row) -> bool:
    """Whether the row has a speedup against another device's row: a baseline row's own 1x says nothing, and a tuned
    row's gain over seed mode on its own device is listed apart from the speedups (Tuned mode against seed mode)."""
    return row.speedup is not None and row.baseline is not row and not row.against_seed_mode


def palette(count: int) -> list[Colour]:
    """One colour per row, the same across a workload's charts, so a row is found by colour as well as name."""
    colours = listed_colours("tab10")
    return [colours[index % len(colours)] for index in range(count)]


def listed_colours(name: str) -> tuple[Colour, ...]:
    """The colours of matplotlib's listed colormap `name` (tab10, tab20), in its order."""
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap

    colormap = colormaps[name]
    assert isinstance(colormap, ListedColormap)  # the tab palettes are lists of colours, not gradients
    # matplotlib's stubs type `colors` as any array-like; a tab palette's is a tuple of (red, green, blue) tuples
    return cast("tuple[Colour, ...]", colormap.colors)


def wrapped_label(label: str) -> str:
    return textwrap.fill(label, LABEL_WIDTH_CHARS, break_on_hyphens=False)


def wrapped_title(text: str) -> str:
    return textwrap.fill(text, TITLE_WIDTH_CHARS, break_on_hyphens=False)


def png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def axis_number(value: float) -> str:
    """A tick's number as the tables write one: `2,500,000`, `0.5`, never `1e6` beside the axis (matplotlib's
    offset, which read as a bare `1e6` under a throughput axis) nor `1e+06`."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"


def plain_ticks(axis: Axis, unit: str = "") -> None:
    """Label `axis`'s major ticks with `axis_number` (and `unit`, `x` for a ratio): no offset, no scientific
    notation."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: axis_number(value) + unit))
