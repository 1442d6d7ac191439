"""Shared channels behind a real jupyter_server: one set of channels per kernel, many websockets.

The jupyter_server connection class (:mod:`ipykernel_ext.server`) in a real jupyter_server
subprocess, kernels over CurveZMQ, real websocket clients (tornado's) speaking
``v1.kernel.websocket.jupyter.org`` or the legacy JSON protocol. The fan-out under load is
test_shared_channels_fanout.py; the library without a server is tests/shared_channels/.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.services.kernels.connection.base import (
    serialize_msg_to_ws_v1,
)

from harness.async_websocket import WSClient, connect_all, settle
from harness.messages import is_status
from harness.shared_channels_server import SharedChannelsServer
from ipykernel_ext.shared_channels.sockets import ports_of

# Hang guard per test (default 120 s): a jupyter_server, kernels and several clients.
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server() -> Iterator[SharedChannelsServer]:
    srv = SharedChannelsServer()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def kernel(server: SharedChannelsServer) -> Iterator[str]:
    kernel_id = server.start_kernel()
    try:
        yield kernel_id
    finally:
        with contextlib.suppress(Exception):
            server.api("DELETE", f"api/kernels/{kernel_id}")


def wait_for_file(flag: Path, then: str = "pass") -> str:
    """Cell code that blocks until ``flag`` exists (the test decides when), then ``then``."""
    return (
        f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.02)\n{then}"
    )


# --- through jupyter_server --------------------------------------------------------------


def test_twenty_clients_one_channel_set_own_replies_all_iopub_and_input(
    server: SharedChannelsServer, kernel: str
) -> None:
    """20 websockets on one kernel each run a cell at once, then one asks input()."""

    async def main() -> None:
        # Stock jupyter_server opens 4 sockets per websocket (docs/UPSTREAM_NOTES.md), one on
        # stdin, where nothing else of the server connects: stdin counts sets of channels.
        stdin_before = server.channel_connections(kernel)["stdin"]
        first = await WSClient(server, kernel).connect()
        await server.stdin_connections_become(kernel, 1)
        clients = [first, *await connect_all([WSClient(server, kernel) for _ in range(19)])]
        ids = [c.execute(f"print('from client {i}')") for i, c in enumerate(clients)]
        replies = await asyncio.gather(*(c.reply_to(i) for c, i in zip(clients, ids, strict=True)))
        # Every cell's idle, not the last id's: the kernel runs the 20 requests in the order
        # they arrived, which need not be the order they were sent in.
        await asyncio.gather(*(c.idle_after(msg_id) for c in clients for msg_id in ids))
        # Every client has had its reply, so any channels opened for it exist by now.
        assert stdin_before == 0, "a set of channels before any websocket"
        stdin_after = server.channel_connections(kernel)["stdin"]
        assert stdin_after == 1, f"{stdin_after} sets of channels for 20 websockets"

        # Each client gets its own reply and no other; every client sees every cell's IOPub.
        expected = [f"from client {j}" for j in range(20)]
        for i, (client, reply) in enumerate(zip(clients, replies, strict=True)):
            assert reply["msg_type"] == "execute_reply", (i, reply)
            assert reply["content"]["status"] == "ok", (i, reply)
            assert reply["parent_header"]["msg_id"] == ids[i], f"client {i} got another's"
            messages = list(client.messages)
            foreign = [
                m
                for m in messages
                if m["channel"] != "iopub" and m["parent_header"].get("session") != client.session
            ]
            assert foreign == [], f"client {i} got replies to other sessions"
            shell = [m["parent_header"]["msg_id"] for m in messages if m["channel"] == "shell"]
            assert shell == [ids[i]], f"client {i}'s shell replies"
            # A cell's output may come as several stream messages: each cell's text, joined.
            texts = dict.fromkeys(ids, "")
            for m in messages:
                if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") in texts:
                    texts[m["parent_header"]["msg_id"]] += m["content"]["text"]
            assert [texts[c].strip() for c in ids] == expected, f"client {i}'s stdout"
            inputs = {
                m["parent_header"]["msg_id"] for m in messages if m["msg_type"] == "execute_input"
            }
            assert inputs >= set(ids), f"client {i} missed execute_input of {set(ids) - inputs}"

        # input(): the prompt goes only to the asker, the answer comes back from it.
        asker = clients[3]
        input_id = asker.execute("answer = input('who? ')\nprint('got', answer)", allow_stdin=True)
        prompt = await asker.wait_for(lambda m: m["msg_type"] == "input_request")
        assert prompt["channel"] == "stdin"
        assert prompt["content"]["prompt"] == "who? "
        asker.send("stdin", "input_reply", {"value": "client 3"}, parent=prompt["header"])
        await asyncio.gather(*(c.idle_after(input_id) for c in clients))
        input_reply = await asker.reply_to(input_id)
        assert input_reply["content"]["status"] == "ok", input_reply
        for i, client in enumerate(clients):
            prompts = [m for m in client.messages if m["msg_type"] == "input_request"]
            assert len(prompts) == (1 if client is asker else 0), f"client {i}: {prompts}"
            outputs = [
                m
                for m in client.messages
                if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == input_id
            ]
            assert "got client 3" in "".join(m["content"]["text"] for m in outputs), f"client {i}"
        await asyncio.gather(*(c.close() for c in clients))

    asyncio.run(main())


def test_comm_echo_goes_to_the_others_only(server: SharedChannelsServer, kernel: str) -> None:
    async def main() -> None:
        a, b, c = await connect_all([WSClient(server, kernel) for _ in range(3)])
        info_id = a.send("shell", "kernel_info_request", {})["msg_id"]
        info = await a.reply_to(info_id)
        # python3-ext always advertises it: a kernel that does not is a failure, not a skip.
        assert "comm_echo" in info["content"].get("supported_features", []), info["content"]
        setup = a.execute(
            "get_ipython().kernel.comm_manager.register_target('t', lambda comm, msg: None)"
        )
        assert (await a.reply_to(setup))["content"]["status"] == "ok"
        comm_id = uuid.uuid4().hex
        opened = a.send("shell", "comm_open", {"comm_id": comm_id, "target_name": "t", "data": {}})
        sent = a.send("shell", "comm_msg", {"comm_id": comm_id, "data": {"x": 1}})
        # b's cell runs after a's comm messages (one shell queue): when it is idle, every
        # echo has been published.
        marker = b.execute("pass")
        await asyncio.gather(*(cl.idle_after(marker) for cl in (a, b, c)))
        for client in (b, c):
            echoes = [m for m in client.messages if m["msg_type"] == "comm_echo"]
            assert [e["parent_header"]["msg_id"] for e in echoes] == [
                opened["msg_id"],
                sent["msg_id"],
            ]
            assert echoes[1]["content"]["data"] == {"x": 1}
            assert echoes[1]["parent_header"]["session"] == a.session
        assert [m for m in a.messages if m["msg_type"] == "comm_echo"] == []
        # ...while a still gets everything else its comm messages caused (busy/idle).
        assert any(m["msg_type"] == "status" for m in a.of(sent["msg_id"]))
        await asyncio.gather(*(cl.close() for cl in (a, b, c)))

    asyncio.run(main())


def test_a_websocket_joining_mid_cell_is_told_busy(
    server: SharedChannelsServer, kernel: str, tmp_path: Path
) -> None:
    """A new websocket joins the existing IOPub subscription; the kernel cannot greet it, so
    the server gives it the kernel's last tracked status, as the kernel sent it."""

    async def main() -> None:
        a = await WSClient(server, kernel).connect()
        await a.until_iopub_live()
        flag = tmp_path / "go"
        running = a.execute(wait_for_file(flag, then="print('done')"))
        await a.wait_for(
            lambda m: m["msg_type"] == "execute_input" and m["parent_header"]["msg_id"] == running
        )
        late = await WSClient(server, kernel).connect()
        first = await late.wait_for(lambda m: m["channel"] == "iopub", timeout=30)
        assert first["msg_type"] == "status", first
        assert first["content"]["execution_state"] == "busy"
        assert first["parent_header"]["msg_id"] == running
        assert first["parent_header"]["msg_type"] == "execute_request"
        # The very message the kernel sent to a: same header, same parent.
        busy = next(
            m for m in a.of(running) if m["msg_type"] == "status" and m["channel"] == "iopub"
        )
        assert (first["header"], first["parent_header"]) == (busy["header"], busy["parent_header"])
        flag.touch()
        await late.idle_after(running)
        # Joining an idle kernel: the last tracked status is that idle (nothing else).
        idle_joiner = await WSClient(server, kernel).connect()
        status = await idle_joiner.wait_for(lambda m: m["channel"] == "iopub", timeout=30)
        assert is_status("idle", running)(status), status
        await asyncio.gather(*(c.close() for c in (a, late, idle_joiner)))

    asyncio.run(main())


