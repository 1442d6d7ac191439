"""A taken-back kernel's journaled cells, given whole again to the tabs that come back.

The kernel keeps, for a server that comes back, each cell that ran while its server was away
(:mod:`ipykernel_ext.kernel.journal`; docs/PROTOCOL.md section 9, "The cell journal"). At
take-back (:mod:`.taking_back`) the server asks the journal (``journal_request`` on control)
and keeps the list here (:class:`Resume`, one per kernel, in :data:`resumes`). When a
websocket of the kernel opens (:func:`resume_on_open`, from
:class:`~ipykernel_ext.server.SharedChannelsConnection`), once its shared channels are live:

1. the kernel's outputs owner is told each cell's request and count (it never heard them), so
   it folds the cell from what follows, and takes it over (writes it) if its tab is not back
   within the grace, as for a tab that left (docs/PROTOCOL.md section 6);
2. ``journal_request`` with ``again``: the kernel sends each cell again on IOPub, in its own
   order, a ``clear_output`` first, so every tab and the owner end with the cell whole, once
   (the lines a tab had already are cleared with the rest), and a cell still running
   sends its ``execute_reply`` to this server too when it ends;
3. a cell that ended while no server was up: its ``execute_reply`` (the one sent to the dead
   server) is delivered to its session's websocket from the journal, once the cell's whole
   (sent again, ending with its ``idle``) reached every client, then acknowledged
   (``ack``: the kernel lets it go); a cell waiting on ``input()``: its ``input_request``
   is delivered to its session's websocket, whose answer goes to the kernel as usual.

Each opening does it again (a second tab, a reload): sending a cell again is idempotent.
At take-back the server does it once itself, with no websocket (:class:`Hearing`): the
owner then writes the cells nobody's tab comes back for.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any, Protocol

from ...protocol import AGAIN_METADATA_KEY, CONTENT, HEADER
from ...shared_channels import KernelMessage, SharedChannels

#: The control request and its reply (docs/PROTOCOL.md section 9), and the feature a kernel
#: that keeps a journal names in ``kernel_info_reply.supported_features``.
JOURNAL_REQUEST = "journal_request"
JOURNAL_FEATURE = "journal"
#: How long the channels have to become live, and the kernel to answer (seconds).
ANSWER_SECONDS = 60.0

Log = logging.Logger | logging.LoggerAdapter[Any]


class CellFollower(Protocol):
    """What a resume tells the kernel's outputs owner
    (:class:`~ipykernel_ext.server.outputs.OutputsOwner`): a request it never heard, and
    that the request's tab, open on the server before, is not back."""

    def resumed(
        self, header: dict[str, Any], metadata: dict[str, Any], execution_count: int | None
    ) -> None: ...

    def left_before(self, session: str) -> None: ...


class Hearing(Protocol):
    """Opens a kernel's channels and outputs owner with no websocket (the server's
    :class:`~ipykernel_ext.server.websocket.tabless.Tabless`): so cells nobody's tab comes
    back for are written all the same."""

    def open(self, kernel_id: str) -> tuple[SharedChannels, CellFollower | None]: ...


