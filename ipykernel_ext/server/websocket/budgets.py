"""The pacer's measures: how many messages a tab may get, and how much stream text a page
may be asked to render (docs/PROTOCOL.md section 8).

* :class:`Rates`: jupyter_server's rate settings, as the pacer reads them;
* :class:`MessageWindow`: at most ``rate * window`` counted messages in any window;
* :class:`StreamBudget`: stream text a page renders, charged for what the page holds
  (:class:`PageText`), with a bounded wait;
* :class:`Clock`: the time they are read on (the event loop's, :class:`LoopClock`, or a
  simulated one).

Nothing here sends or holds a message: :class:`~.pacer.Pacer` asks and records.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

#: The shortest wait before the line is looked at again (seconds): a timer per message
#: would cost more than the messages.
MIN_WAIT = 0.02

#: The longest a growing stream waits for the stream budget after the last stream sent
#: (seconds): a 10 MB log still shows progress every 2 s, where a budget alone would space
#: its updates by its size (10 s at 1 MB/s, and more as it grows).
MAX_STREAM_WAIT = 2.0

#: A waiting message older than this (seconds) goes as fast as the tab takes it, whatever the
#: message window and the stream budget say: what merges has merged by then, and what cannot
#: merge must not fall behind. With the time a tab that reads takes, no message waits more
#: than :data:`MAX_AGE`.
CATCH_UP_AGE = 2.5

#: The bound PROTOCOL section 8 states: no message waits longer in the pacer of a tab that
#: drains what it is sent (seconds).
MAX_AGE = 5.0

#: What the page folds in a stream's text (JupyterLab 4.1+, Notebook 7: ``\r`` returns to the
#: line's start and what follows overwrites it, ``\b`` takes one character back).
_LINE_CONTROLS = re.compile("[\r\n\b]")


class Timer(Protocol):
    def when(self) -> float: ...

    def cancel(self) -> None: ...


class Clock(Protocol):
    """The pacer's time: what it reads and how it is called back (the event loop's, or a
    simulated one that runs hours of a cell in seconds)."""

    def time(self) -> float:
        """Now, in seconds (monotonic)."""

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` at ``when`` (a :meth:`time` value)."""


