"""The static checks of .ci/run, run by the README's test command too: mypy and ruff's format.

``python -m mypy`` with pyproject.toml's ``[tool.mypy]`` (the package, ``harness/``,
``benchmarks/`` and the tests; call sites checked against annotations everywhere), and
``ruff format --check`` over the package, the tests, ``harness/`` and ``benchmarks/``. Each is
skipped, with the reason, where the tool is not installed (``pip install -e '.[test]'`` brings
both). mypy keeps its cache in ``.mypy_cache`` (git-ignored): a first run takes seconds, the
next ones well under one.
"""

from __future__ import annotations

import importlib.util
import os
import re
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


#: A ``type: ignore`` as the house writes it: the error code, then why (CONTRIBUTING.md).
EXPLAINED_IGNORE = re.compile(r"type: ignore\[[\w, -]+\]  # \S")
TYPE_CHECKED = ["ipykernel_ext", "harness", "benchmarks", "tests"]


def unexplained_ignores(source: str) -> list[int]:
    """The lines of ``source`` with a ``type: ignore`` that lacks its code or its reason."""
    return [
        n
        for n, line in enumerate(source.splitlines(), 1)
        if "type: ignore" in line and not EXPLAINED_IGNORE.search(line)
    ]


def test_every_type_ignore_names_its_code_and_reason() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for folder in TYPE_CHECKED
        for path in sorted((ROOT / folder).rglob("*.py"))
        # This file's own lines quote the comment (to state and test the rule): no ignores.
        if path != Path(__file__).resolve() and (lines := unexplained_ignores(path.read_text()))
    }
    assert not found, f"give each its code and a reason (`# type: ignore[code]  # why`): {found}"


def test_the_ignore_rule_sees_a_bare_or_unexplained_ignore() -> None:
    assert unexplained_ignores("x = f()  # type: ignore\ny = g()  # type: ignore[arg-type]\n") == [
        1,
        2,
    ]
    assert unexplained_ignores("z = h()  # type: ignore[misc]  # a mixin: the base has it\n") == []