class Resume:
    """One taken-back kernel's journaled cells, until each reached its own session."""

    def __init__(self, kernel_id: str, cells: list[dict[str, Any]], log: Log) -> None:
        self.kernel_id = kernel_id
        self.log = log
        #: request msg_id -> the journal's summary of the cell (docs/PROTOCOL.md section 9)
        self.cells: dict[str, dict[str, Any]] = {
            c["msg_id"]: c for c in cells if isinstance(c, dict) and c.get("msg_id")
        }
        self._running: asyncio.Task[None] | None = None
        self._again = False

    def opened(self, shared: SharedChannels, owner: CellFollower | None) -> None:
        """A websocket of the kernel opened: give the cells again (at most one at a time;
        one opening during it asks for one more round)."""
        if self._running is not None and not self._running.done():
            self._again = True
            return
        self._running = asyncio.ensure_future(self._resume(shared, owner))
        _tasks.add(self._running)
        self._running.add_done_callback(_tasks.discard)

    async def _resume(self, shared: SharedChannels, owner: CellFollower | None) -> None:
        try:
            while True:
                self._again = False
                await self._once(shared, owner)
                if not self._again or not self.cells or shared.closed:
                    break
        except Exception:
            self.log.exception(
                "Kernel %s: its journaled cells could not be given again", self.kernel_id
            )

    async def _once(self, shared: SharedChannels, owner: CellFollower | None) -> None:
        await asyncio.wait_for(asyncio.shield(shared.ready(timeout=ANSWER_SECONDS)), ANSWER_SECONDS)
        ids = list(self.cells)
        if owner is not None:
            for cell in self.cells.values():
                header = cell.get("header") or {}
                owner.resumed(header, cell.get("metadata") or {}, cell.get("execution_count"))
                # Not back (yet): the owner takes the cell over after its grace, as for a
                # tab that left (docs/PROTOCOL.md section 6).
                owner.left_before(str(header.get("session")))
        # An ended cell's reply goes to its tab after the cell's whole, sent again: the page
        # closes the cell's request when it has the reply and an idle, so a reply that came
        # first (the control channel may overtake IOPub) would leave the whole unshown.
        sent_again = {m: shared.iopub_message(partial(_ends_again, m)) for m in ids}
        try:
            listed = await self._ask(shared, {"again": ids})
            # A cell the kernel no longer lists (it restarted, another server had it): gone.
            for gone in set(self.cells) - {str(c.get("msg_id")) for c in listed}:
                del self.cells[gone]
            delivered = []
            for cell in listed:
                msg_id = str(cell.get("msg_id"))
                if msg_id not in self.cells:
                    continue
                self.cells[msg_id] = cell
                header = cell.get("header") or {}
                if shared.owner(header.get("session", "")) is None:
                    continue  # its own tab is not back: kept for it
                if cell.get("state") == "ended" and isinstance(cell.get("reply"), dict):
                    await asyncio.wait_for(sent_again[msg_id], ANSWER_SECONDS)
                    shared.deliver_as_kernel("shell", "execute_reply", cell["reply"], header)
                    delivered.append(msg_id)
                elif isinstance(cell.get("input_request"), dict):
                    shared.deliver_as_kernel(
                        "stdin", "input_request", cell["input_request"], header
                    )
        finally:
            for waiter in sent_again.values():
                waiter.cancel()
        if delivered:
            await self._ask(shared, {"ack": delivered})
            for msg_id in delivered:
                self.cells.pop(msg_id, None)
        self.log.info(
            "Kernel %s: gave %d journaled cell(s) again; %d reply(ies) delivered from the journal",
            self.kernel_id,
            len(ids),
            len(delivered),
        )
        if not self.cells:
            resumes.pop(self.kernel_id, None)

    async def _ask(self, shared: SharedChannels, content: dict[str, Any]) -> list[dict[str, Any]]:
        reply = await asyncio.wait_for(
            shared.request("control", JOURNAL_REQUEST, content), ANSWER_SECONDS
        )
        answer = shared.unpack(reply["frames"][CONTENT])
        if not isinstance(answer, dict) or answer.get("status") != "ok":
            raise RuntimeError(f"journal_request failed: {answer}")
        cells = answer.get("cells")
        return [c for c in cells if isinstance(c, dict)] if isinstance(cells, list) else []


def _ends_again(msg_id: str, msg: KernelMessage) -> bool:
    """Whether ``msg`` is the ``idle`` that ends request ``msg_id``'s cell sent again (the
    journal marks what it sends again)."""
    if b"status" not in msg.frames[HEADER] or msg.parent_header.get("msg_id") != msg_id:
        return False
    metadata = msg.as_dict()["metadata"]
    return (
        msg.msg_type == "status"
        and isinstance(metadata, dict)
        and metadata.get(AGAIN_METADATA_KEY) is True
        and msg.content.get("execution_state") == "idle"
    )


#: kernel id -> its journaled cells not yet given back (one server process's).
resumes: dict[str, Resume] = {}
#: the resumes under way (kept until done: the loop holds tasks weakly)
_tasks: set[asyncio.Task[None]] = set()


def resume_on_open(kernel_id: str, shared: SharedChannels, owner: CellFollower | None) -> None:
    """A websocket of ``kernel_id`` opened on ``shared``: give its journaled cells again, if
    it has any (module docstring)."""
    resume = resumes.get(kernel_id)
    if resume is not None and resume.cells:
        resume.opened(shared, owner)
