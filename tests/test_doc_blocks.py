"""Every code block of the README and of docs/ runs as written, or is marked a fragment that says why it is not run.

A block's language says what running it means: the `python` blocks of a page run in order in one namespace, in a
folder of their own; each line of a `bash` block, and each `$ ` line of a `console` block, runs in a shell; a `toml`
block parses; a `text` block is output shown, with nothing to run. A block a test cannot run (it installs, needs a GPU,
a network or files of yours, or trains for minutes) has `<!-- fragment: WHY -->` on the line before its fence, which
neither GitHub nor MkDocs shows; its `devicebench` commands are still parsed by the command line itself, so that a
flag renamed or a value no longer accepted fails here, and the scripts it runs must exist. The fragments are a
ratchet (MOST_FRAGMENTS): a new one replaces an old one.

    python -m pytest tests/test_doc_blocks.py -q -p no:cacheprovider -m "slow or not slow"
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the 3.10-only dependency of pyproject.toml
    import tomli as tomllib

REPOSITORY = Path(__file__).resolve().parent.parent
PAGES = (REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("*.md")))
KINDS = ("python", "bash", "console", "toml", "text")
FRAGMENT = re.compile(r"<!-- fragment: (?P<why>[^\n]+?) -->\n\Z")
FEWEST_WORDS_OF_A_REASON = 4
MOST_FRAGMENTS = 29  # today's: lower it when a fragment becomes a block that runs, never raise it
COMMAND_LIMIT_S = 300


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    kind: str
    text: str
    fragment: str | None  # why it is not run; None: it runs

    def __str__(self) -> str:
        return f"{self.page.relative_to(REPOSITORY)}:{self.line}"


def blocks(page: Path, markdown: str | None = None) -> list[Block]:
    """The fenced blocks of `page` (or of `markdown`, said to be that page's text)."""
    markdown = page.read_text() if markdown is None else markdown
    found = []
    for match in re.finditer(r"^```(?P<kind>[^\n]*)\n(?P<text>.*?)^```", markdown, flags=re.M | re.S):
        before = markdown[: match.start()]
        marker = FRAGMENT.search(before)
        found.append(
            Block(page, before.count("\n") + 1, match["kind"].strip(), match["text"], marker and marker["why"])
        )
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]


