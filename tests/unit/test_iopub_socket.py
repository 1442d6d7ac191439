"""NoDropXPubSocket on a real in-process XPUB/SUB pair: wait, timeout, fallback, counters.

inproc pipes hold exactly ``SNDHWM`` (publisher) + ``RCVHWM`` (subscriber) messages, so
"full" is a known number of messages here, not a guess about TCP buffers.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import zmq
from ipykernel.iostream import IOPubThread
from jupyter_client.session import Session

from harness import inproc
from harness.inproc import bound_xpub, run_on_iopub_thread, start_iopub_thread, stop_iopub_thread
from harness.polling import wait_until
from ipykernel_ext.kernel import ExtKernel, ExtKernelApp
from ipykernel_ext.kernel.iopub.notice import NOTICE_PREFIX, MissedNotice
from ipykernel_ext.kernel.iopub.settings import IOPubSettings
from ipykernel_ext.kernel.iopub.socket import NoDropXPubSocket

SNDHWM = 4
RCVHWM = 2
CAPACITY = SNDHWM + RCVHWM  # messages an inproc subscriber's pipe holds


#: A wait's hang guard (s), and its poll step: the in-process counters change in microseconds.
HANG = 10
POLL = 0.005


@contextmanager
def xpub(
    nodrop: bool = True, timeout_ms: int = 5000
) -> Iterator[tuple[zmq.Context[Any], str, NoDropXPubSocket]]:
    ctx: zmq.Context[Any] = zmq.Context()
    settings = IOPubSettings(sndhwm=SNDHWM, nodrop=nodrop, send_timeout_ms=timeout_ms)
    url, pub = bound_xpub(ctx, settings)
    try:
        yield ctx, url, pub
    finally:
        ctx.destroy(linger=0)  # closes the subscribers too, even after a failed assertion


def subscribe(
    ctx: zmq.Context[Any], url: str, pub: zmq.Socket[Any], topic: bytes = b""
) -> zmq.Socket[Any]:
    return inproc.subscribe(ctx, url, pub, topic, rcvhwm=RCVHWM)


def read_all(sub: zmq.Socket[Any], count: int, timeout: float = 10) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        if sub.poll(100):
            got.append(sub.recv_multipart()[-1])
    return got


def payload(i: int) -> list[bytes]:
    return [b"topic", str(i).encode()]


def test_configure_before_bind_and_validation() -> None:
    with xpub() as (_ctx, _url, pub):
        assert pub.sndhwm == SNDHWM
        reply = pub.stats_reply()
        expected = {"status": "ok", "sndhwm": SNDHWM, "nodrop": True, "send_timeout_ms": 5000}
        expected |= {"sent": 0, "waits": 0, "timeouts": 0, "missed": 0}
        assert {k: reply.get(k) for k in expected} == expected  # the reply may carry more
        # A bad value is refused before the socket takes it.
        with pytest.raises(ValueError, match="sndhwm"):
            pub.configure(IOPubSettings(sndhwm=-1))
        with pytest.raises(ValueError, match="send_timeout_ms"):
            pub.configure(IOPubSettings(send_timeout_ms=0))
        assert pub.settings == IOPubSettings(sndhwm=SNDHWM, send_timeout_ms=5000)


def test_the_reply_lists_the_fields_of_protocol_md_in_its_order() -> None:
    # Settings, counters and what waits are kept apart in the socket; the reply is one object
    # whose shape is the wire contract.
    protocol = (Path(__file__).resolve().parents[2] / "docs" / "PROTOCOL.md").read_text()
    block = protocol.split("### control `iopub_stats_request`")[1].split("```")[1]
    documented = re.findall(r'"(\w+)":', block)
    with xpub() as (_ctx, _url, pub):
        reply = pub.stats_reply()
        assert list(reply) == documented
        assert reply["socket"] == "bound-by-ext-app"
        assert reply["backlog_limit_bytes"] == pub.settings.backlog_limit_bytes
        assert reply["backlog_messages"] == reply["backlog_bytes"] == 0


def a_full_subscriber_makes_the_send_wait_and_loses_nothing() -> None:
    total = CAPACITY * 3
    with xpub() as (ctx, url, pub):
        sub = subscribe(ctx, url, pub)
        sender = threading.Thread(
            target=lambda: [pub.send_multipart(payload(i)) for i in range(total)]
        )
        sender.start()
        # The barrier: the sender is blocked on a full queue (a wait was counted).
        wait_until(lambda: pub.stats.waits >= 1, HANG, "a wait counted", POLL)
        assert sender.is_alive()
        got = read_all(sub, total)
        sender.join(10)
        assert not sender.is_alive()
        assert got == [str(i).encode() for i in range(total)]
        assert pub.stats.sent == total
        assert pub.stats.timeouts == pub.stats.missed == 0


def test_a_stalled_subscriber_times_out_and_only_it_misses_messages(
    caplog: pytest.LogCaptureFixture,
) -> None:
    total = CAPACITY * 4
    with xpub(timeout_ms=200) as (ctx, url, pub):
        pub.log = logging.getLogger("test-iopub")
        stalled = subscribe(ctx, url, pub)
        reader = subscribe(ctx, url, pub, b"top")
        received: list[bytes] = []
        reading = threading.Thread(target=lambda: received.extend(read_all(reader, total, 30)))
        reading.start()
        with caplog.at_level(logging.WARNING, logger="test-iopub"):
            for i in range(total):
                pub.send_multipart(payload(i))  # never raises Again
            reading.join(30)
            wait_until(lambda: "subscriber stall" in caplog.text, 30, "the stall logged", POLL)
        assert received == [str(i).encode() for i in range(total)]
        missed = total - len(read_all(stalled, total, timeout=1))
        assert missed > 0
        assert pub.stats.timeouts >= 1
        # At least the message sent with NODROP off; later ones it misses are not counted.
        assert pub.stats.missed >= pub.stats.timeouts
        assert pub.stats.sent == total
        # NODROP is back on after the fallback: the next full queue waits again.
        assert pub.settings.nodrop


def nodrop_off_is_a_plain_xpub_that_still_counts() -> None:
    total = CAPACITY * 3
    with xpub(nodrop=False) as (ctx, url, pub):
        sub = subscribe(ctx, url, pub)
        for i in range(total):
            pub.send_multipart(payload(i))  # drops silently past the queue, never waits
        got = read_all(sub, total, timeout=1)
        assert len(got) == CAPACITY  # what fitted; the rest was dropped by libzmq
        assert pub.stats.sent == total
        assert pub.stats.waits == pub.stats.timeouts == pub.stats.missed == 0


# --- on ipykernel's IOPub thread: waits never block it -------------------------------


@contextmanager
def on_iopub_thread(
    topics: tuple[bytes, ...] = (b"",), timeout_ms: int = 60_000, backlog_limit: int = 1 << 30
) -> Iterator[tuple[list[zmq.Socket[Any]], NoDropXPubSocket, IOPubThread]]:
    """The socket under a real, running ipykernel IOPubThread; a subscriber per topic."""
    with xpub(timeout_ms=timeout_ms) as (ctx, url, pub):
        pub.apply(IOPubSettings(send_timeout_ms=timeout_ms, backlog_limit_bytes=backlog_limit))
        subs = [subscribe(ctx, url, pub, topic) for topic in topics]
        thread = start_iopub_thread(pub)
        try:
            yield subs, pub, thread
        finally:
            stop_iopub_thread(thread)
            thread.close()


def test_a_full_subscriber_never_blocks_the_iopub_thread() -> None:
    total = CAPACITY * 5
    with on_iopub_thread() as ([sub], pub, thread):
        for i in range(total):
            thread.send_multipart(payload(i))
        # The barrier: messages wait in the backlog; the thread still runs what comes next
        # (as an output flush would), while the subscriber has read nothing.
        wait_until(lambda: pub.backlog_messages > 0, HANG, "a backlog", POLL)
        run_on_iopub_thread(thread, lambda: None)
        assert pub.backlog_messages > 0
        got = read_all(sub, total)
        assert got == [str(i).encode() for i in range(total)]
        wait_until(lambda: pub.backlog_messages == 0, HANG, "the backlog emptied", POLL)
        assert pub.stats.stalls >= 1
        assert pub.stats.timeouts == pub.stats.over_budget == pub.stats.missed == 0


def given_up_subscriber_is_parked_and_the_reader_keeps_no_loss() -> None:
    total = CAPACITY * 20
    with on_iopub_thread((b"", b"top"), timeout_ms=300) as ([stalled, reader], pub, thread):
        received: list[bytes] = []
        reading = threading.Thread(target=lambda: received.extend(read_all(reader, total, 60)))
        reading.start()
        for i in range(total):
            thread.send_multipart(payload(i))
        # The reader gets every message, those after the give-up included: a parked pipe
        # does not count for NODROP, so the reader keeps its guarantee even when it is the
        # slower of the two, and the stalled one costs one give-up, not one per message.
        reading.join(60)
        assert received == [str(i).encode() for i in range(total)]
        assert pub.stats.timeouts == 1
        assert pub.stats.missed >= 1
        assert len(read_all(stalled, total, timeout=0.5)) < total


def backlog_budget_holds_the_output_back_and_holds() -> None:
    part = b"x" * 1000
    limit = 20 * 1000
    with on_iopub_thread(timeout_ms=300, backlog_limit=limit) as ([stalled], pub, thread):
        for _ in range(CAPACITY + 200):
            thread.send_multipart([b"topic", part])
        # At the budget the IOPub thread waits for room itself (the output is held back)
        # until the queue has had no room for the whole timeout; then it gives it up.
        wait_until(lambda: pub.stats.timeouts >= 1, HANG, "a give-up counted", POLL)
        run_on_iopub_thread(thread, lambda: None)
        assert pub.stats.over_budget >= 1
        assert pub.stats_reply()["backlog_peak_bytes"] <= limit + len(part) + len(b"topic")
        assert pub.stats.missed >= 1
        assert len(read_all(stalled, CAPACITY + 200, timeout=0.5)) < CAPACITY + 200


def a_reader_past_the_budget_is_held_back_and_loses_nothing() -> None:
    sent = [str(i).encode().ljust(1000, b"x") for i in range(CAPACITY + 200)]
    limit = 20 * 1000
    with on_iopub_thread(backlog_limit=limit) as ([sub], pub, thread):
        for part in sent:
            thread.send_multipart([b"topic", part])
        # The barrier: the backlog reached the budget before the reader read anything.
        wait_until(lambda: pub.stats.over_budget >= 1, HANG, "the budget reached", POLL)
        assert read_all(sub, len(sent)) == sent
        wait_until(lambda: pub.backlog_messages == 0, HANG, "the backlog emptied", POLL)
        assert pub.stats_reply()["backlog_peak_bytes"] <= limit + len(sent[0]) + len(b"topic")
        assert pub.stats.timeouts == pub.stats.missed == 0


# The send timeout below is ten times this hang guard: a send that waited for room would end
# the test here, whatever the machine's speed; one that does not wait takes milliseconds.
@pytest.mark.timeout(60)
def test_after_the_thread_stops_nothing_waits() -> None:
    with on_iopub_thread(timeout_ms=600_000) as (_subs, pub, thread):
        stop_iopub_thread(thread)
        # The kernel is exiting: sends run on this thread now and must not wait for room.
        for i in range(CAPACITY * 3):
            thread.send_multipart(payload(i))
        assert pub.backlog_messages == 0


# --- the missed-messages notice: told from what leaves the socket ---------------------------

TOPIC = b"kernel.unit"


class Shell:
    """Sends as the kernel's main shell does (Session-framed, each idle announced) through the
    real notice and socket; only the kernel around them is left out."""

    def __init__(self, thread: IOPubThread, pub: NoDropXPubSocket) -> None:
        self.session = Session(key=b"unit-test")
        self.thread = thread
        self.notice = MissedNotice(
            session=self.session,
            topic=TOPIC + b".stream",
            waiting=lambda: pub.backlog_messages,
            schedule=thread.schedule,
        )
        run_on_iopub_thread(thread, lambda: pub.watch(self.notice))

    def request(self) -> dict[str, Any]:
        return self.session.msg("execute_request", {"code": ""})

    def output(self, request: dict[str, Any], count: int) -> None:
        for i in range(count):
            self.publish("comm_msg", {"comm_id": "c", "data": {"i": i}}, request)

    def idle(self, request: dict[str, Any], *, main_shell: bool = True) -> None:
        if main_shell:
            self.notice.cell_ending(request)
        self.publish("status", {"execution_state": "idle"}, request)

    def publish(self, msg_type: str, content: dict[str, Any], parent: dict[str, Any]) -> None:
        msg = self.session.msg(msg_type, content, parent=parent)
        topic = TOPIC + b"." + msg_type.split("_")[0].encode()
        self.thread.send_multipart(self.session.serialize(msg, ident=topic))


class Reader:
    """Reads ``sub`` on a thread of its own up to the idle for ``msg_id`` (deserialized)."""

    def __init__(self, sub: zmq.Socket[Any], session: Session, msg_id: str) -> None:
        self.got: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._read, args=(sub, session, msg_id))
        self.thread.start()

    def _read(self, sub: zmq.Socket[Any], session: Session, msg_id: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not sub.poll(100):
                continue
            _idents, frames = session.feed_identities(sub.recv_multipart())
            msg = session.deserialize(frames)
            self.got.append(msg)
            if msg["msg_type"] == "status" and msg["parent_header"]["msg_id"] == msg_id:
                return

    def join(self) -> list[dict[str, Any]]:
        self.thread.join(30)
        assert not self.thread.is_alive(), "no idle came"
        return self.got


def give_up_the_stalled_one(thread: IOPubThread, pub: NoDropXPubSocket, reader: Reader) -> None:
    """Shorten the send timeout once the reader has room (it took the CAPACITY messages its
    pipe held; the stalled queue holds the backlog's head): only the stalled one is given up."""
    wait_until(lambda: len(reader.got) >= CAPACITY, HANG, "the reader's pipe read", POLL)
    run_on_iopub_thread(thread, lambda: pub.apply(replace(pub.settings, send_timeout_ms=200)))
    wait_until(lambda: pub.stats.timeouts >= 1, HANG, "a give-up counted", POLL)


def notices_in(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["msg_type"] == "stream"]


def a_give_up_after_the_cell_ended_tells_that_cell_ahead_of_its_idle() -> None:
    # The cell's idle (and a later one) is queued behind the full queue before the give-up
    # can come: the send timeout is shortened only then (a barrier, not a race).
    with on_iopub_thread((b"", TOPIC)) as ([_stalled, sub], pub, thread):
        shell = Shell(thread, pub)
        cell, later = shell.request(), shell.request()
        shell.output(cell, CAPACITY * 3)
        shell.idle(cell)
        shell.idle(later)
        run_on_iopub_thread(thread, lambda: None)
        assert pub.backlog_messages > 0 and pub.stats.timeouts == 0
        reader = Reader(sub, shell.session, later["header"]["msg_id"])
        give_up_the_stalled_one(thread, pub, reader)
        got = reader.join()
        [notice] = notices_in(got)
        # Just ahead of the cell's idle, in the cell, with the count of that give-up.
        at = got.index(notice)
        assert got[at + 1]["msg_type"] == "status"
        assert got[at + 1]["parent_header"]["msg_id"] == cell["header"]["msg_id"]
        assert notice["parent_header"]["msg_id"] == cell["header"]["msg_id"]
        assert notice["content"]["name"] == "stderr"
        assert notice["content"]["text"].startswith(NOTICE_PREFIX)
        assert f"at least {pub.stats.missed} " in notice["content"]["text"]
        assert pub.stats.timeouts == pub.stats.notices == 1
        comm_msgs = [m["content"]["data"]["i"] for m in got if m["msg_type"] == "comm_msg"]
        assert comm_msgs == list(range(CAPACITY * 3))


def test_a_give_up_during_the_cell_tells_it_when_its_idle_leaves() -> None:
    with on_iopub_thread((b"", TOPIC)) as ([_stalled, sub], pub, thread):
        shell = Shell(thread, pub)
        cell, other = shell.request(), shell.request()
        reader = Reader(sub, shell.session, cell["header"]["msg_id"])
        shell.output(cell, CAPACITY * 3)
        give_up_the_stalled_one(thread, pub, reader)
        # The cell goes on after the give-up; an idle that is not the main shell's (control,
        # a subshell) is not the cell's end, and gets nothing ahead of it.
        shell.output(cell, 3)
        shell.idle(other, main_shell=False)
        shell.idle(cell)
        got = reader.join()
        [notice] = notices_in(got)
        assert got[-2] is notice and notice["parent_header"] == cell["header"]
        assert got[-1]["msg_type"] == "status" and got[-3]["msg_type"] == "status"
        assert f"at least {pub.stats.missed} " in notice["content"]["text"]
        assert pub.stats.timeouts == pub.stats.notices == 1


def test_no_notice_when_it_is_switched_off() -> None:
    with on_iopub_thread((b"", TOPIC)) as ([_stalled, sub], pub, thread):
        shell = Shell(thread, pub)
        shell.notice.enabled = False
        cell = shell.request()
        reader = Reader(sub, shell.session, cell["header"]["msg_id"])
        shell.output(cell, CAPACITY * 3)
        shell.idle(cell)
        give_up_the_stalled_one(thread, pub, reader)
        got = reader.join()
        assert got[-1]["msg_type"] == "status" and notices_in(got) == []
        assert pub.stats.missed >= 1 and pub.stats.notices == 0


def test_a_give_up_between_cells_tells_the_next_request() -> None:
    # The cell's idle left before the queue filled: the lost messages (a thread's output after
    # the cell) have no idle behind them, so the next request to end on the main shell is told.
    with on_iopub_thread((b"", TOPIC)) as ([_stalled, sub], pub, thread):
        shell = Shell(thread, pub)
        cell, later = shell.request(), shell.request()
        reader = Reader(sub, shell.session, later["header"]["msg_id"])
        shell.idle(cell)
        run_on_iopub_thread(thread, lambda: None)
        assert pub.stats.sent == 1 and pub.backlog_messages == 0  # it left, to both
        shell.output(cell, CAPACITY * 3)
        give_up_the_stalled_one(thread, pub, reader)
        shell.idle(later)
        got = reader.join()
        [notice] = notices_in(got)
        assert got[-2] is notice and notice["parent_header"] == later["header"]
        assert pub.stats.timeouts == pub.stats.notices == 1


# --- what each option's help says, held against what the socket does ---------------------

#: (option, what its help says, the check above that proves it). The help is the one
#: ``--help-all`` prints, for both classes that take the option.
HELP_STATES = [
    (
        "iopub_sndhwm",
        "IOPub queue per subscriber, in messages",
        nodrop_off_is_a_plain_xpub_that_still_counts,
    ),
    (
        "iopub_nodrop",
        "Off: stock ipykernel behaviour (libzmq drops what finds a queue full)",
        nodrop_off_is_a_plain_xpub_that_still_counts,
    ),
    (
        "iopub_nodrop",
        "wait for room (XPUB_NODROP) instead of silently dropping",
        a_full_subscriber_makes_the_send_wait_and_loses_nothing,
    ),
    (
        "iopub_send_timeout",
        "may have no room at all before the kernel gives that subscriber up",
        given_up_subscriber_is_parked_and_the_reader_keeps_no_loss,
    ),
    (
        "iopub_send_timeout",
        "the other subscribers lose nothing",
        given_up_subscriber_is_parked_and_the_reader_keeps_no_loss,
    ),
    (
        "iopub_missed_notice",
        "just before the first idle of the main shell to leave the kernel after the give-up",
        a_give_up_after_the_cell_ended_tells_that_cell_ahead_of_its_idle,
    ),
    (
        "iopub_backlog_limit",
        "the IOPub thread waits for room until the backlog is under the limit again",
        a_reader_past_the_budget_is_held_back_and_loses_nothing,
    ),
    (
        "iopub_backlog_limit",
        "a subscriber that is slow but reading loses nothing",
        a_reader_past_the_budget_is_held_back_and_loses_nothing,
    ),
    (
        "iopub_backlog_limit",
        "A queue with no room for the whole iopub_send_timeout is still given up",
        backlog_budget_holds_the_output_back_and_holds,
    ),
]


@pytest.mark.parametrize(
    ("option", "states", "check"), HELP_STATES, ids=[f"{o}-{c.__name__}" for o, _, c in HELP_STATES]
)
def test_the_help_states_what_the_socket_does(
    option: str, states: str, check: Callable[[], None]
) -> None:
    for cls in (ExtKernelApp, ExtKernel):
        if option in cls.class_traits(config=True):
            helptext = " ".join(cls.class_get_trait_help(cls.class_traits()[option]).split())
            assert states in helptext, f"{cls.__name__}.{option}: {helptext}"
    check()
