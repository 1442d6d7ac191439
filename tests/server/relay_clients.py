"""Clients and a server for the shared-channels tests: what tests/server/test_shared_channels*.py
and tests/shared_channels/ share.

:class:`WSClient` is an asyncio websocket client (tornado's) that keeps every message, so many
of them run in one event loop; :class:`JupyterServer` is the harness's server with
SharedChannelsConnection and a short grace period. The synchronous
:class:`~harness.kernel_websocket.KernelWebsocket` is the client for one websocket at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from jupyter_server.services.kernels.connection.base import (
    deserialize_binary_message,
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)
from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from harness import server as server_utils
from harness.kernels import EXT_KERNEL
from harness.messages import is_status

V1 = "v1.kernel.websocket.jupyter.org"
CLASS = "ipykernel_ext.server.SharedChannelsConnection"
GRACE = 0.5


def new_header(msg_type: str, session: str) -> dict[str, Any]:
    return {
        "msg_id": uuid.uuid4().hex,
        "msg_type": msg_type,
        "session": session,
        "username": "test",
        "date": datetime.now(UTC).isoformat(),
        "version": "5.3",
    }


class WSClient:
    """A kernel websocket client: sends requests, keeps every message it receives."""

    def __init__(
        self, server: JupyterServer, kernel_id: str, session: str | None = None, v1: bool = True
    ) -> None:
        self.server = server
        self.kernel_id = kernel_id
        self.session = session or uuid.uuid4().hex
        self.v1 = v1
        self.messages: list[dict[str, Any]] = []
        self.ws: WebSocketClientConnection | None = None
        self._new = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self.closed = False

    async def connect(self) -> WSClient:
        url = self.server.ws_url(f"api/kernels/{self.kernel_id}/channels?session_id={self.session}")
        request = HTTPRequest(url, headers={"Authorization": f"token {self.server.token}"})
        self.ws = await websocket_connect(request, subprotocols=[V1] if self.v1 else None)
        assert self.ws.selected_subprotocol == (V1 if self.v1 else None)
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def _read(self) -> None:
        assert self.ws is not None
        while True:
            data = await self.ws.read_message()
            if data is None:
                self.closed = True
                self._new.set()
                return
            self.messages.append(self.decode(data))
            self._new.set()

    def decode(self, data: str | bytes) -> dict[str, Any]:
        if self.v1:
            assert isinstance(data, bytes)
            channel, parts = deserialize_msg_from_ws_v1(data)
            msg = {
                "channel": channel,
                "header": json.loads(parts[0]),
                "parent_header": json.loads(parts[1]),
                "metadata": json.loads(parts[2]),
                "content": json.loads(parts[3]),
                "buffers": parts[4:],
            }
        elif isinstance(data, bytes):
            msg = deserialize_binary_message(data)
        else:
            msg = json.loads(data)
        msg["msg_type"] = msg["header"]["msg_type"]
        return msg

    def send(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any],
        *,
        session: str | None = None,
        parent: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Send a message; return its header."""
        assert self.ws is not None
        header = new_header(msg_type, self.session if session is None else session)
        parent = parent or {}
        if self.v1:
            parts = [json.dumps(p).encode() for p in (header, parent, {}, content)]
            self.ws.write_message(serialize_msg_to_ws_v1(parts, channel), binary=True)
        else:
            msg = {"header": header, "parent_header": parent, "metadata": {}, "content": content}
            self.ws.write_message(json.dumps({**msg, "channel": channel}))
        return header

    def execute(self, code: str, allow_stdin: bool = False) -> str:
        content = {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": allow_stdin,
            "stop_on_error": True,
        }
        return self.send("shell", "execute_request", content)["msg_id"]

    async def wait_for(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> dict[str, Any]:
        """The first message (received so far or later) for which ``pred`` is true."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for msg in self.messages[seen:]:
                if pred(msg):
                    return msg
            seen = len(self.messages)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.closed:
                raise TimeoutError(f"{self.session}: no matching message in {timeout} s")
            self._new.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._new.wait(), remaining)

    async def reply_to(self, msg_id: str, timeout: float = 60) -> dict[str, Any]:
        return await self.wait_for(
            lambda m: (
                m["channel"] in ("shell", "control") and m["parent_header"].get("msg_id") == msg_id
            ),
            timeout,
        )

    async def idle_after(self, msg_id: str, timeout: float = 60) -> dict[str, Any]:
        return await self.wait_for(is_status("idle", msg_id), timeout)

    async def until_iopub_live(self, timeout: float = 60) -> None:
        """kernel_info_request every half second until the idle status of one arrives."""
        sent: set[str] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sent.add(self.send("shell", "kernel_info_request", {})["msg_id"])
            with contextlib.suppress(TimeoutError):
                await self.wait_for(
                    lambda m: any(is_status("idle", i)(m) for i in sent), timeout=0.5
                )
                return
        raise TimeoutError("IOPub never came back")

    def of(self, msg_id: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["parent_header"].get("msg_id") == msg_id]

    async def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 10)
            except TimeoutError:
                self._reader.cancel()


class JupyterServer(server_utils.JupyterServer):
    """The harness's jupyter_server with our connection class and a short grace period.

    Started on construction; :meth:`stop` ends it.
    """

    def __init__(
        self,
        extra_args: Iterable[str] = (),
        env: dict[str, str] | None = None,
        connection_class: str = CLASS,
        grace: float = GRACE,
    ) -> None:
        super().__init__(
            extra_args=[
                f"--ServerApp.kernel_websocket_connection_class={connection_class}",
                f"--SharedChannelsConnection.shared_channels_grace_period={grace}",
                *extra_args,
            ],
            env=env,
            startup_timeout=60,
            stop_timeout=20,
        )
        self.start()

    def start_kernel(self, name: str = EXT_KERNEL, timeout: float = 60) -> str:
        return super().start_kernel(name, timeout)

    def kernel_process(self, kernel_id: str) -> psutil.Process:
        assert self.proc is not None
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if any(kernel_id in arg for arg in child.cmdline()):
                    return child
            except psutil.Error:
                continue
        raise LookupError(f"no process for kernel {kernel_id}")

    def kernel_connections(self, kernel_id: str) -> int:
        """ESTABLISHED TCP connections held by the kernel process (one per peer socket)."""
        proc = self.kernel_process(kernel_id)
        return sum(1 for c in proc.net_connections("tcp") if c.status == psutil.CONN_ESTABLISHED)

    def channel_connections(self, kernel_id: str) -> Counter[str]:
        """The kernel's ESTABLISHED TCP connections per channel (shell, iopub, stdin, ...).

        jupyter_server's own sockets (its activity watcher on IOPub, the kernel manager's
        control socket) count too; nothing of the server but a websocket's channels ever
        connects to **stdin**, so its count alone tells how many sets of channels there are.
        """
        proc = self.kernel_process(kernel_id)
        connection_file = next(a for a in proc.cmdline() if a.endswith(".json"))
        info = json.loads(Path(connection_file).read_text())
        channel_of = {info[f"{c}_port"]: c for c in ("shell", "iopub", "stdin", "control", "hb")}
        return Counter(
            channel_of[c.laddr.port]
            for c in proc.net_connections("tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.laddr.port in channel_of
        )

    async def stdin_connections_become(
        self, kernel_id: str, count: int, timeout: float = 60
    ) -> Counter[str]:
        """The kernel's connections per channel once ``count`` sockets are on its stdin.

        A barrier, not a window: ``timeout`` only guards against a hang.
        """
        deadline = time.monotonic() + timeout
        while (now := self.channel_connections(kernel_id))["stdin"] != count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"stdin connections stayed {now['stdin']}, not {count}")
            await asyncio.sleep(0.1)
        return now


def wait_for_file(flag: Path, then: str = "pass") -> str:
    """Cell code that blocks until ``flag`` exists (the test decides when), then ``then``."""
    return (
        f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.02)\n{then}"
    )


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def connect_all(clients: list[WSClient]) -> list[WSClient]:
    return list(await asyncio.gather(*(c.connect() for c in clients)))


async def settle(pred: Callable[[], bool], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True
