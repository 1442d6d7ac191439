"""The pacer's promises under any traffic (issue 50), on simulated time.

The real :class:`Pacer`, :class:`Line` and :class:`Outbox`, and for what a close hands over the
real :class:`WebsocketWire` encoding and re-signing real kernel messages (a jupyter_client
``Session``), as :class:`SharedChannelsConnection` does: a tab that reads is never far behind
whatever the traffic, every close hands over everything that waits, once, in order, and the
stream budget holds beside another cell's output.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import sys
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.session import Session
from jupyter_server.services.kernels.connection.base import deserialize_msg_from_ws_v1
from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

from harness.cell_messages import message, stream, widget_update
from harness.simulated_clock import SimulatedClock
from ipykernel_ext.server.websocket import (
    DEFAULT_BUDGET,
    Outbox,
    Pacer,
    Rates,
    WebsocketWire,
)
from ipykernel_ext.server.websocket.budgets import MAX_AGE
from ipykernel_ext.shared_channels import KernelMessage

CELL, OTHER_CELL = "cell-A", "cell-B"


# --- a tab that reads at once, on message dicts (what the flood tests need) ---------------


class DictTab:
    """A pacer whose wire hands message dicts to a tab that reads at once: what it got, when,
    and how old each message was when it got it (``header.date``: when it was put)."""

    def __init__(self) -> None:
        self.clock = SimulatedClock()
        self.got: list[dict[str, Any]] = []
        self.worst_age = 0.0
        self.overflows: list[int] = []
        self.outbox = Outbox(self._write, DEFAULT_BUDGET)
        self.pacer = Pacer(
            self,
            self.outbox,
            Rates(),
            budget=DEFAULT_BUDGET,
            on_overflow=self.overflows.append,
            logger=logging.getLogger("test_pacer_promises"),
            name="tab",
            clock=self.clock,
        )

    def _write(self, data: dict[str, Any], binary: bool) -> None:
        self.got.append(data)
        self.worst_age = max(self.worst_age, self.clock.now - data["header"]["date"])

    def pace_decode(self, original: dict[str, Any]) -> dict[str, Any]:
        return original

    def pace_send(self, original: dict[str, Any]) -> None:
        self.outbox.put(original, False, original)

    def pace_send_merged(self, msg: dict[str, Any]) -> None:
        self.outbox.put({**msg, "msg_type": msg["header"]["msg_type"]}, False, msg)

    def put(self, msg: dict[str, Any], channel: str = "iopub") -> None:
        msg["header"]["date"] = self.clock.now
        msg_type = msg["msg_type"] if channel == "iopub" else ""
        text = len(msg["content"].get("text", "")) if msg["msg_type"] == "stream" else 0
        self.pacer.put(msg, channel, msg_type, 200 + text)


def unmergeable(i: int) -> Iterator[tuple[dict[str, Any], str]]:
    """Six messages nothing merges: two streams of the running cell that alternate, each
    flushed; a widget's custom message; another cell's thread printing to both streams; the
    ``idle`` of another request (statuses are not counted: 5 of 6 are)."""
    yield stream(f"print {i}\n", "stdout", CELL), "iopub"
    yield stream(f"log {i}\n", "stderr", CELL), "iopub"
    data = {"method": "custom", "content": {"frame": i}}
    yield message("comm_msg", {"comm_id": "canvas", "data": data}, CELL), "iopub"
    yield stream(f"thread {i}\n", "stdout", OTHER_CELL), "iopub"
    yield stream(f"thread log {i}\n", "stderr", OTHER_CELL), "iopub"
    yield message("status", {"execution_state": "idle"}, f"kernel-info-{i}"), "iopub"


def sorted_by_cell(msgs: list[dict[str, Any]]) -> dict[Any, list[str]]:
    """Each cell's (request's) messages, in the order they came: what a page shows of a
    cell is its own messages in order (another cell's message crosses a waiting stream)."""
    cells: dict[Any, list[str]] = {}
    for msg in msgs:
        cell = (msg.get("parent_header") or {}).get("msg_id")
        cells.setdefault(cell, []).append(msg["header"]["msg_id"])
    return cells


def test_an_unmergeable_flood_above_the_rate_is_never_far_behind_and_loses_nothing(
    full_size: bool,
) -> None:
    """1500 messages/s that nothing merges (1250/s counted, over the default 1000/s), for 100
    simulated seconds (five minutes under ``--full-size``), to a tab that reads at once, with a
    ``complete_reply`` a third of the way and the cell's ``idle`` at the end: every message
    reaches the tab once, each cell's in order (another cell's message may go ahead of a
    stream that waits for its budget), none older than ``MAX_AGE`` (5 s), and the websocket is
    never closed. On the old main the oldest waiting message was 67 s old after 200 s (a
    third of the time gone by: 100 s are fifteen times ``MAX_AGE`` past it), the reply at
    100 s waited 50 s, and the line passed the buffer limit after about 248 s (closed with
    1013, its 124046 messages lost): the full size shows that last one too."""
    tab = DictTab()
    put: list[dict[str, Any]] = []
    steps = 75_000 if full_size else 25_000  # 6 messages every 4 ms: 1500 messages/s
    for step in range(steps):
        for msg, channel in unmergeable(step):
            tab.put(msg, channel)
            put.append(msg)
        if step == steps // 3:  # a reply to the tab's own completion request
            reply = message("complete_reply", {"matches": []}, "complete-1")
            tab.put(reply, "shell")
            put.append(reply)
        tab.clock.advance(0.004)
    end = message("status", {"execution_state": "idle"}, CELL)
    tab.put(end)
    put.append(end)
    tab.clock.advance(MAX_AGE)
    assert sorted_by_cell(tab.got) == sorted_by_cell(put)
    assert len(tab.got) == len(put)
    assert tab.worst_age <= MAX_AGE, tab.worst_age
    assert not tab.overflows and not tab.pacer.stopped and not tab.pacer.closed


# --- what a close hands over: real kernel messages through the real wire ------------------


class Wire(WebsocketWire):
    """jupyter_server's websocket encoding as this package writes it (the v1 protocol), with
    its outbox given (the connection class makes it from its websocket)."""

    _box: Outbox | None = None
    multi_kernel_manager = MappingKernelManager()  # allow_tracebacks: its default

    @property
    def outbox(self) -> Outbox:
        assert self._box is not None
        return self._box

    @property
    def _v1(self) -> bool:
        return True


class KernelTab:
    """A pacer and outbox as a :class:`SharedChannelsConnection` makes them, on simulated
    time, for a tab that reads at once or (``slow``) never completes a write."""

    def __init__(
        self,
        *,
        slow: bool = False,
        budget: int = DEFAULT_BUDGET,
        rates: Rates | None = None,
        reads_when_told: bool = False,
    ) -> None:
        self.session = Session(key=b"kernel-key")
        self.clock = SimulatedClock()
        self.loop = asyncio.new_event_loop()
        self.slow = slow or reads_when_told
        #: the writes not completed yet (``reads_when_told``: :meth:`read` completes them)
        self.pending: list[asyncio.Future[None]] = []
        self.reads_when_told = reads_when_told
        #: the data written to the websocket (what reached the tab, or tornado's buffer)
        self.written: list[bytes] = []
        self.overflows: list[int] = []
        self.wire = Wire(session=self.session)
        self.outbox = self.wire._box = Outbox(
            self._write, budget, self.overflows.append, chunk_bytes=1
        )
        self.pacer = Pacer(
            self.wire,
            self.outbox,
            rates or Rates(),
            budget=budget,
            on_overflow=self.overflows.append,
            logger=logging.getLogger("test_pacer_promises"),
            name="tab",
            clock=self.clock,
        )

    def _write(self, data: bytes, binary: bool) -> asyncio.Future[None] | None:
        self.written.append(data)
        if not self.slow:
            return None
        fut: asyncio.Future[None] = self.loop.create_future()  # slow: never done, never read
        if self.reads_when_told:
            self.pending.append(fut)
        return fut

    def read(self) -> None:
        """The tab reads what it was written so far: those writes complete (their done
        callbacks run, which write on)."""
        done, self.pending = self.pending, []
        for fut in done:
            fut.set_result(None)
        self.loop.run_until_complete(asyncio.sleep(0))

    def held(self) -> int:
        """What the pacer's line and the outbox hold, as the byte budget counts it."""
        return self.pacer.line.size + self.outbox.charged

    def kernel_message(self, msg: dict[str, Any], channel: str = "iopub") -> KernelMessage:
        """``msg`` (a :mod:`harness.cell_messages` dict) as the kernel sends it, signed."""
        real = self.session.msg(
            msg["msg_type"], msg["content"], parent={"msg_id": CELL}, metadata={}
        )
        real["header"]["msg_id"] = msg["header"]["msg_id"]
        real["parent_header"] = msg["parent_header"]
        real["buffers"] = msg["buffers"]
        frames = self.session.serialize(real)
        return KernelMessage(channel, frames[1:], self.session.unpack)

    def put(self, msg: dict[str, Any], channel: str = "iopub") -> None:
        kmsg = self.kernel_message(msg, channel)
        msg_type = kmsg.msg_type if channel == "iopub" else ""
        self.pacer.put(kmsg, channel, msg_type, sum(len(f) for f in kmsg.frames))

    def hand_over(self) -> list[dict[str, Any]]:
        """What the connection's ``disconnect`` hands to jupyter_server's buffer of the
        session (the outbox's unwritten messages, then the pacer's), as kernel messages,
        each checked against the kernel's key, decoded."""
        waiting = [*self.outbox.close(), *self.pacer.close()]
        kmsgs = [self.wire._as_kernel_message(item) for item in waiting]
        return [self.session.deserialize(list(k.frames), content=True) for k in kmsgs]

    def delivered(self) -> list[dict[str, Any]]:
        """What was written to the websocket (reached the tab, or tornado's buffer, which
        writes it before the close frame), decoded."""
        got = []
        for data in self.written:
            _channel, parts = deserialize_msg_from_ws_v1(data)
            header, parent, _, content = (json.loads(p) for p in parts[:4])
            got.append({"header": header, "parent_header": parent, "content": content})
        return got


def page(messages: list[dict[str, Any]]) -> list[Any]:
    """What a page ends with after ``messages``, in order: a cell's stream text per name
    (consecutive streams of a name joined), each widget's state, every other message."""
    shown: list[Any] = []
    widgets: dict[str, dict[str, Any]] = {}
    for msg in messages:
        msg_type, content = msg["header"]["msg_type"], msg["content"]
        if msg_type == "stream":
            if shown and shown[-1][0] == "stream" and shown[-1][1] == content["name"]:
                shown[-1] = ("stream", content["name"], shown[-1][2] + content["text"])
            else:
                shown.append(("stream", content["name"], content["text"]))
        elif msg_type == "comm_msg" and content["data"].get("method") == "update":
            widgets.setdefault(content["comm_id"], {}).update(content["data"]["state"])
        else:
            shown.append((msg_type, json.dumps(content, sort_keys=True)))
    return [*shown, widgets]


def cell_with_slider() -> list[dict[str, Any]]:
    """50 lines, a slider moved to 29 between them, then an error."""
    msgs: list[dict[str, Any]] = []
    for i in range(50):
        msgs.append(stream(f"line {i}\n", parent=CELL))
        if i < 30:
            msgs.append(widget_update("slider", {"value": i}, parent=CELL))
    msgs.append(message("error", {"ename": "E", "evalue": "x", "traceback": []}, CELL))
    return msgs


def test_a_restart_then_a_close_on_a_slow_tab_hands_over_every_message_once() -> None:
    """A slow tab (it never reads) with ``[50 lines, slider=29, error]`` waiting when the
    kernel restarts (``release()``, then the connection's ``restarting``), then closed: what
    was written and what is handed over make every line once, the slider at 29 and the
    error. On the old main the merged entries sat in the outbox without an original and the
    replay got ``[error]`` alone."""
    tab = KernelTab(slow=True)
    msgs = cell_with_slider()
    for msg in msgs:
        tab.put(msg)
    assert tab.pacer.line
    tab.pacer.release()
    tab.outbox.put(b"restarting", True)  # the connection's own status: no original
    replay = tab.hand_over()
    assert page(tab.delivered() + replay) == page(msgs)


def test_the_pacers_overflow_hands_over_everything_once_in_order() -> None:
    """A slow tab whose pacer passes the byte budget (custom messages, which never merge):
    the websocket is closed (1013), and what was written, then what the close hands over
    (the outbox's queue, the line, and what came until the close) is every message once, in
    order. On the old main the line was thrown away at the overflow and what came after it
    was refused: the replay had a hole."""
    tab = KernelTab(slow=True, budget=200_000)
    msgs = [
        message("comm_msg", {"comm_id": "c", "data": {"method": "custom", "i": i}}, CELL)
        for i in range(2000)
    ]
    for msg in msgs:
        tab.put(msg)
        tab.clock.advance(0.0001)
    assert len(tab.overflows) == 1 and tab.pacer.stopped
    delivered = tab.delivered()
    everything = delivered + tab.hand_over()
    assert [m["header"]["msg_id"] for m in everything] == [m["header"]["msg_id"] for m in msgs]


def test_a_session_closed_over_its_budget_comes_back_and_gets_everything() -> None:
    """A slow tab closed over its byte budget (large displays, which never merge) hands
    over what waits; the session's next websocket replays it (``Pacer.replaying``), then the
    kernel sends more. The replay is let in as the tab reads: nothing the pacer and outbox
    hold passes the budget, no overflow, and the tab gets every message once, in order, the
    replay first. Before, the replay went into the line in one go (each display charged its
    frames and its decoded text): the new websocket was over the budget before it read
    anything, closed with 1013, and its session could never come back."""
    budget = 1_000_000
    big = "x" * 150_000

    def shown(i: int) -> dict[str, Any]:
        content = {"data": {"text/plain": f"{i} {big}"}, "metadata": {}, "transient": {}}
        return message("display_data", content, CELL)

    first = KernelTab(slow=True, budget=budget)
    for i in range(12):
        first.put(shown(i))
    assert first.overflows, "the first websocket must be closed over its budget"
    got_before = len(first.written)
    waiting = [*first.outbox.close(), *first.pacer.close()]
    missed = [first.wire._as_kernel_message(item) for item in waiting]
    assert sum(len(f) for k in missed for f in k.frames) > budget // 2

    back = KernelTab(budget=budget, reads_when_told=True)
    with back.pacer.replaying():
        for kmsg in missed:
            back.pacer.put(kmsg, "iopub", kmsg.msg_type, sum(len(f) for f in kmsg.frames))
    live = [shown(i) for i in range(12, 14)] + [idle_of_cell()]
    for msg in live:
        back.put(msg)
    peak = back.held()
    for _ in range(1000):
        if not back.pending:
            break
        back.read()
        peak = max(peak, back.held())
    assert not back.overflows and not back.pacer.stopped
    assert peak <= budget
    ids = [m["header"]["msg_id"] for m in back.delivered()]
    assert ids == [k.header["msg_id"] for k in missed] + [m["header"]["msg_id"] for m in live]
    assert got_before + len(missed) == 12


def idle_of_cell() -> dict[str, Any]:
    return message("status", {"execution_state": "idle"}, CELL)


def test_the_outboxs_overflow_hands_over_everything_once_in_order() -> None:
    """A slow tab whose outbox passes the byte budget (replies, which go straight to it while
    no output waits), then outputs and replies until the close: what was written and what the
    close hands over are every message once, in order. On the old main the outbox dropped its
    queue at the overflow, and the pacer sent on into the closed outbox."""
    tab = KernelTab(slow=True, budget=200_000)
    msgs: list[tuple[dict[str, Any], str]] = []
    for i in range(400):
        reply = message("execute_reply", {"status": "ok", "pad": "r" * 1000}, CELL)
        msgs.append((reply, "shell"))
        if i >= 300:  # the outbox overflowed by now: these come until the close
            msgs.append((message("comm_msg", {"comm_id": "c", "data": {"i": i}}, CELL), "iopub"))
    for msg, channel in msgs:
        tab.put(msg, channel)
    assert tab.overflows == [tab.outbox.peak] and tab.outbox.overflowed
    everything = tab.delivered() + tab.hand_over()
    assert [m["header"]["msg_id"] for m in everything] == [m["header"]["msg_id"] for m, _ in msgs]


def test_one_message_over_the_limit_behind_a_waiting_log_is_delivered() -> None:
    """A log that waits for its stream budget, then one output larger than the byte budget,
    then the cell's ``idle``, to a tab that reads: all reach the tab, in order, and the
    websocket is not closed (as with nothing waiting). On the old main the big output took
    the line over the budget: closed with 1013, neither it nor the ``idle`` reached the tab.
    (The byte budget is 1 MB and the stream budget 10 kB/s here: the rule, not the sizes.)"""
    tab = KernelTab(budget=1_000_000, rates=Rates(stream_bytes=10_000))
    chunk = ("y" * 99 + "\n") * 10
    msgs = [stream(chunk, parent=CELL) for _ in range(60)]  # 60 kB: under an eighth
    msgs.append(message("display_data", {"data": {"text/plain": "z" * 1_500_000}}, CELL))
    msgs.append(message("status", {"execution_state": "idle"}, CELL))
    for i, msg in enumerate(msgs):
        if i == 60:
            assert tab.pacer.line  # the log waits for its budget
        tab.put(msg)
        tab.clock.advance(0.001)
    tab.clock.advance(5)
    assert not tab.overflows and not tab.pacer.stopped
    assert page(tab.delivered()) == page(msgs)


def test_the_stream_budget_holds_beside_another_cells_output() -> None:
    """A log at 1 MB/s for 60 s while another cell's thread prints at 10 Hz and other
    requests end (their ``idle``) once a second: the log reaches the page in few messages
    (the other cell's prints go ahead of it, its chunks join; only its own cell's end resets
    its count), every byte arrives, and the other cell's prints are never held long. On the
    old main the log went without asking the budget as soon as the other cell's print stood
    behind it, and any ``idle`` reset its count: 621 messages."""
    tab = DictTab()
    chunk = ("y" * 99 + "\n") * 100  # 10 kB, a hundred a second
    for step in range(6000):
        tab.put(stream(chunk, parent=CELL))
        if step % 10 == 0:
            tab.put(stream(f"tick {step}\n", parent=OTHER_CELL))
        if step % 100 == 50:
            tab.put(message("status", {"execution_state": "idle"}, f"kernel-info-{step}"))
        tab.clock.advance(0.01)
    tab.put(message("status", {"execution_state": "idle"}, CELL))
    tab.clock.advance(5)
    log = [m for m in tab.got if m["msg_type"] == "stream" and m["parent_header"]["msg_id"] == CELL]
    assert "".join(m["content"]["text"] for m in log) == chunk * 6000
    assert len(log) <= 60, len(log)
    ticks = [m for m in tab.got if m["parent_header"].get("msg_id") == OTHER_CELL]
    assert len(ticks) == 600  # each went as it came (none waits: it crosses the log)
    assert tab.worst_age <= MAX_AGE and not tab.overflows


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.getLogger("test_pacer_promises").setLevel(logging.WARNING)
    yield


def test_what_waits_is_charged_for_the_memory_it_holds(full_size: bool) -> None:
    """10000 messages (100000 under ``--full-size``) waiting for a slow tab (custom comm
    messages, which never merge, two streams that alternate, outputs), measured with
    tracemalloc: the memory they hold, Python objects included (kernel messages, decoded
    dicts, entries), is within what the tab's byte budget counts, so the per-tab limit is a
    limit on memory. What each waiting message holds does not grow with their number, so the
    smaller count proves the same bound. On the old main the budget counted the frames' bytes
    alone: about a tenth of what was held."""
    tab = KernelTab(slow=True, budget=10**12)
    msgs = []
    count = 100_000 if full_size else 10_000
    for i in range(count):
        if i % 3 == 0:
            data = {"method": "custom", "i": i, "x": "abc" * 10}
            msgs.append(message("comm_msg", {"comm_id": "c", "data": data}, CELL))
        elif i % 3 == 1:
            msgs.append(stream(f"line {i}\n", "stdout" if i % 2 else "stderr", CELL))
        else:
            content = {"data": {"text/plain": f"{i}"}, "metadata": {}, "execution_count": i}
            msgs.append(message("execute_result", content, CELL))
    kmsgs = [tab.kernel_message(msg) for msg in msgs]  # as they arrive: the kernel's frames
    arrived = sum(
        sys.getsizeof(k) + sys.getsizeof(k.cache) + sys.getsizeof(k.frames)
        for k in kmsgs  # what each message is as it arrives, with its frames
    ) + sum(sys.getsizeof(f) for k in kmsgs for f in k.frames)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for kmsg in kmsgs:  # each waits (decoded as the pacer decodes it)
            tab.pacer.put(kmsg, "iopub", kmsg.msg_type, sum(len(f) for f in kmsg.frames))
        gc.collect()
        held = arrived + tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(tab.pacer.line) > count * 0.99
    counted = tab.pacer.line.size + tab.outbox.charged
    assert held <= counted, (held, counted, held / len(tab.pacer.line))
