"""After a mid-cell snapshot: the frontend brought up to date once the cell is over.

A value the cell changes between the snapshot sent mid-cell (on the shell-channel thread, by
:class:`~ipykernel_ext.kernel.busy.answers.BusyAnswers`) and the frontend registering the models
can be dropped by the frontend: it ignores an ``update`` for a model it does not know yet. So when
the frontend closes the control comm, the kernel compares, on the main thread once it is free, what
it sent with what the widgets hold, and sends an ``update`` for each difference (through the
widget's own ``send_state``) and a ``comm_close`` for each model closed meanwhile.

:func:`with_buffers` makes a snapshot comparable; :class:`WidgetReconcile` does the compare.
"""

from __future__ import annotations

from typing import Any

from ...protocol import comm_topic
from .snapshot import build_widget_state_reply, widget_module


def with_buffers(
    states: dict[str, Any], buffer_paths: list[list[Any]], buffers: list[Any]
) -> dict[str, Any]:
    """``states`` with each binary buffer's bytes put back under its top-level state key.

    Enough to compare two snapshots key by key (a nested buffer marks its whole key).
    """
    merged = {model_id: {"state": dict(entry["state"])} for model_id, entry in states.items()}
    for path, buffer in zip(buffer_paths, buffers, strict=True):
        model_id, _, key, *rest = path
        state = merged[model_id]["state"]
        previous = state.get(key) if rest else None
        marker = bytes(buffer)
        state[key] = (previous, tuple(rest), marker) if rest else marker
    return merged


class WidgetReconcile:
    """Sends, on the main thread, what changed in the widgets since a snapshot was sent.

    ``session`` and ``iopub_socket`` are the kernel's (a closed model's ``comm_close`` is sent
    through them); ``log`` gets a line when anything was sent.
    """

    def __init__(self, session: Any, iopub_socket: Any, log: Any) -> None:
        self.session = session
        self.iopub_socket = iopub_socket
        self.log = log

    def reconcile(self, sent: dict[str, Any]) -> int:
        """On the main thread: bring the frontend up to date with what changed since ``sent``
        (a snapshot made comparable by :func:`with_buffers`).

        Returns how many messages were sent.
        """
        module = widget_module()
        if module is None:
            return 0
        reply, buffers = build_widget_state_reply({"model_ids": list(sent)}, self.log)
        now = with_buffers(reply["states"], reply["buffer_paths"], buffers)
        instances = module._instances
        count = 0
        for model_id, was in sent.items():
            widget = instances.get(model_id)
            if model_id not in now or widget is None or widget.comm is None:
                if model_id not in now and model_id not in reply["errors"]:
                    self._send_comm_close(model_id)
                    count += 1
                continue
            state, old_state = now[model_id]["state"], was["state"]
            changed = [key for key in state if key not in old_state or state[key] != old_state[key]]
            if changed:
                widget.send_state(changed)
                count += 1
        if count:
            self.log.info("Widget states: %d update(s) sent after a busy reload", count)
        return count

    def _send_comm_close(self, comm_id: str) -> None:
        """Tell frontends that a model they may have built from the snapshot is gone."""
        self.session.send(
            self.iopub_socket,
            "comm_close",
            {"data": {}, "comm_id": comm_id},
            metadata={},
            ident=comm_topic(comm_id),
        )
