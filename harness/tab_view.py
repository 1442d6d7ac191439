"""What a tab shows after a cell's IOPub messages: outputs and widget states, as a page folds them.

The outputs are folded the way JupyterLab's output area folds them
(:class:`ipykernel_ext.server.outputs.fold.CellOutputs`, ``update_display_data`` replacing
by ``display_id``); each widget's state is the merge of its ``update``/``echo_update``
messages in order (later keys win, buffers at their paths), as ipywidgets' models apply
them; other comm messages are kept in order per comm. The rate tests compare this view of
what a tab received with what the kernel sent.
"""

from __future__ import annotations

from typing import Any

from ipykernel_ext.server.outputs import CellOutputs, output_from_content
from ipykernel_ext.server.websocket import merge_widget_state


class TabView:
    """What a tab shows after the messages of one cell: its outputs, its widgets' states."""

    def __init__(self, iopub: list[dict[str, Any]]) -> None:
        self.cell = CellOutputs(1 << 40)
        self.widgets: dict[str, dict[str, Any]] = {}
        self.buffers: dict[str, list[Any]] = {}
        self.buffer_paths: dict[str, list[Any]] = {}
        self.custom: dict[str, list[Any]] = {}
        self.messages = iopub
        for msg in iopub:
            msg_type, content = msg["msg_type"], msg["content"]
            if msg_type == "update_display_data":
                display_id = content["transient"]["display_id"]
                self.cell.replace_display(display_id, output_from_content(msg_type, content))
            elif msg_type == "comm_msg":
                data = content["data"]
                comm_id = content["comm_id"]
                if data.get("method") in ("update", "echo_update"):
                    old = {
                        "state": self.widgets.get(comm_id, {}),
                        "buffer_paths": self.buffer_paths.get(comm_id, []),
                    }
                    merged, self.buffers[comm_id] = merge_widget_state(
                        old, self.buffers.get(comm_id, []), data, msg.get("buffers") or []
                    )
                    self.widgets[comm_id] = merged["state"]
                    self.buffer_paths[comm_id] = merged.get("buffer_paths", [])
                else:
                    self.custom.setdefault(comm_id, []).append(data)
            else:
                self.cell.apply(msg_type, content)

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return self.cell.to_nbformat()

    def text(self, name: str = "stdout") -> str:
        return "".join(
            o["text"] for o in self.outputs if o["output_type"] == "stream" and o["name"] == name
        )

    def count(self, msg_type: str) -> int:
        return sum(1 for m in self.messages if m["msg_type"] == msg_type)