def test_legacy_protocol_alongside_v1(server: SharedChannelsServer, kernel: str) -> None:
    async def main() -> None:
        legacy, v1 = await connect_all(
            [WSClient(server, kernel, v1=False), WSClient(server, kernel)]
        )
        msg_id = legacy.execute("import sys; print('legacy here'); sys.stdout.flush(); 6 * 7")
        reply = await legacy.reply_to(msg_id)
        assert reply["content"]["status"] == "ok"
        assert reply["channel"] == "shell"
        for client in (legacy, v1):
            await client.idle_after(msg_id)
            types = [m["msg_type"] for m in client.of(msg_id)]
            assert "stream" in types and "execute_result" in types, types
            result = next(m for m in client.of(msg_id) if m["msg_type"] == "execute_result")
            assert result["content"]["data"]["text/plain"] == "42"
        assert [m for m in v1.messages if m["channel"] == "shell"] == []
        # and the other way round
        other = v1.execute("1 + 1")
        assert (await v1.reply_to(other))["content"]["status"] == "ok"
        await legacy.idle_after(other)
        assert not [
            m
            for m in legacy.messages
            if m["parent_header"].get("msg_id") == other and m["channel"] == "shell"
        ]
        await asyncio.gather(legacy.close(), v1.close())

    asyncio.run(main())


