"""The server's decisions about one kernel's followed cells: which sessions are there, which
cells the server owns, and what a returning session is not given (docs/PROTOCOL.md section 6).

:class:`OutputsOwner` (one per kernel, kept in :mod:`ipykernel_ext.server.kernels`) hears
the kernel through its :class:`~.feed.Feed` (a :class:`~ipykernel_ext.shared_channels.Watcher`
of the kernel's shared channels, or a gateway's websocket): every ``execute_request`` with a
``metadata.cellId`` and every comm message a client sends, every IOPub message once, in
order, and every reply (:mod:`.heard`: how it reads them). It feeds them to a
:class:`~.registry.KernelOutputs` (the fold) and makes the decisions the fold cannot:

* which sessions have a websocket open on the kernel (told by the connection class);
* when the server owns a cell: its session's websocket closed and did not come back within
  ``grace`` seconds; it owns it until the cell ends (its idle, a restart, the kernel's death),
  and its :class:`~.writer.OutputsWriter` writes it (where and when is the writer's);
* when no websocket of the kernel has been open for ``grace`` seconds (the file may be
  written then);
* which kernel messages a returning session must not get (:meth:`OutputsOwner.hides`): the
  outputs of its cells that the server wrote into the live document (the tab shows the
  document; given the messages too, it would add them a second time);
* when its feed must hear the kernel (:meth:`Feed.update <.feed.Feed.update>`: a tab is open,
  a followed cell runs).

It never sends anything to the kernel. Each part of the state has one writer: the followed
cells are the fold's (``cells``, fed by the owner); which cells are owned, hidden from a
session or written, and whether the kernel is unattended, are the writer's (``writer``,
changed only through its methods, read by anyone); which sessions are open is the owner's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ...protocol import COMM_MSG_TYPES, CONTENT, METADATA, PARENT_HEADER
from ...shared_channels import Unpack
from .feed import Feed
from .fold import OUTPUT_TYPES
from .heard import HeardMessage, Part, for_the_fold, frame_parts, json_parts
from .registry import KernelOutputs
from .writer import OutputsWriter

#: ``make_feed(owner)``: the feed that hears the owner's kernel (one per transport, :mod:`.feed`).
MakeFeed = Callable[["OutputsOwner"], Feed]


class OutputsOwner:
    """One kernel's followed cells, the sessions open on it, and the cells the server owns.

    ``settings`` is the server's ``web_app.settings`` (``contents_manager``,
    ``session_manager``, and ``jupyter_server_ydoc`` when collaboration is on); ``make_feed``
    makes the feed that hears the kernel (:class:`~.feed.ChannelsFeed` for a kernel of this
    server, :class:`~ipykernel_ext.server.gateway.gateway_link.GatewayFeed` behind a gateway).
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
        make_feed: MakeFeed,
    ) -> None:
        self.kernel_id = kernel_id
        self.grace = grace
        self.unpack = unpack
        self.log = log
        # The kernel's bound never lets go of an ended cell whose outputs are not written yet:
        # it cuts the running cell instead, with a note, so every cut is told
        # (docs/PROTOCOL.md section 6, "What the server follows").
        self.cells = KernelOutputs(max_cell_bytes, max_kernel_bytes, keep=self._unwritten)
        self.writer = OutputsWriter(kernel_id, settings, self.cells, log)
        #: session id -> websockets open with it
        self.open: dict[str, int] = {}
        self._grace_timers: dict[str, asyncio.TimerHandle] = {}
        self._unattended_timer: asyncio.TimerHandle | None = None
        #: what hears the kernel (made last: it may read the owner)
        self.feed: Feed = make_feed(self)

    @property
    def following(self) -> bool:
        """Whether it follows any cell (nothing followed: nothing heard need be decoded)."""
        return bool(self.cells.cells)

    def resumed(
        self, header: dict[str, Any], metadata: dict[str, Any], execution_count: int | None
    ) -> None:
        """A request the kernel ran while no server was up (a kernel taken back: its journal,
        :mod:`ipykernel_ext.server.lasting.resuming`): followed from now, as if heard, with
        the count the kernel gave it; the kernel sends its outputs again next."""
        msg_id = header.get("msg_id")
        if not isinstance(msg_id, str) or msg_id in self.cells.cells:
            return
        self._sent("shell", header, json_parts({"metadata": metadata}))
        cell = self.cells.cells.get(msg_id)
        if cell is not None and isinstance(execution_count, int):
            cell.outputs.execution_count = execution_count

    @property
    def hiding(self) -> bool:
        """Whether any output is kept from a session (:meth:`hides` may say yes)."""
        return bool(self.writer.hidden)

    # --- what it hears (as the channels' Watcher, or from a gateway) ----------------------

    def sent(self, channel: str, frames: list[Any]) -> None:
        """A client's message to the kernel, as ZMQ frames (the shared channels): a cell's
        request, a comm message, or an answer to ``input()`` (its tab writes the echo into
        the cell: the fold does too)."""
        if channel not in ("shell", "stdin"):
            return
        raw, part = frame_parts(frames, self.unpack)
        # Cheap byte tests first: most of what a client sends is none of these.
        if channel == "stdin":
            if not self.cells.cells or b"input_reply" not in raw:
                return
        elif b"execute_request" not in raw and b"comm_" not in raw:
            return
        self._sent(channel, self.unpack(raw), part)

    def sent_message(self, channel: str, msg: dict[str, Any]) -> None:
        """A client's message to the kernel, decoded (the gateway's JSON): as :meth:`sent`."""
        if channel not in ("shell", "stdin") or not isinstance(msg.get("header"), dict):
            return
        self._sent(channel, msg["header"], json_parts(msg))

    def _sent(self, channel: str, header: dict[str, Any], part: Part) -> None:
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
                self.writer.learn_path(cell)
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
            changed = self.cells.on_iopub(for_the_fold(msg))
        elif msg.channel == "shell" and msg_type == "execute_reply" and parent in self.cells.cells:
            changed = self.cells.on_shell(for_the_fold(msg))
        elif msg.channel == "stdin" and msg_type == "input_request" and parent in self.cells.cells:
            self.cells.on_input_request(for_the_fold(msg))
            return
        else:
            return
        for msg_id in changed:
            self._changed(msg_id)

    def _unwritten(self, msg_id: str) -> bool:
        """The fold's ``keep``: whether an ended cell must stay (not written yet)."""
        return self.writer.unwritten(msg_id)

    def _prune(self) -> None:
        """Forget what is said of cells the fold let go (a rerun, its byte bound)."""
        for msg_id in self.cells.evicted:
            self.log.info(
                "Kernel %s: the outputs of an ended cell (request %s), already written, "
                "were let go to make room (keep_outputs_kernel_bytes=%d)",
                self.kernel_id,
                msg_id,
                self.cells.max_kernel_bytes,
            )
        self.cells.evicted.clear()
        self.writer.forget_unheld(self.cells.cells, self.open)

    def hides(self, msg: HeardMessage, session: str) -> bool:
        """Whether ``session``'s websocket must not get ``msg``: an output of one of its
        cells that the server wrote into the live document (the tab shows it from there)."""
        hidden = self.writer.hidden
        if not hidden or msg.channel != "iopub" or msg.msg_type not in OUTPUT_TYPES:
            return False
        parent = msg.parent_header.get("msg_id")
        return isinstance(parent, str) and hidden.get(parent) == session

    # --- websockets (told by the connection class) ---------------------------------------

    def opened(self, session: str) -> None:
        self.open[session] = self.open.get(session, 0) + 1
        # Its replay is over (the connection tells us after it); a tab is there: the file waits.
        self.writer.session_back(session)
        timer = self._grace_timers.pop(session, None)
        if timer is not None:
            timer.cancel()  # back within the grace: its tab goes on writing
        if self._unattended_timer is not None:
            self._unattended_timer.cancel()
            self._unattended_timer = None
        # Without a live document the server wrote nothing yet: the returning tab gets the
        # replay and writes its cells itself.
        for cell in self.cells.cells_of_session(session):
            self.writer.hand_back(cell.msg_id)
            if cell.msg_id not in self.writer.owned and not cell.running:
                self.cells.forget(cell.msg_id)
        self._update_feed()

    def closed(self, session: str) -> None:
        left = self.open.get(session, 0) - 1
        if left > 0:
            self.open[session] = left
            return
        self.open.pop(session, None)
        self._gone(session)

    def left_before(self, session: str) -> None:
        """``session``'s websocket was open on the server before this one (a kernel taken
        back) and is not back: as if it had just closed here (unless it is open)."""
        if session not in self.open:
            self._gone(session)

    def _gone(self, session: str) -> None:
        loop = asyncio.get_running_loop()
        if self.cells.cells_of_session(session) and session not in self._grace_timers:
            self._grace_timers[session] = loop.call_later(self.grace, self._grace_over, session)
        if not self.open and self._unattended_timer is None:
            self._unattended_timer = loop.call_later(self.grace, self._now_unattended)
        self._update_feed()

    def _grace_over(self, session: str) -> None:
        self._grace_timers.pop(session, None)
        if session in self.open:
            return
        for cell in self.cells.cells_of_session(session):
            if cell.msg_id not in self.writer.owned:
                self.log.info(
                    "Kernel %s: the server takes over the outputs of cell %s (session %s left)",
                    self.kernel_id,
                    cell.cell_id,
                    session,
                )
                self.writer.take(cell)

    def _now_unattended(self) -> None:
        self._unattended_timer = None
        if not self.open:
            self.writer.now_unattended()

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
            if cell.msg_id in self.writer.owned:
                self.writer.write_soon(cell)  # the document at the new path may be open

    # --- the kernel ----------------------------------------------------------------------

    def kernel_ended(self, reason: str) -> None:
        """The kernel restarted (``"restart"``) or died or was shut down (``"dead"``): its
        running cells end idle with what they had."""
        if self.cells.running():
            self.log.info("Kernel %s: its running cells end idle (%s)", self.kernel_id, reason)
        for cell in self.cells.end_all(reason):
            self._changed(cell.msg_id)
        self._update_feed()

    def _changed(self, msg_id: str) -> None:
        if self.cells.evicted:
            self._prune()
        cell = self.cells.cells.get(msg_id)
        if cell is None:
            return
        if msg_id in self.writer.owned:
            self.writer.write_soon(cell)
        elif not cell.running and cell.session in self.open:
            # Its tab is there and wrote it: nothing to keep.
            self.cells.forget(msg_id)
        if not cell.running:
            self._update_feed()

    async def drain(self) -> None:
        """Wait for the writes under way (and those they start)."""
        await self.writer.drain()

    # --- hearing the kernel --------------------------------------------------------------

    def _update_feed(self) -> None:
        """Tell the feed whether a tab is open and a followed cell runs (it hears the kernel
        while it must: :mod:`.feed`)."""
        self.feed.update(bool(self.open), bool(self.cells.running()))

    def close(self) -> None:
        for timer in self._grace_timers.values():
            timer.cancel()
        self._grace_timers.clear()
        if self._unattended_timer is not None:
            self._unattended_timer.cancel()
        self.feed.close()
