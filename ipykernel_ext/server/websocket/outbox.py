"""One websocket's outgoing queue and writer: a slow reader holds only itself, and boundedly.

The shared channels read a kernel message once and hand it to every websocket of the kernel
(:mod:`ipykernel_ext.server`). Writing it to each websocket inline would make every tab wait
for the slowest one (and the relay, and so the kernel); buffering it without a limit would let
one tab that stopped reading (a suspended laptop, a frozen page) grow the server's memory
without end. An :class:`Outbox` is in between:

* :meth:`Outbox.put` queues the encoded message and returns at once (no I/O): the relay goes
  on with the next websocket and the next message;
* the websocket's own write futures drive its writer (tornado's ``write_message`` futures:
  done once the data is in the socket): a message goes straight to the websocket while less
  than :data:`CHUNK_BYTES` of earlier ones are still being written and nothing is queued,
  otherwise it is queued, and each completed write moves queued messages on, in order. What
  waits in tornado's buffer is about one chunk; a caught-up websocket costs what the inline
  write did (one ``write_message``, one done callback), no task step per message;
* ``buffered`` counts the bytes queued plus the bytes in flight. A message that would take it
  over ``budget`` stops the outbox instead (``on_overflow(bytes)``, the caller closes the
  websocket, which then reconnects): nothing more is written, and what was queued, that
  message last, is kept for :meth:`Outbox.close` to hand back (the connection gives it to
  jupyter_server's buffer of the session, for the next websocket). One message larger than
  the budget is accepted whatever waits, while no other such message is buffered (it is
  delivered behind a queue as on an empty one, and counts apart, :attr:`Outbox.charged`), so
  ``buffered`` never exceeds the budget plus one message, and what a websocket that never
  reads costs the server is that plus one chunk in tornado's buffer until the close times
  out.

Order is kept: a message goes to the websocket directly only when nothing is queued, and the
queue is written in order (tornado writes a websocket's frames in the order given).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

#: Default byte budget of one websocket's outbox (queued + in flight).
DEFAULT_BUDGET = 64 * 1024 * 1024

#: At most about this many bytes are handed to tornado before its writes complete.
CHUNK_BYTES = 1024 * 1024

#: The websocket close code for a websocket that did not read its messages: "Try Again Later"
#: (RFC 6455 registry, 1013): the frontend reconnects and gets the kernel's state back.
CLOSE_TOO_SLOW = 1013

#: RFC 6455 allows 123 bytes of close reason.
MAX_CLOSE_REASON = 123

#: ``write(data, binary)``: start writing one message, return its completion (or None).
Write = Callable[[Any, bool], "Awaitable[Any] | None"]

log = logging.getLogger(__name__)


class Outbox:
    """A bounded, ordered outgoing queue driven by its websocket's write futures."""

    def __init__(
        self,
        write: Write,
        budget: int = DEFAULT_BUDGET,
        on_overflow: Callable[[int], None] | None = None,
        *,
        chunk_bytes: int = CHUNK_BYTES,
        logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
    ) -> None:
        self.write = write
        self.budget = budget
        self.on_overflow = on_overflow
        self.chunk_bytes = max(1, chunk_bytes)
        self.log = logger or log
        self._queue: deque[tuple[Any, bool, int, Any]] = deque()
        #: Bytes handed to the websocket whose write has not completed.
        self.in_flight = 0
        #: Bytes queued plus bytes in flight.
        self.buffered = 0
        #: The largest ``buffered`` seen (with the message that overflowed, if one did).
        self.peak = 0
        #: Messages accepted, and messages whose write completed.
        self.queued = 0
        self.written = 0
        #: The size of the one message over the budget that is buffered (0: none).
        self.excess = 0
        #: Set when a message would have gone over the budget.
        self.overflowed = False
        self.closed = False
        #: Called when the queue has drained (a pacer sends what waits for this websocket).
        self.on_drained: Callable[[], None] | None = None

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def behind(self) -> bool:
        """Whether a message put now would wait (the websocket has not taken earlier ones)."""
        return bool(self._queue) or self.in_flight >= self.chunk_bytes

    @property
    def charged(self) -> int:
        """``buffered`` without the message over the budget it holds, if any (what counts
        against the budget with what a pacer holds)."""
        return self.buffered - self.excess

    def put(self, data: Any, binary: bool, original: Any = None) -> bool:
        """Queue one encoded message; False if the outbox is stopped or this overflowed it.
        ``original``: what it was encoded from (a kernel message, or the message a merged one
        stands for), handed back by :meth:`close` if it was never written."""
        if self.closed:
            return False
        size = len(data)
        oversized = size > self.budget
        if oversized:
            fits = not self.excess and self.charged <= self.budget
        else:
            fits = not self.buffered or self.charged + size <= self.budget
        if not fits:
            self.peak = max(self.peak, self.buffered + size)
            self.overflowed = True
            # Stopped, not emptied: what is queued, and this, wait for close() to hand over.
            self._queue.append((data, binary, size, original))
            self.stop()
            if self.on_overflow is not None:
                self.on_overflow(self.buffered + size)
            return False
        total = self.buffered = self.buffered + size
        if oversized:
            self.excess = size
        self.queued += 1
        if total > self.peak:
            self.peak = total
        if not self._queue and self.in_flight < self.chunk_bytes:
            self._send(data, binary, size)  # caught up: straight to the websocket
        else:
            self._queue.append((data, binary, size, original))
        return True

    def stop(self) -> None:
        """Write nothing more (the websocket is closing or closed); what is queued stays for
        :meth:`close`."""
        self.closed = True

    def close(self) -> list[Any]:
        """Stop, and hand back, once, the originals of what was queued and never written, in
        order (what tornado holds is its own: it writes it before the close frame)."""
        self.closed = True
        unwritten = [original for *_, original in self._queue if original is not None]
        self._queue.clear()
        return unwritten

    def _send(self, data: Any, binary: bool, size: int) -> None:
        self.in_flight += size
        try:
            fut = self.write(data, binary)
        except Exception as exc:
            self._stopped(exc)
            return
        if fut is None:
            self._done(size)
        else:
            fut = asyncio.ensure_future(fut)
            fut.add_done_callback(lambda f: self._completed(f, size))

    def _completed(self, fut: asyncio.Future[Any], size: int) -> None:
        exc = None if fut.cancelled() else fut.exception()  # retrieved: no asyncio warning
        if exc is not None or fut.cancelled():
            self._stopped(exc)
            return
        self._done(size)

    def _done(self, size: int) -> None:
        self.in_flight -= size
        self.buffered -= size
        if size > self.budget:
            self.excess = 0
        self.written += 1
        queue = self._queue
        while queue and self.in_flight < self.chunk_bytes and not self.closed:
            data, binary, size, _ = queue.popleft()
            self._send(data, binary, size)
        if self.on_drained is not None and not queue and self.in_flight < self.chunk_bytes:
            self.on_drained()

    def _stopped(self, exc: BaseException | None) -> None:
        # The websocket closed under us: nothing more can be written to it.
        if not self.closed:
            self.log.debug("Writing to the websocket stopped: %r", exc)
        self.stop()


def close_websocket(handler: Any, code: int, reason: str, logger: Any) -> None:
    """Close a websocket (tornado's handler) with ``code`` and ``reason`` (cut to what RFC
    6455 allows); one that is closed already is only logged."""
    encoded = reason.encode()[:MAX_CLOSE_REASON].decode(errors="ignore")
    try:
        handler.close(code, encoded)
    except Exception as exc:  # already closed or never opened
        logger.debug("Closing the websocket failed: %s", exc)


def close_too_slow(handler: Any, budget: int, logger: Any) -> None:
    """Close a websocket whose outbox (and pacer) would pass ``budget`` bytes: 1013."""
    reason = f"over the server's {budget}-byte buffer for this websocket; reconnect"
    close_websocket(handler, CLOSE_TOO_SLOW, reason, logger)
