"""RouterClient: one ROUTER socket per channel for many kernels, each addressed by its endpoint.

Kernels started with ``--router-identity=endpoint`` give their shell and control ROUTER
sockets the endpoint they bind as routing id (PROTOCOL.md section 4). A client ROUTER can
then reach all of them through one socket by putting that endpoint in front of each message,
instead of holding a DEALER per kernel per channel (and, with jupyter_client's defaults, a
zmq Context with its two threads per kernel)::

    from ipykernel_ext.router_client import RouterClient

    with RouterClient() as client:
        for cf in connection_files:
            client.add_kernel(cf)                      # kernel id: the connection file path
        infos = client.gather(client.kernel_ids, "shell", "kernel_info_request")
        reply = client.request(cf, "shell", "execute_request", {"code": "x = 1"})

What the client takes care of:

* **Routing ids.** :func:`endpoint_identity` computes them from the connection info alone,
  the way jupyter_client computes the URL it connects to: ``tcp://{ip}:{port}`` with ``ip``
  as written in the connection file, or ``ipc://{ip}-{port}``.
* **CurveZMQ.** A socket takes its CurveZMQ options at each ``connect()``, so before each
  connect the kernel's server key (and, as jupyter_client does, the kernel's keypair as the
  client keypair) is set; a kernel without keys gets the NULL mechanism.
* **Signing.** Each kernel has its own :class:`jupyter_client.session.Session` (its key and
  signature scheme); replies are verified with the key of the kernel they came from.
* **Waiting for the connection.** A ROUTER knows a peer only once the ZMTP handshake is done,
  and by default silently drops messages for an unknown one. With ``ROUTER_MANDATORY`` a send
  to an unknown peer fails with ``EHOSTUNREACH``; the client retries until the kernel is
  connected or the deadline passes, then raises :class:`KernelUnreachable` saying why (nothing
  listening, handshake refused, or a kernel that is there but does not use its endpoint as
  routing id).

Only shell and control. IOPub is PUB/SUB and has no routing ids. stdin is left out: a kernel
sends ``input_request`` to the routing id its shell request came from, which has no stdin
socket here, so leave ``allow_stdin`` false in ``execute_request`` (ipykernel's default when
it is missing). Not thread-safe, like a zmq socket: one client per thread.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import zmq
from jupyter_client.session import Session
from zmq.utils.monitor import recv_monitor_message

CHANNELS = ("shell", "control")

#: How long a send waits for an unconnected kernel, unless told otherwise.
DEFAULT_CONNECT_TIMEOUT = 30.0

#: How long the diagnosis of an unreachable kernel waits for a probe handshake.
PROBE_TIMEOUT = 1.0

_HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


class KernelUnreachable(zmq.ZMQError, TimeoutError):
    """No kernel with the expected routing id got connected before the deadline.

    A ``zmq.ZMQError`` with errno ``EHOSTUNREACH`` (what the ROUTER kept answering) and a
    ``TimeoutError``; ``reason`` is one of ``"not-listening"``, ``"handshake-failed"``,
    ``"identity-mismatch"`` or ``"queue-full"``.
    """

    def __init__(self, kernel_id: str, channel: str, routing_id: bytes, reason: str, msg: str):
        super().__init__(zmq.EHOSTUNREACH, msg)
        self.kernel_id = kernel_id
        self.channel = channel
        self.routing_id = routing_id
        self.reason = reason


def endpoint_identity(connection_info: Mapping[str, Any], channel: str) -> bytes:
    """The routing id of ``channel`` of a kernel started with ``--router-identity=endpoint``.

    ``tcp://{ip}:{port}`` with ``ip`` exactly as in the connection file (``*`` is read as
    ``0.0.0.0``, as jupyter_client and ipykernel both do), or ``ipc://{ip}-{port}``.
    """
    transport = connection_info.get("transport", "tcp")
    ip = connection_info["ip"]
    port = int(connection_info[f"{channel}_port"])
    if transport == "tcp":
        return f"tcp://{'0.0.0.0' if ip == '*' else ip}:{port}".encode()
    if transport == "ipc":
        return f"ipc://{ip}-{port}".encode()
    raise ValueError(f"transport {transport!r} has no endpoint routing id (tcp or ipc only)")


def load_connection_info(connection: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """A connection file's content (or a copy of a connection info dict), keys as str."""
    if isinstance(connection, Mapping):
        info = dict(connection)
    else:
        with open(connection) as f:
            info = json.load(f)
    for name in ("key", "curve_publickey", "curve_secretkey"):
        if isinstance(info.get(name), bytes):
            info[name] = info[name].decode()
    return info


