"""The benchmark runner (``python -m benchmarks``): every benchmark listed, unknown names refused.

No benchmark is run here (each takes minutes); only the runner's listing and its errors.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_BENCHMARKS = {"__init__", "__main__", "harness", "runner"}


def runner(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_list_names_every_benchmark_module() -> None:
    # Read from the folder, not from the runner, so a new benchmark cannot be left out.
    modules = {p.stem for p in (ROOT / "benchmarks").glob("*.py")} - NOT_BENCHMARKS
    result = runner("--list")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[0] for line in result.stdout.splitlines() if line.strip()}
    assert listed == modules
    for line in result.stdout.splitlines():
        assert len(line.split(maxsplit=1)) == 2, f"no description: {line!r}"


def test_unknown_benchmark_is_an_error() -> None:
    result = runner("no_such_benchmark", "--quick")
    assert result.returncode != 0
    assert "unknown benchmark 'no_such_benchmark'" in result.stderr
    assert "--list" in result.stderr
