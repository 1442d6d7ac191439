"""What a tab shows after a cell's IOPub messages: outputs and widget states, as a page folds them.

The outputs are folded the way JupyterLab's output area folds them
(:class:`ipykernel_ext.server.outputs.fold.CellOutputs`, ``update_display_data`` replacing
by ``display_id``); each widget's state is the merge of its ``update``/``echo_update``
messages in order (later keys win, buffers at their paths), as ipywidgets' models apply
them; other comm messages are kept in order per comm. The rate tests compare this view of
what a tab received with what the kernel sent.

A page acts on a widget's *changes*, not only its final state: each key's change events
(Backbone's ``set`` fires one only where the new value differs from the current one) are
kept in :attr:`TabView.changes`, and :func:`sees_every_change` says whether a merged delivery
showed the page every change it acts on: a subsequence of full delivery's changes, ending on
the same value, that keeps every command (a value then reset to ``None``) and every pulse (a
value then set back to the one before it).
"""

from __future__ import annotations

import json
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
        #: each widget key's values, as the page's change events see them
        self.changes: dict[tuple[str, str], list[str]] = {}
        #: each widget key's last write: the index of the state update that set it last
        self.last_write: dict[tuple[str, str], int] = {}
        self._updates = 0
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
                    self._changed(comm_id, data, msg.get("buffers") or [])
                else:
                    self.custom.setdefault(comm_id, []).append(data)
            else:
                self.cell.apply(msg_type, content)

    def _changed(self, comm_id: str, data: dict[str, Any], buffers: list[Any]) -> None:
        """Record the change events of one state update (a key's value is its JSON with the
        bytes of the buffers under it: what the page's model holds)."""
        self._updates += 1
        paths = data.get("buffer_paths") or []
        keys = set(data["state"]) | {path[0] for path in paths if path}
        for key in keys:
            self.last_write[(comm_id, key)] = self._updates
            bufs = [
                [path, bytes(buf).hex()]
                for path, buf in zip(paths, buffers, strict=False)
                if path and path[0] == key
            ]
            value = json.dumps([data["state"].get(key), bufs], sort_keys=True)
            seen = self.changes.setdefault((comm_id, key), [])
            if not seen or seen[-1] != value:
                seen.append(value)

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return self.cell.to_nbformat()

    def text(self, name: str = "stdout") -> str:
        return "".join(
            o["text"] for o in self.outputs if o["output_type"] == "stream" and o["name"] == name
        )

    def count(self, msg_type: str) -> int:
        return sum(1 for m in self.messages if m["msg_type"] == msg_type)

    def comm_messages(self, comm_id: str) -> int:
        """How many ``comm_msg`` of ``comm_id`` the tab got (merged ones count once)."""
        return sum(
            1
            for m in self.messages
            if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id
        )


#: a key's change to ``None`` as :attr:`TabView.changes` holds it
NONE = json.dumps([None, []])


def must_see(full: list[str], pulses: bool = True) -> set[int]:
    """The changes of one key (full delivery's) that the page acts on even when a later one
    follows: a command (a value, then ``None``) and (``pulses``) a pulse (a value, then the
    one before)."""
    return {
        i
        for i in range(len(full) - 1)
        if (full[i + 1] == NONE and full[i] != NONE)
        or (pulses and i > 0 and full[i + 1] == full[i - 1])
    }


def sees_every_change(full: TabView, merged: TabView, pulses: bool = True) -> list[str]:
    """Where the page that got ``merged`` missed a change it acts on, against ``full`` (every
    message): for each widget key, its changes must be a subsequence of full delivery's,
    ending on the same value and keeping every change of :func:`must_see`. Empty: none."""
    missed = []
    for name, changes in full.changes.items():
        got = merged.changes.get(name, [])
        if not _embeds(got, changes, must_see(changes, pulses)) or got[-1:] != changes[-1:]:
            missed.append(f"{name}: {changes} got {got}")
    missed.extend(f"{name}: not sent" for name in merged.changes.keys() - full.changes.keys())
    return missed


def _embeds(got: list[str], full: list[str], required: set[int]) -> bool:
    """Whether ``got`` is ``full`` with only changes outside ``required`` left out."""
    # reach[j]: got[:j] matches a prefix of full read so far, no required change skipped
    reach = [True] + [False] * len(got)
    for i, value in enumerate(full):
        for j in range(len(got), 0, -1):
            reach[j] = (reach[j - 1] and got[j - 1] == value) or (reach[j] and i not in required)
        reach[0] = reach[0] and i not in required
    return reach[len(got)]


def write_order_kept(full: TabView, merged: TabView) -> list[str]:
    """Where the page that got ``merged`` ends with two keys of different models last written
    in the other order than with every message (``full``): a frontend link between them
    (``jslink``) would end elsewhere. Empty: none."""
    keys = sorted(full.last_write)
    return [
        f"{a} and {b}"
        for i, a in enumerate(keys)
        for b in keys[i + 1 :]
        if a[0] != b[0]
        and (full.last_write[a] < full.last_write[b])
        != (merged.last_write.get(a, -1) < merged.last_write.get(b, -1))
    ]