def test_a_session_owned_by_another_websocket_is_refused(
    server: SharedChannelsServer, kernel: str
) -> None:
    async def main() -> None:
        a, b = await connect_all([WSClient(server, kernel), WSClient(server, kernel)])
        # b pretends to be a: the server refuses, tells b, and a gets nothing.
        header = b.send(
            "shell",
            "execute_request",
            {"code": "print('stolen')", "silent": False, "allow_stdin": False},
            session=a.session,
        )
        error = await b.wait_for(
            lambda m: (
                m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == header["msg_id"]
            )
        )
        assert error["content"]["name"] == "stderr"
        assert "in use by another client" in error["content"]["text"]
        marker = a.execute("pass")
        await a.idle_after(marker)
        assert a.of(header["msg_id"]) == []
        # A message without a session is refused with a clear error, too.
        bad = b.send("shell", "kernel_info_request", {}, session="")
        error = await b.wait_for(
            lambda m: (
                m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == bad["msg_id"]
            )
        )
        assert "header.session" in error["content"]["text"]
        # An undecodable header: refused, said so, nothing else breaks.
        assert b.ws is not None
        b.ws.write_message(
            serialize_msg_to_ws_v1([b"not json", b"{}", b"{}", b"{}"], "shell"), binary=True
        )
        error = await b.wait_for(
            lambda m: m["msg_type"] == "stream" and "malformed" in m["content"]["text"]
        )
        assert error["content"]["name"] == "stderr"
        # b still works with its own session.
        own = b.execute("1")
        assert (await b.reply_to(own))["content"]["status"] == "ok"
        await asyncio.gather(a.close(), b.close())

    asyncio.run(main())


