"""SharedChannels against a scripted kernel (real zmq sockets and a real Session, in this
process) and channel clients.

The "kernel" is a ROUTER per request channel and an XPUB for IOPub, signing with the same
key; the clients are plain callbacks collecting what SharedChannels delivers to them (what a
websocket would get). Covers routing by session, fan-out, the comm_echo skip, session
claims, the remembered status for late joiners, a receiving loop that dies, and the watcher.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session

from harness.polling import wait_until_async
from harness.relay_client import RelayClient
from ipykernel_ext.protocol import CONTENT
from ipykernel_ext.shared_channels import (
    KernelMessage,
    RefusedMessage,
    SessionInUse,
    SharedChannels,
)

from ..fault_injection import FAULT_MARKER, FaultyChannels

KEY = b"unit-test-key"
UNTRACKED = {"kernel_info_request", "comm_info_request"}


class ScriptedKernel:
    """Sockets bound like a kernel's; answers and publishes what a test tells it to."""

    def __init__(self, ctx: zmq.asyncio.Context) -> None:
        self.session = Session(key=KEY)
        self.sockets: dict[str, zmq.asyncio.Socket] = {}
        self.info: dict[str, Any] = {
            "transport": "tcp",
            "ip": "127.0.0.1",
            "key": KEY.decode(),
            "signature_scheme": "hmac-sha256",
            "hb_port": 0,
        }
        for channel, kind in (
            ("shell", zmq.ROUTER),
            ("control", zmq.ROUTER),
            ("stdin", zmq.ROUTER),
            ("iopub", zmq.XPUB),
        ):
            sock = ctx.socket(kind)
            sock.linger = 0
            if kind == zmq.XPUB:
                # Every subscription, even to a topic another subscriber already has (a new
                # channel set may subscribe before the old one's pipe is gone).
                sock.setsockopt(zmq.XPUB_VERBOSE, 1)
            self.info[f"{channel}_port"] = sock.bind_to_random_port("tcp://127.0.0.1")
            self.sockets[channel] = sock

    async def subscribed(self) -> None:
        """Wait for a new subscription (unsubscriptions of closed sets are passed over)."""
        while True:
            assert await self.sockets["iopub"].poll(5000), "no IOPub subscription"
            if (await self.sockets["iopub"].recv())[:1] == b"\x01":
                return

    async def request(self, channel: str) -> tuple[list[bytes], dict[str, Any]]:
        sock = self.sockets[channel]
        assert await sock.poll(5000), f"no request on {channel}"
        frames = await sock.recv_multipart()
        idents, rest = self.session.feed_identities(frames)
        return idents, self.session.deserialize(rest)

    def reply(self, channel: str, idents: list[bytes], parent: dict[str, Any], kind: str) -> None:
        self.session.send(self.sockets[channel], kind, {"status": "ok"}, parent, ident=idents)

    def publish(self, kind: str, content: dict[str, Any], parent: dict[str, Any] | None) -> None:
        self.session.send(self.sockets["iopub"], kind, content, parent or {})


def send_as(session: str, stream: Any) -> None:
    """A kernel_info_request on a client's ``stream``, in the name of ``session``."""
    Session(key=KEY, session=session).send(stream, "kernel_info_request", {})


#: A wait's hang guard (s), and its poll step (the relay runs in this event loop).
HANG = 10
POLL = 0.005


def run(test: Callable[[SharedChannels, ScriptedKernel], Any], **channel_kw: Any) -> None:
    async def main() -> None:
        ctx = zmq.asyncio.Context()
        kernel = ScriptedKernel(ctx)
        channels = channel_kw.pop("cls", SharedChannels)(
            kernel.info, context=ctx, grace_period=0.05, **channel_kw
        )
        try:
            channels.start()
            await kernel.subscribed()
            await test(channels, kernel)
        finally:
            await channels.aclose()
            ctx.destroy(linger=0)

    asyncio.run(asyncio.wait_for(main(), 30))


async def barrier(kernel: ScriptedKernel, *clients: RelayClient) -> None:
    """Everything published before this is delivered: publish a marker, wait for it."""
    marker = f"barrier-{uuid.uuid4().hex}".encode()
    kernel.publish("stream", {"name": "stdout", "text": marker.decode()}, None)
    for ws in clients:

        def arrived(ws: RelayClient = ws) -> bool:
            return any(marker in m.frames[CONTENT] for m in ws.received)

        await wait_until_async(arrived, HANG, "the barrier's marker", POLL)


def test_replies_go_to_their_session_only() -> None:
    async def test(channels: SharedChannels, kernel: ScriptedKernel) -> None:
        a, b = RelayClient(channels), RelayClient(channels)
        for ws in (a, b):
            msg = ws.send("shell", "kernel_info_request")
            idents, request = await kernel.request("shell")
            assert request["header"]["msg_id"] == msg["header"]["msg_id"]
            kernel.reply("shell", idents, request["header"], "kernel_info_reply")
        await wait_until_async(
            lambda: len(a.received) == 1 and len(b.received) == 1, HANG, "one message each", POLL
        )
        assert a.received[0].parent_header["session"] == a.session.session
        assert b.received[0].parent_header["session"] == b.session.session
        # A reply for a session nobody owns reaches nobody; the barrier shows nothing else came.
        kernel.reply("shell", idents, {"session": "gone", "msg_id": "x"}, "kernel_info_reply")
        await barrier(kernel, a, b)
        assert [m.channel for m in a.received] == ["shell", "iopub"]
        assert [m.channel for m in b.received] == ["shell", "iopub"]

    run(test)


