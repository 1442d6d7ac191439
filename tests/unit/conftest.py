"""The unit layer: in-process, seconds in all (``python -m pytest tests/unit``).

No kernel process and no server here: real zmq socket pairs and real Sessions in one
process, and plain callbacks where a websocket would be. Every test in this directory is
marked ``unit`` (by tests/conftest.py), so ``python -m pytest -m unit`` selects the same tests
from the top.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def widgets() -> Iterator[list[Any]]:
    """Two live ipywidgets in this process: a slider (value 7) and an Image with a buffer."""
    w = pytest.importorskip("ipywidgets")
    made = [w.IntSlider(value=7), w.Image(value=b"\x89PNG in-process", format="png")]
    yield made
    for widget in made:
        widget.close()