def commands(block: Block) -> list[str]:
    """The shell commands of a `bash` or `console` block: a `\\` at a line's end joins the next line; comments and
    a console's output are left out."""
    lines = block.text.splitlines()
    if block.kind == "console":
        lines = [line.removeprefix("$ ") for line in lines if line.startswith("$ ")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [line.strip() for line in joined.splitlines() if shlex.split(line, comments=True)]


def without_environment(words: list[str]) -> list[str]:
    """A command's words after its `NAME=value` prefixes."""
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    return words


def test_every_block_says_what_it_is_and_every_fragment_why():
    unknown = [f"{block} ```{block.kind}" for block in ALL_BLOCKS if block.kind not in KINDS]
    assert not unknown, f"a block's language is one of {KINDS} (`text` for output shown): {unknown}"
    fragments = [block for block in ALL_BLOCKS if block.fragment is not None]
    terse = [str(block) for block in fragments if len(block.fragment.split()) < FEWEST_WORDS_OF_A_REASON]
    assert not terse, f"a fragment says why it is not run, in a few words: {terse}"
    assert not [str(block) for block in fragments if block.kind == "text"], "output is never a fragment"
    assert len(fragments) <= MOST_FRAGMENTS, (
        f"{len(fragments)} fragments, more than {MOST_FRAGMENTS}: make the new block one that runs "
        f"(tiny settings, the doc's own snippet small): {[str(block) for block in fragments]}"
    )


def test_the_fragment_finder_reads_the_marker_only_on_the_line_before_a_fence():
    markdown = (
        "<!-- fragment: needs a GPU and its driver -->\n```bash\nx\n```\n\n"
        "<!-- fragment: a line too far -->\n\n```python\ny\n```\n"
    )
    found = [(block.line, block.kind, block.fragment) for block in blocks(REPOSITORY / "README.md", markdown)]
    assert found == [(2, "bash", "needs a GPU and its driver"), (8, "python", None)]


def test_the_command_reader_joins_continued_lines_and_leaves_out_comments_and_output():
    page = REPOSITORY / "README.md"
    bash = Block(page, 1, "bash", "# a comment\ndevicebench run a \\\n  --devices cpu   # why\n\nls\n", None)
    assert commands(bash) == ["devicebench run a    --devices cpu   # why", "ls"]
    console = Block(page, 1, "console", "$ devicebench devices\nThis machine\n$ ls -l\n", None)
    assert commands(console) == ["devicebench devices", "ls -l"]


# --- fragments: their devicebench commands parse, their scripts exist --------------------------------------------


def parsed(words: list[str]) -> None:
    """Parse `devicebench WORDS` as the command line does, without running the command: an unknown command or
    flag, or a value its option refuses, raises click's UsageError or BadParameter."""
    import typer.main
    from typer.core import TyperGroup

    from devicebench.cli import app
    from devicebench.cli.app import click  # the click the CLI is built on (typer's own, from typer 0.29)

    group = typer.main.get_command(app)
    root = click.Context(group, info_name="devicebench")
    command, path, words = group, ["devicebench"], words[1:]
    while isinstance(command, TyperGroup):
        name, words = words[0], words[1:]
        command = command.get_command(root, name)
        if command is None:
            raise click.ClickException(f"no command {name!r} in {' '.join(path)}")
        path.append(name)
    command.make_context(" ".join(path), words, parent=root)


FRAGMENTS = [block for block in ALL_BLOCKS if block.fragment is not None and block.kind in ("bash", "console")]


@pytest.mark.parametrize("block", FRAGMENTS, ids=str)
def test_a_fragment_s_commands_parse_and_its_scripts_exist(block):
    from devicebench.cli.app import click

    for command in commands(block):
        for part in re.split(r"&&|\|", command):
            words = without_environment(shlex.split(part, comments=True))
            if words[:1] == ["devicebench"]:
                try:
                    parsed(words)
                except click.ClickException as error:
                    pytest.fail(f"{block}: `{part.strip()}`: {error.format_message()}")
            elif words[:1] == ["python"] and words[1:2] and words[1].endswith(".py"):
                assert (REPOSITORY / words[1]).is_file(), f"{block}: {words[1]} is not in the repository"


def test_the_parser_refuses_what_the_command_line_refuses():
    from devicebench.cli.app import click

    parsed(["devicebench", "run", "mnist-cnn2", "--devices", "cpu", "--epochs", "2"])
    parsed(["devicebench", "data", "fetch", "cifar10"])
    for wrong in (["run", "--no-such-flag"], ["run", "--epochs", "two"], ["no-such-command"]):
        with pytest.raises(click.ClickException):
            parsed(["devicebench", *wrong])


# --- the blocks that run ----------------------------------------------------------------------------------------


def test_the_toml_blocks_parse():
    for block in ALL_BLOCKS:
        if block.kind == "toml":
            tomllib.loads(block.text)


# a page whose blocks train a seed's model: 17 s of CPU time for python.md's 3 epochs of 10 steps of mnist-cnn2
TRAINING_PAGES = ("python.md",)
PYTHON_PAGES = [
    pytest.param(page, id=page.name, marks=[pytest.mark.slow] if page.name in TRAINING_PAGES else [])
    for page in sorted({block.page for block in ALL_BLOCKS if block.kind == "python" and block.fragment is None})
]


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_a_page_s_python_blocks_run_in_order(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # what a block writes stays here; the results database is the sandbox's
    namespace: dict = {"__name__": "__doc_block__"}
    for block in blocks(page):
        if block.kind == "python" and block.fragment is None:
            exec(compile(block.text, str(block), "exec"), namespace)  # the docs' own code, as a reader runs it


SHELL_BLOCKS = [block for block in ALL_BLOCKS if block.kind in ("bash", "console") and block.fragment is None]


@pytest.mark.slow
@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=str)
def test_a_shell_block_runs_as_written(block, tmp_path):
    for command in commands(block):
        ran = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=COMMAND_LIMIT_S
        )
        assert ran.returncode == 0, f"{block}: `{command}` exited {ran.returncode}:\n{ran.stdout}\n{ran.stderr}"
