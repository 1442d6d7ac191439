"""One tab's IOPub pacer: nothing dropped, at most the configured rate, merged when it must wait.

jupyter_server's rate limit (``limit_rate``) drops a tab's IOPub messages while it is over
``iopub_msg_rate_limit`` messages or ``iopub_data_rate_limit`` stream bytes a second: a
slider ends on a stale value, a long print loses lines. Sending everything instead floods
the page (JupyterLab renders a stream output again on each message, so 200000 lines as
200000 messages take it minutes; the same bytes as one message render at once). A
:class:`Pacer` sits between a websocket's kernel messages and its :class:`~.outbox.Outbox`
(docs/PROTOCOL.md section 8):

* a message goes to the outbox at once while nothing waits, the outbox is not behind, the
  :class:`MessageWindow` has room and, for a stream, the :class:`StreamBudget` allows it;
* otherwise it waits in the tab's :class:`~.merging.Line`, where the merge rules fold it
  into what already waits (:mod:`.merging`); the line is sent in order as the window, the
  budget and the outbox allow (a timer, or the outbox's drain);
* a stream that could still grow waits for the stream budget; one that cannot (something it
  does not cross stands behind it, the cell's ``idle`` say) goes as soon as the window
  allows, so a cell's final output reaches the tab right after its ``idle`` arrived;
* what waits counts toward the websocket's byte budget with what its outbox holds: over it,
  the websocket is closed as a slow one (``on_overflow``), as before; state floods fold into
  a few entries, so a slow tab's memory stays bounded for them.

The wire format is the connection's (:class:`Wire`): this module never encodes a message.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .merging import STREAM, Line, Message
from .outbox import Outbox

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

#: The shortest wait before the line is looked at again (seconds): a timer per message
#: would cost more than the messages.
MIN_WAIT = 0.02


class Wire(Protocol):
    """What a connection class gives its pacer: how to read and send its messages."""

    def pace_decode(self, original: Any) -> Message:
        """``original`` as a message dict (``header``, ``parent_header``, ``metadata``,
        ``content``, ``buffers``)."""

    def pace_send(self, original: Any) -> None:
        """Send ``original`` to the tab unchanged."""

    def pace_send_merged(self, msg: Message) -> None:
        """Encode and send ``msg``, a message that stands for several (an IOPub message)."""


@dataclass(frozen=True)
class Rates:
    """jupyter_server's rate settings, as the pacer reads them."""

    #: messages a second a tab may get (``iopub_msg_rate_limit``; 0: no limit)
    messages: float = 1000
    #: stream bytes a second a page may be asked to render (``iopub_data_rate_limit``; 0: no limit)
    stream_bytes: float = 1_000_000
    #: the window both are measured over (``rate_limit_window``, seconds)
    window: float = 3


class MessageWindow:
    """At most ``rate * window`` counted messages in any ``window`` seconds.

    The window is cut into spans of at most half a second (``window / ceil(2 * window)``),
    each allowed ``rate * span`` messages: any window is whole spans, so the rule holds for
    every window, and a burst waits at most one span (a cell's last update reaches the tab
    within half a second of its ``idle``), where one count over the whole window could hold
    it back for the whole window.
    """

    def __init__(self, rate: float, window: float) -> None:
        self.span = window / math.ceil(2 * window) if window > 0 else 1.0
        self.allowance = max(1, int(rate * self.span))
        self.window = window
        self._span_sends: deque[float] = deque()
        self._window_sends: deque[float] = deque()
        #: the most counted messages sent in any ``window`` seconds so far
        self.peak = 0

    def wait(self, now: float) -> float:
        """Seconds until one more counted message may be sent (0: now)."""
        sends = self._span_sends
        while sends and sends[0] <= now - self.span:
            sends.popleft()
        if len(sends) < self.allowance:
            return 0.0
        return sends[0] + self.span - now

    def record(self, now: float) -> None:
        self._span_sends.append(now)
        recent = self._window_sends
        recent.append(now)
        while recent and recent[0] <= now - self.window:
            recent.popleft()
        self.peak = max(self.peak, len(recent))


class StreamBudget:
    """How much stream text a page is asked to render, at ``rate`` bytes a second.

    A page renders a cell's stream output again, whole, on each stream message, so a
    message costs the text the output already shows plus its own (``shown`` + bytes, reset
    at the cell's ``idle``). Tokens refill at ``rate`` up to ``rate * window``; a message
    goes when the tokens cover its cost, or when they are full (a larger output still
    updates, less often: every ``cost / rate`` seconds).
    """

    def __init__(self, rate: float, window: float) -> None:
        self.rate = rate
        self.capacity = rate * max(window, MIN_WAIT)
        self.tokens = self.capacity
        self.shown = 0
        self._at = time.monotonic()

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self._at) * self.rate)
        self._at = now

    def wait(self, now: float, nbytes: int) -> float:
        """Seconds until a stream message of ``nbytes`` may go (0: now)."""
        self._refill(now)
        cost = self.shown + nbytes
        if self.tokens >= cost or self.tokens >= self.capacity:
            return 0.0
        return (min(cost, self.capacity) - self.tokens) / self.rate

    def spend(self, now: float, nbytes: int) -> None:
        self._refill(now)
        self.shown += nbytes
        self.tokens -= self.shown

    def cell_ended(self) -> None:
        self.shown = 0


