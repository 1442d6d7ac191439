"""The per-websocket outbox: order, chunked writes, the byte budget, a closed websocket.

A ``WriteRecorder`` is the websocket's ``write``: it returns a future the test completes (as
tornado's does once the bytes are in the socket), so "the client stopped reading" is futures
that never complete (real websockets: tests/server/test_shared_channels_server.py). Also: the
IOPub socket's RCVHWM is set before it connects (so libzmq drains the kernel while the loop is
busy).
"""

from __future__ import annotations

import asyncio
from typing import Any

import zmq
import zmq.asyncio

from harness.polling import wait_until
from ipykernel_ext.endpoints import connect_channel
from ipykernel_ext.server.websocket import Outbox

#: How long a wait may take before the test fails: a hang guard only, never a measure.
HANG_MS = 30_000


class WriteRecorder:
    def __init__(self, auto: bool = True) -> None:
        self.auto = auto  # complete each write at once (a reading client)
        self.written: list[Any] = []
        self.pending: list[asyncio.Future[None]] = []
        self.max_pending = 0
        self.closed = False

    def write(self, data: Any, binary: bool) -> asyncio.Future[None]:
        if self.closed:
            raise ConnectionError("closed")
        self.written.append(data)
        fut = asyncio.get_running_loop().create_future()
        if self.auto:
            fut.set_result(None)
        else:
            self.pending.append(fut)
            self.max_pending = max(self.max_pending, len(self.pending))
        return fut

    def release(self) -> None:
        for fut in self.pending:
            if not fut.done():
                fut.set_result(None)
        self.pending.clear()


async def turns(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_messages_are_written_in_order_in_chunks() -> None:
    async def main() -> None:
        ws = WriteRecorder(auto=False)
        outbox = Outbox(ws.write, budget=10**9, chunk_bytes=4)
        for i in range(10):
            assert outbox.put(b"%d" % i, True)
        await turns()
        assert ws.written == [b"0", b"1", b"2", b"3"]  # one chunk until its writes complete
        while len(ws.written) < 10:
            ws.release()
            await turns()
        ws.release()
        await turns()
        assert ws.written == [b"%d" % i for i in range(10)]
        assert ws.max_pending == 4
        assert (outbox.queued, outbox.written, outbox.buffered) == (10, 10, 0)

    run(main())


def test_a_stuck_websocket_is_closed_at_its_budget_and_never_holds_more() -> None:
    async def main() -> None:
        ws = WriteRecorder(auto=False)
        overflows: list[int] = []
        outbox = Outbox(ws.write, budget=1000, on_overflow=overflows.append, chunk_bytes=180)
        accepted = 0
        for _ in range(50):
            if not outbox.put(b"x" * 90, True):
                break
            accepted += 1
            await turns(1)
            assert outbox.buffered <= 1000
        assert accepted == 11  # 11 * 90 = 990; the 12th would make 1080
        assert overflows == [1080]
        assert outbox.overflowed and outbox.closed
        assert outbox.peak == 1080  # budget + one message, as the log line reports
        assert not outbox.put(b"late", True)
        # What was queued, and the message that overflowed, wait for close() to hand them
        # over (for the session's next websocket); nothing more is written or taken.
        assert len(outbox) == 9 + 1
        outbox.close()
        assert len(outbox) == 0

    run(main())


def test_one_message_larger_than_the_budget_still_goes_to_a_caught_up_websocket() -> None:
    async def main() -> None:
        ws = WriteRecorder()
        overflows: list[int] = []
        outbox = Outbox(ws.write, budget=100, on_overflow=overflows.append)
        assert outbox.put(b"y" * 500, True)
        await turns()
        assert ws.written == [b"y" * 500]
        assert outbox.put(b"z", True)
        await turns()
        assert overflows == [] and outbox.written == 2

    run(main())


def test_a_reading_websocket_never_overflows_however_many_messages() -> None:
    async def main() -> None:
        ws = WriteRecorder()
        outbox = Outbox(ws.write, budget=10_000, on_overflow=lambda n: None)
        for i in range(2000):
            assert outbox.put(b"m" * 100, True)
            if i % 50 == 0:
                await turns(3)
        await turns()
        assert outbox.written == 2000 and outbox.peak <= 10_000

    run(main())


def test_a_closed_websocket_stops_the_writer() -> None:
    async def main() -> None:
        ws = WriteRecorder()
        outbox = Outbox(ws.write)
        outbox.put(b"a", True)
        await turns()
        ws.closed = True
        outbox.put(b"b", True)
        await turns()
        assert outbox.closed and not outbox.overflowed
        assert not outbox.put(b"c", True)

    run(main())


def test_the_iopub_receive_queue_is_sized_before_connecting() -> None:
    """With RCVHWM set before connect(), libzmq queues a 5000-message burst the application
    has not read (its default, 1000, or the option set after connect(), does not). The sender
    is an XPUB with XPUB_NODROP, as the kernel's: a message without room is retried, never
    dropped, so what arrives does not depend on the I/O threads' speed."""
    ctx = zmq.asyncio.Context()
    pub: zmq.Socket[Any] = zmq.Context.shadow(ctx.underlying).socket(zmq.XPUB)
    pub.setsockopt(zmq.XPUB_NODROP, 1)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    info: dict[str, Any] = {f"{c}_port": 0 for c in ("shell", "control", "stdin", "hb")}
    info |= {"transport": "tcp", "ip": "127.0.0.1", "iopub_port": port, "key": ""}
    info["signature_scheme"] = "hmac-sha256"
    sub = connect_channel(ctx, info, "iopub", rcvhwm=10000)
    sync: zmq.Socket[Any] = zmq.Socket.shadow(sub.underlying)
    try:
        assert sub.rcvhwm == 10000
        assert pub.poll(HANG_MS) and pub.recv() == b"\x01"  # the subscription: connected

        def sent() -> bool:
            try:
                pub.send(b"x" * 1000, zmq.NOBLOCK)
            except zmq.Again:  # no room yet: the I/O threads are moving the queue
                return False
            return True

        for i in range(5000):
            wait_until(sent, HANG_MS / 1000, f"room for message {i}", 0.001)
        for received in range(5000):
            assert sync.poll(HANG_MS), f"only {received} of 5000 arrived"
            sync.recv()
    finally:
        sub.close(linger=0)
        pub.close(linger=0)
        ctx.term()
