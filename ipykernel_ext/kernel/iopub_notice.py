"""The missed-messages notice: a cell is told, in its own output, that a frontend missed some.

When the IOPub socket gives a subscriber up (:mod:`ipykernel_ext.kernel.iopub`: its queue stayed
full past the send timeout), that frontend misses
messages. The kernel log says so, but a user reading the notebook never sees the log; so the
cell during which it happened gets a ``stream`` message on ``stderr``, published just before
its ``idle`` status, saying how many messages were missed at least and which option to raise.
A frontend whose queue has room again by then (it read again, as a paused server does) shows
it in the cell; see docs/PROTOCOL.md §1 for when it cannot.

Both steps run on the IOPub thread, in order with the cell's own messages (``schedule``),
so the count covers exactly the messages the cell sent, and the notice is sent straight on
the socket there, ahead of the ``idle`` that is queued behind it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .iopub_stats import IOPubStats

#: The first words of every notice (tests and users can search for them).
NOTICE_PREFIX = "[ipykernel_ext] IOPub:"


def notice_text(missed: int, stats: IOPubStats) -> str:
    """What the affected cell's stderr says."""
    return (
        f"{NOTICE_PREFIX} a frontend of this kernel missed at least {missed} output or "
        f"widget message(s) of this cell: its queue stayed full for "
        f"{stats.send_timeout_ms / 1000:g} s (--iopub-send-timeout). Reload the page to see "
        "the current state; raise that option if that frontend is alive but slow.\n"
    )


class MissedNotice:
    """Counts what each main-shell cell's frontends missed and tells the cell.

    ``stats`` returns the IOPub socket's counters (None when it has none: a socket that
    could not be adopted); ``schedule`` runs a function on the IOPub thread after what is
    already queued there; ``send_stream(content, parent)`` sends a ``stream`` message
    straight on the socket (called on the IOPub thread only).
    """

    def __init__(
        self,
        *,
        stats: Callable[[], IOPubStats | None],
        schedule: Callable[[Callable[[], None]], None],
        send_stream: Callable[[dict[str, Any], dict[str, Any]], None],
        enabled: bool = True,
    ) -> None:
        self._stats = stats
        self._schedule = schedule
        self._send_stream = send_stream
        self.enabled = enabled
        self._missed_at_start = 0

    def cell_started(self) -> None:
        """The main shell published ``busy``: count from the messages queued after it."""
        self._schedule(self._note_start)

    def cell_ending(self, parent: dict[str, Any]) -> None:
        """The main shell is about to publish ``idle`` for ``parent``: tell it, if need be."""
        self._schedule(lambda: self._tell(parent))

    def _note_start(self) -> None:
        stats = self._stats()
        self._missed_at_start = stats.missed if stats is not None else 0

    def _tell(self, parent: dict[str, Any]) -> None:
        stats = self._stats()
        if stats is None:
            return
        missed = stats.missed - self._missed_at_start
        self._missed_at_start = stats.missed
        if missed <= 0 or not self.enabled:
            return
        stats.notices += 1
        self._send_stream({"name": "stderr", "text": notice_text(missed, stats)}, parent)
