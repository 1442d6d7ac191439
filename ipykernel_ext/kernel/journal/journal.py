"""The kernel's cell journal: every journaled cell, fed in wire order, bounded, sent again.

:class:`Journal` is fed from three sides, under one lock:

* the kernel's hooks (:mod:`.kernel_part`), on the thread running the cell: a cell starts
  (its ``execute_input`` is about to go out), ends (its ``execute_reply`` is about to go out),
  asks ``input()`` and has its answer;
* the IOPub thread, after each message it sent (:meth:`Journal.sent`, the thread's ``tap``):
  an output whose parent is a journaled cell is folded into it (:mod:`.cell`). Recorded there,
  in the order the messages left, so that what is sent again (:meth:`Journal.again`, on the
  same thread) holds exactly what left before it and nothing that leaves after. The fold is
  batched: a sent message only joins a queue, folded :data:`FOLD_BATCH` at a time, and
  whatever reads the journal folds the queue first. Folding each message as it left cost
  the kernel 9 to 14% on output-heavy cells (measured in place, journal on against off):
  the few microseconds of each fold, on the IOPub thread between two sends, held the GIL
  the cell's thread was waiting for, thousands of times a second;
* the control thread: a server's ``journal_request`` (:meth:`Journal.summary`,
  :meth:`Journal.ack`).

**Bounds**: at most :attr:`Journal.max_bytes` of outputs in all (:data:`DEFAULT_MAX_BYTES`,
or what the launcher sets in :data:`~ipykernel_ext.protocol.JOURNAL_BYTES_ENV`; 0: no
journal). Over it the ended cells go first, oldest first; then the running cells are cut
from their oldest output, and the cut is told where they are sent again. At most
:data:`MAX_ENDED` ended cells are kept, until a server acknowledges them. What is sent again
is only ever a page's worth of each cell: streams are folded (``\\r`` applied), displays
replaced by id.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...protocol import (
    AGAIN_METADATA_KEY,
    BUFFERS,
    CONTENT,
    HEADER,
    JOURNAL_BYTES_ENV,
    METADATA,
    PARENT_HEADER,
    frame_bytes,
    split_frames,
)
from .cell import FOLDED, JournalCell, Part

#: Bytes of outputs the journal holds in all, unless the kernel is told otherwise.
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
#: Ended cells kept until a server acknowledges them (the oldest go first).
MAX_ENDED = 8
#: Sent messages that wait, at most, to be folded (module docstring): a few milliseconds of
#: folding at once, under the interpreter's switch interval (5 ms).
FOLD_BATCH = 256
#: Bytes of sent messages that wait, at most, to be folded: what the queue holds besides the
#: bound (the messages' frames, which a fold would have let go of, or kept within the bound).
FOLD_BYTES = 4 * 1024 * 1024
#: The metadata key of the note sent again where a cell's output was cut for the bound.
CUT_NOTE_KEY = "ipykernel_ext_journal_cut"


def journal_bytes(environ: Mapping[str, str]) -> int:
    """The journal's bound the launcher asked for (:data:`DEFAULT_MAX_BYTES` if none; 0: no
    journal); a bad value is an error naming the variable."""
    raw = environ.get(JOURNAL_BYTES_ENV, "")
    if raw == "":
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{JOURNAL_BYTES_ENV}={raw!r}: expected a number of bytes") from None
    if value < 0:
        raise ValueError(f"{JOURNAL_BYTES_ENV}={raw!r}: expected 0 (no journal) or more")
    return value


#: ``topic(msg_type)``: the IOPub topic the kernel publishes ``msg_type`` under.
Topic = Callable[[str], bytes]


_MSG_TYPE_KEY = b'"msg_type":'
_MSG_ID_KEY = b'"msg_id":'
#: Outputs kept as the bytes they came in (decoded only when sent again).
KEPT_RAW = frozenset({"display_data", "execute_result", "error"})


def _field(part: bytes, key: bytes) -> str | None:
    """A string field of a header's bytes, read where it can be (most messages are not a
    cell's outputs: they need no decoding), else decoded."""
    at = part.find(key)
    if at >= 0:
        start = part.find(b'"', at + len(key)) + 1
        end = part.find(b'"', start)
        if 0 < start <= end and part[at + len(key) : start - 1].strip() == b"":
            return part[start:end].decode("utf-8", "replace")
    value = json.loads(part).get(key.decode().strip('":'))
    return value if isinstance(value, str) else None


