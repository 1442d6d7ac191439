"""The IOPub backlog: what a full subscriber's queue keeps waiting, in order, and its bytes.

:class:`Backlog` is the socket's (:mod:`ipykernel_ext.kernel.iopub.socket`) queue of what could not
be sent yet. It keeps its own byte count and the most bytes it ever held, so what
``iopub_stats_reply`` says waits (``backlog_messages``, ``backlog_bytes``,
``backlog_peak_bytes``) is read off the queue itself and cannot drift from it. Only the IOPub
thread changes it; any thread may read its length and byte counts (plain ints).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


def message_nbytes(msg_parts: Any) -> int:
    """The bytes of a multipart message, whatever its frames are (bytes, Frame, memoryview)."""
    total = 0
    for part in msg_parts:
        try:
            total += memoryview(part).nbytes
        except TypeError:
            total += len(part)
    return total


@dataclass
class BacklogEntry:
    """One message in the backlog, with what its send takes."""

    parts: Any
    flags: int
    kwargs: dict[str, Any]
    nbytes: int
    #: waited while a subscriber was given up: that subscriber misses it (counted once)
    missed: bool = False


class Backlog:
    """The messages waiting to be sent, oldest first, and their bytes."""

    #: bytes waiting now
    nbytes: int
    #: the most bytes that ever waited
    peak_bytes: int

    def __init__(self) -> None:
        self._messages: deque[BacklogEntry] = deque()
        self.nbytes = 0
        self.peak_bytes = 0

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[BacklogEntry]:
        return iter(self._messages)

    def add(self, parts: Any, flags: int, kwargs: dict[str, Any], *, ahead: bool = False) -> None:
        """Queue a message last, or first (``ahead``: to go before the head)."""
        waiting = BacklogEntry(parts, flags, kwargs, message_nbytes(parts))
        if ahead:
            self._messages.appendleft(waiting)
        else:
            self._messages.append(waiting)
        self.nbytes += waiting.nbytes
        self.peak_bytes = max(self.peak_bytes, self.nbytes)

    def head(self) -> BacklogEntry:
        """The next message to send (the backlog must not be empty)."""
        return self._messages[0]

    def pop(self) -> BacklogEntry:
        """Take the head off: it has been sent."""
        done = self._messages.popleft()
        self.nbytes -= done.nbytes
        return done

    def mark_missed(self) -> int:
        """Mark every waiting message as missed by a given-up subscriber; how many were new."""
        missed = 0
        for waiting in self._messages:
            if not waiting.missed:
                waiting.missed = True
                missed += 1
        return missed

    def clear(self) -> None:
        """Forget what waits (the socket is closing and cannot send it)."""
        self._messages.clear()
        self.nbytes = 0
