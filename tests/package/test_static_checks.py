"""The static checks of .ci/run, run by the README's test command too: mypy and ruff's format.

``python -m mypy`` with pyproject.toml's ``[tool.mypy]`` (the package, ``harness/`` and
``benchmarks/``; call sites checked against annotations everywhere), and
``ruff format --check`` over the package, the tests, ``harness/`` and ``benchmarks/``. Each is
skipped, with the reason, where the tool is not installed (``pip install -e '.[test]'`` brings
both). mypy keeps its cache in ``.mypy_cache`` (git-ignored): a first run takes seconds, the
next ones well under one.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What .ci/run formats and lints (CONTRIBUTING.md, "Style and changes").
FORMATTED = ["ipykernel_ext", "tests", "benchmarks", "harness"]
#: A hang guard under pytest's own timeout (pyproject.toml), never a verdict on speed.
HANG_GUARD_S = 110


def run_tool(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(
            f"{module} is not installed (the test extra brings it: pip install -e '.[test]')"
        )
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        # Plain text in the assertion message, whatever the terminal (ruff reads NO_COLOR).
        env={**os.environ, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )


def test_mypy_is_clean() -> None:
    done = run_tool("mypy", "--no-color-output")
    assert done.returncode == 0, f"python -m mypy:\n{done.stdout}{done.stderr}"


def test_ruff_format_is_clean() -> None:
    done = run_tool("ruff", "format", "--check", *FORMATTED)
    assert done.returncode == 0, (
        f"ruff format --check (ruff format {' '.join(FORMATTED)} fixes it):\n"
        f"{done.stdout}{done.stderr}"
    )
