"""The benchmark runner (``python -m benchmarks``): every benchmark listed, unknown names refused.

No benchmark is run here (each takes minutes): the runner's listing, its errors, each
benchmark's ``--help`` (its module imported, or its burst preset built, and its options
parsed next to the common ones), bad conditions and loads refused with a clear message,
and, read from the source, what each module gives the runner.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
NOT_BENCHMARKS = {"__init__", "__main__", "plot", "runner", "trials"}
#: Read from the folder, not from the runner, so a new benchmark cannot be left out.
MODULES = sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem not in NOT_BENCHMARKS)
#: The burst scenario's named runs, read from the source for the same reason.
PRESETS = sorted(
    key.value
    for node in ast.walk(ast.parse((BENCHMARKS / "burst" / "presets.py").read_text()))
    if isinstance(node, ast.Dict)
    for key in node.keys
    if isinstance(key, ast.Constant) and isinstance(key.value, str)
)
BENCHMARK_NAMES = sorted([*MODULES, *PRESETS])


def runner(*args: str) -> subprocess.CompletedProcess[str]:
    return python("-m", "benchmarks", *args)


def python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def top_level_names(path: Path) -> set[str]:
    """The functions, classes and assigned names a module defines at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                names.update(t.id for t in elts if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (function-level imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_list_names_every_benchmark_module() -> None:
    result = runner("--list")
    assert result.returncode == 0, result.stderr
    listed = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    assert listed == BENCHMARK_NAMES
    # The five burst benchmarks are one scenario, and still named each.
    assert {"burst", "iopub_burst", "through_server", "cluster_burst", "iopub_pause"} <= set(
        PRESETS
    )
    for line in result.stdout.splitlines():
        assert len(line.split(maxsplit=1)) == 2, f"no description: {line!r}"


def test_unknown_benchmark_is_an_error() -> None:
    result = runner("no_such_benchmark", "--quick")
    assert result.returncode != 0
    assert "unknown benchmark 'no_such_benchmark'" in result.stderr
    assert "--list" in result.stderr


@pytest.mark.parametrize("name", MODULES)
def test_every_benchmark_gives_the_runner_what_it_asks(name: str) -> None:
    # What the runner asks of a module (benchmarks/runner.py); no main() of its own.
    names = top_level_names(BENCHMARKS / f"{name}.py")
    assert {"run", "TRIALS", "QUICK_TRIALS"} <= names
    assert "main" not in names


@pytest.mark.parametrize("name", BENCHMARK_NAMES)
def test_every_benchmark_parses_its_options(name: str) -> None:
    # Imports the module and builds its parser: an option clashing with a common one fails.
    result = runner(name, "--help")
    assert result.returncode == 0, result.stderr
    assert f"usage: python -m benchmarks {name}" in result.stdout
    assert "common options" in result.stdout


def test_a_benchmark_file_runs_through_the_runner() -> None:
    result = python("benchmarks/comm_echo.py", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: python -m benchmarks comm_echo" in result.stdout


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--conditions", "nope", "unknown condition 'nope'"),
        ("--conditions", "block:soon", "unknown condition 'block:soon'"),
        ("--loads", "grid:x", "a load is grid:N or comms:N"),
        ("--loads", "comms:0", "a load is grid:N or comms:N"),
        ("--buttons", "1000,many", "a load is grid:N or comms:N"),
    ],
)
def test_a_bad_condition_or_load_is_refused_before_any_kernel(
    option: str, value: str, message: str
) -> None:
    result = runner("burst", option, value)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_trials_does_not_import_the_runner() -> None:
    # The runner imports benchmarks/trials.py; the other way round would be a cycle.
    assert not imported_modules(BENCHMARKS / "trials.py") & {
        "benchmarks.runner",
        "benchmarks.__main__",
    }
    result = python(
        "-c",
        "import sys, benchmarks.trials; "
        "assert 'benchmarks.runner' not in sys.modules, 'trials imported the runner'",
    )
    assert result.returncode == 0, result.stderr
