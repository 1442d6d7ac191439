"""The ``shared_channels`` benchmark's websocket clients: they count a burst, nothing more.

Each :class:`Counter` is a tornado websocket client of ``/api/kernels/<id>/channels`` with
the ``v1.kernel.websocket.jupyter.org`` subprotocol that counts the comm_msg of one burst and
notes when the burst's idle status came; frames are sliced (``harness.ws_protocol``), never
JSON-decoded, so the clients cost as little as possible on a machine the server and the
kernel share. They run in one or two worker processes (:func:`client_workers`), each an
asyncio loop driven over a pipe: ``("burst", msg_id, code, timeout, send)`` answers each
client's (count, idle time) and the time the request went out, ``("stats",)`` the kernel's
``iopub_stats_reply`` content, ``("stop",)`` closes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing as mp
import time
import uuid
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from jupyter_client.session import Session

from harness.server import JupyterServer
from harness.ws_protocol import WS_V1, auth_header, channels_path, decode_v1, encode_message
from harness.ws_protocol import new_message as ws_message


class Counter:
    """One websocket client that counts a burst's comm_msg and notices its idle status."""

    def __init__(self) -> None:
        self.parent = b""
        self.count = 0
        self.done_at = 0.0
        self.done = asyncio.Event()
        self.ws: Any = None
        self.control_parent = b"-"
        self.control_reply: asyncio.Future[dict[str, Any]] | None = None

    def reset(self, msg_id: str) -> None:
        self.parent = msg_id.encode()
        self.count = 0
        self.done_at = 0.0
        self.done.clear()

    def on_message(self, data: bytes | str | None) -> None:
        if not isinstance(data, bytes):
            return
        channel, parts = decode_v1(data)  # sliced, not JSON-decoded: clients cost little
        header, parent, _metadata, content = parts[:4]
        if channel == "control" and self.control_parent in parent:
            if self.control_reply is not None and not self.control_reply.done():
                self.control_reply.set_result(json.loads(content))
            return
        if channel != "iopub" or self.parent not in parent:
            return
        if b'"comm_msg"' in header:
            self.count += 1
        elif b'"status"' in header and b"idle" in content:
            self.done_at = time.monotonic()
            self.done.set()


#: The driver's session: requests are built as jupyter_client builds them.
DRIVER = Session(username="bench", session="bench-driver")


def send_request(
    counter: Counter, channel: str, msg_type: str, content: dict[str, Any], msg_id: str
) -> None:
    """A request on ``counter``'s websocket with the id every client waits on."""
    msg = ws_message(DRIVER, msg_type, content)
    msg["header"]["msg_id"] = msg_id  # the id every client waits on
    counter.ws.write_message(encode_message(channel, msg), binary=True)


async def worker_main(conn: Any, port: int, token: str, kernel_id: str, n: int) -> None:
    """Connect ``n`` counters (ten at a time), say ``ready``, then answer commands until stop."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    counters = [Counter() for _ in range(n)]

    async def connect(counter: Counter) -> None:
        url = f"ws://127.0.0.1:{port}/{channels_path(kernel_id, str(uuid.uuid4()))}"
        request = HTTPRequest(url, headers=dict([auth_header(token)]))
        counter.ws = await websocket_connect(
            request,
            subprotocols=[WS_V1],
            on_message_callback=counter.on_message,
            max_message_size=1 << 30,
        )

    for i in range(0, n, 10):  # a few at a time, as browsers would arrive
        await asyncio.gather(*(connect(c) for c in counters[i : i + 10]))
    conn.send("ready")
    loop = asyncio.get_running_loop()
    while True:
        command = await loop.run_in_executor(None, conn.recv)
        if command[0] == "stop":
            break
        if command[0] == "stats":  # the kernel's IOPub counters (PROTOCOL.md section 1)
            msg_id = uuid.uuid4().hex
            counters[0].control_parent = msg_id.encode()
            counters[0].control_reply = loop.create_future()
            send_request(counters[0], "control", "iopub_stats_request", {}, msg_id)
            try:
                conn.send(await asyncio.wait_for(counters[0].control_reply, 30))
            except TimeoutError:
                conn.send({})
            continue
        _, msg_id, code, timeout, send = command
        for counter in counters:
            counter.reset(msg_id)
        sent_at = time.monotonic()
        if send:
            content = {
                "code": code,
                "silent": False,
                "store_history": False,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            }
            send_request(counters[0], "shell", "execute_request", content, msg_id)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(c.done.wait() for c in counters)), timeout=timeout
            )
        conn.send([(c.count, c.done_at or None) for c in counters] + [("sent", sent_at)])
    for counter in counters:
        counter.ws.close()
    await asyncio.sleep(0.2)


def worker(conn: Any, port: int, token: str, kernel_id: str, n: int) -> None:
    """A worker process's body: ``n`` clients on ``kernel_id``, commands from ``conn``."""
    asyncio.run(worker_main(conn, port, token, kernel_id, n))


# --- the driver's side: worker processes and their pipes ---------------------------------


@contextlib.contextmanager
def client_workers(
    server: JupyterServer, kernel_id: str, n_clients: int
) -> Iterator[list[Connection]]:
    """``n_clients`` websocket clients, connected, in one or two worker processes: their pipes."""
    ctx = mp.get_context("spawn")
    n_workers = 1 if n_clients < 10 else 2
    split = [
        n_clients // n_workers + (1 if i < n_clients % n_workers else 0) for i in range(n_workers)
    ]
    workers = []
    try:
        for count in split:
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=worker, args=(child, server.port, server.token, kernel_id, count)
            )
            proc.start()
            workers.append((proc, parent))
        for _, pipe in workers:
            if not pipe.poll(120):
                raise RuntimeError("clients did not connect")
            assert pipe.recv() == "ready"
        yield [pipe for _, pipe in workers]
        for _, pipe in workers:
            pipe.send(("stop",))
        for proc, _ in workers:
            proc.join(30)
    finally:
        for proc, _ in workers:
            if proc.is_alive():
                proc.kill()


def burst(
    pipes: list[Connection], code: str, timeout: float
) -> tuple[list[tuple[int, float | None]], float]:
    """Run ``code`` (sent by the first client): each client's (comm_msg, idle time), sent at."""
    msg_id = uuid.uuid4().hex
    for i, pipe in enumerate(pipes):
        pipe.send(("burst", msg_id, code, timeout, i == 0))
    results = [pipe.recv() for pipe in pipes]
    return [r for res in results for r in res[:-1]], results[0][-1][1]