def test_disconnect_mid_execution_and_reconnect(
    server: SharedChannelsServer, kernel: str, tmp_path: Path
) -> None:
    async def main() -> None:
        a, b = await connect_all([WSClient(server, kernel), WSClient(server, kernel)])
        flag = tmp_path / "a-left"
        running = a.execute(wait_for_file(flag, then="print('after sleep')"))
        await b.wait_for(
            lambda m: m["msg_type"] == "execute_input" and m["parent_header"]["msg_id"] == running
        )
        await a.close()
        flag.touch()  # the cell ends only now that a has gone
        # b is unaffected: sees the end of a's cell, runs its own, gets its reply.
        await b.idle_after(running)
        assert "after sleep" in "".join(
            m["content"]["text"] for m in b.of(running) if m["msg_type"] == "stream"
        )
        own = b.execute("2 + 2")
        assert (await b.reply_to(own))["content"]["status"] == "ok"
        assert [m for m in b.messages if m["channel"] == "shell"] == [await b.reply_to(own)]

        # The same session reconnecting (a page reload) gets its replies again.
        again = await WSClient(server, kernel, session=a.session).connect()
        msg_id = again.execute("3 + 3")
        assert (await again.reply_to(msg_id))["content"]["status"] == "ok"
        await asyncio.gather(again.close(), b.close())

    asyncio.run(main())


def test_last_client_away_buffers_then_replays(
    server: SharedChannelsServer, kernel: str, tmp_path: Path
) -> None:
    """jupyter_server's offline buffer (buffer_offline_messages) works as with stock."""

    async def main() -> None:
        a = await WSClient(server, kernel).connect()
        flag, done = tmp_path / "away", tmp_path / "done"
        running = a.execute(
            wait_for_file(flag, then=f"print('while away'); open({str(done)!r}, 'w').close()")
        )
        await a.wait_for(lambda m: m["msg_type"] == "execute_input")
        await a.close()
        flag.touch()
        # The cell ends while nobody is connected: wait for its own sign of it.
        assert await settle(done.exists), "the cell never finished"
        back = await WSClient(server, kernel, session=a.session).connect()
        reply = await back.reply_to(running, timeout=30)
        assert reply["content"]["status"] == "ok"
        assert "while away" in "".join(
            m["content"]["text"] for m in back.of(running) if m["msg_type"] == "stream"
        )
        await back.close()

    asyncio.run(main())


def test_a_failed_channel_set_closes_every_websocket_and_a_new_one_works() -> None:
    """Fault injection: the receiving loop raises; nobody may be left on a deaf channel."""
    from ..fault_injection import FAULT_MARKER

    tests_dir = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (tests_dir, os.environ.get("PYTHONPATH", "")) if p)
    srv = SharedChannelsServer(
        env={"PYTHONPATH": path}, connection_class="fault_injection.FaultyConnection"
    )
    try:
        kernel_id = srv.start_kernel()

        async def main() -> None:
            a, b = await connect_all([WSClient(srv, kernel_id), WSClient(srv, kernel_id)])
            await a.until_iopub_live()
            a.execute(f"print({FAULT_MARKER.decode()!r})")
            for client in (a, b):

                def closed(c: WSClient = client) -> bool:
                    return c.closed

                assert await settle(closed), f"{client.session} left open"
                assert client.ws is not None
                assert client.ws.close_code == 1011
                assert "stopped receiving" in (client.ws.close_reason or "")
            # Reconnecting (same session, as a reload; or a new one) gets a live channel set.
            for again in (WSClient(srv, kernel_id, session=a.session), WSClient(srv, kernel_id)):
                await again.connect()
                await again.until_iopub_live()
                msg_id = again.execute("6 * 7")
                assert (await again.reply_to(msg_id))["content"]["status"] == "ok"
                await again.idle_after(msg_id)
                await again.close()

        asyncio.run(main())
        assert "injected fault in the receiving loop" in srv.log_text()
    finally:
        srv.stop()


