"""The real Pacer, Line and Outbox on simulated time (:mod:`harness.simulated_clock`).

A cell's IOPub as a tab would get it, through jupyter_server's default rates (1000 messages/s,
1 MB/s of stream text, over 3 s), from a tab that reads at once (its websocket writes complete
as they are made): an hour of progress runs in seconds, and every verdict is read off
simulated time, so none depends on the machine's speed.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from typing import Any

from harness.cell_messages import message, stream, widget_update
from harness.simulated_clock import SimulatedClock
from ipykernel_ext.server.websocket import (
    DEFAULT_BUDGET,
    MAX_STREAM_WAIT,
    MessageWindow,
    Outbox,
    Pacer,
    PageText,
    Rates,
)

CELL = "cell-1"


class Tab:
    """A pacer's wire to a tab that reads at once: what it got, and when."""

    def __init__(self, rates: Rates | None = None) -> None:
        self.clock = SimulatedClock()
        self.got: list[tuple[float, dict[str, Any]]] = []
        self.overflows: list[int] = []
        self.outbox = Outbox(self._write, DEFAULT_BUDGET)
        self.pacer = Pacer(
            self,
            self.outbox,
            rates or Rates(),
            budget=DEFAULT_BUDGET,
            on_overflow=self.overflows.append,
            logger=logging.getLogger("test_pacer"),
            name="tab",
            clock=self.clock,
        )
        #: the most bytes the pacer held at once
        self.peak_held = 0

    def _write(self, data: Any, binary: bool) -> None:
        self.got.append((self.clock.now, data))

    # the Wire
    def pace_decode(self, original: dict[str, Any]) -> dict[str, Any]:
        return original

    def pace_send(self, original: dict[str, Any]) -> None:
        self.outbox.put(original, False)

    def pace_send_merged(self, msg: dict[str, Any]) -> None:
        self.outbox.put({**msg, "msg_type": msg["header"]["msg_type"]}, False)

    def put(self, msg: dict[str, Any], size: int = 200) -> None:
        msg_type = msg["msg_type"]
        text = len(msg["content"]["text"]) if msg_type == "stream" else 0
        self.pacer.put(msg, "iopub", msg_type, size + text)
        self.peak_held = max(self.peak_held, self.pacer.line.size)

    def times(self, msg_type: str, name: str | None = None) -> list[float]:
        return [
            at
            for at, m in self.got
            if m["msg_type"] == msg_type and (name is None or m["content"].get("name") == name)
        ]

    def text(self) -> str:
        return "".join(m["content"]["text"] for _, m in self.got if m["msg_type"] == "stream")


def idle() -> dict[str, Any]:
    msg = message("status", {"execution_state": "idle"}, CELL)
    return msg


def longest_gap(times: list[float], start: float, end: float) -> float:
    points = [start, *(t for t in times if start <= t <= end), end]
    return max(b - a for a, b in itertools.pairwise(points))


def test_a_progress_bar_beside_a_long_log_moves_twice_a_second() -> None:
    """After 6 MB of log, a bar moved every 0.1 s for 6 s beside a short print a step:
    the bar's updates cross the stream that waits for its budget (on the old main the line
    was sent in order and the bar moved twice in the 6 s)."""
    tab = Tab()
    line = "x" * 99 + "\n"
    for _i in range(6000):  # 6 MB, a 1 kB message a millisecond
        tab.put(stream(line * 10, parent=CELL))
        tab.clock.advance(0.001)
    start = tab.clock.now
    for step in range(60):
        tab.put(stream(f"step {step}\n", parent=CELL))
        tab.put(widget_update("bar", {"value": step}, parent=CELL))
        tab.clock.advance(0.1)
    end = tab.clock.now
    tab.put(idle())
    tab.clock.advance(5)
    bar = tab.times("comm_msg")
    assert longest_gap(bar, start, end) <= 0.5
    assert [
        m["content"]["data"]["state"]["value"] for _, m in tab.got if m["msg_type"] == "comm_msg"
    ][-1] == 59
    assert tab.text() == line * 60000 + "".join(f"step {s}\n" for s in range(60))
    assert not tab.overflows


