"""What the pacer reads of a tab's messages, and what it charges for the memory one holds.

:class:`~.pacer.Pacer` decodes a message only when its rules need to (a message sent at once
costs no decoding unless the stream budget or a cell's end reads it): which messages count
toward the message rate (as stock counts them), which are decoded, a stream's text and the
output it adds to (its cell and name), a cell's ``idle``. And what a waiting entry holds in
memory, Python objects included, for the websocket's byte budget (docs/PROTOCOL.md section 8,
"Bounded").
"""

from __future__ import annotations

from typing import Any

from .merging import Entry, Message

#: What stock's limiter never counts (and never drops): they are not counted here either.
UNCOUNTED_MSG_TYPES = frozenset({"status", "comm_open", "execute_input"})

#: The IOPub messages decoded when they must wait: those the merge rules may fold or skip,
#: and ``status`` (a cell's ``idle`` ends its stream budget and its merge count).
DECODED_MSG_TYPES = frozenset(
    {
        "stream",
        "comm_msg",
        "update_display_data",
        "clear_output",
        "display_data",
        "execute_result",
        "status",
    }
)

#: The IOPub messages decoded when they are sent at once: a stream (the stream budget charges
#: what its text leaves on the page) and ``status`` (a cell's ``idle`` ends its budget).
SENT_DECODED_MSG_TYPES = frozenset({"stream", "status"})

#: What a waiting entry holds beyond its frames' bytes (bytes, measured with tracemalloc on
#: CPython 3.11, tests/unit/test_pacer_promises.py): the entry, its place in the line, the
#: kernel message's objects (its frames as bytes objects, its decoded header and parent)...
ENTRY_COST = 2200
#: ... and, for an entry that keeps its decoded message (one that may merge), that
#: message's dicts (charged with the size of its frames again, for the decoded text).
DECODED_COST = 800


def held_beyond_frames(entry: Entry) -> int:
    """What a waiting entry holds beyond the bytes of its frames, as the byte budget charges
    it: the entry and its place in the line, the kernel message's objects, and, if it keeps
    its decoded message (it may merge), that message, about the size of its frames again."""
    if entry.msg is None:
        return ENTRY_COST
    return ENTRY_COST + DECODED_COST + entry.size


def held_at_most(size: int) -> int:
    """The most a message of ``size`` frame bytes can hold once it waits in the line (its
    frames, and its decoded message if it keeps it): what a backlog leaves room for."""
    return size + ENTRY_COST + DECODED_COST + size


def idle_of(msg: Message) -> bool:
    return bool(
        msg["header"].get("msg_type") == "status"
        and (msg.get("content") or {}).get("execution_state") == "idle"
    )


def stream_key(msg: Message | None) -> tuple[Any, str]:
    """The output a stream message adds to: its cell and its name."""
    msg = msg or {}
    parent = (msg.get("parent_header") or {}).get("msg_id")
    return parent, str((msg.get("content") or {}).get("name", ""))


def stream_text(msg: Message | None) -> str | None:
    """A stream message's text (None: not a stream, or one whose text is not a string)."""
    if msg is None or msg["header"].get("msg_type") != "stream":
        return None
    content = msg.get("content")
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) else None
