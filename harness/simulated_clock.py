"""Simulated time for the server's IOPub pacer (a ``Clock`` of it): hours in seconds.

The real ``Pacer``, ``Line`` and ``Outbox`` of :mod:`ipykernel_ext.server.websocket` run on it
unchanged: :meth:`SimulatedClock.advance` moves time on and runs every timer that falls due,
in order, as an event loop would.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable


class SimulatedTimer:
    def __init__(self, when: float) -> None:
        self._when = when
        self.cancelled = False

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self.cancelled = True


class SimulatedClock:
    """A clock whose time moves only when told, running the timers that fall due."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._timers: list[tuple[float, int, SimulatedTimer, Callable[[], None]]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> SimulatedTimer:
        timer = SimulatedTimer(when)
        heapq.heappush(self._timers, (when, next(self._order), timer, callback))
        return timer

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``, running each timer at its time."""
        end = self.now + seconds
        while self._timers and self._timers[0][0] <= end:
            when, _, timer, callback = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.now = max(self.now, when)
            callback()
        self.now = end
