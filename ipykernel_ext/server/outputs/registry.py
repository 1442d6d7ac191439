"""The cells of one kernel the server follows and their folded outputs, from the messages that
pass.

A :class:`KernelOutputs` is fed what a server connection sees of one kernel: every
``execute_request`` a client sends (:meth:`~KernelOutputs.on_execute_request`), every IOPub
message (:meth:`~KernelOutputs.on_iopub`), the shell replies and the comm messages clients
send (:meth:`~KernelOutputs.on_shell`), and a restart or death
(:meth:`~KernelOutputs.end_all`). It keeps, per request that names a cell
(``metadata.cellId``, as JupyterLab and Notebook 7 send it), a :class:`FollowedCell`, running
then ended: the cell id, the session that sent it, the notebook path once someone tells it,
and the :class:`~.fold.CellOutputs` folded from that request's IOPub messages. It owns four
things the fold of one cell cannot know:

* the display index: ``display_id`` -> the cells that show it, kernel-wide, as JupyterLab's
  kernel connection keeps it: ``update_display_data`` (from any parent) replaces the display
  in every cell that shows it, and a ``display_data`` with an id already shown updates those
  and is then added as usual;
* capture by an ipywidgets ``Output`` widget (:mod:`.capture`): such outputs are not the cell's;
* the kernel's byte bound: all cells held together stay under ``max_kernel_bytes``; an ended
  cell is let go (oldest first) before a running one is cut, but never one the caller still
  has to write (``keep``): then the running cell is cut, with its note, so a bound never
  drops outputs without saying so (docs/PROTOCOL.md section 6, "What the server follows");
* what the tab writes itself (docs/PROTOCOL.md section 6, "What the tab wrote itself"): no
  kernel message carries the input echo that JupyterLab 4.6 and Notebook 7 add to the cell
  when the user answers ``input()`` (``OutputArea.onInputRequest``: a ``stdin`` stream, the
  request's prompt, a space, the answer, or eight middle dots for a password, and a
  newline). The server sees the kernel's
  ``input_request`` (:meth:`~KernelOutputs.on_input_request`) and the tab's ``input_reply``
  (:meth:`~KernelOutputs.on_input_reply`) and folds the same echo at the same place, so a cell
  taken over keeps it, in order, in the document and the file.

A cell *ends* with its request's ``status: idle`` (every output comes before it on IOPub), with
an ``aborted`` reply (nothing ran), or idle with what it had when the kernel restarts or dies.
Ended cells are kept (a later cell may update their displays) until
:meth:`~KernelOutputs.forget`, a rerun of the same cell id, a restart, or the byte bound lets
them go. Nothing here writes anywhere: callers get the set of request ids whose outputs
changed and write them (:mod:`.collab`, :mod:`.contents`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...protocol import COMM_MSG_TYPES
from .capture import OutputCapture
from .fold import OUTPUT_TYPES, CellOutputs, output_from_content

#: Default bound of one cell's outputs, in bytes.
DEFAULT_MAX_CELL_BYTES = 8 * 1024 * 1024

#: Default bound of all cells of one kernel, in bytes.
DEFAULT_MAX_KERNEL_BYTES = 64 * 1024 * 1024

#: What JupyterLab's Stdin widget shows for a password's answer (and writes into the echo).
PASSWORD_ECHO = "\u00b7" * 8


def input_echo(prompt: str, answer: str, password: bool) -> str:
    """The text of the ``stdin`` stream JupyterLab 4.6 adds when ``answer`` is given to an
    ``input_request`` (its Stdin widget: ``prompt + " "``, then the answer or the dots; the
    output area adds the newline)."""
    return f"{prompt} {PASSWORD_ECHO if password else answer}\n"


@dataclass
class FollowedCell:
    """One execution of one cell that the server follows, as it saw it: running until its
    request ends (:attr:`state`), then ended, kept until the kernel's cells let it go."""

    msg_id: str  # the execute_request's msg_id (its outputs' parent)
    cell_id: str
    session: str  # header.session of the request: the tab (websocket) that ran it
    outputs: CellOutputs
    path: str | None = None  # the notebook's path, when known (from the kernel's session)
    #: "running" until the request's idle, then "idle" (the cell's execution_state)
    state: str = "running"
    #: why it ended: "idle", "aborted", "restart" or "dead"; None while running
    ended_by: str | None = None
    reply_status: str | None = None

    @property
    def execution_count(self) -> int | None:
        return self.outputs.execution_count

    @property
    def running(self) -> bool:
        return self.state == "running"


