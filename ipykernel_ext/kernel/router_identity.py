"""Opt-in ROUTER identities: the shell and control sockets take their endpoint as routing id.

A client ROUTER addresses a peer by the peer's routing id. Stock kernels' ROUTER sockets get
a random one, so a client needs a DEALER per kernel per channel. With
``--router-identity=endpoint`` the kernel's shell and control ROUTERs use the endpoint string
they bind as their routing id, which a client computes from the connection file alone:

* tcp: ``tcp://{ip}:{port}``, ``ip`` exactly as in the connection file (``127.0.0.1``,
  ``0.0.0.0``, a host name: never resolved or rewritten; ``*`` is already ``0.0.0.0`` here,
  as ipykernel and jupyter_client both turn it into that);
* ipc: ``ipc://{ip}-{port}`` (``ip`` is the path prefix, ``ipc:///run/kernel-ipc-2``).

That is the URL ipykernel binds and jupyter_client connects to, byte for byte: the rule is
:func:`ipykernel_ext.endpoints.endpoint`, shared with the client side.

libzmq copies socket options into a listener when it binds, so the routing id must be set
before bind; the CurveZMQ server options ipykernel applies before calling ``_bind_socket``
are untouched. A random TCP port is therefore picked *before* the bind (one candidate per
call: ipykernel's ``_bind_socket`` retries on EADDRINUSE), not by binding to ``*``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import zmq

from ..endpoints import endpoint, routing_id

#: The range pyzmq's ``bind_to_random_port`` picks from when it cannot let the OS choose.
RANDOM_PORT_RANGE = (49152, 65535)


def bind_with_endpoint_identity(socket: zmq.Socket[Any], transport: str, ip: str, port: int) -> int:
    """Bind ``socket`` once, its routing id set to the endpoint it binds; return the port.

    ``port <= 0`` picks one as ipykernel does (a random TCP port, or the first free ipc path
    ``{ip}-{n}``). A TCP port already in use raises ``zmq.ZMQError(EADDRINUSE)`` so that
    ``IPKernelApp._bind_socket`` tries another one, as it does for stock sockets.
    """
    if port <= 0:
        port = _free_ipc_index(ip) if transport == "ipc" else random.randint(*RANDOM_PORT_RANGE)
    # Set before bind: libzmq copies the options into the listener, and every peer that
    # connects later gets this routing id in its ZMTP handshake.
    socket.setsockopt(zmq.ROUTING_ID, routing_id(transport, ip, port))
    socket.bind(endpoint(transport, ip, port))
    return port


def _free_ipc_index(prefix: str) -> int:
    # The same search as IPKernelApp._try_bind_socket, so the paths match stock kernels'.
    index = 1
    while Path(f"{prefix}-{index}").exists():
        index += 1
    return index


__all__ = ["bind_with_endpoint_identity"]
