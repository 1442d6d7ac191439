"""Which requests' outputs an ipywidgets ``Output`` widget is capturing right now.

An ipywidgets ``Output`` widget (model ``OutputModel``, module ``@jupyter-widgets/output``)
captures every output whose parent ``msg_id`` is the ``msg_id`` in its state: ``with out:``
in the kernel sets it to the running request's id (and back to ``""`` on exit), and a
frontend may set it too. The tab that shows the widget routes those outputs into the widget
(a message hook on that ``msg_id``), so they are the widget's, never the cell's. This
tracker reads the state changes from the comm messages seen on IOPub (the kernel's) and on
shell (a client's), in the order they pass, so it knows for each output message whether it is
captured: the kernel publishes the ``msg_id`` update before the captured outputs and the reset
after them, on the same IOPub stream.
"""

from __future__ import annotations

from typing import Any

#: ``_model_name`` of ipywidgets' Output widget.
OUTPUT_MODEL = "OutputModel"

#: The comm target of every ipywidgets model.
WIDGET_TARGET = "jupyter.widget"


class OutputCapture:
    """Output widgets by comm id and the request each one captures (see the module)."""

    def __init__(self) -> None:
        self._capturing: dict[str, str] = {}  # comm_id -> captured msg_id ("" = none)

    def on_comm_message(self, msg_type: str, content: dict[str, Any]) -> None:
        """Follow one ``comm_open``/``comm_msg``/``comm_close`` (either direction)."""
        comm_id = content.get("comm_id")
        if not comm_id:
            return
        if msg_type == "comm_close":
            self._capturing.pop(comm_id, None)
            return
        data = content.get("data") or {}
        state = data.get("state") or {}
        if msg_type == "comm_open":
            if content.get("target_name", WIDGET_TARGET) != WIDGET_TARGET:
                return
            if state.get("_model_name") != OUTPUT_MODEL:
                return
            self._capturing[comm_id] = state.get("msg_id") or ""
        elif (
            msg_type == "comm_msg"
            and comm_id in self._capturing
            # "echo_update": ipywidgets 8's echo of a frontend's update to the others
            and data.get("method") in ("update", "echo_update")
            and "msg_id" in state
        ):
            self._capturing[comm_id] = state.get("msg_id") or ""

    def captures(self, parent_msg_id: str | None) -> bool:
        """Whether outputs with this parent go to an Output widget, not to their cell."""
        return bool(parent_msg_id) and parent_msg_id in self._capturing.values()

    def clear(self) -> None:
        """The kernel restarted: its widgets are gone."""
        self._capturing.clear()
