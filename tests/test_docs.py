"""The README is the front door and the reference lives under docs/, built by MkDocs (mkdocs.yml).

These tests keep it so: the site builds in strict mode (a broken link or anchor, or a page left out of the nav, is a
warning and so a failure), the README stays short, keeps its three commands together in the order a newcomer runs
them, and links only to files that exist.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
README = REPOSITORY / "README.md"
THREE_COMMANDS = ('pip install -e ".[dev,gbdt-cpu]"', "devicebench run", "python -m pytest")


def fenced_blocks(markdown: str) -> list[str]:
    """The text of every ``` fenced block, without its fences."""
    return re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.M | re.S)


def relative_links(markdown: str) -> list[str]:
    """The targets of the markdown links and images outside fenced blocks that point into the repository."""
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.M | re.S)
    targets = re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", prose)
    return [target for target in targets if not target.startswith(("http://", "https://", "#", "mailto:"))]


def test_the_docs_build_in_strict_mode_with_every_page(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs need MkDocs: pip install -e '.[dev]'")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = built.stdout + built.stderr
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    assert "WARNING" not in output, output
    assert (tmp_path / "index.html").is_file()
    assert (tmp_path / "measurement" / "index.html").is_file()  # docs/measurement.md, the rules one by one
    assert (tmp_path / "report-example.png").is_file()
    flattened = {
        str(page.relative_to(tmp_path)): lines
        for page in sorted(tmp_path.rglob("*.html"))
        if (lines := unrendered_list_items(page.read_text()))
    }
    assert not flattened, f"list items shown as text (a list item needs a blank line after a nested block): {flattened}"


def unrendered_list_items(html: str) -> list[str]:
    """The lines of a built page, code left out, that begin with a list marker: a list that Markdown read as the
    lazy continuation of a paragraph (after a nested list or an indented table), which strict mode lets through."""
    prose = re.sub(r"<pre\b.*?</pre>", "", html, flags=re.S)
    return re.findall(r"^(?:<p>)?[ \t]*(?:[-*+]|\d+\.) .{0,60}", prose, flags=re.M)


def test_the_list_finder_sees_dashes_left_as_text_and_not_rendered_lists_or_code():
    html = (
        "<p>Batches are drawn in order.\n- <strong>loss</strong>: a name</p>\n<ul>\n<li>a real item</li>\n</ul>\n"
        "<p>- a paragraph of one</p>\n<pre><code>- in code\n1. also code\n</code></pre>\n<p>3 - 2 is 1</p>\n"
    )
    assert unrendered_list_items(html) == ["- <strong>loss</strong>: a name</p>", "<p>- a paragraph of one</p>"]


def test_the_readme_is_a_front_door_of_fewer_than_200_lines():
    lines = README.read_text().splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines: move reference text into docs/"


def test_the_readme_gives_the_three_commands_in_one_block_in_order():
    blocks = [[line.strip() for line in block.splitlines()] for block in fenced_blocks(README.read_text())]
    for lines in blocks:
        found = [
            next((index for index, line in enumerate(lines) if line.startswith(command)), None)
            for command in THREE_COMMANDS
        ]
        if None not in found and found == sorted(found):
            return
    pytest.fail(f"no fenced block of README.md holds {', '.join(THREE_COMMANDS)} in this order")


def test_the_readme_installs_pytorch_s_cpu_build_before_devicebench():
    """Left to `pip install -e`, PyPI's torch is a CUDA build: gigabytes a machine without a GPU cannot use. The
    line is the one `devicebench check` gives such a machine."""
    from devicebench.host import CPU_INSTALL  # imports torch: only this test needs it

    for markdown in (README, REPOSITORY / "docs" / "index.md"):
        (block,) = [block for block in fenced_blocks(markdown.read_text()) if THREE_COMMANDS[1] in block]
        lines = [line.strip() for line in block.splitlines()]
        assert lines[0].split("#")[0].strip() == CPU_INSTALL and lines[1].startswith(THREE_COMMANDS[0]), markdown


def test_every_relative_link_of_the_readme_points_to_a_file_that_exists():
    links = relative_links(README.read_text())
    assert links, "README.md links to no page of docs/"
    missing = [link for link in links if not (REPOSITORY / link.split("#")[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_link_finder_sees_links_and_images_and_leaves_out_code_and_urls():
    markdown = (
        "See [a](docs/a.md#part), ![b](docs/b.png) and [c](https://example.com), [d](#here), "
        "[e](mailto:x@example.com).\n\n```bash\n[f](nowhere.md)\n```\n"
    )
    assert relative_links(markdown) == ["docs/a.md#part", "docs/b.png"]


DOCS = REPOSITORY / "docs"
MOST_MENU_ENTRIES = 5  # the theme's top menu stays one line from 1000 px up: 17 entries took 4 lines at 1280 px
NARROW_PAGE_COLUMNS = 70  # the code a page shows without scrolling in an 800-px window (screenshots: about 70)


def nav_pages(entries: list) -> list[str]:
    """The pages of a MkDocs nav, sections opened, in order."""
    pages = []
    for entry in entries:
        (target,) = entry.values()
        pages += nav_pages(target) if isinstance(target, list) else [target]
    return pages


def test_the_top_menu_is_a_few_sections_that_hold_every_page():
    yaml = pytest.importorskip("yaml", reason="reading mkdocs.yml needs PyYAML, which MkDocs brings")
    nav = yaml.safe_load((REPOSITORY / "mkdocs.yml").read_text())["nav"]
    assert len(nav) <= MOST_MENU_ENTRIES, [next(iter(entry)) for entry in nav]
    pages = nav_pages(nav)
    assert sorted(pages) == sorted(path.name for path in DOCS.glob("*.md")) and len(set(pages)) == len(pages)


def test_the_commands_on_the_front_page_fit_a_narrow_window_comments_included():
    long_lines = [
        line
        for block in fenced_blocks((DOCS / "index.md").read_text())
        for line in block.splitlines()
        if len(line) > NARROW_PAGE_COLUMNS
    ]
    assert not long_lines, f"docs/index.md: cut off at 800 px; give comments a line of their own: {long_lines}"


def test_every_skip_message_names_only_files_in_the_repository():
    """A skip reason is read where the tests ran, often a fresh clone: a page it names must be there, in the
    repository, at the root or under docs/ (one named a design note kept outside it)."""
    named = {
        (test.name, name)
        for test in (REPOSITORY / "tests").glob("*.py")
        for line in test.read_text().splitlines()
        if "skip" in line
        for name in re.findall(r"[\w./-]+\.md\b", line)
    }
    missing = sorted(
        (test, name) for test, name in named if not any((folder / name).is_file() for folder in (REPOSITORY, DOCS))
    )
    assert not missing, f"skip messages name files that are not in the repository: {missing}"
