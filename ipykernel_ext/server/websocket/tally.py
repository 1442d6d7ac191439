"""How late one websocket's pacer sent, and the line the server logs for it at a cell's end.

Nothing merged or sent late is lost, but it is said (docs/PROTOCOL.md section 8, "What is
said"): at a cell's ``idle``, when anything of that cell was merged, or any message went late
since the last such line, the server logs at INFO how many merged, the message window's peak,
how many went late past the rates, and the longest wait since the last line. :class:`Tally`
keeps the lateness counts for :class:`~.pacer.Pacer`, which tells it how long each entry
waited and which went late; the merge counts are the line's (``Line.folded``).
"""

from __future__ import annotations

import logging
from typing import Any

from .budgets import MessageWindow


class Tally:
    """One websocket's lateness counts and its cell line (module docstring)."""

    def __init__(self, log: logging.Logger | logging.LoggerAdapter[Any], name: str) -> None:
        self.log = log
        self.name = name
        #: entries sent late (older than the catch-up age), whatever the rates
        self.caught_up = 0
        #: since the last line logged: the longest wait here (section 8's bound), caught_up
        self._longest_since_logged = 0.0
        self._late_logged = 0

    def waited(self, age: float) -> None:
        """An entry of the line was sent ``age`` seconds after it began to wait."""
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
