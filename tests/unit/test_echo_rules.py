"""echo.py in process: the malformed-comm rules, what is echoed, and the echo's shape.

The rules are PROTOCOL.md section 2. Echoes are sent by a real jupyter_client Session over a
real inproc PUB/SUB pair and read back as a client would read them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import pytest
import zmq
from jupyter_client.session import Session

from ipykernel_ext.kernel.comms.echo import (
    WIDGET_TARGET,
    CommEcho,
    frames_received,
    malformed_reason,
    trim_payload,
)


def client_msg(msg_type: str, content: Any, metadata: Any = None) -> dict[str, Any]:
    session = Session(key=b"client-key")
    msg = session.msg(msg_type, content, metadata={} if metadata is None else metadata)
    if metadata is not None:
        msg["metadata"] = metadata
    msg["content"] = content
    msg["buffers"] = []
    return msg


OPEN = {"comm_id": "c1", "target_name": "t", "data": {}}


# --- malformed_reason -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("msg_type", "content"),
    [
        ("comm_open", OPEN),
        ("comm_open", {**OPEN, "target_module": None}),
        ("comm_open", {**OPEN, "target_module": "mod"}),
        ("comm_open", {"comm_id": "c1", "target_name": "t"}),  # data is optional
        ("comm_msg", {"comm_id": "c1", "data": {"x": 1}}),
        ("comm_close", {"comm_id": "c1", "data": {}}),
        ("comm_msg", {"comm_id": "c1", "data": {}, "extra": [1]}),  # extra fields pass
    ],
)
def test_well_formed(msg_type: str, content: dict[str, Any]) -> None:
    assert malformed_reason(client_msg(msg_type, content)) is None


@pytest.mark.parametrize(
    ("msg_type", "content", "metadata", "reason"),
    [
        ("comm_msg", [1, 2], {}, "content is list, not an object"),
        ("comm_msg", None, {}, "content is NoneType, not an object"),
        ("comm_msg", {"data": {}}, {}, "comm_id is missing or not a non-empty string"),
        ("comm_msg", {"comm_id": "", "data": {}}, {}, "comm_id is missing or not a non-empty"),
        ("comm_msg", {"comm_id": 7, "data": {}}, {}, "comm_id is missing or not a non-empty"),
        ("comm_msg", {"comm_id": "c1", "data": [1]}, {}, "data is list, not an object"),
        ("comm_close", {"comm_id": "c1", "data": "x"}, {}, "data is str, not an object"),
        ("comm_msg", {"comm_id": "c1", "data": {}}, [], "metadata is not an object"),
        ("comm_open", {"comm_id": "c1", "data": {}}, {}, "comm_open without a string target"),
        ("comm_open", {**OPEN, "target_name": 3}, {}, "comm_open without a string target"),
        ("comm_open", {**OPEN, "target_module": 3}, {}, "target_module is neither a string"),
    ],
)
def test_malformed(msg_type: str, content: Any, metadata: Any, reason: str) -> None:
    found = malformed_reason(client_msg(msg_type, content, metadata))
    assert found is not None and found.startswith(reason)


# --- which messages are echoed, and how --------------------------------------------------------


class Wire:
    """A kernel-side PUB and a client-side SUB, in process."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.pub = self.context.socket(zmq.PUB)
        self.sub = self.context.socket(zmq.SUB)
        url = f"inproc://echo-{uuid.uuid4().hex}"
        self.pub.bind(url)
        self.sub.connect(url)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.kernel_session = Session(key=b"k")

    def wait_connected(self) -> None:
        """Publish probes until one arrives: the subscription has reached the PUB."""
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        for _ in range(500):
            self.pub.send_multipart([b"probe", b""])
            if poller.poll(10):
                while self.sub.poll(0):
                    self.sub.recv_multipart()
                return
        raise AssertionError("inproc SUB never connected")

    def received(self) -> list[dict[str, Any]]:
        """Everything published so far: read up to a barrier sent after it (same pipe, so
        whatever was published before has arrived once the barrier has)."""
        self.pub.send_multipart([b"barrier", b""])
        out: list[dict[str, Any]] = []
        while True:
            assert self.sub.poll(10_000), "the barrier never arrived"
            frames = self.sub.recv_multipart()
            if frames == [b"barrier", b""]:
                return out
            idents, rest = self.kernel_session.feed_identities(frames)
            msg = self.kernel_session.deserialize(rest)
            msg["idents"] = idents
            out.append(msg)

    def close(self) -> None:
        self.pub.close(linger=0)
        self.sub.close(linger=0)
        self.context.term()


@pytest.fixture
def wire() -> Iterator[Wire]:
    w = Wire()
    w.wait_connected()
    yield w
    w.close()


def make_echo(wire: Wire, comms: dict[str, Any] | None = None, **kwargs: Any) -> CommEcho:
    manager = SimpleNamespace(comms=comms or {})
    return CommEcho(
        session=wire.kernel_session,
        iopub_socket=wire.pub,
        topic=b"kernel.test.comm_echo",
        comm_manager=manager,
        **kwargs,
    )


