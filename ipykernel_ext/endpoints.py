"""Where a kernel's channel listens and how a client connects to it: one rule for the package.

jupyter_client owns the rule (``ConnectionFileMixin``): the URL is ``tcp://{ip}:{port}`` or
``{transport}://{ip}-{port}`` (ipc: ``ip`` is a path prefix), ``*`` as ip means
``0.0.0.0``, and a client socket of an encrypted kernel takes the kernel's CurveZMQ keypair
from the connection file as its own and the kernel's public key as server key (ipykernel does
not authenticate clients). Everything in ipykernel_ext that connects to or names a kernel
endpoint goes through this module:

* :func:`connect_channel` makes a connected socket with jupyter_client's own public
  ``connect_shell`` / ``connect_iopub`` / ... (the shared channels use it);
* :func:`endpoint` and :func:`channel_endpoint` give the URL string for code that needs the
  string itself: a routing id (``--router-identity=endpoint``) or one ROUTER that connects to
  many kernels (:mod:`ipykernel_ext.client.router`);
* :func:`apply_curve_client` sets the CurveZMQ client options on a socket that connects to
  more than one kernel, before each ``connect()`` (libzmq copies them at connect time);
* :func:`client_session` makes the :class:`~jupyter_client.session.Session` that signs a
  client's messages to the kernel (its ``key`` and ``signature_scheme``), for the shared
  channels and the :class:`~ipykernel_ext.client.router.RouterClient` alike.

The unit tests check :func:`endpoint` and :func:`apply_curve_client` against jupyter_client's
``ConnectionFileMixin._make_url`` and ``_create_connected_socket``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.connect import ConnectionFileMixin
from jupyter_client.session import Session
from traitlets import Instance

from .protocol import KERNEL_CHANNELS

#: Channels a client connects to: every channel of the kernel (heartbeat included, as in the
#: connection file; jupyter_client has a ``connect_{channel}`` for each).
CONNECTABLE_CHANNELS = KERNEL_CHANNELS


class KernelConnection(ConnectionFileMixin):
    """jupyter_client's connection rule bound to a zmq context of the caller's choosing.

    ``KernelManager`` and ``KernelClient`` carry this mixin with their own context; this
    small class lets code that only has a connection dict (and an asyncio context, say) use
    the same public ``connect_*`` methods.
    """

    context = Instance(zmq.Context)

    @classmethod
    def from_info(
        cls, connection_info: Mapping[str, Any], context: zmq.Context[Any]
    ) -> KernelConnection:
        connection = cls(context=context)
        connection.load_connection_info(dict(connection_info))  # type: ignore[arg-type]  # typed as its TypedDict; reads any connection dict
        return connection


def connect_channel(
    context: zmq.Context[Any],
    connection_info: Mapping[str, Any],
    channel: str,
    identity: bytes | None = None,
    rcvhwm: int | None = None,
) -> zmq.Socket[Any]:
    """A socket of ``context`` connected to ``channel`` of the kernel, as jupyter_client makes it.

    Linger 1 s, ``identity`` if given, CurveZMQ client options for an encrypted kernel, and
    an IOPub socket subscribed to everything. ``rcvhwm`` (messages, 0: no limit) is set
    *before* ``connect()``: libzmq sizes a connection's queue when it is made.
    """
    if channel not in CONNECTABLE_CHANNELS:
        raise ValueError(f"unknown kernel channel {channel!r}; one of {CONNECTABLE_CHANNELS}")
    if rcvhwm is not None:
        context = _preset_context(context, rcvhwm)
    connection = KernelConnection.from_info(connection_info, context)
    connect = getattr(connection, f"connect_{channel}")
    return connect(identity=identity)


class _PresetRcvhwm:
    """Mixed into a context class: every socket it makes gets ``RCVHWM`` before anything."""

    preset_rcvhwm = 1000

    def socket(self, socket_type: int, **kwargs: Any) -> Any:
        sock = super().socket(socket_type, **kwargs)  # type: ignore[misc]  # a mixin: the zmq.Context under it has socket()
        sock.rcvhwm = self.preset_rcvhwm
        return sock


class _PresetContext(_PresetRcvhwm, zmq.Context[zmq.Socket[Any]]):  # type: ignore[misc]  # socket(): one form, not zmq's overloads
    pass


class _PresetAsyncContext(_PresetRcvhwm, zmq.asyncio.Context):  # type: ignore[misc]  # socket(): one form, not zmq's overloads
    pass


def _preset_context(context: zmq.Context[Any], rcvhwm: int) -> zmq.Context[Any]:
    """A shadow of ``context`` (same libzmq context) whose sockets start with ``rcvhwm``."""
    cls = _PresetAsyncContext if isinstance(context, zmq.asyncio.Context) else _PresetContext
    preset = cls.shadow(context.underlying)
    preset.preset_rcvhwm = rcvhwm
    return preset


def endpoint(transport: str, ip: str, port: int) -> str:
    """The URL of ``port`` on a kernel: ``tcp://{ip}:{port}`` or ``{transport}://{ip}-{port}``."""
    if transport == "tcp":
        return f"tcp://{ip}:{int(port)}"
    return f"{transport}://{ip}-{int(port)}"


