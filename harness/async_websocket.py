"""Kernel websocket clients that run many at a time in one asyncio event loop.

:class:`WSClient` is a tornado websocket client of ``/api/kernels/<id>/channels`` that keeps
every message it receives; :func:`connect_all` opens many at once, and :func:`settle` waits
in the loop for a condition (a barrier polled, with a hang guard). :class:`CountingClient`
decodes headers only (bursts); :class:`StuckWebsocket` shakes hands, then never reads.

Why a second client beside the synchronous :class:`harness.kernel_websocket.KernelWebsocket`:
that one has a reader thread per websocket and blocks its caller, which suits a test driving
one websocket a request at a time; the shared-channels tests hold twenty websockets on one
kernel, read them all concurrently and speak the legacy JSON protocol too, which an event
loop does with no thread per client. What both must agree on (subprotocol, URL, requests,
framing, the message dict) is :mod:`harness.ws_protocol`; each only moves frames.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any, Self, TypeVar

from jupyter_client.session import Session
from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from .messages import is_status
from .polling import WaitTimeout, wait_until_async
from .server import JupyterServer
from .ws_protocol import (
    WS_V1,
    auth_header,
    channels_path,
    decode_message,
    decode_v1,
    encode_message,
    message_from_parts,
    new_message,
)


class WSClient:
    """A kernel websocket client: sends requests, keeps every message it receives.

    ``session``: the websocket's session id (a fresh uuid by default); ``v1=False`` speaks the
    legacy JSON protocol (no subprotocol). ``messages`` are dicts of
    :func:`harness.ws_protocol.decode_message`, in the order they came.
    """

    def __init__(
        self, server: JupyterServer, kernel_id: str, session: str | None = None, v1: bool = True
    ) -> None:
        self.server = server
        self.kernel_id = kernel_id
        self.session = session or uuid.uuid4().hex
        self.v1 = v1
        self.messages: list[dict[str, Any]] = []
        self.ws: WebSocketClientConnection | None = None
        self._session = Session(session=self.session, username="test")
        self._new = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self.closed = False

    async def connect(self) -> Self:
        request = HTTPRequest(
            self.server.ws_url(channels_path(self.kernel_id, self.session)),
            headers=dict([auth_header(self.server.token)]),
        )
        self.ws = await websocket_connect(request, subprotocols=[WS_V1] if self.v1 else None)
        assert self.ws.selected_subprotocol == (WS_V1 if self.v1 else None)
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
        """The message of one frame (a subclass may keep less of it)."""
        return decode_message(data, self.v1)

    def send(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any],
        *,
        session: str | None = None,
        parent: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Send a message; return its header.

        ``session`` puts another session id in the header (the websocket's stays): how a
        test pretends to be another client.
        """
        assert self.ws is not None
        msg = new_message(self._session, msg_type, content, parent=parent)
        if session is not None:
            msg["header"]["session"] = session
        self.ws.write_message(encode_message(channel, msg, self.v1), binary=self.v1)
        return msg["header"]

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


Client = TypeVar("Client", bound=WSClient)


async def connect_all(clients: list[Client]) -> list[Client]:
    """``clients``, each connected (all at once)."""
    return list(await asyncio.gather(*(c.connect() for c in clients)))


async def settle(pred: Callable[[], bool], timeout: float = 30) -> bool:
    """Whether ``pred()`` became true within ``timeout`` s (checked every 0.1 s in the loop).

    A barrier on a condition the system exposes; ``timeout`` only guards against a hang.
    :func:`harness.polling.wait_until_async`, for a caller that asserts the answer itself.
    """
    try:
        await wait_until_async(pred, timeout, "settle", 0.1)
    except WaitTimeout:
        return False
    return True


class CountingClient(WSClient):
    """A WSClient that decodes only headers (and the content of small messages), for many
    clients of a large burst in one process; each message carries its ``size`` on the wire."""

    def decode(self, data: str | bytes) -> dict[str, Any]:
        assert isinstance(data, bytes)
        msg = message_from_parts(*decode_v1(data), decode_content=self.small)
        return {**msg, "size": len(data)}

    @staticmethod
    def small(header: dict[str, Any]) -> bool:
        return header["msg_type"] != "comm_msg"

    def comm_msgs(self, msg_id: str) -> int:
        return sum(m["msg_type"] == "comm_msg" for m in self.of(msg_id))


class StuckWebsocket:
    """A websocket client that completes the handshake and then never reads.

    A raw TCP socket with a small receive buffer: once that and the server's send buffer are
    full, everything the server still has for it waits in the server.
    """

    def __init__(self, srv: JupyterServer, kernel_id: str) -> None:
        self.session = uuid.uuid4().hex
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", srv.port))
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET /{channels_path(kernel_id, self.session)} HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{srv.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Protocol: {WS_V1}\r\n"
            f"{': '.join(auth_header(srv.token))}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        response = b""
        self.sock.settimeout(30)
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(1)  # byte by byte: not one byte past the headers
            assert chunk, "the server closed during the handshake"
            response += chunk
        assert response.startswith(b"HTTP/1.1 101"), response

    def close(self) -> None:
        self.sock.close()