#: strict_server's IOPub rate limit (status, comm_open, execute_input apart) over a window no
#: test comes near; its grace, far longer than a reconnect takes on a loaded machine.
RATE_LIMIT_MSGS = 100
RATE_LIMIT_WINDOW_S = 1000
STRICT_GRACE = 10


@pytest.fixture(scope="module")
def strict_server() -> Iterator[SharedChannelsServer]:
    """No offline buffer (so the grace period shows), a long grace and a low IOPub rate limit
    whose window outlasts any test: the count only grows until an ``idle`` resets it (with a
    1 s window, a slowly handled burst fell below 80% and re-armed the notice)."""
    srv = SharedChannelsServer(
        [
            "--MappingKernelManager.buffer_offline_messages=False",
            # stock's dropping limiter (the one switch that brings it back)
            "--SharedChannelsConnection.iopub_merge=False",
            # 0.1 msgs/s over 1000 s: exactly 100 messages (100 / 1000.0 == 0.1 in floats).
            "--ZMQChannelsWebsocketConnection.iopub_msg_rate_limit=0.1",
            f"--ZMQChannelsWebsocketConnection.rate_limit_window={RATE_LIMIT_WINDOW_S}",
        ],
        grace=STRICT_GRACE,
    )
    try:
        yield srv
    finally:
        srv.stop()


def test_channels_close_after_the_grace_period(strict_server: SharedChannelsServer) -> None:
    srv = strict_server
    kernel_id = srv.start_kernel()

    # The server logs "Closing shared channels <ports> (...)" when it closes a set; this
    # kernel's ports pick out its own (other tests' kernels share the server).
    ports = str(ports_of(srv.connection_info(kernel_id)))

    def closings() -> int:
        return srv.log_text().count(f"Closing shared channels {ports}")

    async def main() -> None:
        a = await WSClient(srv, kernel_id).connect()
        await srv.stdin_connections_become(kernel_id, 1)
        closed_before = closings()
        await a.close()
        # Back within the grace period (STRICT_GRACE, far longer than a reconnect takes):
        # the same channels, never closed.
        b = await WSClient(srv, kernel_id).connect()
        assert (await b.reply_to(b.execute("1")))["content"]["status"] == "ok"
        assert closings() == closed_before
        assert srv.channel_connections(kernel_id)["stdin"] == 1
        await b.close()
        # Gone after it (the server says so): no channel of a websocket left on the kernel.
        assert await settle(lambda: closings() == closed_before + 1, timeout=STRICT_GRACE + 60)
        await srv.stdin_connections_become(kernel_id, 0)
        # A new websocket: a new set of channels.
        c = await WSClient(srv, kernel_id).connect()
        assert (await c.reply_to(c.execute("1")))["content"]["status"] == "ok"
        await srv.stdin_connections_become(kernel_id, 1)
        await c.close()

    try:
        asyncio.run(main())
    finally:
        srv.api("DELETE", f"api/kernels/{kernel_id}")


