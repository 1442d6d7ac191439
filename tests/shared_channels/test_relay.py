"""SharedChannels used as a library: one set of ZMQ channels per kernel, many logical clients.

:mod:`ipykernel_ext.shared_channels` driven directly from asyncio, with a kernel started by
jupyter_client over CurveZMQ; no server (that level is tests/server/test_shared_channels*.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from jupyter_client.session import Session

from harness.async_websocket import settle
from harness.polling import wait_until_async
from ipykernel_ext.protocol import CONTENT
from ipykernel_ext.shared_channels import KernelMessage, SessionInUse, SharedChannels

# Hang guard per test (default 120 s): a kernel and several clients.
pytestmark = pytest.mark.timeout(180)


class LibClient:
    """A logical client of SharedChannels: a Session and the messages delivered to it."""

    def __init__(
        self, channels: SharedChannels, key: bytes, session: str | None = None, **attach: Any
    ) -> None:
        self.session = Session(key=key) if session is None else Session(key=key, session=session)
        self.received: list[KernelMessage] = []
        self.handle = channels.attach(self.received.append, self.session.session, **attach)

    def send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        msg = self.session.send(self.handle.stream(channel), msg_type, content)  # type: ignore[arg-type]  # a ZMQStream look-alike: Session.send calls send_multipart
        assert msg is not None
        return msg["header"]["msg_id"]

    def replies(self) -> list[KernelMessage]:
        return [m for m in self.received if m.channel != "iopub"]

    async def wait(
        self, pred: Callable[[KernelMessage], bool], timeout: float = 30
    ) -> KernelMessage:
        found = await wait_until_async(
            lambda: next((m for m in self.received if pred(m)), None),
            timeout,
            "a matching message",
            0.02,
        )
        assert found is not None  # the wait returns a truthy value: a message
        return found


def idle(msg_id: str) -> Callable[[KernelMessage], bool]:
    return lambda m: (
        m.channel == "iopub"
        and m.msg_type == "status"
        and m.parent_header.get("msg_id") == msg_id
        and b"idle" in m.frames[CONTENT]
    )


def test_library_routes_replies_and_echoes(ext_kernel: Any) -> None:
    async def main() -> None:
        info = ext_kernel[0].get_connection_info()
        assert info.get("curve_publickey"), "the kernel must run with CurveZMQ"
        channels = SharedChannels(info, grace_period=0.2)
        channels.start()
        key = info["key"]
        a = LibClient(channels, key)
        b = LibClient(channels, key, skip_own_echo=False)
        await asyncio.wait_for(channels.ready(), 30)
        ids_a = [a.send("shell", "kernel_info_request", {}) for _ in range(3)]
        id_b = b.send("control", "kernel_info_request", {})
        for msg_id in ids_a:
            await a.wait(idle(msg_id))

            def is_reply(m: KernelMessage, i: str = msg_id) -> bool:
                return m.channel == "shell" and m.parent_header["msg_id"] == i

            await a.wait(is_reply)
        await b.wait(lambda m: m.parent_header.get("msg_id") == id_b and m.channel == "control")
        # Each reply once, to its sender only (in any order: a kernel may answer kernel_info
        # off the main thread while it is busy).
        assert sorted(m.parent_header["msg_id"] for m in a.replies()) == sorted(ids_a)
        assert [m.parent_header["msg_id"] for m in b.replies()] == [id_b]
        # The readiness check's own kernel_info replies reached nobody.
        assert all(m.parent_header["session"] != channels.session.session for m in a.replies())

        # comm_echo: a does not get its own (default), b asked for its own.
        comm_a = a.send("shell", "comm_open", {"comm_id": "ca", "target_name": "t", "data": {}})
        comm_b = b.send("shell", "comm_open", {"comm_id": "cb", "target_name": "t", "data": {}})
        await a.wait(idle(comm_b))
        await b.wait(idle(comm_b))

        def echoes(client: LibClient) -> list[str]:
            return [m.parent_header["msg_id"] for m in client.received if m.msg_type == "comm_echo"]

        assert echoes(a) == [comm_b]
        assert echoes(b) == [comm_a, comm_b]

        # Sessions are owned: b cannot send with a's session.
        thief = Session(key=key, session=a.session.session)
        with pytest.raises(SessionInUse):
            thief.send(b.handle.stream("shell"), "kernel_info_request", {})  # type: ignore[arg-type]  # a ZMQStream look-alike: Session.send calls send_multipart
        # A new attach with a's session takes it over (a reconnecting): a's old handle can
        # no longer send with it, and replies for it go to the new owner.
        a2 = LibClient(channels, key, session=a.session.session)
        assert channels.owner(a.session.session) is a2.handle
        with pytest.raises(SessionInUse):
            a.send("shell", "kernel_info_request", {})
        msg_id = a2.send("shell", "kernel_info_request", {})
        await a2.wait(lambda m: m.channel == "shell" and m.parent_header.get("msg_id") == msg_id)

        # A departed client's session cannot be claimed by another one (its late replies
        # would go there), only taken over by attaching with it.
        b.handle.close()
        with pytest.raises(SessionInUse):
            Session(key=key, session=b.session.session).send(
                a2.handle.stream("shell"),  # type: ignore[arg-type]  # a ZMQStream look-alike: Session.send calls send_multipart
                "kernel_info_request",
                {},
            )
        b2 = LibClient(channels, key, session=b.session.session)
        msg_id = b2.send("shell", "kernel_info_request", {})
        await b2.wait(lambda m: m.channel == "shell" and m.parent_header.get("msg_id") == msg_id)

        # Grace period: the sockets close a little after the last client left.
        for client in (a, a2, b2):
            client.handle.close()
        assert not channels.closed
        assert await settle(lambda: channels.closed, timeout=10)
        assert channels.sockets == {}

    asyncio.run(main())