def test_an_hour_of_carriage_return_progress_updates_every_second() -> None:
    """A tqdm-style line rewritten with ``\\r`` ten times a second for an hour: the page holds
    one line, so it is charged one line, and it updates at least once a second to the end (on
    the old main the budget charged every byte sent: every 3 s, then slower)."""
    tab = Tab()
    for i in range(36_000):
        tab.put(stream(f"\r{i:>7} it " + "#" * (i * 80 // 36_000) + " " * 80, parent=CELL))
        tab.clock.advance(0.1)
    tab.put(idle())
    tab.clock.advance(5)
    times = tab.times("stream")
    assert longest_gap(times, 1000.0, 1000.0 + 3600) <= 1.0
    assert tab.text().endswith(f"\r{35_999:>7} it " + "#" * 79 + " " * 80)
    assert tab.peak_held < 100_000
    assert not tab.overflows


def test_ten_minutes_of_a_1_mb_a_second_log_arrive_whole_and_keep_showing() -> None:
    """A log at 1 MB/s for ten minutes: every byte reaches the tab, the output updates at
    least every ``MAX_STREAM_WAIT`` seconds, what the pacer holds stays within about that
    many seconds of log, and the websocket is never closed (on the old main the wait grew with
    the text shown and the held text closed the websocket after about 165 s)."""
    tab = Tab()
    chunk = ("y" * 99 + "\n") * 100  # 10 kB, a hundred a second
    for _ in range(60_000):
        tab.put(stream(chunk, parent=CELL))
        tab.clock.advance(0.01)
    tab.put(idle())
    tab.clock.advance(5)
    times = tab.times("stream")
    assert longest_gap(times, 1000.0, 1600.0) <= MAX_STREAM_WAIT + 0.05
    assert sum(len(m["content"]["text"]) for _, m in tab.got if m["msg_type"] == "stream") == (
        60_000 * len(chunk)
    )
    assert tab.peak_held <= (MAX_STREAM_WAIT + 0.1) * 1_000_000 * 1.1
    assert not tab.overflows and not tab.pacer.closed


def test_release_sends_what_waits_before_the_connections_own_message() -> None:
    """What waits goes at once, in order, when the connection writes its own message (a
    ``restarting`` status after the kernel died)."""
    tab = Tab()
    for i in range(3000):
        tab.put(stream(f"line {i}\n" + "z" * 2000, parent=CELL))
    assert tab.pacer.line
    tab.pacer.release()
    assert not tab.pacer.line
    assert tab.text() == "".join(f"line {i}\n" + "z" * 2000 for i in range(3000))


def test_close_hands_back_what_waits_in_order() -> None:
    tab = Tab()
    for i in range(3000):
        tab.put(stream(f"{i}\n" + "z" * 2000, parent=CELL))
    tab.put(widget_update("w", {"v": 1}, parent=CELL))
    sent = tab.text()
    waiting = tab.pacer.close()
    assert tab.pacer.closed and waiting
    texts = "".join(e.message()["content"]["text"] for e in waiting if e.kind == "stream")
    assert sent + texts == "".join(f"{i}\n" + "z" * 2000 for i in range(3000))


def test_a_low_message_rate_is_exact() -> None:
    """``iopub_msg_rate_limit=1``: one message a second, never two (the old main's half-second
    spans allowed two a second), while none waits longer than ``CATCH_UP_AGE`` (three
    messages at once: the third goes 2 s after the first)."""
    tab = Tab(Rates(messages=1, stream_bytes=0, window=3))
    for i in range(3):
        tab.put(message("comm_msg", {"comm_id": "c", "data": {"method": "custom", "i": i}}, CELL))
    tab.clock.advance(20)
    times = tab.times("comm_msg")
    assert len(times) == 3
    assert min(b - a for a, b in itertools.pairwise(times)) >= 1.0


def test_the_message_window_holds_its_rate_in_every_window() -> None:
    for rate, window in [(1, 3), (2.5, 3), (1000, 3), (0.1, 3), (7, 0.5)]:
        meter = MessageWindow(rate, window)
        now, sends = 0.0, []
        while now < 60:
            wait = meter.wait(now)
            if wait == 0:
                meter.record(now)
                sends.append(now)
            now += max(wait, 0.001)
        per_window = max(1, rate * window)
        for i, start in enumerate(sends):
            in_window = bisect.bisect_left(sends, start + window) - i
            assert in_window <= per_window, (rate, window, start)


def test_the_page_text_is_what_a_terminal_shows() -> None:
    cases = [
        (["abc\n", "de"], 6),
        (["12345", "\rab"], 5),  # overwritten, not shortened
        (["abc\rxy\n", "z"], 4 + 1),
        (["abc\b\bX"], 3),
        (["\r", "\r"] * 100, 0),
        (["progress 1%\r"] + ["progress 50%\r"] * 1000, 12),
        (["a\nb\nc\n"], 6),
    ]
    for pieces, size in cases:
        page = PageText()
        for piece in pieces:
            page.add(piece)
        assert page.size == size, pieces
