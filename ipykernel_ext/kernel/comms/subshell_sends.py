"""Sends to a subshell's queue that never block the shell-channel thread.

The shell-channel thread hands each message for a subshell to that subshell's inproc PAIR
socket; ipykernel sends blocking, so a subshell that does not read (a subshell console's cell
that sleeps) fills its queue (about two thousand messages) and then stops the shell-channel
thread, and with it every client's shell requests: the main shell's cells, every other
subshell, ``create_subshell_request``. A subshell console's own comms reach that easily (a
slider it made, moved a few thousand times, or an unthrottled custom comm): their messages go
to its subshell (:mod:`.comm_routing`).

:class:`SubshellSends` sends those without blocking: a message that finds the queue full waits
here, in order, with every later message for that subshell, and goes as soon as there is room
(looked at every few milliseconds on the shell-channel thread's loop while anything waits).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import zmq

#: How often what waits is offered again, in seconds (only while something waits).
RETRY = 0.005


class SubshellSends:
    """Messages for subshells whose queue was full, by subshell id, in arrival order.

    Used on the shell-channel thread only; ``io_loop()`` is its IOLoop (what waits is offered
    again from its ``call_later``).
    """

    def __init__(self, io_loop: Callable[[], Any]) -> None:
        self._io_loop = io_loop
        self._waiting: dict[str, deque[tuple[Any, list[Any]]]] = {}

    def _later(self, delay: float, f: Callable[[], None]) -> None:
        self._io_loop().call_later(delay, f)

    def send_behind(self, subshell_id: str | None, manager: Any, msg: list[Any]) -> None:
        """Keep ``msg`` behind what waits for ``subshell_id`` (:meth:`holds`), on the socket
        the subshell manager has for it."""
        assert subshell_id is not None
        self.send(subshell_id, manager.get_shell_channel_to_subshell_socket(subshell_id), msg)

    def send(self, subshell_id: str, socket: Any, msg: list[Any]) -> None:
        """Send ``msg`` on ``socket`` (``subshell_id``'s) now if its queue has room and
        nothing waits for it, else keep it, behind what waits."""
        waiting = self._waiting.get(subshell_id)
        if waiting is None:
            try:
                # A multipart message is queued whole or not at all (the first frame decides).
                socket.send_multipart(msg, copy=False, flags=zmq.NOBLOCK)
                return
            except zmq.Again:
                waiting = self._waiting[subshell_id] = deque()
                self._later(RETRY, self._offer)
        waiting.append((socket, msg))

    def __bool__(self) -> bool:
        """Whether anything waits, for any subshell."""
        return bool(self._waiting)

    def holds(self, subshell_id: str | None) -> bool:
        """Whether messages wait for ``subshell_id`` (a later one must go behind them)."""
        return subshell_id is not None and subshell_id in self._waiting

    def _offer(self) -> None:
        for subshell_id, waiting in list(self._waiting.items()):
            while waiting:
                socket, msg = waiting[0]
                try:
                    socket.send_multipart(msg, copy=False, flags=zmq.NOBLOCK)
                except zmq.Again:
                    break
                except zmq.ZMQError:
                    pass  # (the subshell was deleted: its socket is closed; dropped as stock)
                waiting.popleft()
            if not waiting:
                del self._waiting[subshell_id]
        if self._waiting:
            self._later(RETRY, self._offer)
