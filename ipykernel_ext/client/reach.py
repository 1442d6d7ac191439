"""How a :class:`~ipykernel_ext.client.router.RouterClient` reaches one kernel, and why not.

* :func:`endpoint_identity`: the routing id of a kernel's shell or control socket when it
  runs with ``--router-identity=endpoint``: the URL jupyter_client connects to
  (:func:`ipykernel_ext.endpoints.channel_endpoint`), tcp or ipc only.
* :func:`connect_url`: where the client connects to one channel of a kernel (its endpoint, or
  the same port on ``connect_ip`` for a kernel seen through another address).
* :class:`RoutedKernel`: what the client keeps per kernel (Session, URLs, routing ids, keys).
* :func:`diagnose`: once a send has waited past its deadline, find out why the kernel is not
  connected (nothing listening, handshake refused, a kernel that does not use its endpoint
  as routing id, or a full queue) and say so in a :class:`KernelUnreachable`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import zmq
from jupyter_client.session import Session
from zmq.utils.monitor import recv_monitor_message

from ..endpoints import apply_curve_client, endpoint, routing_id

#: How long the diagnosis of an unreachable kernel waits for a probe handshake.
PROBE_TIMEOUT = 1.0

_HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


class KernelUnreachable(zmq.ZMQError, TimeoutError):  # type: ignore[misc]  # strerror: pyzmq says str, OSError str | None
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


def connect_url(info: Mapping[str, Any], channel: str, connect_ip: str | None) -> str:
    """The URL to connect ``channel`` of the kernel ``info`` describes (a connection dict)."""
    if connect_ip is None or info.get("transport", "tcp") != "tcp":
        return endpoint_identity(info, channel).decode()
    return endpoint("tcp", connect_ip, int(info[f"{channel}_port"]))


def endpoint_identity(connection_info: Mapping[str, Any], channel: str) -> bytes:
    """The routing id of ``channel`` of a kernel started with ``--router-identity=endpoint``.

    ``tcp://{ip}:{port}`` with ``ip`` exactly as in the connection file (``*`` is read as
    ``0.0.0.0``, as jupyter_client and ipykernel both do), or ``ipc://{ip}-{port}``.
    """
    return routing_id(
        connection_info.get("transport", "tcp"),
        connection_info["ip"],
        int(connection_info[f"{channel}_port"]),
    )


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
class RoutedKernel:
    """One kernel of a RouterClient: how to sign for it, where it is, what it is called."""

    kernel_id: str
    session: Session
    urls: dict[str, str]
    routing_ids: dict[str, bytes]
    #: ``(public, secret)`` from the connection file, None for a plain kernel.
    curve: tuple[bytes, bytes] | None

    def secure(self, sock: zmq.Socket[Any]) -> None:
        """CurveZMQ client options for this kernel, set right before ``connect()``."""
        apply_curve_client(sock, self.curve)


def diagnose(
    context: zmq.Context[Any],
    kernel: RoutedKernel,
    channel: str,
    try_send: Callable[[], int],
) -> KernelUnreachable | None:
    """Why ``kernel`` is unreachable on ``channel``; None if it got connected meanwhile.

    ``try_send()`` sends the pending message without blocking and returns 0 when it went
    out, else the errno (EHOSTUNREACH or EAGAIN).
    """
    url, rid = kernel.urls[channel], kernel.routing_ids[channel]
    first = try_send()
    if first == 0:
        return None
    probe = "queue-full" if first == zmq.EAGAIN else _probe(context, kernel, channel)
    if probe == "queue-full":
        reason = "queue-full"
        why = f"connected to {url}, but its send queue stays full (the kernel reads nothing)"
    elif probe == "handshake":
        # The probe got in, so the client's socket gets in too by its next reconnect
        # (100 ms): only if it still cannot send is the kernel's routing id not its endpoint.
        until = time.monotonic() + PROBE_TIMEOUT
        while time.monotonic() < until:
            if try_send() == 0:
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
        kernel.kernel_id,
        channel,
        rid,
        reason,
        f"kernel {kernel.kernel_id!r} ({channel}) unreachable: {why}",
    )


def _probe(context: zmq.Context[Any], kernel: RoutedKernel, channel: str) -> str:
    """Connect a throwaway DEALER to the kernel and report how its handshake went."""
    probe = context.socket(zmq.DEALER)
    probe.linger = 0
    monitor = probe.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | _HANDSHAKE_FAILED)
    try:
        kernel.secure(probe)
        probe.connect(kernel.urls[channel])
        if not monitor.poll(int(PROBE_TIMEOUT * 1000)):
            return "silent"
        event = recv_monitor_message(monitor)["event"]
        return "handshake" if event == zmq.EVENT_HANDSHAKE_SUCCEEDED else "handshake-failed"
    finally:
        probe.disable_monitor()
        monitor.close(linger=0)
        probe.close(linger=0)