@dataclass
class _Kernel:
    kernel_id: str
    session: Session
    urls: dict[str, str]
    routing_ids: dict[str, bytes]
    curve_publickey: bytes | None
    curve_secretkey: bytes | None


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
        for channel in CHANNELS:
            sock = self.context.socket(zmq.ROUTER)
            # Fail sends to a peer that is not (yet) connected instead of dropping them.
            sock.router_mandatory = 1
            # A restarted kernel reconnects with the same routing id; let it take over the
            # old pipe rather than be refused while the dead connection is still known.
            sock.router_handover = 1
            sock.linger = 1000
            self.sockets[channel] = sock
        self._kernels: dict[str, _Kernel] = {}
        self._by_routing_id: dict[str, dict[bytes, str]] = {c: {} for c in CHANNELS}
        self._inbox: dict[str, deque[tuple[str, dict[str, Any]]]] = {c: deque() for c in CHANNELS}
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

    def _kernel(self, kernel_id: str) -> _Kernel:
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
        routing_ids = {c: endpoint_identity(info, c) for c in CHANNELS}
        for channel, rid in routing_ids.items():
            if rid in self._by_routing_id[channel]:
                other = self._by_routing_id[channel][rid]
                raise ValueError(f"{kernel_id!r}: {rid!r} is already the {channel} of {other!r}")
        urls = {c: _connect_url(info, c, connect_ip) for c in CHANNELS}
        key = info.get("key", "")
        kernel = _Kernel(
            kernel_id=kernel_id,
            session=Session(
                key=key.encode(),
                signature_scheme=info.get("signature_scheme", "hmac-sha256"),
            ),
            urls=urls,
            routing_ids=routing_ids,
            curve_publickey=_optional_bytes(info.get("curve_publickey")),
            curve_secretkey=_optional_bytes(info.get("curve_secretkey")),
        )
        connected: list[str] = []
        try:
            for channel in CHANNELS:
                self._apply_security(self.sockets[channel], kernel)
                self.sockets[channel].connect(urls[channel])
                connected.append(channel)
        except zmq.ZMQError:
            for channel in connected:
                self.sockets[channel].disconnect(urls[channel])
            raise
        for channel in CHANNELS:
            self._by_routing_id[channel][routing_ids[channel]] = kernel_id
        self._kernels[kernel_id] = kernel
        return kernel_id

    def remove_kernel(self, kernel_id: str) -> None:
        """Disconnect from a kernel; its replies that arrive later are dropped."""
        kernel = self._kernels.pop(self._kernel(kernel_id).kernel_id)
        for channel in CHANNELS:
            self._by_routing_id[channel].pop(kernel.routing_ids[channel], None)
            try:
                self.sockets[channel].disconnect(kernel.urls[channel])
            except zmq.ZMQError as e:  # already gone (ENOENT): nothing to undo
                self.log.debug("disconnect %s: %s", kernel.urls[channel], e)

    @staticmethod
    def _apply_security(sock: zmq.Socket[Any], kernel: _Kernel) -> None:
        # libzmq copies the options into each connection at connect(): set them every time.
        if kernel.curve_publickey is not None and kernel.curve_secretkey is not None:
            # The kernel's keypair as client keypair, as jupyter_client does: the connection
            # file already carries it, and ipykernel does not authenticate clients.
            sock.curve_secretkey = kernel.curve_secretkey
            sock.curve_publickey = kernel.curve_publickey
            sock.curve_serverkey = kernel.curve_publickey
        else:
            # Back to the NULL mechanism after a CurveZMQ kernel (CURVE_SERVER=0 does that).
            sock.curve_server = False

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
        if channel not in CHANNELS:
            raise ValueError(f"channel must be one of {CHANNELS}, not {channel!r}")
        kernel = self._kernel(kernel_id)
        msg = kernel.session.msg(msg_type, {} if content is None else content, metadata=metadata)
        # serialize() puts the routing id in front of the delimiter: the ROUTER routes on it.
        frames = kernel.session.serialize(msg, ident=kernel.routing_ids[channel])
        return msg["header"]["msg_id"], [*frames, *(buffers or [])]

    def _send_all(self, items: list[tuple[str, str, list[Any]]], deadline: float) -> None:
        """Send every message, retrying the ones whose kernel is not connected yet."""
        pending = [item for item in items if not self._try_send(*item)]
        pause = 0.001
        while pending:
            if time.monotonic() >= deadline:
                for kernel_id, channel, frames in pending:
                    error = self._last_chance(kernel_id, channel, frames)
                    if error is not None:
                        others = len(pending) - 1
                        if others:
                            error.strerror += f" ({others} more message(s) not sent either)"
                        raise error
                return
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.05)
            pending = [item for item in pending if not self._try_send(*item)]

    def _try_send(self, kernel_id: str, channel: str, frames: list[Any]) -> bool:
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

    def _last_chance(
        self, kernel_id: str, channel: str, frames: list[Any]
    ) -> KernelUnreachable | None:
        """Find out why a kernel is unreachable; None if it got connected meanwhile."""
        kernel = self._kernels[kernel_id]
        url, rid = kernel.urls[channel], kernel.routing_ids[channel]
        first = self._send_errno(channel, frames)
        if first == 0:
            return None
        probe = "queue-full" if first == zmq.EAGAIN else self._probe(kernel, channel)
        if probe == "queue-full":
            reason = "queue-full"
            why = f"connected to {url}, but its send queue stays full (the kernel reads nothing)"
        elif probe == "handshake":
            # The probe got in, so our socket gets in too by its next reconnect (100 ms):
            # only if it still cannot send is the kernel's routing id not its endpoint.
            until = time.monotonic() + PROBE_TIMEOUT
            while time.monotonic() < until:
                if self._try_send(kernel_id, channel, frames):
                    return None
                time.sleep(0.02)
            reason = "identity-mismatch"
            why = (
                f"a kernel answers at {url} but none has routing id {rid!r}; was it started "
                "with --router-identity=endpoint?"
            )
        elif probe == "handshake-failed":
            reason = "handshake-failed"
            why = (
                f"the ZMTP handshake with {url} fails: the CurveZMQ keys in the connection file "
                "are not the kernel's, or only one side uses encryption"
            )
        else:
            reason = "not-listening"
            why = f"nothing answers at {url}: kernel not running (yet), or a wrong address"
        return KernelUnreachable(
            kernel_id, channel, rid, reason, f"kernel {kernel_id!r} ({channel}) unreachable: {why}"
        )

    def _probe(self, kernel: _Kernel, channel: str) -> str:
        """Connect a throwaway DEALER to the kernel and report how its handshake went."""
        probe = self.context.socket(zmq.DEALER)
        probe.linger = 0
        monitor = probe.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | _HANDSHAKE_FAILED)
        try:
            self._apply_security(probe, kernel)
            probe.connect(kernel.urls[channel])
            if not monitor.poll(int(PROBE_TIMEOUT * 1000)):
                return "silent"
            event = recv_monitor_message(monitor)["event"]
            return "handshake" if event == zmq.EVENT_HANDSHAKE_SUCCEEDED else "handshake-failed"
        finally:
            probe.disable_monitor()
            monitor.close(linger=0)
            probe.close(linger=0)

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
        routing_id = frames[0].bytes
        kernel_id = self._by_routing_id[channel].get(routing_id)
        if kernel_id is None:
            self.log.debug("dropped a %s message from unknown peer %r", channel, routing_id)
            return
        session = self._kernels[kernel_id].session
        try:
            _, msg_frames = session.feed_identities(frames[1:], copy=False)
            msg = session.deserialize(msg_frames, content=True, copy=False)
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


def _connect_url(info: Mapping[str, Any], channel: str, connect_ip: str | None) -> str:
    if connect_ip is None or info.get("transport", "tcp") != "tcp":
        return endpoint_identity(info, channel).decode()
    return f"tcp://{connect_ip}:{int(info[f'{channel}_port'])}"


def _optional_bytes(value: str | bytes | None) -> bytes | None:
    if value is None or value == "":
        return None
    return value.encode() if isinstance(value, str) else value
