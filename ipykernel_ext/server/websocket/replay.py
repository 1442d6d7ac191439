"""What a returning session missed, let into its new websocket's pacer as the tab reads.

A session that comes back gets, first, what its last websocket never took: jupyter_server's
offline buffer of the session, or what the server held for it behind a gateway. After a 1013
that is more than the websocket's byte budget; put into the pacer in one go, each large output
charged its frames and its decoded text, the new websocket would be over the budget before
it read anything, closed with 1013 again, and the session could never come back.

:class:`Replay` owns that rule (docs/PROTOCOL.md section 8, "A session that comes back"):
:class:`~.pacer.Pacer` hands it everything put during a replay, and what the kernel sends
after, while anything of the replay waits (order is kept); it gives the next message back
when what the pacer and the outbox hold leaves room, under the budget, for the most that
message can hold (:func:`~.reading.held_at_most`; the first always, when they hold nothing).
What came after the replay counts against a budget of its own: a tab that reads gets through
its replay holding at most twice the budget, one that does not is closed as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, NamedTuple

from .reading import held_at_most


class Missed(NamedTuple):
    """A message put while a replay waits, as :meth:`~.pacer.Pacer.put` took it."""

    original: Any
    channel: str
    msg_type: str
    size: int
    #: it came after the replay (the kernel sends it now): it counts toward the budget
    live: bool


class Replay:
    """One websocket's replay and what waits behind it (module docstring)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        #: a replay is being put (what is put is what the session missed)
        self.replaying = False
        self._waiting: deque[Missed] = deque()
        #: the most the waiting live messages will hold once let in
        self.live = 0

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def add(self, original: Any, channel: str, msg_type: str, size: int) -> bool:
        """Wait behind the rest; False when what came after the replay is over its budget
        (the tab does not read what the kernel sends now)."""
        missed = Missed(original, channel, msg_type, size, live=not self.replaying)
        self._waiting.append(missed)
        if missed.live:
            self.live += held_at_most(size)
        return self.live <= self.budget

    def take(self, held: int) -> Missed | None:
        """The next message, if ``held`` (what the pacer and outbox hold) leaves it room."""
        if not self._waiting:
            return None
        first = self._waiting[0]
        if held and held + held_at_most(first.size) > self.budget:
            return None
        return self.pop()

    def pop(self) -> Missed:
        """The next message, whatever is held (the connection writes a message of its own)."""
        first = self._waiting.popleft()
        if first.live:
            self.live -= held_at_most(first.size)
        return first

    def hand_back(self) -> Iterator[Any]:
        """Empty it: the originals, in order (the websocket closes)."""
        waiting, self._waiting, self.live = self._waiting, deque(), 0
        return (missed.original for missed in waiting)
