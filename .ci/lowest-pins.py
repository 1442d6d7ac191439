"""Print pip constraints pinning every runtime dependency to its declared floor.

``python .ci/lowest-pins.py`` reads ``[project] dependencies`` from pyproject.toml and turns
each ``name>=X[,<Y]`` into ``name==X``, for the lowest-versions leg of ``.ci/run``. A
dependency without a ``>=`` floor is an error: an untested floor is no floor.
``--check`` instead compares the installed versions with those floors (exit 1 on a mismatch),
so the leg cannot pass on versions pip chose differently.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import version
from pathlib import Path

import tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$")


def floors() -> dict[str, str]:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    pins: dict[str, str] = {}
    for dep in deps:
        match = REQUIREMENT.match(dep.split(";")[0])
        if not match:
            sys.exit(f"cannot read the requirement {dep!r}")
        name, spec = match.groups()
        low = [s.strip()[2:].strip() for s in spec.split(",") if s.strip().startswith(">=")]
        if len(low) != 1:
            sys.exit(f"{dep!r}: no single '>=' floor to test")
        pins[name] = low[0]
    return pins


def _release(text: str) -> tuple[int, ...]:
    # "27.3" and "27.3.0" are the same release (PEP 440 pads with zeros).
    parts = [int(p) for p in text.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def main() -> int:
    pins = floors()
    if sys.argv[1:] == ["--check"]:
        wrong = {n: (v, version(n)) for n, v in pins.items() if _release(version(n)) != _release(v)}
        for name, (floor, got) in wrong.items():
            print(f"{name}: {got} installed, floor {floor}", file=sys.stderr)
        for name, floor in pins.items():
            print(f"{name}=={version(name)} (floor {floor})")
        return 1 if wrong else 0
    for name, floor in pins.items():
        print(f"{name}=={floor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