class KernelOutputs:
    """The followed cells of one kernel, running and recently ended (see the module
    docstring)."""

    def __init__(
        self,
        max_cell_bytes: int = DEFAULT_MAX_CELL_BYTES,
        max_kernel_bytes: int = DEFAULT_MAX_KERNEL_BYTES,
        keep: Callable[[str], bool] | None = None,
    ) -> None:
        self.max_cell_bytes = max_cell_bytes
        self.max_kernel_bytes = max_kernel_bytes
        #: msg_id -> whether an ended cell must stay (its outputs are not written yet)
        self.keep = keep
        #: msg_ids of ended cells the kernel's bound evicted (the caller logs and clears
        #: them), oldest first
        self.evicted: list[str] = []
        self.cells: dict[str, FollowedCell] = {}  # msg_id -> cell, oldest first
        self._displays: dict[str, list[str]] = {}  # display_id -> msg_ids of cells showing it
        #: input_request msg_id -> (the cell's msg_id, its prompt, password), until answered
        self._input_requests: dict[str, tuple[str, str, bool]] = {}
        self.capture = OutputCapture()

    # queries -----------------------------------------------------------------------------

    def running(self) -> list[FollowedCell]:
        return [c for c in self.cells.values() if c.running]

    def cells_of_session(self, session: str) -> list[FollowedCell]:
        return [c for c in self.cells.values() if c.session == session]

    @property
    def nbytes(self) -> int:
        return sum(c.outputs.nbytes for c in self.cells.values())

    # feeding -----------------------------------------------------------------------------

    def on_execute_request(
        self, msg: dict[str, Any], path: str | None = None
    ) -> FollowedCell | None:
        """A client sent an ``execute_request``: a new running cell if it names one."""
        cell_id = (msg.get("metadata") or {}).get("cellId")
        msg_id = msg["header"]["msg_id"]
        if not cell_id or not isinstance(cell_id, str):
            return None
        for old in [c for c in self.cells.values() if c.cell_id == cell_id and not c.running]:
            if path is None or old.path in (None, path):
                self.forget(old.msg_id)  # rerun: its outputs are the new run's now
        cell = FollowedCell(
            msg_id=msg_id,
            cell_id=cell_id,
            session=msg["header"].get("session", ""),
            path=path,
            outputs=CellOutputs(self.max_cell_bytes, self._room, self.max_kernel_bytes),
        )
        self.cells[msg_id] = cell
        return cell

    def on_iopub(self, msg: dict[str, Any]) -> set[str]:
        """One IOPub message, in order; the msg_ids of the cells whose outputs changed."""
        msg_type = msg["header"]["msg_type"]
        content = msg.get("content") or {}
        parent = (msg.get("parent_header") or {}).get("msg_id")
        if msg_type in COMM_MSG_TYPES:
            self.capture.on_comm_message(msg_type, content)
            return set()
        cell = self.cells.get(parent) if parent else None
        if msg_type == "status":
            if cell is not None and cell.running and content.get("execution_state") == "idle":
                self._end(cell, "idle")
                return {cell.msg_id}
            return set()
        if msg_type == "execute_input":
            if cell is not None:
                cell.outputs.apply(msg_type, content)
                return {cell.msg_id}
            return set()
        if msg_type not in OUTPUT_TYPES:
            return set()
        changed: set[str] = set()
        display_id = (content.get("transient") or {}).get("display_id")
        if display_id and msg_type in ("display_data", "update_display_data"):
            # JupyterLab's kernel connection does this before any message hook (an Output
            # widget's capture is one): displays are updated whoever captures the message.
            changed |= self._replace_display(display_id, output_from_content(msg_type, content))
        if msg_type == "update_display_data" or cell is None or self.capture.captures(parent):
            return changed
        if cell.outputs.apply(msg_type, content):
            changed.add(cell.msg_id)
        if display_id and msg_type == "display_data" and display_id in cell.outputs.display_ids():
            shown = self._displays.setdefault(display_id, [])
            if cell.msg_id not in shown:
                shown.append(cell.msg_id)
        return changed

    def on_shell(self, msg: dict[str, Any]) -> set[str]:
        """A shell message either way: a client's comm message, or a kernel's reply."""
        msg_type = msg["header"]["msg_type"]
        content = msg.get("content") or {}
        if msg_type in COMM_MSG_TYPES:
            self.capture.on_comm_message(msg_type, content)
            return set()
        if msg_type != "execute_reply":
            return set()
        parent = (msg.get("parent_header") or {}).get("msg_id")
        cell = self.cells.get(parent) if parent else None
        if cell is None:
            return set()
        cell.reply_status = content.get("status")
        changed = set()
        if cell.running and cell.reply_status == "aborted":
            # A request aborted after an error (Run All with stop_on_error) ran nothing: no
            # output follows, and its idle may never come (kernels differ): it ends here.
            self._end(cell, "aborted")
            changed.add(cell.msg_id)
        count = content.get("execution_count")
        if cell.outputs.execution_count is None and isinstance(count, int):
            cell.outputs.execution_count = count
            changed.add(cell.msg_id)
        return changed

    def on_input_request(self, msg: dict[str, Any]) -> None:
        """The kernel asked a cell's client for input (stdin ``input_request``)."""
        parent = (msg.get("parent_header") or {}).get("msg_id")
        cell = self.cells.get(parent) if parent else None
        if cell is None or not cell.running:
            return
        content = msg.get("content") or {}
        prompt = content.get("prompt", "")
        self._input_requests[msg["header"]["msg_id"]] = (
            cell.msg_id,
            prompt if isinstance(prompt, str) else str(prompt),
            bool(content.get("password")),
        )

    def on_input_reply(self, msg: dict[str, Any]) -> set[str]:
        """A client answered an ``input_request`` (its ``input_reply``, whose parent is the
        request): the echo its tab adds to the cell is folded in at this point."""
        parent = (msg.get("parent_header") or {}).get("msg_id")
        asked = self._input_requests.pop(parent, None) if parent else None
        if asked is None:
            return set()
        msg_id, prompt, password = asked
        cell = self.cells.get(msg_id)
        content = msg.get("content") or {}
        if cell is None or content.get("status", "ok") != "ok":
            return set()
        answer = content.get("value", "")
        echo = input_echo(prompt, answer if isinstance(answer, str) else str(answer), password)
        if cell.outputs.apply("stream", {"name": "stdin", "text": echo}):
            return {msg_id}
        return set()

    def end_all(self, reason: str) -> list[FollowedCell]:
        """The kernel restarted (``"restart"``) or died (``"dead"``): running cells end idle
        with what they had; returns them. Output widgets and displays are forgotten."""
        ended = self.running()
        for cell in ended:
            self._end(cell, reason)
        self.capture.clear()
        self._displays.clear()
        self._input_requests.clear()
        return ended

    def forget(self, msg_id: str) -> FollowedCell | None:
        """Let go of one cell (a writer is done with it, or it was rerun)."""
        cell = self.cells.pop(msg_id, None)
        if cell is not None:
            for display_id in cell.outputs.display_ids():
                shown = self._displays.get(display_id, [])
                if msg_id in shown:
                    shown.remove(msg_id)
                if not shown:
                    self._displays.pop(display_id, None)
        return cell

    # internals ---------------------------------------------------------------------------

    def _end(self, cell: FollowedCell, reason: str) -> None:
        cell.state = "idle"
        cell.ended_by = reason

    def _replace_display(self, display_id: str, output: dict[str, Any]) -> set[str]:
        changed = set()
        for msg_id in list(self._displays.get(display_id, [])):
            cell = self.cells.get(msg_id)
            if cell is not None and cell.outputs.replace_display(display_id, output):
                changed.add(msg_id)
        return changed

    def _room(self, needed: int) -> int:
        """What the kernel's bound lets a cell add now; to make ``needed`` bytes of room it
        lets ended cells go first, oldest first."""
        free = self.max_kernel_bytes - self.nbytes
        keep = self.keep
        for cell in [c for c in self.cells.values() if not c.running]:
            if free >= needed:
                break
            if keep is not None and keep(cell.msg_id):
                continue  # not written yet: the running cell is cut instead (with a note)
            self.forget(cell.msg_id)
            self.evicted.append(cell.msg_id)
            free = self.max_kernel_bytes - self.nbytes
        return free
