"""NoDropXPubSocket on a real in-process XPUB/SUB pair: wait, timeout, fallback, counters.

inproc pipes hold exactly ``SNDHWM`` (publisher) + ``RCVHWM`` (subscriber) messages, so
"full" is a known number of messages here, not a guess about TCP buffers.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import zmq

from ipykernel_ext.iopub import NoDropXPubSocket

SNDHWM = 4
RCVHWM = 2
CAPACITY = SNDHWM + RCVHWM  # messages an inproc subscriber's pipe holds


def wait_until(condition: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition never became true")
        time.sleep(0.005)


@contextmanager
def xpub(
    nodrop: bool = True, timeout_ms: int = 5000
) -> Iterator[tuple[zmq.Context, str, NoDropXPubSocket]]:
    ctx = zmq.Context()
    url = f"inproc://iopub-{uuid.uuid4().hex}"
    pub = ctx.socket(zmq.XPUB, socket_class=NoDropXPubSocket)
    pub.configure(sndhwm=SNDHWM, nodrop=nodrop, send_timeout_ms=timeout_ms)
    pub.bind(url)
    try:
        yield ctx, url, pub
    finally:
        ctx.destroy(linger=0)  # closes the subscribers too, even after a failed assertion


def subscribe(ctx: zmq.Context, url: str, pub: zmq.Socket, topic: bytes = b"") -> zmq.Socket:
    sub = ctx.socket(zmq.SUB)
    sub.rcvhwm = RCVHWM
    sub.linger = 0
    sub.connect(url)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    # The subscription arrives at the XPUB as a message: once read, the pipe exists. (XPUB
    # passes on only new topics, so each subscriber of one test uses its own prefix.)
    assert pub.poll(5000), "no subscription reached the XPUB"
    assert pub.recv() == b"\x01" + topic
    return sub


def read_all(sub: zmq.Socket, count: int, timeout: float = 10) -> list[bytes]:
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
        assert pub.sndtimeo == 5000
        reply = pub.stats.as_reply()
        # Fields this test knows; the reply may carry more.
        assert {
            k: reply.get(k)
            for k in (
                "status",
                "sndhwm",
                "nodrop",
                "send_timeout_ms",
                "sent",
                "waits",
                "timeouts",
                "fallback_sends",
            )
        } == {
            "status": "ok",
            "sndhwm": SNDHWM,
            "nodrop": True,
            "send_timeout_ms": 5000,
            "sent": 0,
            "waits": 0,
            "timeouts": 0,
            "fallback_sends": 0,
        }
        with pytest.raises(ValueError, match="sndhwm"):
            pub.configure(sndhwm=-1)
        with pytest.raises(ValueError, match="send_timeout_ms"):
            pub.configure(send_timeout_ms=0)


def test_a_full_subscriber_makes_the_send_wait_and_loses_nothing() -> None:
    total = CAPACITY * 3
    with xpub() as (ctx, url, pub):
        sub = subscribe(ctx, url, pub)
        sender = threading.Thread(
            target=lambda: [pub.send_multipart(payload(i)) for i in range(total)]
        )
        sender.start()
        # The barrier: the sender is blocked on a full queue (a wait was counted).
        wait_until(lambda: pub.stats.waits >= 1)
        assert sender.is_alive()
        got = read_all(sub, total)
        sender.join(10)
        assert not sender.is_alive()
        assert got == [str(i).encode() for i in range(total)]
        assert pub.stats.sent == total
        assert pub.stats.timeouts == pub.stats.fallback_sends == 0


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
            wait_until(lambda: "subscriber stall" in caplog.text, timeout=30)
        assert received == [str(i).encode() for i in range(total)]
        missed = total - len(read_all(stalled, total, timeout=1))
        assert missed > 0
        assert pub.stats.timeouts >= 1
        assert pub.stats.fallback_sends == pub.stats.timeouts
        assert pub.stats.sent == total
        # NODROP is back on after the fallback: the next full queue waits again.
        assert pub.stats.nodrop


def test_nodrop_off_is_a_plain_xpub_that_still_counts() -> None:
    total = CAPACITY * 3
    with xpub(nodrop=False) as (ctx, url, pub):
        sub = subscribe(ctx, url, pub)
        for i in range(total):
            pub.send_multipart(payload(i))  # drops silently past the queue, never waits
        got = read_all(sub, total, timeout=1)
        assert len(got) == CAPACITY  # what fitted; the rest was dropped by libzmq
        assert pub.stats.sent == total
        assert pub.stats.waits == pub.stats.timeouts == pub.stats.fallback_sends == 0
