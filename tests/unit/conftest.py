"""The unit layer: in-process, seconds in all (``python -m pytest tests/unit``).

No kernel process and no server here: real zmq socket pairs in one process, and fake
websockets (plain callbacks) where a websocket would be. Every test in this directory is
marked ``unit``, so ``python -m pytest -m unit`` selects the same tests from the top.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.unit)