class LoopClock:
    """The running asyncio event loop's time and timers (what a connection's pacer uses)."""

    def time(self) -> float:
        return time.monotonic()  # asyncio's loops keep time.monotonic()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_at(when, callback)


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

    The window is cut into ``n`` equal spans, each allowed ``floor(rate * window / n)``
    messages: any window is whole spans, so the rule holds for every window, and a burst
    waits at most one span. ``n`` is ``ceil(2 * window)`` (spans of at most half a second: a
    cell's last update reaches the tab within half a second of its ``idle``, where one count
    over the whole window could hold it back for the whole window), fewer where the rate
    allows less than one message a span (at 1 message/s over 3 s: three spans of one
    second, one message each, never two a second). Below one message a window, the span is
    ``1 / rate`` with one message.
    """

    def __init__(self, rate: float, window: float) -> None:
        window = window if window > 0 else 1.0
        per_window = rate * window
        if per_window < 1:
            self.span, self.allowance = 1 / rate, 1
        else:
            spans = max(1, min(math.ceil(2 * window), math.floor(per_window)))
            self.span = window / spans
            self.allowance = math.floor(per_window / spans)
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


class PageText:
    """How many characters a page holds for one stream output, as text arrives.

    JupyterLab 4.1+ and Notebook 7 apply ``\\r`` and ``\\b`` as text arrives and keep the text as
    a terminal shows it: a progress line rewritten with ``\\r`` is one line on the page however
    often it is rewritten. The size follows that, in O(1) per piece where the piece has no
    ``\\r`` or ``\\b`` (most text), O(characters) otherwise. ANSI escape codes are counted as
    the characters they are: the page keeps them in its text and renders their spans.
    """

    __slots__ = ("cursor", "finished", "width")

    def __init__(self) -> None:
        #: characters of the finished lines (their newlines included)
        self.finished = 0
        #: the last line's length, and where the next character lands in it
        self.width = 0
        self.cursor = 0

    @property
    def size(self) -> int:
        return self.finished + self.width

    def add(self, text: str) -> None:
        if "\r" not in text and "\b" not in text:
            last = text.rfind("\n")
            if last < 0:
                self._write(len(text))
                return
            first = text.find("\n")
            self._write(first)
            self.finished += self.width + 1 + (last - first)  # and the lines after, whole
            self.width = self.cursor = 0
            self._write(len(text) - last - 1)
            return
        at = 0
        for control in _LINE_CONTROLS.finditer(text):
            self._write(control.start() - at)
            at = control.end()
            char = control.group()
            if char == "\n":
                self.finished += self.width + 1
                self.width = self.cursor = 0
            elif char == "\r":
                self.cursor = 0
            else:
                self.cursor = max(0, self.cursor - 1)
        self._write(len(text) - at)

    def _write(self, n: int) -> None:
        self.cursor += n
        if self.cursor > self.width:
            self.width = self.cursor


#: Stream outputs whose page text is kept at the most (the oldest is forgotten first: a thread
#: of a cell that ended may print for ever, and no ``idle`` of its cell ends its count).
MAX_PAGES = 64

#: A stream output as the budget counts it: the cell (its request's ``msg_id``) and the name.
StreamKey = tuple[Any, str]


class StreamBudget:
    """How much stream text a page is asked to render, at ``rate`` characters a second.

    A page renders a cell's stream output again, whole, on each stream message, so a message
    costs the text that output holds once the message is applied (:class:`PageText`, per
    cell and stream name, reset by that cell's ``idle`` alone). Tokens refill at ``rate`` up
    to ``rate * window``; a message goes when the tokens cover its cost, or when they are
    full (a larger output still updates, less often), and never waits more than
    ``max_wait`` seconds after the last message of that output was sent. Tokens never go
    below zero: a big output costs at most a full bucket.
    """

    def __init__(
        self, rate: float, window: float, now: float, max_wait: float = MAX_STREAM_WAIT
    ) -> None:
        self.rate = rate
        self.capacity = rate * max(window, MIN_WAIT)
        self.max_wait = max_wait
        self.tokens = self.capacity
        #: each output's page text and when its last message was sent, the latest last
        self.pages: dict[StreamKey, tuple[PageText, float]] = {}
        self._at = now

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self._at) * self.rate)
        self._at = now

    def wait(self, now: float, key: StreamKey, nbytes: int) -> float:
        """Seconds until a stream message of ``nbytes`` for output ``key`` may go (0: now).
        (``nbytes`` bounds what the message adds to the page: its cost is at most that plus
        what the page holds.)"""
        self._refill(now)
        page, last_sent = self.pages.get(key, (None, -math.inf))
        cost = (page.size if page is not None else 0) + nbytes
        if self.tokens >= cost or self.tokens >= self.capacity:
            return 0.0
        wait = (min(cost, self.capacity) - self.tokens) / self.rate
        return max(0.0, min(wait, last_sent + self.max_wait - now))

    def spend(self, now: float, key: StreamKey, texts: list[str]) -> None:
        self._refill(now)
        pages = self.pages
        page = pages.pop(key, (PageText(), 0.0))[0]  # latest last
        for text in texts:
            page.add(text)
        pages[key] = (page, now)
        if len(pages) > MAX_PAGES:
            del pages[next(iter(pages))]
        self.tokens = max(0.0, self.tokens - page.size)

    def cell_ended(self, cell: Any) -> None:
        """Cell ``cell`` ended (its ``idle``): its outputs start anew (another cell's count
        stays: it is still on the page, growing)."""
        for key in [key for key in self.pages if key[0] == cell]:
            del self.pages[key]