@pytest.mark.parametrize("as_received", [False, True])
def test_echo_carries_the_client_message_unchanged(wire: Wire, as_received: bool) -> None:
    """Packed again, or (dispatched by the kernel) the client's frames re-sent: the same."""
    echo = make_echo(wire)
    msg = client_msg("comm_open", {**OPEN, "data": {"v": 1}}, {"version": "2.1.0"})
    msg["buffers"] = [memoryview(b"buffer-one")]
    frames = [b"client-id", *Session(key=b"client-key").serialize(msg), *msg["buffers"]]
    with frames_received(frames) if as_received else nullcontext():
        echo.publish(msg)
    [got] = wire.received()
    assert got["idents"] == [b"kernel.test.comm_echo"]
    assert got["header"]["msg_type"] == "comm_echo"
    assert got["header"]["session"] == wire.kernel_session.session
    assert got["parent_header"]["msg_id"] == msg["header"]["msg_id"]
    assert got["parent_header"]["session"] == msg["header"]["session"]
    assert got["parent_header"]["msg_type"] == "comm_open"
    assert got["content"] == {**OPEN, "data": {"v": 1}}
    assert got["metadata"] == {"version": "2.1.0"}  # not merged with the session's metadata
    assert [bytes(b) for b in got["buffers"]] == [b"buffer-one"]
    assert echo.echoed == 1


def test_unknown_comm_and_excluded_targets_are_not_echoed(wire: Wire) -> None:
    known = SimpleNamespace(target_name="t")
    excluded = SimpleNamespace(target_name="big.upload")
    echo = make_echo(wire, {"known": known, "up": excluded}, exclude_targets=["big.upload"])
    cases = [
        (client_msg("comm_msg", {"comm_id": "known", "data": {}}), True),
        (client_msg("comm_close", {"comm_id": "known", "data": {}}), True),
        (client_msg("comm_msg", {"comm_id": "nobody", "data": {}}), False),
        (client_msg("comm_msg", {"comm_id": "up", "data": {}}), False),
        (client_msg("comm_open", {**OPEN, "target_name": "unregistered"}), True),
        (client_msg("comm_open", {**OPEN, "target_name": "big.upload"}), False),
        (client_msg("execute_request", {"code": ""}), False),
    ]
    assert [echo.should_echo(msg) for msg, _ in cases] == [want for _, want in cases]

    # The exclusions are read per message: a change applies to comms already open.
    echo.exclude_targets = frozenset({"t"})
    assert echo.should_echo(client_msg("comm_msg", {"comm_id": "known", "data": {}})) is False
    assert echo.should_echo(client_msg("comm_msg", {"comm_id": "up", "data": {}})) is True


def test_switch_and_handler_order(wire: Wire) -> None:
    echo = make_echo(wire, enabled=False)
    handled: list[str] = []

    def handler(stream: Any, ident: list[bytes], msg: dict[str, Any]) -> str:
        handled.append(msg["header"]["msg_id"])
        return "handled"

    wrapped = echo.wrap(handler)
    off = client_msg("comm_open", OPEN)
    assert wrapped(None, [], off) == "handled"
    assert wire.received() == [] and handled == [off["header"]["msg_id"]]

    echo.enabled = True
    on = client_msg("comm_open", OPEN)
    assert wrapped(None, [], on) == "handled"
    [got] = wire.received()
    assert got["parent_header"]["msg_id"] == on["header"]["msg_id"]
    assert handled[-1] == on["header"]["msg_id"]


def test_a_failing_echo_never_keeps_the_comm_from_its_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class BrokenSession:
        def msg(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("session broken")

    echo = CommEcho(
        session=BrokenSession(),
        iopub_socket=None,
        topic=b"t",
        comm_manager=SimpleNamespace(comms={}),
        log=logging.getLogger("test_echo_rules"),
    )
    with caplog.at_level(logging.ERROR, logger="test_echo_rules"):
        result = echo.wrap(lambda stream, ident, msg: "handled")(
            None, [], client_msg("comm_open", OPEN)
        )
    assert result == "handled"
    assert "comm_echo could not be published" in caplog.text


def test_malformed_warned_once_per_kind(wire: Wire, caplog: pytest.LogCaptureFixture) -> None:
    echo = make_echo(wire, log=logging.getLogger("test_echo_rules"))
    bad = {"comm_id": "c1", "data": [1]}
    with caplog.at_level(logging.DEBUG, logger="test_echo_rules"):
        for _ in range(3):
            assert echo.publish(client_msg("comm_msg", bad)) is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "data is list" in warnings[0].getMessage()
    assert echo.malformed == 3
    assert wire.received() == []


UPDATE = {"method": "update", "state": {"value": 1}, "buffer_paths": [["value"]]}


@pytest.mark.parametrize(
    ("target", "data", "sizes", "omitted"),
    [
        ("t", {}, [], None),
        ("t", {}, [64], None),  # at the threshold: echoed as it came
        ("t", {}, [30, 34], None),
        ("t", {}, [65], {"buffers": 1, "bytes": 65}),
        ("t", {}, [30, 35], {"buffers": 2, "bytes": 65}),
        (None, {}, [65], {"buffers": 1, "bytes": 65}),  # a comm without a target
        # Widget comms follow ipywidgets' echo_update rule, not the size: no widget lives here.
        (WIDGET_TARGET, UPDATE, [65], None),
        (WIDGET_TARGET, {"method": "custom"}, [65], None),
    ],
)
def test_trim_payload(
    target: str | None, data: dict[str, Any], sizes: list[int], omitted: dict[str, int] | None
) -> None:
    content = {"comm_id": "c1", "data": data}
    buffers = [memoryview(b"x" * n) for n in sizes]
    got = trim_payload(target, content, buffers, 64)
    # Untouched: the very same objects, so the echo is what it was byte for byte.
    assert got == ((content, buffers, None) if omitted is None else (content, [], omitted))
    assert got[0] is content
