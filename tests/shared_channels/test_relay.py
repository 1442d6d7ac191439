"""SharedChannels used as a library: one set of ZMQ channels per kernel, many logical clients.

:mod:`ipykernel_ext.shared_channels` driven directly from asyncio, with a kernel started by
jupyter_client over CurveZMQ; no server (that level is tests/server/test_shared_channels*.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from harness.async_websocket import settle
from harness.kernels import start_kernel
from harness.polling import wait_until_async
from harness.relay_client import RelayClient
from ipykernel_ext.protocol import CONTENT
from ipykernel_ext.shared_channels import KernelMessage, SharedChannels

# Hang guard per test (default 120 s): a kernel and several clients.
pytestmark = pytest.mark.timeout(180)


async def arrived(client: RelayClient, pred: Callable[[KernelMessage], bool]) -> None:
    """Wait until a message matching ``pred`` was delivered to ``client``."""
    await wait_until_async(lambda: any(pred(m) for m in client.received), 30, "a match", 0.02)


def reply_to(msg_id: str, channel: str = "shell") -> Callable[[KernelMessage], bool]:
    return lambda m: m.channel == channel and m.parent_header.get("msg_id") == msg_id


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
        a = RelayClient(channels)
        b = RelayClient(channels, skip_own_echo=False)
        await asyncio.wait_for(channels.ready(), 30)
        ids_a = [a.send("shell", "kernel_info_request")["header"]["msg_id"] for _ in range(3)]
        id_b = b.send("control", "kernel_info_request")["header"]["msg_id"]
        for msg_id in ids_a:
            await arrived(a, idle(msg_id))
            await arrived(a, reply_to(msg_id))
        await arrived(b, reply_to(id_b, "control"))
        # Each reply once, to its sender only (in any order: a kernel may answer kernel_info
        # off the main thread while it is busy).
        assert sorted(m.parent_header["msg_id"] for m in a.replies()) == sorted(ids_a)
        assert [m.parent_header["msg_id"] for m in b.replies()] == [id_b]
        # The readiness check's own kernel_info replies reached nobody.
        assert all(m.parent_header["session"] != channels.session.session for m in a.replies())

        # comm_echo: a does not get its own (default), b asked for its own.
        opening = {"target_name": "t", "data": {}}
        comm_a = a.send("shell", "comm_open", {"comm_id": "ca", **opening})["header"]["msg_id"]
        comm_b = b.send("shell", "comm_open", {"comm_id": "cb", **opening})["header"]["msg_id"]
        await arrived(a, idle(comm_b))
        await arrived(b, idle(comm_b))

        def echoes(client: RelayClient) -> list[str]:
            return [m.parent_header["msg_id"] for m in client.received if m.msg_type == "comm_echo"]

        assert echoes(a) == [comm_b]
        assert echoes(b) == [comm_a, comm_b]

        # A reconnecting client (a new attach with a's session) gets that session's replies;
        # so does one re-attaching with a departed client's session (ownership and its
        # refusals: tests/unit/test_shared_channels_unit.py).
        a2 = RelayClient(channels, session=a.session.session)
        b.handle.close()
        b2 = RelayClient(channels, session=b.session.session)
        for client in (a2, b2):
            msg_id = client.send("shell", "kernel_info_request")["header"]["msg_id"]
            await arrived(client, reply_to(msg_id))

        # Grace period: the sockets close a little after the last client left.
        for client in (a, a2, b2):
            client.handle.close()
        assert not channels.closed
        assert await settle(lambda: channels.closed, timeout=10)
        assert channels.sockets == {}

    asyncio.run(main())


def test_after_a_restart_on_the_same_ports_the_next_client_waits_for_the_new_process() -> None:
    """A set kept open across a restart on the same ports (jupyter_client's default) keeps
    its sockets: its SUB rejoins the new process through libzmq's reconnect, and what the
    kernel publishes before that is lost. Told of the restart (the server does it for the
    API's and the restarter's), the set's next readiness wait nudges the new process until
    its IOPub arrived, as stock does with the new sockets of each websocket. Before,
    ``ready()`` was the old process's done future: a websocket opened right after a restart
    could send its first cell before the SUB had rejoined, and lose its ``execute_input``."""
    km = start_kernel()

    async def main() -> None:
        channels = SharedChannels(dict(km.get_connection_info()), grace_period=0.2)
        channels.start()
        await asyncio.wait_for(channels.ready(), 30)
        before = km.get_connection_info()
        await asyncio.to_thread(km.restart_kernel, now=True)
        assert not channels.follow(dict(km.get_connection_info())), "the same ports: no reconnect"
        assert km.get_connection_info()["iopub_port"] == before["iopub_port"]

        channels.kernel_restarted()
        ready = channels.ready()
        assert not ready.done(), "the set must wait for the new process, not say it is live"
        assert await asyncio.wait_for(ready, 60)
        client = RelayClient(channels)
        content = {"code": "1", "silent": False, "store_history": False, "allow_stdin": False}
        msg_id = client.send("shell", "execute_request", content)["header"]["msg_id"]
        await arrived(
            client,
            lambda m: m.msg_type == "execute_input" and m.parent_header.get("msg_id") == msg_id,
        )
        await arrived(client, idle(msg_id))
        client.handle.close()
        assert await settle(lambda: channels.closed, timeout=10)

    try:
        asyncio.run(main())
    finally:
        km.shutdown_kernel(now=True)
