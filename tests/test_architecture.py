"""The layers of docs/architecture.md hold: `lint-imports` keeps the contracts of pyproject.toml, and no module of
src/ imports itself back through others (a package's __init__ and its modules included)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# import-linter's graph library, a dev tool: a machine without it (the GPU image) runs the other tests
grimp = pytest.importorskip("grimp")


ROOT = Path(__file__).resolve().parent.parent


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm): each is an import cycle."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = lowest[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                lowest[module] = min(lowest[module], lowest[imported])
            elif imported in on_stack:
                lowest[module] = min(lowest[module], index[imported])
        if lowest[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_no_module_of_devicebench_imports_itself_back():
    graph = grimp.build_graph("devicebench")  # type-checking imports too: a cycle there is still a cycle to read
    assert len(graph.modules) > 50  # the whole package, not an empty graph that has no cycle either
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_a_package_and_its_module_importing_each_other():
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.data", "pkg.data.images", "pkg.report"):
        graph.add_module(module)
    graph.add_import(importer="pkg.data", imported="pkg.data.images")  # data/__init__ re-exports a reader
    graph.add_import(importer="pkg.report", imported="pkg.data")
    assert import_cycles(graph) == []
    graph.add_import(importer="pkg.data.images", imported="pkg.data")  # the reader imports its package back
    assert import_cycles(graph) == [["pkg.data", "pkg.data.images"]]


def lint_imports() -> subprocess.CompletedProcess:
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if command is None:
        pytest.fail("lint-imports is missing: pip install -e '.[dev]' installs import-linter")
    return subprocess.run([command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_import_contracts_of_pyproject_are_kept():
    outcome = lint_imports()
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    assert "Contracts: 8 kept, 0 broken." in outcome.stdout


def test_lint_imports_fails_when_a_lower_layer_imports_a_higher_one(tmp_path):
    """The contract bites: a copy of the package whose host.py (near the bottom) imports the runner is refused."""
    copy = tmp_path / "devicebench"
    shutil.copytree(ROOT / "src" / "devicebench", copy, ignore=shutil.ignore_patterns("__pycache__"))
    host = copy / "host.py"
    host.write_text(host.read_text() + "\nfrom devicebench import runner  # noqa: E402, F401\n")
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    outcome = subprocess.run(
        [command, "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    assert "devicebench.host is not allowed to import devicebench.runner" in outcome.stdout


# --- the house's size rules: the machines keep them, not goodwill -------------------------------------------------

SOURCE = ROOT / "src" / "devicebench"
DATA_TABLES = {"results/datasheets.py"}  # a catalog of published figures: its length is its rows, not its logic
MOST_LINES = 500
MOST_FUNCTION_LINES = 60
# Where the function limit holds: the code a newcomer reads first to follow a run (CLI commands, whose length is
# their typer option declarations, are not in it)
SHORT_FUNCTIONS = ("runner.py", "planning.py", "budget.py", "session_choices.py", "engine/")


def modules() -> list[str]:
    return sorted(str(path.relative_to(SOURCE)) for path in SOURCE.rglob("*.py"))


def test_no_source_file_is_over_500_lines_but_the_data_tables():
    long = {name: len((SOURCE / name).read_text().splitlines()) for name in modules()}
    assert {name: lines for name, lines in long.items() if lines > MOST_LINES and name not in DATA_TABLES} == {}


def test_no_function_of_the_run_s_story_is_over_60_lines():
    import ast

    long = []
    for name in modules():
        if not name.startswith(SHORT_FUNCTIONS):
            continue
        for node in ast.walk(ast.parse((SOURCE / name).read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MOST_FUNCTION_LINES:
                    long.append(f"{name}: {node.name} ({lines} lines)")
    assert long == []


def test_every_module_is_named_in_the_architecture_map():
    """docs/architecture.md's "Each module's one job" names each module in its package's paragraph."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Each module's one job", 1)[1]
    paragraphs = {}
    for paragraph in section.split("\n\n"):
        if paragraph.startswith("**Top level.**"):
            paragraphs[""] = paragraph
        elif paragraph.startswith("**`"):
            paragraphs[paragraph[3 : paragraph.index("`", 3)]] = paragraph
    missing = []
    for name in modules():
        package, _, file = name.rpartition("/")
        if f"`{file}`" not in paragraphs.get(f"{package}/" if package else "", ""):
            missing.append(name)
    assert missing == []