def channel_endpoint(connection_info: Mapping[str, Any], channel: str) -> str:
    """The URL of ``channel`` in a connection dict (``*`` as ip read as ``0.0.0.0``)."""
    ip = connection_info["ip"]
    return endpoint(
        connection_info.get("transport", "tcp"),
        "0.0.0.0" if ip == "*" else ip,
        int(connection_info[f"{channel}_port"]),
    )


#: libzmq refuses longer routing ids (ZMQ_ROUTING_ID is 1 to 255 bytes).
MAX_ROUTING_ID_BYTES = 255


def routing_id(transport: str, ip: str, port: int) -> bytes:
    """The routing id of a kernel ROUTER under ``--router-identity=endpoint``: its endpoint.

    The one rule for both sides: the kernel sets it before bind
    (:mod:`ipykernel_ext.kernel.router_identity`) and a client computes it from the connection
    file (:mod:`ipykernel_ext.client.reach`); they must agree byte for byte. ``*`` as ip is
    ``0.0.0.0``, as jupyter_client and ipykernel both read it; tcp and ipc only.
    """
    if transport not in ("tcp", "ipc"):
        raise ValueError(
            f"router_identity='endpoint' does not support transport {transport!r} (tcp or ipc)"
        )
    url = endpoint(transport, "0.0.0.0" if ip == "*" else ip, port).encode()
    if len(url) > MAX_ROUTING_ID_BYTES:
        raise ValueError(
            f"router_identity='endpoint': {url.decode()!r} is {len(url)} bytes, longer than the "
            f"{MAX_ROUTING_ID_BYTES} a ZMQ routing id may have; use a shorter ip or ipc path"
        )
    return url


def curve_keys(connection_info: Mapping[str, Any]) -> tuple[bytes, bytes] | None:
    """The kernel's ``(public, secret)`` CurveZMQ keys from a connection dict, or None."""
    public = connection_info.get("curve_publickey")
    secret = connection_info.get("curve_secretkey")
    if not public or not secret:
        return None
    return as_bytes(public), as_bytes(secret)


def apply_curve_client(sock: zmq.Socket[Any], keys: tuple[bytes, bytes] | None) -> None:
    """Set the client options jupyter_client sets for an encrypted kernel, before connect().

    ``keys`` is :func:`curve_keys`; None switches the socket back to the NULL mechanism, so a
    socket that connects to several kernels can reach plain ones after encrypted ones.
    """
    if keys is None:
        sock.curve_server = False  # CURVE_SERVER=0 selects the NULL mechanism again
        return
    public, secret = keys
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = public


def client_session(connection_info: Mapping[str, Any]) -> Session:
    """A Session that signs with the kernel's ``key`` and ``signature_scheme``.

    ``key`` may be str (a connection file) or bytes (``KernelManager.get_connection_info()``);
    a missing key means unsigned messages and a missing scheme ``hmac-sha256``, as
    jupyter_client reads a connection file.
    """
    return Session(
        key=as_bytes(connection_info.get("key", b"")),
        signature_scheme=connection_info.get("signature_scheme", "hmac-sha256"),
    )


def as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


__all__ = [
    "KernelConnection",
    "apply_curve_client",
    "channel_endpoint",
    "client_session",
    "connect_channel",
    "curve_keys",
    "endpoint",
    "routing_id",
]
