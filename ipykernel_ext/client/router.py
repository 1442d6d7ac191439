"""RouterClient: one ROUTER socket per channel for many kernels, each addressed by its endpoint.

Kernels started with ``--router-identity=endpoint`` give their shell and control ROUTER
sockets the endpoint they bind as routing id (PROTOCOL.md section 4). A client ROUTER can
then reach all of them through one socket by putting that endpoint in front of each message,
instead of holding a DEALER per kernel per channel (and, with jupyter_client's defaults, a
zmq Context with its two threads per kernel)::

    from ipykernel_ext.client.router import RouterClient

    with RouterClient() as client:
        for cf in connection_files:
            client.add_kernel(cf)                      # kernel id: the connection file path
        infos = client.gather(client.kernel_ids, "shell", "kernel_info_request")
        reply = client.request(cf, "shell", "execute_request", {"code": "x = 1"})

What the client takes care of:

* **Routing ids.** :func:`~ipykernel_ext.client.reach.endpoint_identity` computes them from
  the connection info alone, with jupyter_client's URL rule (:mod:`ipykernel_ext.endpoints`):
  ``tcp://{ip}:{port}`` with ``ip`` as written in the connection file, or ``ipc://{ip}-{port}``.
* **CurveZMQ.** A socket takes its CurveZMQ options at each ``connect()``, so before each
  connect the kernel's server key (and, as jupyter_client does, the kernel's keypair as the
  client keypair) is set (:func:`ipykernel_ext.endpoints.apply_curve_client`); a kernel
  without keys gets the NULL mechanism.
* **Signing.** Each kernel has its own :class:`jupyter_client.session.Session` (its key and
  signature scheme); replies are verified with the key of the kernel they came from.
* **Waiting for the connection.** A ROUTER knows a peer only once the ZMTP handshake is done,
  and by default silently drops messages for an unknown one. With ``ROUTER_MANDATORY`` a send
  to an unknown peer fails with ``EHOSTUNREACH``; the client retries until the kernel is
  connected or the deadline passes, then raises :class:`KernelUnreachable` saying why (nothing
  listening, handshake refused, or a kernel that is there but does not use its endpoint as
  routing id; :mod:`ipykernel_ext.client.reach`).

Only shell and control. IOPub is PUB/SUB and has no routing ids. stdin is left out: a kernel
sends ``input_request`` to the routing id its shell request came from, which has no stdin
socket here, so leave ``allow_stdin`` false in ``execute_request`` (ipykernel's default when
it is missing). Not thread-safe, like a zmq socket: one client per thread.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

import zmq
from jupyter_client.session import Session

from ..endpoints import client_session, curve_keys
from ..protocol import KERNEL_CHANNELS, frame_bytes, split_frames
from .reach import (
    KernelUnreachable,
    RoutedKernel,
    connect_url,
    diagnose,
    endpoint_identity,
    load_connection_info,
)

#: The channels a RouterClient speaks on: the kernel's, but stdin (an ``input_request`` goes
#: to the routing id of the shell request, which has no stdin socket here), IOPub (PUB/SUB:
#: no routing ids) and the heartbeat (module docstring).
ROUTER_CLIENT_CHANNELS = tuple(c for c in KERNEL_CHANNELS if c not in ("stdin", "iopub", "hb"))

#: How long a send waits for an unconnected kernel, unless told otherwise.
DEFAULT_CONNECT_TIMEOUT = 30.0

__all__ = ["ROUTER_CLIENT_CHANNELS", "KernelUnreachable", "RouterClient", "endpoint_identity"]


class RouterClient:
    """One ROUTER socket per channel (shell, control) talking to many kernels.

    Kernels are added with :meth:`add_kernel` and named by a kernel id of the caller's
    choosing (default: the connection file path, or the shell endpoint). Requests go out with
    :meth:`send` / :meth:`request` / :meth:`gather`; replies come back keyed by kernel id.
    Replies nobody waits for (to :meth:`send`, or late ones) are returned by :meth:`recv`.
    """

    def __init__(
        self,
        context: zmq.Context[Any] | None = None,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        log: logging.Logger | None = None,
    ) -> None:
        self._own_context = context is None
        self.context: zmq.Context[Any] = context if context is not None else zmq.Context()
        self.connect_timeout = connect_timeout
        self.log = log or logging.getLogger(__name__)
        self.sockets: dict[str, zmq.Socket[Any]] = {}
        for channel in ROUTER_CLIENT_CHANNELS:
            sock = self.context.socket(zmq.ROUTER)
            # Fail sends to a peer that is not (yet) connected instead of dropping them.
            sock.router_mandatory = 1
            # A restarted kernel reconnects with the same routing id; let it take over the
            # old pipe rather than be refused while the dead connection is still known.
            sock.router_handover = 1
            sock.linger = 1000
            self.sockets[channel] = sock
        self._kernels: dict[str, RoutedKernel] = {}
        self._by_routing_id: dict[str, dict[bytes, str]] = {c: {} for c in ROUTER_CLIENT_CHANNELS}
        self._inbox: dict[str, deque[tuple[str, dict[str, Any]]]] = {
            c: deque() for c in ROUTER_CLIENT_CHANNELS
        }
        # Requests someone waits for: msg_id -> the kernel id it went to, and its reply.
        self._expected: dict[str, str] = {}
        self._replies: dict[str, dict[str, Any]] = {}
        self.closed = False

    # --- kernels ----------------------------------------------------------------------

    @property
    def kernel_ids(self) -> list[str]:
        return list(self._kernels)

    def routing_id(self, kernel_id: str, channel: str) -> bytes:
        return self._kernel(kernel_id).routing_ids[channel]

    def session(self, kernel_id: str) -> Session:
        """The Session that signs this kernel's messages (its key, its scheme)."""
        return self._kernel(kernel_id).session

    def _kernel(self, kernel_id: str) -> RoutedKernel:
        try:
            return self._kernels[kernel_id]
        except KeyError:
            raise KeyError(f"no kernel {kernel_id!r} in this client: add_kernel() it") from None

    def add_kernel(
        self,
        connection: str | os.PathLike[str] | Mapping[str, Any],
        kernel_id: str | None = None,
        *,
        connect_ip: str | None = None,
    ) -> str:
        """Connect the shell and control sockets to a kernel; return its kernel id.

        ``connection`` is a connection file path or its content (``km.get_connection_info()``).
        ``connect_ip`` connects TCP to another address than the file's ``ip`` (a kernel bound
        to ``0.0.0.0`` seen from another host); the routing id stays the file's endpoint.
        Returns at once: the connection is made in the background, and sends wait for it.
        """
        info = load_connection_info(connection)
        if kernel_id is None:
            kernel_id = (
                os.fspath(connection)
                if not isinstance(connection, Mapping)
                else endpoint_identity(info, "shell").decode()
            )
        if kernel_id in self._kernels:
            raise ValueError(f"kernel id {kernel_id!r} is already added")
        routing_ids = {c: endpoint_identity(info, c) for c in ROUTER_CLIENT_CHANNELS}
        for channel, rid in routing_ids.items():
            if rid in self._by_routing_id[channel]:
                other = self._by_routing_id[channel][rid]
                raise ValueError(f"{kernel_id!r}: {rid!r} is already the {channel} of {other!r}")
        urls = {c: connect_url(info, c, connect_ip) for c in ROUTER_CLIENT_CHANNELS}
        kernel = RoutedKernel(
            kernel_id=kernel_id,
            session=client_session(info),
            urls=urls,
            routing_ids=routing_ids,
            curve=curve_keys(info),
        )
        connected: list[str] = []
        try:
            for channel in ROUTER_CLIENT_CHANNELS:
                # libzmq copies the options into each connection at connect(): set them
                # every time, for this kernel.
                kernel.secure(self.sockets[channel])
                self.sockets[channel].connect(urls[channel])
                connected.append(channel)
        except zmq.ZMQError:
            for channel in connected:
                self.sockets[channel].disconnect(urls[channel])
            raise
        for channel in ROUTER_CLIENT_CHANNELS:
            self._by_routing_id[channel][routing_ids[channel]] = kernel_id
        self._kernels[kernel_id] = kernel
        return kernel_id

    def remove_kernel(self, kernel_id: str) -> None:
        """Disconnect from a kernel; its replies that arrive later are dropped."""
        kernel = self._kernels.pop(self._kernel(kernel_id).kernel_id)
        for channel in ROUTER_CLIENT_CHANNELS:
            self._by_routing_id[channel].pop(kernel.routing_ids[channel], None)
            try:
                self.sockets[channel].disconnect(kernel.urls[channel])
            except zmq.ZMQError as e:  # already gone (ENOENT): nothing to undo
                self.log.debug("disconnect %s: %s", kernel.urls[channel], e)

    # --- sending ----------------------------------------------------------------------

    def send(
        self,
        kernel_id: str,
        channel: str,
        msg_type: str,
        content: dict[str, Any] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        buffers: list[Any] | None = None,
        timeout: float | None = None,
    ) -> str:
        """Sign and send one message to a kernel; return its msg_id.

        Waits up to ``timeout`` (default ``connect_timeout``) for the kernel to be connected.
        Raises :class:`KernelUnreachable` past it.
        """
        msg_id, frames = self._build(kernel_id, channel, msg_type, content, metadata, buffers)
        deadline = time.monotonic() + (self.connect_timeout if timeout is None else timeout)
        self._send_all([(kernel_id, channel, frames)], deadline)
        return msg_id

    def _build(
        self,
        kernel_id: str,
        channel: str,
        msg_type: str,
        content: dict[str, Any] | None,
        metadata: dict[str, Any] | None,
        buffers: list[Any] | None,
    ) -> tuple[str, list[Any]]:
        if channel not in ROUTER_CLIENT_CHANNELS:
            raise ValueError(f"channel must be one of {ROUTER_CLIENT_CHANNELS}, not {channel!r}")
        kernel = self._kernel(kernel_id)
        msg = kernel.session.msg(msg_type, {} if content is None else content, metadata=metadata)
        # serialize() puts the routing id in front of the delimiter: the ROUTER routes on it.
        frames = kernel.session.serialize(msg, ident=kernel.routing_ids[channel])
        return msg["header"]["msg_id"], [*frames, *(buffers or [])]

    def _send_all(self, items: list[tuple[str, str, list[Any]]], deadline: float) -> None:
        """Send every message, retrying the ones whose kernel is not connected yet."""
        pending = [(k, c, f) for k, c, f in items if not self._try_send(c, f)]
        pause = 0.001
        while pending:
            if time.monotonic() >= deadline:
                for kernel_id, channel, frames in pending:
                    # Why is it unreachable? (None: it got connected meanwhile.)
                    error = diagnose(
                        self.context,
                        self._kernels[kernel_id],
                        channel,
                        partial(self._send_errno, channel, frames),
                    )
                    if error is not None:
                        others = len(pending) - 1
                        if others:
                            error.strerror += f" ({others} more message(s) not sent either)"
                        raise error
                return
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.05)
            pending = [(k, c, f) for k, c, f in pending if not self._try_send(c, f)]

    def _try_send(self, channel: str, frames: list[Any]) -> bool:
        return self._send_errno(channel, frames) == 0

    def _send_errno(self, channel: str, frames: list[Any]) -> int:
        """Send without blocking: 0 if sent, else EHOSTUNREACH or EAGAIN."""
        try:
            self.sockets[channel].send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.ZMQError as e:
            # EHOSTUNREACH: the handshake is not done yet. EAGAIN: its queue is full.
            if e.errno not in (zmq.EHOSTUNREACH, zmq.EAGAIN):
                raise
            return e.errno
        return 0

    # --- receiving --------------------------------------------------------------------

    def recv(self, channel: str, timeout: float | None = None) -> tuple[str, dict[str, Any]]:
        """The next message on ``channel`` that no :meth:`request`/:meth:`gather` waits for.

        Returns ``(kernel_id, msg)``; raises ``TimeoutError`` after ``timeout`` seconds
        (``None``: wait forever).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._inbox[channel]:
            self._recv_one(channel, deadline)
        return self._inbox[channel].popleft()

    def request(
        self,
        kernel_id: str,
        channel: str,
        msg_type: str,
        content: dict[str, Any] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        buffers: list[Any] | None = None,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Send a request to one kernel and return its reply (the whole message).

        Waits up to ``connect_timeout`` for the kernel to be connected
        (:class:`KernelUnreachable`), and up to ``timeout`` in all (``TimeoutError``).
        """
        msg_id, frames = self._build(kernel_id, channel, msg_type, content, metadata, buffers)
        return self._exchange({msg_id: (kernel_id, channel, frames)}, timeout)[kernel_id]

    def gather(
        self,
        kernel_ids: Iterable[str],
        channel: str,
        msg_type: str,
        content: dict[str, Any] | None = None,
        *,
        timeout: float = 60.0,
    ) -> dict[str, dict[str, Any]]:
        """Send the same request to several kernels; return ``{kernel_id: reply}``.

        Every kernel that is connected gets its request at once; the others get theirs as
        they connect, up to ``connect_timeout`` (then :class:`KernelUnreachable`). Replies are
        awaited up to ``timeout`` in all (then ``TimeoutError`` naming the silent kernels).
        """
        requests: dict[str, tuple[str, str, list[Any]]] = {}
        for kernel_id in dict.fromkeys(kernel_ids):
            msg_id, frames = self._build(kernel_id, channel, msg_type, content, None, None)
            requests[msg_id] = (kernel_id, channel, frames)
        return self._exchange(requests, timeout)

    def _exchange(
        self, requests: dict[str, tuple[str, str, list[Any]]], timeout: float
    ) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        deadline = now + timeout
        for msg_id, (kernel_id, _, _) in requests.items():
            self._expected[msg_id] = kernel_id
        try:
            self._send_all(list(requests.values()), min(deadline, now + self.connect_timeout))
            replies: dict[str, dict[str, Any]] = {}
            for msg_id, (kernel_id, channel, _) in requests.items():
                while msg_id not in self._replies:
                    try:
                        self._recv_one(channel, deadline)
                    except TimeoutError:
                        missing = [k for m, (k, _, _) in requests.items() if m not in self._replies]
                        raise TimeoutError(
                            f"no reply on {channel} within {timeout} s from {missing}"
                        ) from None
                replies[kernel_id] = self._replies[msg_id]
            return replies
        finally:
            for msg_id in requests:
                self._expected.pop(msg_id, None)
                self._replies.pop(msg_id, None)

    def _recv_one(self, channel: str, deadline: float | None) -> None:
        """Receive one message on ``channel``: to whoever waits for it, else the inbox."""
        sock = self.sockets[channel]
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not sock.poll(None if remaining is None else int(remaining * 1000)):
            raise TimeoutError(f"nothing received on {channel}")
        frames = sock.recv_multipart(copy=False)
        routing_id = frame_bytes(frames[0])
        kernel_id = self._by_routing_id[channel].get(routing_id)
        if kernel_id is None:
            self.log.debug("dropped a %s message from unknown peer %r", channel, routing_id)
            return
        session = self._kernels[kernel_id].session
        try:
            split = split_frames(frames[1:])
            if split is None:
                raise ValueError("no delimiter")
            msg = session.deserialize(split.parts, content=True, copy=False)
        except Exception as e:  # bad signature, malformed frames: never from a good kernel
            self.log.warning("dropped an invalid %s message from %r: %s", channel, kernel_id, e)
            return
        parent_id = msg["parent_header"].get("msg_id")
        # A reply counts only from the kernel the request went to (and only once).
        if self._expected.get(parent_id) == kernel_id and parent_id not in self._replies:
            self._replies[parent_id] = msg
        else:
            self._inbox[channel].append((kernel_id, msg))

    # --- lifetime ---------------------------------------------------------------------

    def close(self, linger: int | None = None) -> None:
        """Close the sockets (and the context, if this client made it)."""
        if self.closed:
            return
        for sock in self.sockets.values():
            sock.close(linger=linger)
        if self._own_context:
            self.context.term()
        self.closed = True

    def __enter__(self) -> RouterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
