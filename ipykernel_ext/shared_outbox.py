"""One websocket's outgoing queue and writer: a slow reader holds only itself, and boundedly.

The shared channels read a kernel message once and hand it to every websocket of the kernel
(:mod:`ipykernel_ext.server`). Writing it to each websocket inline would make every tab wait
for the slowest one (and the relay, and so the kernel); buffering it without a limit would let
one tab that stopped reading (a suspended laptop, a frozen page) grow the server's memory
without end. An :class:`Outbox` is in between:

* :meth:`Outbox.put` queues the encoded message and returns at once (no I/O): the relay goes
  on with the next websocket and the next message;
* one writer task per websocket writes the queue in order, a chunk at a time (at most
  :data:`CHUNK_MESSAGES` messages or :data:`CHUNK_BYTES` bytes), and awaits the chunk's write
  futures (tornado's ``write_message`` futures: done once the data is in the socket) before
  the next: what waits in tornado's buffer is one chunk at most;
* ``buffered`` counts the bytes queued plus the chunk in flight. A message that would take it
  over ``budget`` closes the outbox instead (``on_overflow(bytes)``, the caller closes the
  websocket, which then reconnects and is brought up to date by the kernel's state); a
  message is always accepted into an empty outbox, so ``buffered`` never exceeds
  ``max(budget, one message)``, and what a websocket that never reads costs the server is
  its budget plus one chunk in tornado's buffer until the close times out.

Order is kept: one queue per websocket, one writer, futures awaited in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

#: Default byte budget of one websocket's outbox (queued + in flight).
DEFAULT_BUDGET = 64 * 1024 * 1024

#: At most this many messages, or this many bytes, are handed to tornado before awaiting.
CHUNK_MESSAGES = 64
CHUNK_BYTES = 1024 * 1024

#: ``write(data, binary)``: start writing one message, return its completion (or None).
Write = Callable[[Any, bool], "Awaitable[Any] | None"]

log = logging.getLogger(__name__)


class Outbox:
    """A bounded, ordered outgoing queue with its own writer task (see the module doc)."""

    def __init__(
        self,
        write: Write,
        budget: int = DEFAULT_BUDGET,
        on_overflow: Callable[[int], None] | None = None,
        *,
        chunk_messages: int = CHUNK_MESSAGES,
        chunk_bytes: int = CHUNK_BYTES,
        logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
    ) -> None:
        self.write = write
        self.budget = budget
        self.on_overflow = on_overflow
        self.chunk_messages = max(1, chunk_messages)
        self.chunk_bytes = max(1, chunk_bytes)
        self.log = logger or log
        self._queue: deque[tuple[Any, bool, int]] = deque()
        self._wakeup: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        #: Bytes queued plus bytes handed to the websocket whose write has not completed.
        self.buffered = 0
        #: The largest ``buffered`` seen (with the message that overflowed, if one did).
        self.peak = 0
        #: Messages accepted, and messages whose write completed.
        self.queued = 0
        self.written = 0
        #: Set when a message would have gone over the budget.
        self.overflowed = False
        self.closed = False

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, data: Any, binary: bool) -> bool:
        """Queue one encoded message; False if the outbox is closed or this overflowed it."""
        if self.closed:
            return False
        size = len(data)
        total = self.buffered + size
        if total > self.budget and self.buffered:
            self.peak = max(self.peak, total)
            self.overflowed = True
            self.close()
            if self.on_overflow is not None:
                self.on_overflow(total)
            return False
        self._queue.append((data, binary, size))
        self.buffered = total
        self.queued += 1
        if total > self.peak:
            self.peak = total
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        elif self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)
        return True

    def close(self) -> None:
        """Drop what is queued and stop the writer (what tornado holds is its own)."""
        if self.closed:
            return
        self.closed = True
        self._queue.clear()
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queue
        while not self.closed:
            if not queue:
                self._wakeup = loop.create_future()
                try:
                    await self._wakeup
                finally:
                    self._wakeup = None
                continue
            pending: list[Any] = []
            count = nbytes = 0
            try:
                while queue and count < self.chunk_messages and nbytes < self.chunk_bytes:
                    data, binary, size = queue.popleft()
                    count += 1
                    nbytes += size
                    fut = self.write(data, binary)
                    if fut is not None:
                        pending.append(fut)
                if pending:
                    results = await asyncio.gather(*pending, return_exceptions=True)
                    failed = next((r for r in results if isinstance(r, BaseException)), None)
                    if failed is not None:
                        raise failed
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # The websocket closed under us: nothing more can be written to it.
                self.log.debug("Writing to the websocket stopped: %r", exc)
                self.close()
                return
            self.buffered -= nbytes
            self.written += count
