"""Outputs survive the tab: per kernel, the server keeps running cells' outputs and writes
those whose tab is gone (issue 23; the rules are docs/PROTOCOL.md section 6).

:class:`OutputsOwner` (one per kernel, kept in :class:`OutputsOwners`) watches the kernel's
shared channels (a :class:`~ipykernel_ext.shared_channels.Watcher`): every ``execute_request``
with a ``metadata.cellId`` and every comm message a client sends, every IOPub message once,
in order, and every reply. It feeds them to a :class:`~ipykernel_ext.server.outputs.KernelOutputs`
(the fold) and owns the decisions the fold cannot make:

* which sessions have a websocket open on the kernel (told by the connection class);
* when the server owns a cell: its session's websocket closed and did not come back within
  ``grace`` seconds; it owns it until the cell ends (its idle, a restart, the kernel's death);
* what it writes: with a live collaborative document of the notebook, the cell as it goes
  (:class:`~ipykernel_ext.server.outputs.collab.CollabWriter`, one write in flight per cell, the
  next one brings the document to the fold's latest state); without one, the ended cells into the
  ``.ipynb`` (:class:`~ipykernel_ext.server.outputs.contents.ContentsWriter`) once no websocket of
  the kernel has been open for ``grace`` seconds;
* which kernel messages a returning session must not get (:meth:`OutputsOwner.hides`): the
  outputs of its cells that the server wrote into the live document (the tab shows the
  document; given the messages too, it would add them a second time);
* keeping the kernel's channels open while it follows a running cell nobody else holds.

It never sends anything to the kernel. The notebook of a cell is the path of the kernel's
notebook session (jupyter_server's session manager); a kernel shared by several notebooks
names none, and its cells are not written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from jupyter_client.session import DELIM
from jupyter_core.utils import ensure_async

from ...protocol import COMM_MSG_TYPES, CONTENT, HEADER, METADATA, PARENT_HEADER
from ...shared_channels import KernelMessage, SharedChannels, SharedClient
from .coalesce import Coalescer
from .collab import CollabWriter
from .contents import ContentsWriter
from .registry import KernelOutputs, RunningCell

#: The IOPub messages that change a cell's outputs (hidden from a returning session).
OUTPUT_MSG_TYPES = frozenset(
    {"stream", "display_data", "execute_result", "error", "clear_output", "update_display_data"}
)

#: The keys of a decoded message's parts, by their index in the frames after the delimiter.
_PARTS = {
    HEADER: "header",
    PARENT_HEADER: "parent_header",
    METADATA: "metadata",
    CONTENT: "content",
}

Unpack = Callable[[bytes], Any]


class HeardMessage(Protocol):
    """A kernel message as the owner reads it: a shared channels' ``KernelMessage``, or a
    gateway websocket's decoded JSON (:mod:`ipykernel_ext.server.gateway`)."""

    channel: str

    @property
    def header(self) -> dict[str, Any]: ...

    @property
    def parent_header(self) -> dict[str, Any]: ...

    @property
    def msg_type(self) -> str: ...

    def content_once(self) -> Any: ...


class Feed(Protocol):
    """What keeps the server hearing a kernel behind a gateway
    (:mod:`ipykernel_ext.server.gateway`): its own websocket to the gateway, open while a tab of
    the kernel is (so it hears a cell from its first message) or a followed cell runs; closed
    otherwise (an open websocket would keep the gateway from culling the idle kernel)."""

    def update(self, tabs_open: bool, following: bool) -> None: ...

    def close(self) -> None: ...


