"""One cell's record in the journal: its request, its outputs folded, its reply, its question.

:class:`JournalCell` folds the cell's IOPub outputs the way the page does, so that sending its
entries again after a ``clear_output`` leaves the page with what it would show had it seen
every message (``@jupyterlab/outputarea``, ``OutputArea._onIOPub`` and ``OutputAreaModel``):

* ``stream``: appended to the last entry when that is a stream of the same name, kept as the
  page stores it (:class:`KeptStream`, by the shared rule of ``ipykernel_ext.stream_text``: a
  progress bar costs one line), else a new entry;
* ``display_data``, ``execute_result``, ``error``: a new entry, kept as the bytes it came in
  (decoded only if it is sent again);
* ``update_display_data``: replaces the data of this cell's entry with that ``display_id``;
  one for a display of another cell is kept (the latest per id) and sent again as it came;
* ``clear_output``: clears the entries now, or with ``wait=True`` at the next added entry
  (until then it is kept at the end, and sent again there).

Entries are cut from the front when the journal's bound asks (:meth:`JournalCell.cut_front`);
the bytes cut are counted and told where the cell is sent again. Not thread-safe on its own:
the :class:`~.journal.Journal` holds the lock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...stream_text import StreamText

#: Output message types that add an output.
ADDING = frozenset({"stream", "display_data", "execute_result", "error"})
#: Every IOPub message type the journal folds into a cell.
FOLDED = ADDING | {"clear_output", "update_display_data"}

#: A part as it came (bytes, decoded only when sent again) or decoded.
Part = dict[str, Any] | bytes


def decoded(part: Part) -> dict[str, Any]:
    value = json.loads(part) if isinstance(part, bytes) else part
    return value if isinstance(value, dict) else {}


class KeptStream(StreamText):
    """A stream output of the cell: its name, and its text and cursor as the page stores them
    (sent again as :attr:`~StreamText.resent`)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def append(self, new: str) -> int:
        """Append ``new``; how many bytes the text grew (or shrank) by."""
        before = self.nbytes
        self.feed(new)
        return self.nbytes - before


@dataclass
class KeptOutput:
    """One output as it is sent again: its message type, content, metadata and buffers."""

    msg_type: str
    content: Part
    metadata: Part
    buffers: list[bytes]
    #: what holding it costs (stream: its text's UTF-8 bytes; else the frames it came in)
    nbytes: int
    display_id: str | None = None
    stream: KeptStream | None = None

    def parts(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Its content and metadata, decoded."""
        if self.stream is not None:
            return {"name": self.stream.name, "text": self.stream.resent}, {}
        return decoded(self.content), decoded(self.metadata)


def display_id_of(content: Part) -> str | None:
    """The ``transient.display_id`` of an output's content (decoded only if it names one)."""
    if isinstance(content, bytes) and b'"display_id"' not in content:
        return None
    transient = decoded(content).get("transient")
    value = transient.get("display_id") if isinstance(transient, dict) else None
    return value if isinstance(value, str) else None


@dataclass
class JournalCell:
    """One ``execute_request`` the kernel ran (or runs), as a returning server needs it."""

    #: the request's header (its outputs' parent) and metadata (JupyterLab's ``cellId``)
    header: dict[str, Any]
    metadata: dict[str, Any]
    execution_count: int | None
    entries: list[KeptOutput] = field(default_factory=list)
    #: the ``execute_reply`` content and metadata once the cell ended (None while it runs)
    reply: dict[str, Any] | None = None
    reply_metadata: dict[str, Any] = field(default_factory=dict)
    #: the routing ids (shell) of the servers that asked for the cell again while it ran:
    #: its ``execute_reply`` goes to them too (the request's own peer may be gone)
    reply_to: list[list[bytes]] = field(default_factory=list)
    #: an ``input_request`` content still waiting for its answer
    asking: dict[str, Any] | None = None
    #: a ``clear_output(wait=True)`` waiting for the next added entry
    clear_waiting: bool = False
    #: bytes of outputs cut from the front for the journal's bound, since the last clear
    cut_bytes: int = 0
    nbytes: int = 0

    @property
    def msg_id(self) -> str:
        return str(self.header.get("msg_id", ""))

    @property
    def ended(self) -> bool:
        return self.reply is not None

    def fold(
        self, msg_type: str, content: Part, metadata: Part, buffers: list[bytes], nbytes: int
    ) -> None:
        """One output message of this cell, in the order the kernel sent it (``content``
        decoded for a stream, a ``clear_output`` and an ``update_display_data``)."""
        if msg_type == "clear_output":
            if decoded(content).get("wait"):
                self.clear_waiting = True
            else:
                self._clear()
            return
        if msg_type in ADDING and self.clear_waiting:
            self._clear()
        if msg_type == "stream":
            fields = decoded(content)
            name, text = str(fields.get("name", "stdout")), str(fields.get("text", ""))
            last = self.entries[-1] if self.entries else None
            if last is None or last.stream is None or last.stream.name != name:
                last = KeptOutput("stream", b"", b"", [], 0, stream=KeptStream(name))
                self.entries.append(last)
            grown = last.stream.append(text)  # type: ignore[union-attr]  # set just above
            last.nbytes += grown
            self.nbytes += grown
            return
        display_id = display_id_of(content)
        if msg_type == "update_display_data" and display_id is not None:
            for entry in self.entries:
                if entry.display_id != display_id:
                    continue
                self.nbytes += nbytes - entry.nbytes
                if entry.msg_type == "update_display_data":
                    entry.content, entry.metadata = content, metadata
                else:  # the display shown here: its data replaced in place, as the page does
                    new = decoded(content)
                    entry.content = {
                        **decoded(entry.content),
                        "data": new.get("data", {}),
                        "metadata": new.get("metadata", {}),
                    }
                entry.buffers, entry.nbytes = buffers, nbytes
                return
        self.entries.append(KeptOutput(msg_type, content, metadata, buffers, nbytes, display_id))
        self.nbytes += nbytes

    def _clear(self) -> None:
        self.entries.clear()
        self.nbytes = 0
        self.cut_bytes = 0
        self.clear_waiting = False

    def cut_front(self, wanted: int) -> int:
        """Drop at least ``wanted`` bytes from the oldest outputs (a stream at a line start
        when it can); how many were dropped."""
        dropped = 0
        while self.entries and dropped < wanted:
            first = self.entries[0]
            if first.stream is not None and first.nbytes > wanted - dropped:
                cut = first.stream.cut_front(wanted - dropped)
                first.nbytes -= cut
                dropped += cut
                break
            self.entries.pop(0)
            dropped += first.nbytes
        self.nbytes -= dropped
        self.cut_bytes += dropped
        return dropped

    def summary(self) -> dict[str, Any]:
        """What ``journal_reply`` says of this cell (docs/PROTOCOL.md section 9)."""
        return {
            "msg_id": self.msg_id,
            "header": self.header,
            "metadata": self.metadata,
            "execution_count": self.execution_count,
            "state": "ended" if self.ended else "running",
            "reply": self.reply,
            "input_request": self.asking,
            "outputs": len(self.entries),
            "nbytes": self.nbytes,
            "cut_bytes": self.cut_bytes,
        }
