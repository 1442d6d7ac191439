"""One connect rule: our endpoint URLs, CurveZMQ client options and signing Session against
jupyter_client's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio
from jupyter_client import KernelManager
from jupyter_client.connect import ConnectionFileMixin

from ipykernel_ext.client.reach import endpoint_identity
from ipykernel_ext.client.router import RouterClient
from ipykernel_ext.endpoints import (
    apply_curve_client,
    channel_endpoint,
    client_session,
    connect_channel,
    curve_keys,
    routing_id,
)
from ipykernel_ext.shared_channels import SharedChannels

CHANNELS = ("shell", "control", "stdin", "iopub", "hb")
PUBLIC, SECRET = zmq.curve_keypair()

INFOS = [
    {"transport": "tcp", "ip": "127.0.0.1"},
    {"transport": "tcp", "ip": "0.0.0.0"},
    {"transport": "tcp", "ip": "*"},
    {"transport": "tcp", "ip": "::1"},
    {"transport": "tcp", "ip": "kernel-host.example"},
    {"transport": "ipc", "ip": "/run/user/1000/kernel-ipc"},
]
PORTS = {f"{channel}_port": 50001 + i for i, channel in enumerate(CHANNELS)}


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def jupyter_client_url(info: dict[str, Any], channel: str) -> str:
    mixin = ConnectionFileMixin()
    mixin.load_connection_info({**info, **PORTS})  # type: ignore[typeddict-item]  # typed as its TypedDict; reads any connection dict
    return mixin._make_url(channel)


@pytest.mark.parametrize("info", INFOS, ids=lambda i: f"{i['transport']}-{i['ip']}")
def test_channel_endpoint_is_jupyter_clients_url(info: dict[str, Any]) -> None:
    full = {**info, **PORTS}
    for channel in CHANNELS:
        assert channel_endpoint(full, channel) == jupyter_client_url(info, channel)
        # One rule makes the routing id on both sides: the kernel's, from its own ip and
        # port, is the client's, from the connection file, and is the URL clients connect to.
        port = full[f"{channel}_port"]
        kernel_side = routing_id(info["transport"], info["ip"], port)
        assert kernel_side == endpoint_identity(full, channel)
        assert kernel_side == channel_endpoint(full, channel).encode()


def test_routing_ids_only_for_tcp_and_ipc() -> None:
    with pytest.raises(ValueError, match="inproc"):
        endpoint_identity({"transport": "inproc", "ip": "x", "shell_port": 1}, "shell")
    with pytest.raises(ValueError, match="inproc"):
        routing_id("inproc", "x", 1)
    with pytest.raises(ValueError, match="255"):
        routing_id("ipc", "/tmp/" + "x" * 300, 1)


def curve_server(ctx: zmq.Context[Any]) -> tuple[zmq.Socket[Any], int]:
    """A ROUTER with the kernel's CurveZMQ server options, as ipykernel binds it."""
    server = ctx.socket(zmq.ROUTER)
    server.curve_server = True
    server.curve_secretkey = SECRET
    server.curve_publickey = PUBLIC
    return server, server.bind_to_random_port("tcp://127.0.0.1")


def reaches(server: zmq.Socket[Any], client: zmq.Socket[Any], port: int) -> bool:
    client.connect(f"tcp://127.0.0.1:{port}")
    client.send(b"ping")
    return bool(server.poll(5000)) and server.recv_multipart()[-1] == b"ping"


def test_curve_options_are_jupyter_clients(ctx: zmq.Context[Any]) -> None:
    km = KernelManager(transport_encryption="required")
    km.curve_publickey, km.curve_secretkey = PUBLIC, SECRET
    km.context = ctx
    km.ip, km.shell_port = "127.0.0.1", 50001
    theirs = km.connect_shell()
    ours = ctx.socket(zmq.DEALER)
    ours.linger = 0
    apply_curve_client(ours, curve_keys(km.get_connection_info()))
    # libzmq does not read CurveZMQ keys back; the mechanism and a real handshake tell.
    assert ours.mechanism == theirs.mechanism == zmq.CURVE
    server, port = curve_server(ctx)
    assert reaches(server, ours, port)
    # A socket reused for a plain kernel goes back to the NULL mechanism.
    apply_curve_client(ours, None)
    assert ours.mechanism == zmq.NULL


