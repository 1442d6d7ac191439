"""A synchronous websocket client of a kernel through jupyter_server, as JupyterLab is one.

:class:`KernelWebsocket` speaks the ``v1.kernel.websocket.jupyter.org`` protocol on the
server's ``/api/kernels/<id>/channels``: every kernel message goes through the server's
websocket with the binary ``v1`` framing. The server signs what the client sends (v1
messages are forwarded with ``Session.send_raw``), so a client needs no key.

Why two clients: this one is for a test or benchmark that drives one websocket (or a few) a
request at a time from plain code, with a reader thread and blocking waits;
:class:`harness.async_websocket.WSClient` runs dozens in one asyncio event loop, for the
shared-channels tests. What they must agree on (subprotocol, URL, requests, framing, the
message dict) is :mod:`harness.ws_protocol`; each only moves frames.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import websocket  # websocket-client
from jupyter_client.session import Session

from .server import JupyterServer
from .ws_protocol import (
    CHANNELS,
    WS_V1,
    ProtocolError,
    auth_header,
    channels_path,
    decode_message,
    encode_message,
    new_message,
)


class KernelWebsocket:
    """One client of a kernel through the server's ``/api/kernels/<id>/channels`` websocket.

    Its session id is the ``session_id`` query argument, which the server also uses as the
    client's shell/control DEALER identity: give every client its own (the default is a
    fresh uuid). The constructor returns once a ``kernel_info_reply`` came back through the
    websocket (on ``ready_on``: ``"control"`` for a session whose own cell still runs, as
    stock answers its shell request after the cell), i.e. the server has finished connecting
    and subscribing to IOPub.

    Messages that :meth:`recv` reads while a caller waits for something else are not lost:
    :meth:`recv_until` keeps the ones it skipped in ``self.backlog`` for later calls.

    A slow tab: ``rcvbuf`` sets the socket's receive buffer (bytes, before it connects), and
    :meth:`pause_reading` stops the reader after the frame it is reading, so what the server
    writes next stays in the server (once the small buffers between are full) until
    :meth:`close`, which reads again up to the server's close.
    """

    def __init__(
        self,
        server: JupyterServer,
        kernel_id: str,
        session_id: str | None = None,
        timeout: float = 60,
        ready_on: str = "shell",
        legacy: bool = False,
        rcvbuf: int | None = None,
    ) -> None:
        self.server = server
        self.kernel_id = kernel_id
        self.session = Session(session=session_id or uuid.uuid4().hex, username="e2e-test")
        self.backlog: list[dict[str, Any]] = []
        #: the legacy JSON protocol (a server in gateway mode speaks no other)
        self.legacy = legacy
        self.ws = websocket.create_connection(
            server.ws_url(channels_path(kernel_id, self.session.session)),
            subprotocols=None if legacy else [WS_V1],
            header=[": ".join(auth_header(server.token))],
            timeout=timeout,
            enable_multithread=True,
            # The reader decodes each text frame (``data.decode()``, which checks its UTF-8 in
            # C); websocket-client's own check is pure Python, about 3 MB/s: seconds a frame
            # of the legacy protocol's megabytes.
            skip_utf8_validation=True,
            sockopt=() if rcvbuf is None else ((socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf),),
        )
        selected = self.ws.getsubprotocol()
        if selected != (None if legacy else WS_V1):
            self.ws.close()
            wanted = "none (legacy)" if legacy else WS_V1
            raise ProtocolError(f"server chose websocket subprotocol {selected!r}, not {wanted}")
        # One thread reads blocking and queues whole messages: a socket timeout in the middle
        # of a frame would leave websocket-client's framing out of step, so callers wait on
        # the queue instead. It also keeps reading while a test does something else.
        self.ws.settimeout(None)
        self._inbox: queue.Queue[dict[str, Any] | BaseException] = queue.Queue()
        self._broken: BaseException | None = None
        #: cleared: the reader stops after the frame it is reading (:meth:`pause_reading`)
        self._reading = threading.Event()
        self._reading.set()
        self._reader = threading.Thread(
            target=self._read, name=f"ws-reader-{self.session_id[:8]}", daemon=True
        )
        self._reader.start()
        # On control for a session whose own cell runs: its shell request waits for the cell.
        self.kernel_info = self.request(ready_on, "kernel_info_request", timeout=timeout)

    @property
    def session_id(self) -> str:
        return self.session.session

    def pause_reading(self) -> None:
        """Read no more frames after the one being read (a tab that fell behind): the
        server's writes to this websocket back up; :meth:`close` reads again."""
        self._reading.clear()

    def close(self) -> None:
        """Close the websocket (the server then closes its kernel channels for it); a paused
        reader reads again, what the server wrote up to its close."""
        with contextlib.suppress(Exception):
            self.ws.send_close()
        self._reading.set()
        self._reader.join(timeout=5)  # it ends on the server's close frame
        with contextlib.suppress(Exception):
            self.ws.shutdown()
        self._reader.join(timeout=5)

    def __enter__(self) -> KernelWebsocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # sending ------------------------------------------------------------------------

    def send(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        buffers: list[bytes] | None = None,
        parent: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Send one message; returns it (its ``header.msg_id`` identifies the replies).
        ``parent``: the header it answers (an ``input_reply``'s ``input_request``)."""
        if channel not in CHANNELS:
            raise ValueError(f"unknown channel {channel!r}")
        msg = new_message(
            self.session, msg_type, content, metadata=metadata, buffers=buffers, parent=parent
        )
        data = encode_message(channel, msg, v1=not self.legacy)
        opcode = websocket.ABNF.OPCODE_TEXT if self.legacy else websocket.ABNF.OPCODE_BINARY
        self.ws.send(data, opcode=opcode)
        return msg

    def execute(self, code: str, metadata: dict[str, Any] | None = None, **content: Any) -> str:
        """Send an ``execute_request`` (``content`` over stock's defaults); returns its msg_id."""
        fields = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        fields.update(content)
        return self.send("shell", "execute_request", fields, metadata)["header"]["msg_id"]

    # receiving ----------------------------------------------------------------------

    def _read(self) -> None:
        while True:
            try:
                opcode, data = self.ws.recv_data()
            except Exception as exc:  # closed by us, or the connection broke
                self._inbox.put(ConnectionError(f"websocket closed: {exc!r}"))
                return
            received = time.perf_counter()
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                self._inbox.put(ConnectionError("websocket closed by the server"))
                return
            if opcode == websocket.ABNF.OPCODE_TEXT and not self.legacy:
                # The server writes JSON text only for the legacy protocol; never with v1.
                self._inbox.put(ProtocolError(f"text frame on a v1 websocket: {data[:200]!r}"))
                continue
            if opcode == websocket.ABNF.OPCODE_TEXT:
                data = data.decode()
            try:
                msg = decode_message(data, v1=not self.legacy)
            except ValueError as exc:
                self._inbox.put(exc)
                continue
            msg["received"] = received  # time.perf_counter() when the frame was read
            self._inbox.put(msg)
            self._reading.wait()

    def recv(self, timeout: float) -> dict[str, Any]:
        """The next message from the websocket; ``TimeoutError`` if none in ``timeout`` s.

        Each message has, besides the usual keys, ``channel`` and ``received`` (the
        ``time.perf_counter()`` at which its frame was read).
        """
        if self._broken is not None:
            raise self._broken
        try:
            item = self._inbox.get(timeout=max(timeout, 0))
        except queue.Empty:
            raise TimeoutError(f"no websocket message in {timeout:.1f} s") from None
        if isinstance(item, ConnectionError):
            self._broken = item
        if isinstance(item, BaseException):
            raise item
        return item

    def recv_until(self, match: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """The first message (backlog first) for which ``match`` is true."""
        for i, msg in enumerate(self.backlog):
            if match(msg):
                return self.backlog.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(deadline - time.monotonic())
            if match(msg):
                return msg
            self.backlog.append(msg)

    def request(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any] | None = None,
        timeout: float = 60,
    ) -> dict[str, Any]:
        """Send a request on ``channel`` and return its reply (same channel, same parent)."""
        msg_id = self.send(channel, msg_type, content)["header"]["msg_id"]
        try:
            return self.recv_until(
                lambda m: m["channel"] == channel and m["parent_header"].get("msg_id") == msg_id,
                timeout,
            )
        except TimeoutError as exc:
            raise TimeoutError(f"no reply to {msg_type} on {channel} in {timeout} s") from exc

    def collect_execution(
        self,
        msg_id: str,
        timeout: float = 120,
        on_message: Callable[[dict[str, Any]], None] | None = None,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The execute_reply of ``msg_id`` and every IOPub message it caused, up to its idle.

        ``on_message`` is called with each of them as it is read (to act mid-burst, e.g.
        pause the server once N comm_open have come). IOPub messages with other parents
        stay in the backlog. ``TimeoutError`` if the idle
        or the reply does not come in ``timeout`` s (the ones received so far are in the
        exception's ``messages`` attribute).
        """
        deadline = time.monotonic() + timeout
        iopub: list[dict[str, Any]] = []
        reply: dict[str, Any] | None = None
        idle = False

        def ours(m: dict[str, Any]) -> bool:
            return m["parent_header"].get("msg_id") == msg_id and m["channel"] in (
                "iopub",
                "shell",
            )

        pending = [m for m in self.backlog if ours(m)]
        self.backlog = [m for m in self.backlog if not ours(m)]
        while reply is None or not idle:
            if pending:
                msg = pending.pop(0)
            else:
                try:
                    msg = self.recv_until(ours, deadline - time.monotonic())
                except TimeoutError as exc:
                    err = TimeoutError(
                        f"execution {msg_id}: reply={'yes' if reply else 'no'}, idle={idle}, "
                        f"{len(iopub)} IOPub messages after {timeout} s"
                    )
                    err.messages = iopub  # type: ignore[attr-defined]  # what arrived, for the caller's report
                    raise err from exc
            if msg["channel"] == "shell":
                reply = msg
            else:
                iopub.append(msg)
                if on_message is not None:
                    on_message(msg)
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    idle = True
        return reply, iopub

    def run(self, code: str, timeout: float = 120) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """:meth:`execute` then :meth:`collect_execution`; fails on an error reply."""
        reply, iopub = self.collect_execution(self.execute(code), timeout)
        if reply["content"]["status"] != "ok":
            raise AssertionError(
                f"{code[:80]!r} failed: {reply['content'].get('ename')}: "
                f"{reply['content'].get('evalue')}"
            )
        return reply, iopub


def stream_text(messages: list[dict[str, Any]], name: str = "stdout") -> str:
    """The text of the ``stream`` messages named ``name`` among ``messages``."""
    return "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["content"]["name"] == name
    )
