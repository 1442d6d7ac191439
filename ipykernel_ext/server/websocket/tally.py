"""What one websocket's pacer did, and the line the server logs for it at a cell's end.

Nothing merged or sent late is lost, but it is said (docs/PROTOCOL.md section 8, "What is
said"): at a cell's ``idle``, when anything of that cell was merged, or any message went late
since the last such line, the server logs at INFO how many merged, the message window's peak,
how many went late past the rates, and the longest wait since the last line. :class:`Tally`
keeps those counts for :class:`~.pacer.Pacer`, which tells it what it sends and folds.
"""

from __future__ import annotations

import logging
from typing import Any

from .budgets import MessageWindow


class Tally:
    """One websocket's pacing counts and its cell line (module docstring)."""

    def __init__(self, log: logging.Logger | logging.LoggerAdapter[Any], name: str) -> None:
        self.log = log
        self.name = name
        #: messages the tab got as they came, and merged messages sent
        self.sent = 0
        self.sent_merged = 0
        #: messages folded into others or skipped with a replaced frame, in all
        self.folded = 0
        #: entries sent late (older than the catch-up age), whatever the rates
        self.caught_up = 0
        #: the oldest a message was when it was sent from the line (seconds)
        self.worst_age = 0.0
        #: since the last line logged: the longest wait here (section 8's bound), caught_up
        self._longest_since_logged = 0.0
        self._late_logged = 0

    def waited(self, age: float) -> None:
        """An entry of the line was sent ``age`` seconds after it began to wait."""
        self.worst_age = max(self.worst_age, age)
        self._longest_since_logged = max(self._longest_since_logged, age)

    def cell_ended(self, parent: Any, folded: int, window: MessageWindow | None) -> None:
        """A cell's ``idle`` was sent; ``folded`` of its messages were merged."""
        if not folded and self.caught_up <= self._late_logged:
            return
        # Also when only lateness: a flood that cannot merge says how long it waited.
        self.log.info(
            "IOPub to %s: cell %s: %d messages merged into others or skipped with a replaced "
            "frame (none lost; peak %d counted messages in a %.3g s window, %d sent late past "
            "the rates; the longest wait here since the last such line %.2f s)",
            self.name,
            parent,
            folded,
            window.peak if window is not None else -1,
            window.window if window is not None else 0,
            self.caught_up,
            self._longest_since_logged,
        )
        self._late_logged = self.caught_up
        self._longest_since_logged = 0.0