class Journal:
    """What the kernel keeps of its cells for a server that comes back (module docstring)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError(f"the journal's bound must be at least 1 byte, not {max_bytes}")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        #: by request msg_id, oldest first (the IOPub thread reads only whether it is empty,
        #: without the lock: one atomic read)
        self._cells: dict[str, JournalCell] = {}
        self._nbytes = 0
        #: sent messages not folded yet, in wire order (appended by the IOPub thread alone),
        #: and about how many bytes they hold (a fold elsewhere may leave it a message off)
        self._unfolded: deque[list[Any]] = deque()
        self._unfolded_bytes = 0

    # --- the kernel's hooks (the cell's thread) ----------------------------------------

    def started(self, request: dict[str, Any], execution_count: int | None) -> None:
        """``request`` (a whole ``execute_request``) runs; its outputs are journaled."""
        header = dict(request.get("header") or {})
        msg_id = header.get("msg_id")
        if not isinstance(msg_id, str):
            return
        metadata = request.get("metadata")
        cell = JournalCell(
            header, dict(metadata) if isinstance(metadata, dict) else {}, execution_count
        )
        with self._lock:
            self._cells.pop(msg_id, None)
            self._cells[msg_id] = cell

    def ended(self, msg_id: str, reply: dict[str, Any], metadata: dict[str, Any]) -> None:
        """The request's ``execute_reply`` (its content and metadata) is about to be sent."""
        with self._lock:
            cell = self._cells.get(msg_id)
            if cell is None:
                return
            cell.reply, cell.reply_metadata = dict(reply), dict(metadata)
            cell.asking = None
            ended = [c for c in self._cells.values() if c.ended]
            for old in ended[: max(0, len(ended) - MAX_ENDED)]:
                self._drop(old)

    def asking(self, msg_id: str, content: dict[str, Any]) -> None:
        """The request's cell asked ``input()`` (the ``input_request`` content)."""
        with self._lock:
            cell = self._cells.get(msg_id)
            if cell is not None:
                cell.asking = dict(content)

    def answered(self, msg_id: str) -> None:
        """Its ``input()`` returned (answered, interrupted or failed)."""
        with self._lock:
            cell = self._cells.get(msg_id)
            if cell is not None:
                cell.asking = None

    # --- the IOPub thread ------------------------------------------------------------------

    def sent(self, frames: list[Any]) -> None:
        """One message the IOPub socket just sent (``[*topic, DELIMITER, signature, ...]``):
        queued, and the queue folded once it holds :data:`FOLD_BATCH` messages or
        :data:`FOLD_BYTES`."""
        if not self._cells:
            return
        self._unfolded.append(frames)
        self._unfolded_bytes += sum(len(f) for f in frames)
        if len(self._unfolded) >= FOLD_BATCH or self._unfolded_bytes >= FOLD_BYTES:
            with self._lock:
                self._fold_unfolded()

    def _fold_unfolded(self) -> None:
        """Fold every queued message, in wire order (under the lock)."""
        self._unfolded_bytes = 0
        while self._unfolded:
            self._fold(self._unfolded.popleft())

    def _fold(self, frames: list[Any]) -> None:
        """One sent message into its cell, if it is an output of a journaled one (under the
        lock: the cells themselves are the test, before anything is decoded)."""
        split = split_frames(frames)
        if split is None or not split.whole:
            return  # not a Jupyter message: nothing of a cell
        try:
            parent_id = _field(split.raw(PARENT_HEADER), _MSG_ID_KEY)
            if parent_id not in self._cells:
                return
            msg_type = _field(split.raw(HEADER), _MSG_TYPE_KEY)
            if msg_type not in FOLDED:
                return
            raw_content = split.raw(CONTENT)
            # What the fold must read is decoded now; a display is kept as it came.
            content: Part = raw_content if msg_type in KEPT_RAW else json.loads(raw_content)
            metadata: Part = b"{}" if msg_type == "stream" else split.raw(METADATA)
        except (ValueError, TypeError, AttributeError):
            return  # unreadable: nothing a page would show either
        buffers = [frame_bytes(b) for b in split.parts[BUFFERS:]]
        nbytes = len(raw_content) + sum(len(b) for b in buffers)
        cell = self._cells[parent_id]
        before = cell.nbytes
        cell.fold(msg_type, content, metadata, buffers, nbytes)
        self._nbytes += cell.nbytes - before
        if self._nbytes > self.max_bytes:
            self._bound()

    def again(
        self, msg_ids: Iterable[str], session: Any, topic: Topic
    ) -> tuple[list[list[Any]], list[dict[str, Any]]]:
        """The messages that give a page each cell of ``msg_ids`` whole again, framed and
        signed, each marked (:data:`~ipykernel_ext.protocol.AGAIN_METADATA_KEY` in its
        message metadata): a ``clear_output``, a note if its front was cut for the bound,
        its outputs, a waiting ``clear_output(wait=True)``, and ``status: idle`` for a cell
        that ended; and the summary of every cell (:meth:`summary`) at that same moment, so
        what it says ended is what was sent again with its ``idle``. Called on the IOPub
        thread, which sends them before anything it sends later."""
        out: list[list[Any]] = []
        with self._lock:
            self._fold_unfolded()
            cells = [self._cells[m] for m in msg_ids if m in self._cells]
            for cell in cells:
                parts: list[tuple[str, dict[str, Any], dict[str, Any], list[bytes]]] = [
                    ("clear_output", {"wait": False}, {}, [])
                ]
                if cell.cut_bytes:
                    note = (
                        f"[{cell.cut_bytes} bytes of this cell's earlier output were not kept: "
                        f"the kernel keeps at most {self.max_bytes} bytes of outputs for a "
                        "server that comes back]"
                    )
                    parts.append(
                        (
                            "display_data",
                            {
                                "data": {"text/plain": note},
                                "metadata": {CUT_NOTE_KEY: cell.cut_bytes},
                            },
                            {},
                            [],
                        )
                    )
                parts += [(e.msg_type, *e.parts(), e.buffers) for e in cell.entries]
                if cell.clear_waiting:
                    parts.append(("clear_output", {"wait": True}, {}, []))
                if cell.ended:
                    parts.append(("status", {"execution_state": "idle"}, {}, []))
                for msg_type, content, metadata, buffers in parts:
                    marked = {**metadata, AGAIN_METADATA_KEY: True}
                    msg = session.msg(msg_type, content, parent=cell.header, metadata=marked)
                    out.append(session.serialize(msg, ident=topic(msg_type)) + list(buffers))
            summary = [cell.summary() for cell in self._cells.values()]
        return out, summary

    def replies_to(self, msg_id: str) -> tuple[dict[str, Any], dict[str, Any], list[list[bytes]]]:
        """The ended request's reply content and metadata, and who else must have it."""
        with self._lock:
            cell = self._cells.get(msg_id)
            if cell is None or cell.reply is None:
                return {}, {}, []
            return cell.reply, cell.reply_metadata, list(cell.reply_to)

    # --- a server (the control thread) ------------------------------------------------

    def reply_also_to(self, msg_ids: Iterable[str], ident: list[bytes]) -> None:
        """The running cells of ``msg_ids`` send their ``execute_reply`` to ``ident`` too."""
        with self._lock:
            for msg_id in msg_ids:
                cell = self._cells.get(msg_id)
                if cell is not None and not cell.ended and ident not in cell.reply_to:
                    cell.reply_to.append(list(ident))

    def summary(self) -> list[dict[str, Any]]:
        """Each journaled cell, oldest first, as ``journal_reply`` says it."""
        with self._lock:
            self._fold_unfolded()
            return [cell.summary() for cell in self._cells.values()]

    def ack(self, msg_ids: Iterable[str]) -> list[str]:
        """A server has these cells whole: the ended ones are dropped (which ones)."""
        dropped = []
        with self._lock:
            self._fold_unfolded()
            for msg_id in msg_ids:
                cell = self._cells.get(msg_id)
                if cell is not None and cell.ended:
                    self._drop(cell)
                    dropped.append(msg_id)
        return dropped

    @property
    def nbytes(self) -> int:
        """Bytes of outputs held now, all cells together (what was sent until now folded)."""
        with self._lock:
            self._fold_unfolded()
            return self._nbytes

    # --- under the lock --------------------------------------------------------------------

    def _drop(self, cell: JournalCell) -> None:
        if self._cells.pop(cell.msg_id, None) is not None:
            self._nbytes -= cell.nbytes

    def _bound(self) -> None:
        """Back under :attr:`max_bytes`: ended cells first (oldest first), then the running
        ones from their oldest output (largest cell first)."""
        for cell in [c for c in self._cells.values() if c.ended]:
            if self._nbytes <= self.max_bytes:
                break
            self._drop(cell)
        while self._nbytes > self.max_bytes:
            largest = max(self._cells.values(), key=lambda c: c.nbytes, default=None)
            if largest is None or not largest.nbytes:
                break
            self._nbytes -= largest.cut_front(self._nbytes - self.max_bytes)