class OutputsOwner:
    """One kernel's running cells, the sessions open on it, and the cells the server owns.

    ``settings`` is the server's ``web_app.settings`` (``contents_manager``,
    ``session_manager``, and ``jupyter_server_ydoc`` when collaboration is on).
    """

    def __init__(
        self,
        kernel_id: str,
        settings: dict[str, Any],
        *,
        grace: float,
        unpack: Unpack,
        log: logging.Logger | logging.LoggerAdapter[Any],
        max_cell_bytes: int,
        max_kernel_bytes: int,
    ) -> None:
        self.kernel_id = kernel_id
        self.grace = grace
        self.unpack = unpack
        self.log = log
        # The kernel's bound never lets go of an ended cell whose outputs are not written yet
        # (issue 30: every cut is told): it cuts the running cell instead, with a note.
        self.cells = KernelOutputs(max_cell_bytes, max_kernel_bytes, keep=self._unwritten)
        self.collab = CollabWriter(settings)
        manager = settings.get("contents_manager")
        self.contents = ContentsWriter(manager) if manager is not None else None
        self.session_manager = settings.get("session_manager")
        #: session id -> websockets open with it
        self.open: dict[str, int] = {}
        #: msg_ids of the cells the server owns
        self.owned: set[str] = set()
        #: msg_id -> session, of owned cells written into a live document
        self.hidden: dict[str, str] = {}
        self.channels: SharedChannels | None = None
        #: in gateway mode, the server's own websocket to the kernel (set by
        #: :class:`~ipykernel_ext.server.gateway.GatewayOutputsConnection`; the shared channels
        #: need none)
        self.feed: Feed | None = None
        self._hold: SharedClient | None = None
        self._grace_timers: dict[str, asyncio.TimerHandle] = {}
        self._unattended_timer: asyncio.TimerHandle | None = None
        #: no websocket of the kernel has been open for ``grace`` seconds
        self.unattended = False
        self._writes = Coalescer()  # one write in flight per cell (msg_id)
        self._path_lookup: asyncio.Future[str | None] | None = None
        self._pending_files: set[str] = set()  # ended owned cells waiting for the file
        #: ended cells whose outputs are where they belong (the document or the file), or
        #: that can never be written (told in the log): the kernel's bound may let them go
        self._settled: set[str] = set()
        self._cut_told: set[str] = set()  # cells whose cut was logged
        self._tasks: set[asyncio.Future[Any]] = set()

    # --- the channels (Watcher) ----------------------------------------------------------

    def watch(self, channels: SharedChannels) -> None:
        """Watch ``channels`` (the kernel's current set; a new set replaces the old)."""
        if self.channels is not channels:
            self._release()
            self.channels = channels
        channels.watcher = self

    def sent(self, channel: str, frames: list[Any]) -> None:
        """A client's message to the kernel, as ZMQ frames (the shared channels): a cell's
        request, a comm message, or an answer to ``input()`` (its tab writes the echo into
        the cell: the fold does too)."""
        if channel not in ("shell", "stdin"):
            return
        start = frames.index(DELIM) + 1
        raw = bytes(frames[start + HEADER])
        # Cheap byte tests first: most of what a client sends is none of these.
        if channel == "stdin":
            if not self.cells.cells or b"input_reply" not in raw:
                return
        elif b"execute_request" not in raw and b"comm_" not in raw:
            return
        self._sent(channel, self.unpack(raw), lambda i: self.unpack(bytes(frames[start + i])))

    def sent_message(self, channel: str, msg: dict[str, Any]) -> None:
        """A client's message to the kernel, decoded (the gateway's JSON): as :meth:`sent`."""
        if channel not in ("shell", "stdin") or not isinstance(msg.get("header"), dict):
            return
        self._sent(channel, msg["header"], lambda i: msg.get(_PARTS[i]) or {})

    def _sent(self, channel: str, header: dict[str, Any], part: Callable[[int], Any]) -> None:
        """``part(i)``: the message's decoded part ``i`` (``METADATA``, ``CONTENT``, ...)."""
        msg_type = header.get("msg_type")
        if channel == "stdin":
            if msg_type == "input_reply" and self.cells.cells:
                reply = {
                    "header": header,
                    "parent_header": part(PARENT_HEADER),
                    "content": part(CONTENT),
                }
                changed = self.cells.on_input_reply(reply)
                for msg_id in changed:
                    self._changed(msg_id)
        elif msg_type == "execute_request":
            metadata = part(METADATA)
            if not isinstance(metadata, dict) or not metadata.get("cellId"):
                return  # a console, a script: not a notebook cell
            cell = self.cells.on_execute_request({"header": header, "metadata": metadata})
            self._prune()
            if cell is not None:
                self._spawn(self._find_path(cell))
        elif msg_type in COMM_MSG_TYPES and self.cells.cells:
            self.cells.on_shell({"header": header, "content": part(CONTENT)})

    def received(self, msg: HeardMessage) -> None:
        """A kernel message, before any client: folded if it concerns a tracked cell."""
        if not self.cells.cells:
            return  # nothing followed: nothing decoded
        msg_type = msg.msg_type
        parent = msg.parent_header.get("msg_id")
        if msg.channel == "iopub":
            if not (
                parent in self.cells.cells
                or msg_type in COMM_MSG_TYPES
                or msg_type in ("display_data", "update_display_data")  # displays of others
            ):
                return
            changed = self.cells.on_iopub(_as_dict(msg))
        elif msg.channel == "shell" and msg_type == "execute_reply" and parent in self.cells.cells:
            changed = self.cells.on_shell(_as_dict(msg))
        elif msg.channel == "stdin" and msg_type == "input_request" and parent in self.cells.cells:
            self.cells.on_input_request(_as_dict(msg))
            return
        else:
            return
        for msg_id in changed:
            self._changed(msg_id)

    def _unwritten(self, msg_id: str) -> bool:
        """Whether an ended cell must stay: its outputs are not written yet (its session may
        still be in its grace, or the write is pending)."""
        return msg_id not in self._settled

    def _prune(self) -> None:
        """Forget what is said of cells the fold let go (a rerun, its byte bound). Which
        messages a departed session is not given is kept until it comes back: its offline
        buffer may still replay an ended cell's outputs, which the document already has."""
        held = self.cells.cells
        for msg_id in self.cells.let_go:
            self.log.info(
                "Kernel %s: the outputs of an ended cell (request %s), already written, "
                "were let go to make room (keep_outputs_kernel_bytes=%d)",
                self.kernel_id,
                msg_id,
                self.cells.max_kernel_bytes,
            )
        self.cells.let_go.clear()
        self.owned &= held.keys()
        self._pending_files &= held.keys()
        self._settled &= held.keys()
        self._cut_told &= held.keys()
        for msg_id in [m for m in self.hidden if m not in held]:
            if self.hidden[msg_id] in self.open:
                del self.hidden[msg_id]

    def hides(self, msg: HeardMessage, session: str) -> bool:
        """Whether ``session``'s websocket must not get ``msg``: an output of one of its
        cells that the server wrote into the live document (the tab shows it from there)."""
        if not self.hidden or msg.channel != "iopub" or msg.msg_type not in OUTPUT_MSG_TYPES:
            return False
        return self.hidden.get(msg.parent_header.get("msg_id")) == session

    # --- websockets (told by the connection class) ---------------------------------------

    def opened(self, session: str) -> None:
        self.open[session] = self.open.get(session, 0) + 1
        # Its replay is over (the connection tells us after it): what was hidden from it of
        # cells let go is of no more use.
        for msg_id in [m for m, s in self.hidden.items() if s == session]:
            if msg_id not in self.cells.cells:
                del self.hidden[msg_id]
        timer = self._grace_timers.pop(session, None)
        if timer is not None:
            timer.cancel()  # back within the grace: its tab goes on writing
        if self._unattended_timer is not None:
            self._unattended_timer.cancel()
            self._unattended_timer = None
        self.unattended = False
        # Without a live document the server wrote nothing yet: the returning tab gets the
        # replay and writes its cells itself. (A first write under way may be into the live
        # document: that cell stays the server's.)
        for cell in self.cells.cells_of_session(session):
            if (
                cell.msg_id in self.owned
                and cell.msg_id not in self.hidden
                and not self._writes.busy(cell.msg_id)
            ):
                self.owned.discard(cell.msg_id)
                self._pending_files.discard(cell.msg_id)
            if cell.msg_id not in self.owned and not cell.running:
                self.cells.forget(cell.msg_id)
        self._update_hold()

    def closed(self, session: str) -> None:
        left = self.open.get(session, 0) - 1
        if left > 0:
            self.open[session] = left
            return
        self.open.pop(session, None)
        loop = asyncio.get_running_loop()
        if self.cells.cells_of_session(session) and session not in self._grace_timers:
            self._grace_timers[session] = loop.call_later(self.grace, self._grace_over, session)
        if not self.open and self._unattended_timer is None:
            self._unattended_timer = loop.call_later(self.grace, self._now_unattended)
        self._update_hold()

    def _grace_over(self, session: str) -> None:
        self._grace_timers.pop(session, None)
        if session in self.open:
            return
        for cell in self.cells.cells_of_session(session):
            if cell.msg_id not in self.owned:
                self.log.info(
                    "Kernel %s: the server takes over the outputs of cell %s (session %s left)",
                    self.kernel_id,
                    cell.cell_id,
                    session,
                )
                self.owned.add(cell.msg_id)
                self._write_soon(cell)

    def _now_unattended(self) -> None:
        self._unattended_timer = None
        if not self.open:
            self.unattended = True
            self._spawn(self._write_files())

    # --- the notebook's path ------------------------------------------------------------

    def renamed(self, old: str, new: str) -> None:
        """The ContentsManager renamed or moved ``old`` (a notebook, or a folder holding it)
        to ``new``: cells of that notebook are written at the new path from now on."""
        old, new = old.strip("/"), new.strip("/")
        for cell in self.cells.cells.values():
            path = (cell.path or "").strip("/")
            if not path:
                continue
            if path == old:
                moved = new
            elif path.startswith(old + "/"):
                moved = new + path[len(old) :]
            else:
                continue
            self.log.info(
                "Kernel %s: cell %s follows its notebook from %s to %s",
                self.kernel_id,
                cell.cell_id,
                cell.path,
                moved,
            )
            cell.path = moved
            if cell.msg_id in self.owned:
                self._write_soon(cell)  # the document at the new path may be open

    async def _current_path(self, cell: RunningCell) -> str | None:
        """The kernel's notebook as its session names it now (after a rename that did not go
        through this server's ContentsManager events, the session is the one to ask)."""
        path = await self._notebook_path()
        if path and path != cell.path:
            self.log.info(
                "Kernel %s: cell %s's notebook is now %s (was %s)",
                self.kernel_id,
                cell.cell_id,
                path,
                cell.path,
            )
            cell.path = path
        return path

    # --- the kernel ----------------------------------------------------------------------

    def kernel_ended(self, reason: str) -> None:
        """The kernel restarted (``"restart"``) or died or was shut down (``"dead"``): its
        running cells end idle with what they had."""
        if self.cells.running():
            self.log.info("Kernel %s: its running cells end idle (%s)", self.kernel_id, reason)
        for cell in self.cells.end_all(reason):
            self._changed(cell.msg_id)
        self._update_hold()

    def _changed(self, msg_id: str) -> None:
        if self.cells.let_go:
            self._prune()
        cell = self.cells.cells.get(msg_id)
        if cell is None:
            return
        if msg_id in self.owned:
            self._write_soon(cell)
        elif not cell.running and cell.session in self.open:
            # Its tab is there and wrote it: nothing to keep.
            self.cells.forget(msg_id)
        if not cell.running:
            self._update_hold()

    # --- writing -------------------------------------------------------------------------

    def _write_soon(self, cell: RunningCell) -> None:
        """Write ``cell`` now, or once the write under way is done (it reads the fold then)."""
        self._writes.request(cell.msg_id, lambda: self._write(cell))

    async def _write(self, cell: RunningCell) -> None:
        if cell.msg_id not in self.owned or cell.msg_id not in self.cells.cells:
            return  # handed back, or let go
        self._tell_cut(cell)
        path = cell.path or await self._find_path(cell)
        if not path:
            if not cell.running and cell.msg_id not in self._settled:
                self._settled.add(cell.msg_id)
                self.log.warning(
                    "Kernel %s: the outputs of cell %s are not written anywhere: no single "
                    "notebook session names the kernel (%s)",
                    self.kernel_id,
                    cell.cell_id,
                    "/api/sessions",
                )
            return
        ended = not cell.running  # before the write: the document then has the end too
        if self.collab.available and await self.collab.write(
            path, cell.cell_id, cell.outputs.to_nbformat(), cell.execution_count, cell.state
        ):
            self.hidden[cell.msg_id] = cell.session
            self._pending_files.discard(cell.msg_id)
            if ended:
                self._settled.add(cell.msg_id)
            return
        # No live document (no collaboration, or no room open): the file, once the cell
        # ended and no tab of the kernel is connected.
        if not cell.running:
            self._pending_files.add(cell.msg_id)
            if self.unattended:
                await self._write_files()
            else:
                self.log.info(
                    "Kernel %s: cell %s ended; its outputs go into %s once no tab of the "
                    "kernel is connected",
                    self.kernel_id,
                    cell.cell_id,
                    path,
                )

    def _tell_cut(self, cell: RunningCell) -> None:
        """Log, once per cell the server writes, that a bound cut it (its note says so in
        the cell)."""
        cut_by = cell.outputs.cut_by
        if cut_by is None or cell.msg_id in self._cut_told:
            return
        self._cut_told.add(cell.msg_id)
        limit, scope = cut_by
        self.log.warning(
            "Kernel %s: the outputs of cell %s were cut at %d bytes per %s "
            "(KeepOutputs.keep_outputs_%s_bytes); a note in the cell says so",
            self.kernel_id,
            cell.cell_id,
            limit,
            scope,
            scope,
        )

    async def _write_files(self) -> None:
        """Write the ended owned cells waiting for the file, if no tab is connected."""
        if not self.unattended or self.contents is None:
            return
        by_path: dict[str, dict[str, tuple[list[dict[str, Any]], int | None]]] = {}
        for msg_id in list(self._pending_files):
            cell = self.cells.cells.get(msg_id)
            if cell is None or cell.running or not cell.path:
                self._pending_files.discard(msg_id)
                continue
            by_path.setdefault(cell.path, {})[cell.cell_id] = (
                cell.outputs.to_nbformat(),
                cell.execution_count,
            )
            self._pending_files.discard(msg_id)
        for path, cells in by_path.items():
            if self.collab.available and await self.collab.document(path) is not None:
                continue  # a room opened meanwhile: its next change brings them there
            held = [c for c in self.cells.cells.values() if c.path == path and c.cell_id in cells]
            await self._write_file(path, cells, held)
            # Written, or told: either way nothing more will come of them.
            self._settled.update(c.msg_id for c in held)

    async def _write_file(
        self,
        path: str,
        cells: dict[str, tuple[list[dict[str, Any]], int | None]],
        held: list[RunningCell],
    ) -> None:
        """Write ``cells`` into ``path``; if the file is not there (renamed or moved in a way
        this server did not see), into the notebook the kernel's session names now; if that
        fails too, say so in the log (nothing else can be told: no tab is open)."""
        assert self.contents is not None
        tried = [path]
        while True:
            try:
                written = await self.contents.write(path, cells)
                self.log.info("Kernel %s: wrote cells %s into %s", self.kernel_id, written, path)
                return
            except Exception as exc:
                error = exc
            current = await self._current_path(held[0]) if held else None
            if not current or current in tried:
                break
            for cell in held:
                cell.path = current
            path = current
            tried.append(path)
        self.log.error(
            "Kernel %s: the outputs of cells %s could not be written anywhere (tried %s): %r",
            self.kernel_id,
            sorted(cells),
            ", ".join(tried),
            error,
        )

    async def _find_path(self, cell: RunningCell) -> str | None:
        """The notebook of the kernel's session (None: no notebook session, or several)."""
        if cell.path or self.session_manager is None:
            return cell.path
        # One lookup at a time, shared: Run All sends every cell at once.
        if self._path_lookup is None or self._path_lookup.done():
            self._path_lookup = asyncio.ensure_future(self._notebook_path())
        cell.path = await asyncio.shield(self._path_lookup)
        return cell.path

    async def _notebook_path(self) -> str | None:
        try:
            sessions = await ensure_async(self.session_manager.list_sessions())
        except Exception:
            self.log.exception("Listing sessions for kernel %s failed", self.kernel_id)
            return None
        paths = {
            s.get("path")
            for s in sessions
            if (s.get("kernel") or {}).get("id") == self.kernel_id
            and (s.get("type") == "notebook" or str(s.get("path", "")).endswith(".ipynb"))
        }
        return paths.pop() if len(paths) == 1 else None

    def _spawn(self, coro: Any) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error("Outputs of kernel %s", self.kernel_id, exc_info=task.exception())

    async def drain(self) -> None:
        """Wait for the writes under way (and those they start)."""
        for msg_id in list(self.owned):
            await self._writes.wait(msg_id)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- keeping the channels open -------------------------------------------------------

    def _update_hold(self) -> None:
        """Hold the kernel's channels while a followed cell runs and no websocket is open
        (without an offline buffer they would close under it)."""
        if self.feed is not None:
            self.feed.update(bool(self.open), bool(self.cells.running()))
            return
        want = not self.open and bool(self.cells.running())
        if want and self._hold is None and self.channels is not None and not self.channels.closed:
            self._hold = self.channels.attach(
                _ignore,
                name=f"outputs of kernel {self.kernel_id}",
                on_lost=self._lost,
                announce_status=False,
            )
        elif not want:
            self._release()

    def _release(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.close()

    def _lost(self, reason: str) -> None:
        self._hold = None

    def close(self) -> None:
        for timer in self._grace_timers.values():
            timer.cancel()
        self._grace_timers.clear()
        if self._unattended_timer is not None:
            self._unattended_timer.cancel()
        self._release()
        if self.feed is not None:
            self.feed.close()
        if self.channels is not None and self.channels.watcher is self:
            self.channels.watcher = None


def _ignore(msg: KernelMessage) -> None:
    """The hold client's delivery: the owner saw the message already, as the watcher."""


def _as_dict(msg: HeardMessage) -> dict[str, Any]:
    """The message as the fold reads it. The content is decoded for the fold alone, not kept
    on the message (``msg.content`` would memoize it): a message jupyter_server's offline
    buffer holds for a departed session would then hold its text twice, as bytes and as the
    decoded content (the 50 MB cell's +190 MB, docs/BENCHMARKS.md)."""
    return {
        "header": msg.header,
        "parent_header": msg.parent_header,
        "metadata": {},
        "content": msg.content_once(),
    }