def test_iopub_fans_out_and_an_echo_skips_its_sender() -> None:
    async def test(channels: SharedChannels, kernel: ScriptedKernel) -> None:
        a = RelayClient(channels)
        b = RelayClient(channels, skip_own_echo=False)
        c = RelayClient(channels)
        sent = a.send("shell", "comm_msg", {"comm_id": "x", "data": {}})
        await kernel.request("shell")
        kernel.publish("comm_echo", {"comm_id": "x", "data": {}}, sent["header"])
        own_b = b.send("shell", "comm_msg", {"comm_id": "x", "data": {}})
        await kernel.request("shell")
        kernel.publish("comm_echo", {"comm_id": "x", "data": {}}, own_b["header"])
        await barrier(kernel, a, b, c)
        assert a.types() == ["comm_echo", "stream"]  # b's echo, not its own
        assert b.types() == ["comm_echo", "comm_echo", "stream"]  # asked for its own too
        assert c.types() == ["comm_echo", "comm_echo", "stream"]

    run(test)


def test_sessions_are_owned_taken_over_and_retired() -> None:
    async def test(channels: SharedChannels, kernel: ScriptedKernel) -> None:
        a, b = RelayClient(channels), RelayClient(channels)
        with pytest.raises(SessionInUse):
            send_as(a.session.session, b.handle.stream("shell"))
        with pytest.raises(SessionInUse):
            send_as(channels.session.session, b.handle.stream("shell"))
        a2 = RelayClient(channels, session=a.session.session)  # a reconnecting
        assert channels.owner(a.session.session) is a2.handle
        with pytest.raises(SessionInUse):  # a's old handle no longer sends with it
            a.send("shell", "kernel_info_request")
        # One record: what each client owns, and who is attached, follow from it.
        assert a.handle.sessions == set() and a2.handle.sessions == {a.session.session}
        assert channels.clients == (a.handle, b.handle, a2.handle)
        b.handle.close()
        # mypy keeps channels.clients narrowed across close(): forget it (mypy#9457)
        channels = channels
        assert channels.clients == (a.handle, a2.handle) and b.handle.sessions == set()
        with pytest.raises(SessionInUse, match="belonged to another client"):
            send_as(b.session.session, a2.handle.stream("shell"))
        with pytest.raises(RuntimeError, match="detached"):
            b.send("shell", "kernel_info_request")

    run(test)


def test_a_stream_diverts_its_channel_as_a_zmqstream_does() -> None:
    """jupyter_server's offline buffer calls ``on_recv(callback)`` on each stream in
    ``connection.channels`` and reads ``stream.socket.closed``: the client's messages on that
    channel go to the callback until ``on_recv(None)``; IOPub cannot be sent on."""

    async def test(channels: SharedChannels, kernel: ScriptedKernel) -> None:
        a = RelayClient(channels)
        iopub = a.handle.stream("iopub")
        assert a.handle.stream("iopub") is iopub  # one per channel: what on_recv set holds
        held: list[KernelMessage] = []
        iopub.on_recv(held.append)
        kernel.publish("stream", {"name": "stdout", "text": "held"}, None)
        await wait_until_async(lambda: len(held) == 1, HANG, "the stream held", POLL)
        iopub.on_recv(None)
        await barrier(kernel, a)
        assert b"held" in held[0].frames[CONTENT]
        assert a.types() == ["stream"] and b"barrier" in a.received[0].frames[CONTENT]
        with pytest.raises(RefusedMessage, match="iopub"):
            send_as(a.session.session, iopub)
        assert not iopub.socket.closed and not iopub.closed()
        iopub.close()  # as stop_buffering does: the client detaches
        iopub = iopub  # mypy keeps iopub.socket.closed narrowed across close() (mypy#9457)
        assert iopub.socket.closed and a.handle.closed and channels.clients == ()

    run(test)


def test_a_late_joiner_gets_the_last_tracked_status() -> None:
    async def test(channels: SharedChannels, kernel: ScriptedKernel) -> None:
        first = RelayClient(channels)
        assert first.received == []  # nothing to announce yet
        execute = first.send("shell", "execute_request", {"code": "sleep"})["header"]
        await kernel.request("shell")
        kernel.publish("status", {"execution_state": "busy"}, execute)
        # A status for an untracked request (the server's kernel_info nudge) is not kept.
        info = {"msg_id": "ki", "msg_type": "kernel_info_request", "session": "s"}
        kernel.publish("status", {"execution_state": "idle"}, info)
        await barrier(kernel, first)
        late = RelayClient(channels)
        assert late.types() == ["status"]
        status = late.received[0]
        assert status is channels.status
        assert status.parent_header["msg_id"] == execute["msg_id"]
        assert b"busy" in status.frames[CONTENT]
        # Same frames as the kernel sent them (signature included): nothing rebuilt.
        busy = next(m for m in first.received if m.msg_type == "status")
        assert busy.frames == status.frames
        kernel.publish("status", {"execution_state": "idle"}, execute)
        await barrier(kernel, late)
        assert b"idle" in RelayClient(channels).received[0].frames[CONTENT]

    run(test, track_status=lambda parent_type: parent_type not in UNTRACKED)