class Pacer:
    """One websocket's IOPub pacing and merging (module docstring)."""

    def __init__(
        self,
        wire: Wire,
        outbox: Outbox,
        rates: Rates,
        *,
        budget: int,
        on_overflow: Callable[[int], None],
        logger: logging.Logger | logging.LoggerAdapter[Any],
        name: str,
    ) -> None:
        self.wire = wire
        self.outbox = outbox
        self.window = MessageWindow(rates.messages, rates.window) if rates.messages > 0 else None
        self.stream_budget = (
            StreamBudget(rates.stream_bytes, rates.window) if rates.stream_bytes > 0 else None
        )
        self.budget = budget
        self.on_overflow = on_overflow
        self.log = logger
        self.name = name
        self.line = Line()
        #: messages the tab got as they came, and merged messages sent
        self.sent = 0
        self.sent_merged = 0
        #: messages folded into others or skipped with a replaced frame, in all
        self.folded = 0
        self.closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._flushing = False
        outbox.on_drained = self._drained

    # --- in ------------------------------------------------------------------------------

    def put(self, original: Any, channel: str, msg_type: str, size: int, text_bytes: int) -> None:
        """One message for the tab. ``text_bytes``: a stream's text size (its content frame)."""
        if self.closed:
            return
        if channel != "iopub":
            if self.line:  # replies and input requests keep their place behind the outputs
                self._hold(original, None, size, counted=False)
            else:
                self.wire.pace_send(original)
            return
        counted = msg_type not in UNCOUNTED_MSG_TYPES
        now = time.monotonic()
        if (
            not self.line
            and not self.outbox.behind
            and self._may_send(now, counted, msg_type, text_bytes)
        ):
            self._send_now(original, now, counted, msg_type, text_bytes)
            return
        msg = self.wire.pace_decode(original) if msg_type in DECODED_MSG_TYPES else None
        self._hold(original, msg, size, counted)

    def _may_send(self, now: float, counted: bool, msg_type: str, text_bytes: int) -> bool:
        if counted and self.window is not None and self.window.wait(now) > 0:
            return False
        budget = self.stream_budget
        return not (
            msg_type == "stream" and budget is not None and budget.wait(now, text_bytes) > 0
        )

    def _hold(self, original: Any, msg: Message | None, size: int, counted: bool) -> None:
        line = self.line
        before = line.folded_total
        line.add(original, msg, size, counted)
        self.folded += line.folded_total - before
        held = line.size + self.outbox.buffered
        if held > self.budget:
            self.close()
            self.on_overflow(held)
            return
        if not self.outbox.behind:
            self._schedule(0)

    # --- out -----------------------------------------------------------------------------

    def _send_now(
        self, original: Any, now: float, counted: bool, msg_type: str, text_bytes: int
    ) -> None:
        if msg_type == "status":
            self._status_sent(self.wire.pace_decode(original))
        self.wire.pace_send(original)
        self.sent += 1
        self._sent(now, counted, msg_type == "stream", text_bytes)

    def _sent(self, now: float, counted: bool, stream: bool, text_bytes: int) -> None:
        if counted and self.window is not None:
            self.window.record(now)
        if stream and self.stream_budget is not None:
            self.stream_budget.spend(now, text_bytes)

    def _status_sent(self, msg: Message) -> None:
        if (msg.get("content") or {}).get("execution_state") != "idle":
            return
        if self.stream_budget is not None:
            self.stream_budget.cell_ended()
        parent = (msg.get("parent_header") or {}).get("msg_id")
        folded = self.line.folded.pop(parent, 0)
        if folded:
            self.log.info(
                "IOPub to %s: cell %s: %d messages merged into others or skipped with a "
                "replaced frame (none lost; peak %d counted messages in a %.3g s window)",
                self.name,
                parent,
                folded,
                self.window.peak if self.window is not None else -1,
                self.window.window if self.window is not None else 0,
            )

    def _schedule(self, delay: float) -> None:
        """Look at the line again in ``delay`` seconds, or sooner if a look is due sooner (a
        message that ends a waiting stream must not wait for that stream's budget)."""
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        at = loop.time() + (max(delay, MIN_WAIT) if delay else 0)
        if self._timer is not None:
            if self._timer.when() <= at:
                return
            self._timer.cancel()
        self._timer = loop.call_at(at, self._flush)

    def _drained(self) -> None:
        if self.line and not self._flushing:
            self._flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing or self.closed:
            return
        self._flushing = True
        try:
            self._send_line()
        finally:
            self._flushing = False

    def _send_line(self) -> None:
        line = self.line
        now = time.monotonic()
        while line and not self.closed:
            if self.outbox.behind:
                return  # its drain calls back
            head = line.entries[0]
            wait = 0.0
            if head.counted and self.window is not None:
                wait = self.window.wait(now)
            text_bytes = head.text_size
            budget = self.stream_budget
            if not wait and head.kind == STREAM and budget is not None and line.head_may_grow():
                wait = budget.wait(now, text_bytes)
            if wait > 0:
                self._schedule(wait)
                return
            entry = line.pop()
            msg_type = entry.msg["header"].get("msg_type") if entry.msg else None
            if entry.merged:
                self.wire.pace_send_merged(entry.message())
                self.sent_merged += 1
            else:
                self.wire.pace_send(entry.original)
                self.sent += 1
            if msg_type == "status" and entry.msg is not None:
                self._status_sent(entry.msg)
            self._sent(now, entry.counted, entry.kind == STREAM, text_bytes)

    def close(self) -> None:
        """Stop: drop what waits (the websocket is gone or going)."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.line = Line()
        self.outbox.on_drained = None
