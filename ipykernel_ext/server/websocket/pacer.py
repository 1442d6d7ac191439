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
  otherwise it waits in the tab's :class:`~.line.Line`, folded into what waits where the
  rules allow (:mod:`.merging`), and the line goes in order as they allow (a timer, or the
  outbox's drain);
* a stream waits for its budget (per cell and stream, what the page holds), at most
  :data:`MAX_STREAM_WAIT` after that output's last message, unless its cell's ``idle``
  waits behind it; meanwhile what may cross it (widget state, display updates, another
  cell's messages) goes ahead at the message rate, and its output's next stream joins it;
* a message older than :data:`CATCH_UP_AGE` goes as fast as the tab takes it, whatever the
  rates: a tab that reads is never far behind, whatever merges or not;
* what the connection writes itself (``restarting``, ``dead``, a stderr note) goes after
  what waits, which is then sent at once (:meth:`Pacer.release`); what waits counts toward
  the websocket's byte budget with what its outbox holds, Python objects included
  (:mod:`.reading`): over it, the pacer stops and the websocket is closed as a slow one
  (``on_overflow``); a close hands back, once and in order, what waits (:meth:`Pacer.close`)
  for jupyter_server's buffer of the session; one message over the budget is delivered as
  on an empty line.

The wire format is the connection's (:class:`~.wire.Wire`): this module never encodes a message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .budgets import (
    CATCH_UP_AGE,
    MIN_WAIT,
    Clock,
    LoopClock,
    MessageWindow,
    Rates,
    StreamBudget,
    Timer,
)
from .line import Line
from .merging import OTHER, STATE_KINDS, STREAM, Entry, Message
from .outbox import Outbox
from .reading import (
    DECODED_MSG_TYPES,
    SENT_DECODED_MSG_TYPES,
    UNCOUNTED_MSG_TYPES,
    held_beyond_frames,
    idle_of,
    stream_key,
    stream_text,
)
from .replay import Replay
from .tally import Tally
from .wire import Wire

#: A waiting stream that holds more than this share of the websocket's byte budget goes at
#: once, whatever the stream budget says: what the pacer holds never closes a tab that reads.
STREAM_HOLD_SHARE = 8


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
        clock: Clock | None = None,
    ) -> None:
        self.wire = wire
        self.clock: Clock = clock if clock is not None else LoopClock()
        self.outbox = outbox
        self.window = MessageWindow(rates.messages, rates.window) if rates.messages > 0 else None
        self.stream_budget = (
            StreamBudget(rates.stream_bytes, rates.window, self.clock.time())
            if rates.stream_bytes > 0
            else None
        )
        self.budget = budget
        self.on_overflow = on_overflow
        self.log = logger
        self.name = name
        self.line = Line()
        #: what it sent, folded and sent late, and the line logged at a cell's end
        self.tally = Tally(logger, name)
        #: over the byte budget: nothing more is sent, what comes is kept for :meth:`close`
        self.stopped = False
        #: handed over (:meth:`close`): nothing more is taken
        self.closed = False
        #: what came once the pacer or its outbox stopped, as it came, for :meth:`close`
        self._kept: list[Any] = []
        #: the cells whose ``idle`` waits in the line (how many of them): their streams can
        #: no longer grow and go without waiting for the stream budget
        self._ending: dict[Any, int] = {}
        self._timer: Timer | None = None
        self._flushing = False
        #: what a returning session missed, and what came behind it (:meth:`replaying`)
        self.replay = Replay(budget)
        outbox.on_drained = self._drained

    # --- in ------------------------------------------------------------------------------

    def put(self, original: Any, channel: str, msg_type: str, size: int) -> None:
        """One message for the tab (``size``: its bytes, as the byte budget counts them)."""
        if self.closed:
            return
        if self.stopped or self.outbox.closed:
            # The websocket is closing: kept as it came, for the hand-over (close()).
            self._kept.append(original)
            return
        if self.replay.replaying or self.replay:
            if not self.replay.add(original, channel, msg_type, size):
                self._stop()
                self.on_overflow(self.replay.live)
            return
        self._take(original, channel, msg_type, size)

    @contextmanager
    def replaying(self) -> Iterator[None]:
        """What is put inside is what the tab's session missed: it is let in as the tab reads
        (:mod:`.replay`); what the kernel sends meanwhile waits behind it, in order."""
        self.replay.replaying = True
        try:
            yield
        finally:
            self.replay.replaying = False
            self._let_in()

    def _let_in(self) -> None:
        """The replay's next messages, while the line and the outbox leave them room."""
        while not (self.closed or self.stopped or self.outbox.closed):
            missed = self.replay.take(self.line.size + self.outbox.charged)
            if missed is None:
                return
            self._take(missed.original, missed.channel, missed.msg_type, missed.size)

    def _take(self, original: Any, channel: str, msg_type: str, size: int) -> None:
        iopub = channel == "iopub"
        counted = iopub and msg_type not in UNCOUNTED_MSG_TYPES
        if size > self.budget:
            self._send_whole(original, msg_type if iopub else "", counted)
            return
        if not iopub:
            if self.line:  # replies and input requests keep their place behind the outputs
                self._hold(original, None, size, counted=False)
            else:
                self.wire.pace_send(original)
            return
        now = self.clock.time()
        msg = None
        if not self.line and not self.outbox.behind:
            # Sent at once, a message is decoded only if its own accounting needs it.
            if msg_type in SENT_DECODED_MSG_TYPES:
                msg = self.wire.pace_decode(original)
            if self._may_send(now, counted, msg):
                self._send_now(original, msg, now, counted)
                return
        if msg is None and msg_type in DECODED_MSG_TYPES:
            msg = self.wire.pace_decode(original)
        self._hold(original, msg, size, counted)

    def _send_whole(self, original: Any, msg_type: str, counted: bool) -> None:
        """One message over the byte budget: delivered as it would be on an empty line (what
        waits goes first, at once; the outbox takes one such message whatever it holds; a
        replay stays behind it)."""
        self._release_line()
        if self.stopped or self.outbox.closed:
            self._kept.append(original)
            return
        msg = self.wire.pace_decode(original) if msg_type in SENT_DECODED_MSG_TYPES else None
        self._send_now(original, msg, self.clock.time(), counted)

    def _may_send(self, now: float, counted: bool, msg: Message | None) -> bool:
        if counted and self.window is not None and self.window.wait(now) > 0:
            return False
        budget = self.stream_budget
        text = stream_text(msg)
        if text is None or budget is None:
            return True
        return budget.wait(now, stream_key(msg), len(text)) <= 0

    def _hold(self, original: Any, msg: Message | None, size: int, counted: bool) -> None:
        line = self.line
        last = line.last() if line else None
        stamp = last.stamp if last is not None else 0
        entries = len(line)
        line.add(original, msg, size, counted)
        now_last = line.last()
        if now_last is not last or now_last.stamp != stamp:  # a new place in the line
            now_last.born = self.clock.time()
        idle = msg is not None and idle_of(msg)
        if idle:
            parent = now_last.parent
            self._ending[parent] = self._ending.get(parent, 0) + 1
        if len(line) > entries:  # a new entry: charge what it holds beyond its frames
            if now_last.kind == OTHER and not idle:
                now_last.msg = None  # it never merges: its frames are all it needs
            line.charge(now_last, held_beyond_frames(now_last))
        held = line.size + self.outbox.charged
        if held > self.budget:
            self._stop()
            self.on_overflow(held)
            return
        if not self.outbox.behind:
            self._schedule(0)

    def _stop(self) -> None:
        """Over the byte budget (the websocket is being closed): send nothing more, keep
        everything for the hand-over."""
        self.stopped = True
        self._cancel_timer()

    # --- out -----------------------------------------------------------------------------

    def _send_now(self, original: Any, msg: Message | None, now: float, counted: bool) -> None:
        if msg is not None and msg["header"].get("msg_type") == "status":
            self._status_sent(msg)
        self.wire.pace_send(original)
        if counted and self.window is not None:
            self.window.record(now)
        text = stream_text(msg)
        if text is not None and self.stream_budget is not None:
            self.stream_budget.spend(now, stream_key(msg), [text])

    def _send_entry(self, entry: Entry, now: float) -> None:
        self.tally.waited(now - entry.born)
        if entry.merged:
            self.wire.pace_send_merged(entry.message())
        else:
            self.wire.pace_send(entry.original)
        if entry.counted and self.window is not None:
            self.window.record(now)
        if entry.kind == STREAM and self.stream_budget is not None:
            self.stream_budget.spend(now, (entry.parent, entry.name), entry.texts())
        elif entry.msg is not None and entry.msg["header"].get("msg_type") == "status":
            if idle_of(entry.msg):
                left = self._ending.pop(entry.parent, 1) - 1
                if left:
                    self._ending[entry.parent] = left
            self._status_sent(entry.msg)

    def _status_sent(self, msg: Message) -> None:
        if not idle_of(msg):
            return
        parent = (msg.get("parent_header") or {}).get("msg_id")
        if self.stream_budget is not None:
            self.stream_budget.cell_ended(parent)
        self.tally.cell_ended(parent, self.line.folded.pop(parent, 0), self.window)

    def _schedule(self, delay: float) -> None:
        """Look at the line again in ``delay`` seconds, or sooner if a look is due sooner (a
        message that ends a waiting stream must not wait for that stream's budget)."""
        if self.closed or self.stopped:
            return
        at = self.clock.time() + (max(delay, MIN_WAIT) if delay else 0)
        if self._timer is not None:
            if self._timer.when() <= at:
                return
            self._timer.cancel()
        self._timer = self.clock.call_at(at, self._flush)

    def _drained(self) -> None:
        if (self.line or self.replay) and not self._flushing:
            self._flush()

    def _flush(self) -> None:
        self._cancel_timer()
        if self._flushing or self.closed or self.stopped:
            return
        self._flushing = True
        try:
            self._send_line()
            self._let_in()
        finally:
            self._flushing = False

    def _window_wait(self, entry: Entry, now: float) -> float:
        return self.window.wait(now) if entry.counted and self.window is not None else 0.0

    def _stream_wait(self, head: Entry, now: float) -> float:
        """How long the head, a stream, waits for the stream budget (0: it goes now)."""
        budget = self.stream_budget
        if (
            budget is None
            or head.size * STREAM_HOLD_SHARE > self.budget
            or head.parent in self._ending  # its cell ended: it can no longer grow
        ):
            return 0.0
        return budget.wait(now, (head.parent, head.name), head.text_size)

    def _send_line(self) -> None:
        line = self.line
        outbox = self.outbox
        now = self.clock.time()
        while line and not self.stopped:
            if outbox.behind or outbox.closed:
                return  # its drain calls back
            head = line.first()
            # Late: the oldest waiting message goes as fast as the tab takes it, whatever
            # the rates (what merges has merged by now; what cannot must not fall behind).
            due = head.born + CATCH_UP_AGE - now
            if due <= 0:
                self.tally.caught_up += 1
                self._send_entry(line.pop(), now)
                continue
            wait = self._window_wait(head, now)
            if wait > 0:
                self._schedule(min(wait, due))
                return
            if head.kind == STREAM:
                stream_wait = self._stream_wait(head, now)
                if stream_wait > 0 and not self._cross(head, now, min(stream_wait, due)):
                    return
                if stream_wait > 0:
                    continue
            self._send_entry(line.pop(), now)

    def _cross(self, head: Entry, now: float, until: float) -> bool:
        """The head, a stream, waits for its budget: what stands right behind it goes ahead
        if it may cross it (widget state, a display update, another cell's message), at the
        message rate, or joins it (the same output's next stream). False: nothing moved, the
        line is looked at again in ``until`` seconds or when the window allows."""
        line = self.line
        behind = line.second()
        if behind is None:
            self._schedule(until)
            return False
        if behind.kind == STREAM and behind.key == head.key:
            line.join_second()
            return True
        if behind.kind not in STATE_KINDS and (
            behind.parent is None or behind.parent == head.parent
        ):
            self._schedule(until)  # it keeps its place: both wait for the budget
            return False
        wait = self._window_wait(behind, now)
        if wait > 0:
            self._schedule(min(wait, until))
            return False
        self._send_entry(line.pop_second(), now)
        return True

    def release(self) -> None:
        """Send everything that waits now, in order, whatever the rates: the connection is
        about to write a message of its own (a ``restarting`` or ``dead`` status, a stderr
        note), which must follow what the kernel sent before it, the replay's too (unmerged).
        (Stopped, nothing is sent: it is all kept for the hand-over.)"""
        self._release_line()
        while self.replay and not (self.closed or self.stopped or self.outbox.closed):
            self.wire.pace_send(self.replay.pop().original)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _release_line(self) -> None:
        self._cancel_timer()
        now = self.clock.time()
        while self.line and not self.closed and not self.stopped and not self.outbox.closed:
            self._send_entry(self.line.pop(), now)

    def close(self) -> list[Any]:
        """Stop, and hand back, once, what waits (the websocket is gone or going), in order:
        the line's entries, the replay, then what came after the pacer or outbox stopped."""
        self.closed = True
        self._cancel_timer()
        waiting: list[Any] = [*self.line, *self.replay.hand_back(), *self._kept]
        self.line = Line()
        self._kept = []
        self._ending.clear()
        self.outbox.on_drained = None
        return waiting