def test_curve_keys_from_a_connection_file_dict() -> None:
    assert curve_keys({"curve_publickey": PUBLIC.decode(), "curve_secretkey": SECRET.decode()}) == (
        PUBLIC,
        SECRET,
    )
    assert curve_keys({}) is None
    assert curve_keys({"curve_publickey": "", "curve_secretkey": ""}) is None


@pytest.mark.parametrize("encrypted", [False, True])
def test_connect_channel_is_jupyter_clients_socket(ctx: zmq.Context[Any], encrypted: bool) -> None:
    server, port = curve_server(ctx) if encrypted else (ctx.socket(zmq.ROUTER), 0)
    if not encrypted:
        port = server.bind_to_random_port("tcp://127.0.0.1")
    info = {"transport": "tcp", "ip": "127.0.0.1", **PORTS, "control_port": port, "key": b"k"}
    info["signature_scheme"] = "hmac-sha256"
    if encrypted:
        info.update(curve_publickey=PUBLIC.decode(), curve_secretkey=SECRET.decode())
    actx = zmq.asyncio.Context()
    try:
        shell = connect_channel(actx, info, "shell", identity=b"me")
        iopub = connect_channel(actx, info, "iopub")
        assert isinstance(shell, zmq.asyncio.Socket)
        assert shell.type == zmq.DEALER and iopub.type == zmq.SUB
        assert shell.identity == b"me"
        assert shell.linger == 1000
        assert shell.mechanism == (zmq.CURVE if encrypted else zmq.NULL)
        with pytest.raises(ValueError, match="unknown kernel channel"):
            connect_channel(actx, info, "nope")
        # And it gets through to a kernel-like ROUTER with the kernel's server options.
        control = connect_channel(ctx, info, "control", identity=b"me")
        control.send(b"ping")
        assert server.poll(5000)
        assert server.recv_multipart() == [b"me", b"ping"]
    finally:
        actx.destroy(linger=0)


SIGNING = [
    pytest.param({"key": "a-key", "signature_scheme": "hmac-sha256"}, id="str-key"),
    pytest.param({"key": b"a-key", "signature_scheme": "hmac-sha512"}, id="bytes-key-sha512"),
    pytest.param({"key": "a-key"}, id="no-scheme"),
    pytest.param({"key": ""}, id="empty-key"),
    pytest.param({}, id="no-key"),
]


@pytest.mark.parametrize("signing", SIGNING)
def test_one_signing_session_for_the_relay_and_the_router(
    ctx: zmq.Context[Any], tmp_path: Path, signing: dict[str, Any]
) -> None:
    """The shared channels (a ``get_connection_info()`` dict, key as bytes) and the
    RouterClient (that dict, or a connection file: key as str) sign as jupyter_client does."""
    info = {"transport": "tcp", "ip": "127.0.0.1", **PORTS, **signing}
    key = signing.get("key", b"")
    key = key.encode() if isinstance(key, str) else key
    scheme = signing.get("signature_scheme", "hmac-sha256")
    on_file = {**info, "key": key.decode()} if "key" in info else info
    path = tmp_path / "kernel.json"
    path.write_text(json.dumps(on_file))

    actx = zmq.asyncio.Context.shadow(ctx.underlying)
    sessions = [client_session(info), SharedChannels(info, context=actx).session]
    with RouterClient(ctx) as router:
        for connection in (info, str(path)):
            kernel_id = router.add_kernel(connection)
            sessions.append(router.session(kernel_id))
            router.remove_kernel(kernel_id)

    for session in sessions:
        assert (session.key, session.signature_scheme) == (key, scheme)
        assert (session.auth is None) == (key == b"")  # no key: unsigned, as jupyter_client
    if "key" in signing:
        # jupyter_client's own reading of the same dict verifies what ours signs.
        km = KernelManager()
        km.load_connection_info(dict(info))  # type: ignore[arg-type]  # typed as its TypedDict; reads any connection dict
        for session in sessions:
            frames = session.serialize(session.msg("kernel_info_request", {}))
            _, frames = km.session.feed_identities(frames)
            assert km.session.deserialize(frames)["header"]["session"] == session.session
