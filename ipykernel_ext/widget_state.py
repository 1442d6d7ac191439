"""Widget state snapshot (stub, being written)."""
from __future__ import annotations
from typing import Any


def build_widget_state_reply(content: Any) -> tuple[dict[str, Any], list[Any]]:
    return {"status": "ok", "states": {}, "buffer_paths": [], "missing": []}, []
