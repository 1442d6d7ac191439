"""A cell's IOPub messages as message dicts, and the nbformat outputs a page keeps of them.

For the in-process tests of what the server does with IOPub (the outputs fold, the merge
rules): each builder returns a message as the server reads it (``header``, ``parent_header``,
``metadata``, ``content``, ``buffers``, and ``msg_type`` at the top, as the websocket
clients' dicts have it), with a new ``msg_id``, under the request ``parent`` (a msg_id).
"""

from __future__ import annotations

import itertools
from typing import Any

_ids = itertools.count()


def message(
    msg_type: str, content: dict[str, Any], parent: str = "", buffers: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "header": {"msg_id": f"pub-{next(_ids)}", "msg_type": msg_type},
        "parent_header": {"msg_id": parent} if parent else {},
        "metadata": {},
        "content": content,
        "buffers": buffers or [],
        "msg_type": msg_type,
    }


def stream(text: str, name: str = "stdout", parent: str = "") -> dict[str, Any]:
    return message("stream", {"name": name, "text": text}, parent)


def display(
    plain: str, display_id: str | None = None, parent: str = "", update: bool = False
) -> dict[str, Any]:
    """A display_data (``update``: an update_display_data) of ``plain`` text."""
    transient = {"display_id": display_id} if display_id else {}
    content = {"data": {"text/plain": plain}, "metadata": {}, "transient": transient}
    return message("update_display_data" if update else "display_data", content, parent)


def clear(wait: bool = True, parent: str = "") -> dict[str, Any]:
    return message("clear_output", {"wait": wait}, parent)


def widget_update(
    comm_id: str,
    state: dict[str, Any],
    paths: list[Any] | None = None,
    buffers: list[Any] | None = None,
    parent: str = "",
    method: str = "update",
) -> dict[str, Any]:
    """A widget's state message: ``state`` with its buffers at ``paths``."""
    data = {"method": method, "state": state, "buffer_paths": paths or []}
    return message("comm_msg", {"comm_id": comm_id, "data": data}, parent, buffers)


def S(text: str, name: str = "stdout") -> dict[str, Any]:
    """The stream output a page keeps."""
    return {"output_type": "stream", "name": name, "text": text}


def D(plain: str) -> dict[str, Any]:
    """The display output a page keeps of :func:`display`'s message."""
    return {"output_type": "display_data", "data": {"text/plain": plain}, "metadata": {}}