def test_iopub_rate_limit_is_per_websocket_as_stock(strict_server: SharedChannelsServer) -> None:
    srv = strict_server
    kernel_id = srv.start_kernel()
    burst = (
        "from comm import create_comm\n"
        "c = create_comm(target_name='rate', data={})\n"
        "for i in range(1000): c.send({'i': i})\n"
    )

    async def main() -> None:
        a, b = await connect_all([WSClient(srv, kernel_id), WSClient(srv, kernel_id)])
        msg_id = a.execute(burst)
        for client in (a, b):
            await client.idle_after(msg_id)
            msgs = client.of(msg_id)
            warnings = [
                m
                for m in msgs
                if m["msg_type"] == "stream" and "rate exceeded" in m["content"]["text"]
            ]
            # Exact whatever the speed: the window outlasts the test (see strict_server).
            assert len(warnings) == 1, "each websocket is told once"
            assert sum(m["msg_type"] == "comm_msg" for m in msgs) == RATE_LIMIT_MSGS
        # The limit resets on idle: the next cell's output arrives.
        after = b.execute("print('after the burst')")
        await b.idle_after(after)
        for client in (a, b):
            await client.idle_after(after)
            assert any(m["msg_type"] == "stream" for m in client.of(after))
        await asyncio.gather(a.close(), b.close())

    try:
        asyncio.run(main())
    finally:
        srv.api("DELETE", f"api/kernels/{kernel_id}")


def test_kernel_shutdown_with_websockets_open(strict_server: SharedChannelsServer) -> None:
    srv = strict_server
    kernel_id = srv.start_kernel()

    async def main() -> None:
        clients = await connect_all([WSClient(srv, kernel_id) for _ in range(3)])
        await asyncio.to_thread(srv.api, "DELETE", f"api/kernels/{kernel_id}")
        for client in clients:
            reply = await client.wait_for(lambda m: m["msg_type"] == "shutdown_reply")
            assert reply["content"]["restart"] is False
        await asyncio.gather(*(c.close() for c in clients))
        # Another kernel on the same server is unaffected.
        other = srv.start_kernel()
        try:
            c = await WSClient(srv, other).connect()
            assert (await c.reply_to(c.execute("1")))["content"]["status"] == "ok"
            await c.close()
        finally:
            srv.api("DELETE", f"api/kernels/{other}")

    asyncio.run(main())


def test_restart_clients_get_status_and_go_on(server: SharedChannelsServer, kernel: str) -> None:
    def status(state: str) -> Callable[[dict[str, Any]], bool]:
        return lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == state

    async def main() -> None:
        clients = await connect_all([WSClient(server, kernel) for _ in range(3)])
        first = clients[0].execute("x = 1")
        await asyncio.gather(*(c.idle_after(first) for c in clients))

        async def fresh_kernel_answers(client: WSClient) -> None:
            msg_id = client.execute("'x' in dir()")
            reply = await client.reply_to(msg_id)
            assert reply["content"]["status"] == "ok"
            await client.idle_after(msg_id)
            results = [m for m in client.of(msg_id) if m["msg_type"] == "execute_result"]
            assert results, [(m["channel"], m["msg_type"], m["content"]) for m in client.of(msg_id)]
            result = results[0]
            assert result["content"]["data"]["text/plain"] == "False"  # a new kernel

        # REST restart: as with the stock class, every client sees the old kernel's
        # shutdown_reply (restart: true) on IOPub. The shared IOPub socket resubscribes to
        # the new kernel on its own; like any Jupyter client (and like the stock class, whose
        # sockets resubscribe the same way) a client knows output reaches it again once it
        # sees the status of a request of its own.
        marks = [len(c.messages) for c in clients]
        await asyncio.to_thread(server.api, "POST", f"api/kernels/{kernel}/restart")
        for client, mark in zip(clients, marks, strict=True):
            reply = await client.wait_for(lambda m: m["msg_type"] == "shutdown_reply")
            assert reply["content"]["restart"] is True
            after = client.messages.index(reply)
            assert after >= mark
        for client in clients:
            await client.until_iopub_live()
        for client in clients:
            await fresh_kernel_answers(client)

        # The kernel dies: the server restarts it and tells each websocket "restarting".
        server.kernel_process(kernel).kill()
        await asyncio.gather(*(c.wait_for(status("restarting")) for c in clients))
        for client in clients:
            await client.until_iopub_live()
        for client in clients:
            await fresh_kernel_answers(client)
        await asyncio.gather(*(c.close() for c in clients))

    asyncio.run(main())