def test_no_status_is_announced_without_a_tracking_rule() -> None:
    async def test(channels: SharedChannels, kernel: ScriptedKernel) -> None:
        first = RelayClient(channels)
        kernel.publish(
            "status", {"execution_state": "busy"}, {"msg_id": "e", "msg_type": "execute_request"}
        )
        await barrier(kernel, first)
        assert RelayClient(channels).received == []

    run(test)


def test_a_dead_receiving_loop_closes_the_set_and_tells_every_client() -> None:
    async def test(channels: SharedChannels, kernel: ScriptedKernel) -> None:
        clients = [RelayClient(channels) for _ in range(3)]
        closed: list[SharedChannels] = []
        channels.on_close = closed.append
        kernel.publish("stream", {"name": "stdout", "text": FAULT_MARKER.decode()}, None)
        await wait_until_async(lambda: channels.closed, HANG, "the set closed", POLL)
        assert closed == [channels]
        for ws in clients:
            assert len(ws.lost) == 1 and "iopub channel stopped receiving" in ws.lost[0]
            assert ws.handle.closed
            with pytest.raises(RuntimeError):
                ws.send("shell", "kernel_info_request")
        assert channels.sockets == {}
        with pytest.raises(RuntimeError, match="iopub channel stopped receiving"):
            channels.attach(lambda m: None)
        # A new set on the same kernel works: clients that reconnect are not deaf.
        fresh = SharedChannels(kernel.info, context=channels.context, grace_period=0.05)
        fresh.start()
        try:
            await kernel.subscribed()
            again = RelayClient(fresh)
            msg = again.send("control", "kernel_info_request")
            idents, request = await kernel.request("control")
            kernel.reply("control", idents, request["header"], "kernel_info_reply")
            await wait_until_async(
                lambda: any(m.channel == "control" for m in again.received),
                HANG,
                "the control reply on the new set",
                POLL,
            )
            assert again.received[-1].parent_header["msg_id"] == msg["header"]["msg_id"]
            await barrier(kernel, again)
        finally:
            await fresh.aclose()

    run(test, cls=FaultyChannels)


def test_the_last_client_leaving_closes_the_set_after_the_grace_period() -> None:
    async def test(channels: SharedChannels, kernel: ScriptedKernel) -> None:
        ws = RelayClient(channels)
        ws.handle.close()
        assert not channels.closed
        await wait_until_async(lambda: channels.closed, HANG, "the set closed", POLL)
        assert ws.lost == []  # it had left: nobody to tell

    run(test)


class RecordingWatcher:
    """A watcher that records what it is shown, and what clients had been given by then."""

    def __init__(self, clients: list[RelayClient]) -> None:
        self.clients = clients
        self.sent: list[tuple[str, list[Any]]] = []
        self.received: list[tuple[str, str, int]] = []  # channel, type, deliveries so far

    def sent_cb(self, channel: str, frames: list[Any]) -> None:
        self.sent.append((channel, list(frames)))

    def received_cb(self, msg: KernelMessage) -> None:
        delivered = sum(len(c.received) for c in self.clients)
        self.received.append((msg.channel, msg.msg_type, delivered))


def test_the_watcher_sees_every_message_once_before_any_client() -> None:
    async def test(channels: SharedChannels, kernel: ScriptedKernel) -> None:
        clients: list[RelayClient] = []
        recorder = RecordingWatcher(clients)

        class Watcher:
            sent = staticmethod(recorder.sent_cb)
            received = staticmethod(recorder.received_cb)

        channels.watcher = Watcher()
        a, b = RelayClient(channels), RelayClient(channels)
        clients += [a, b]
        request = a.send("shell", "execute_request", {"code": "1"})
        idents, seen = await kernel.request("shell")
        assert [c for c, _ in recorder.sent] == ["shell"]  # before the kernel had it
        kernel.publish("stream", {"name": "stdout", "text": "x"}, seen["header"])
        await wait_until_async(
            lambda: len(a.received) == 1 and len(b.received) == 1, HANG, "one message each", POLL
        )
        assert recorder.received == [("iopub", "stream", 0)]  # shown first, once
        a.handle.close()  # the reply's client leaves: the watcher still sees the reply
        kernel.reply("shell", idents, request["header"], "execute_reply")
        await barrier(kernel, b)
        assert ("shell", "execute_reply", 2) in recorder.received
        assert [m.channel for m in b.received] == ["iopub", "iopub"]
        channels.watcher = None
        kernel.publish("stream", {"name": "stdout", "text": "y"}, None)
        await barrier(kernel, b)
        assert len(recorder.received) == 3  # stream, reply, first barrier

    run(test)
