"""Opt-in ROUTER identities: the shell and control sockets take their endpoint as routing id.

A client ROUTER addresses a peer by the peer's routing id. Stock kernels' ROUTER sockets get
a random one, so a client needs a DEALER per kernel per channel. With
``--router-identity=endpoint`` the kernel's shell and control ROUTERs use the exact endpoint
string they bind (``b"tcp://127.0.0.1:53017"``, ``b"ipc:///path-2"``), which the client
already has from the connection file. The routing id must be set before bind, so for a
random TCP port the port is chosen first and the bind retried on a clash.
"""

from __future__ import annotations

import errno
import random
from pathlib import Path
from typing import Any

import zmq

#: The port range libzmq's and pyzmq's ``bind_to_random_port`` pick from.
RANDOM_PORT_RANGE = (49152, 65535)
MAX_BIND_ATTEMPTS = 100


def tcp_endpoint(ip: str, port: int) -> str:
    """The endpoint string for ``ip`` and ``port`` as a connection file client writes it."""
    return f"tcp://{ip}:{port}"


def bind_with_endpoint_identity(socket: zmq.Socket[Any], transport: str, ip: str, port: int) -> int:
    """Bind ``socket`` with its routing id set to the endpoint it binds; return the port.

    ``port <= 0`` picks a free one, as ipykernel does (a random TCP port, or the first free
    ipc path ``{ip}-{n}``).
    """
    if transport == "tcp":
        if port > 0:
            _bind(socket, tcp_endpoint(ip, port))
            return port
        for _ in range(MAX_BIND_ATTEMPTS):
            candidate = random.randint(*RANDOM_PORT_RANGE)
            try:
                _bind(socket, tcp_endpoint(ip, candidate))
            except zmq.ZMQError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                continue
            return candidate
        raise zmq.ZMQBindError(f"could not find a free port on {ip} in {MAX_BIND_ATTEMPTS} tries")
    if transport == "ipc":
        if port <= 0:
            port = 1
            while Path(f"{ip}-{port}").exists():
                port += 1
        _bind(socket, f"ipc://{ip}-{port}")
        return port
    raise ValueError(f"router_identity=endpoint does not support transport {transport!r}")


def _bind(socket: zmq.Socket[Any], endpoint: str) -> None:
    # libzmq reads ZMQ_ROUTING_ID when a peer connects, so it must be in place before bind.
    socket.setsockopt(zmq.ROUTING_ID, endpoint.encode())
    socket.bind(endpoint)
