"""The control queries of ExtKernel in process: bad input gets a clear error reply, not a crash.

A real ExtKernel is made in this process, as ipykernel's own tests make theirs: a keyed
Session, a control ROUTER under a ZMQStream, IOPub through a real IOPubThread over our
NoDropXPubSocket (``inproc://``, :mod:`harness.inproc`); ``process_control`` gets the frames as
the control thread does. One kernel for the module (the queries are read-only), a client per
test; what the kernel changes in the process (the IPython shell singleton, builtins, its user
module, an atexit hook) is put back. Absence is shown by order: after a query that must
publish (or answer) nothing, the next request's answer is the first to arrive.
"""

from __future__ import annotations

import atexit
import builtins
import logging
import sys
import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import zmq
from ipykernel.zmqshell import ZMQInteractiveShell
from jupyter_client.session import Session
from tornado.ioloop import IOLoop
from traitlets.config import Config
from zmq.eventloop.zmqstream import ZMQStream

from harness.inproc import (
    HANG_MS,
    Frontend,
    bound,
    bound_xpub,
    start_iopub_thread,
    stop_iopub_thread,
    subscribe,
)
from ipykernel_ext.kernel import ExtKernel
from ipykernel_ext.kernel.iopub.settings import IOPubSettings

w = pytest.importorskip("ipywidgets")

KEY = b"control-queries-inprocess"
LOG = "tests.unit.control_queries"


class Rig:
    """An in-process ExtKernel, a client on its control channel, a subscriber on its IOPub."""

    def __init__(
        self,
        kernel: ExtKernel,
        ctx: zmq.Context[Any],
        control: zmq.Socket[Any],
        url: str,
        subscriber: zmq.Socket[Any],
    ) -> None:
        self.kernel = kernel
        self.ctx = ctx
        self.control = control
        self.url = url
        self.subscriber = subscriber
        assert kernel.control_stream is not None
        self.io_loop: IOLoop = kernel.control_stream.io_loop
        self.client = self.new_client()

    def new_client(self) -> Frontend:
        """A client of its own, so no test reads another's replies."""
        return Frontend(self.ctx, self.url, KEY)

    def send(self, msg_type: str, content: Any, session: Session | None = None) -> dict[str, Any]:
        """Send a request (signed by ``session`` if given: another key on the same socket)."""
        return self.client.send(self.client.msg(msg_type, content), session)

    def deliver(self) -> None:
        """The control thread: what reached the control socket goes to process_control."""
        assert self.control.poll(HANG_MS), "nothing reached the control socket"
        frames = self.control.recv_multipart(copy=False)

        async def process() -> None:
            await self.kernel.process_control(frames)
            # A reply waits in the ZMQStream's queue: send it now, as stock's
            # _publish_status_and_flush does.
            assert self.kernel.control_stream is not None
            self.kernel.control_stream.flush(zmq.POLLOUT)

        self.io_loop.run_sync(process, timeout=HANG_MS / 1000)

    def query(self, msg_type: str, content: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        request = self.send(msg_type, content)
        self.deliver()
        return request, self.reply()

    def reply(self) -> dict[str, Any]:
        return self.client.read(self.client.socket, "no reply on control")

    def published(self) -> dict[str, Any]:
        return self.client.read(self.subscriber, "nothing published on IOPub")


@pytest.fixture(scope="module")
def kernel_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    ctx: zmq.Context[Any] = zmq.Context()
    url, control = bound(ctx, zmq.ROUTER, "control")
    iopub_url, pub = bound_xpub(ctx, IOPubSettings())
    subscriber = subscribe(ctx, iopub_url, pub)
    iopub = start_iopub_thread(pub)
    io_loop = IOLoop(make_current=False)

    builtins_before = set(vars(builtins))
    user_module = types.ModuleType(f"tests_ext_kernel_{uuid.uuid4().hex}")
    config = Config()
    config.HistoryManager.enabled = False
    with pytest.MonkeyPatch.context() as patch:
        # The shell makes its profile there, not in the home directory.
        patch.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
        kernel = ExtKernel(
            config=config,
            session=Session(key=KEY),
            control_stream=ZMQStream(control, io_loop),
            iopub_thread=iopub,
            iopub_socket=iopub.background_socket,
            user_module=user_module,
            log=logging.getLogger(LOG),
        )
        made = Rig(kernel, ctx, control, url, subscriber)
        try:
            yield made
        finally:
            shell = kernel.shell
            assert shell is not None
            atexit.unregister(shell.atexit_operations)
            ZMQInteractiveShell.clear_instance()
            sys.modules.pop(user_module.__name__, None)
            for name in set(vars(builtins)) - builtins_before:
                delattr(builtins, name)
            assert kernel.control_stream is not None
            kernel.control_stream.close()
            io_loop.close()
            stop_iopub_thread(iopub)
            iopub.close()
            ctx.destroy(linger=0)


@pytest.fixture
def rig(kernel_rig: Rig) -> Rig:
    kernel_rig.client.close()  # the last test's (the module's end closes the last one)
    kernel_rig.client = kernel_rig.new_client()
    return kernel_rig


def parent_id(msg: dict[str, Any]) -> str:
    return msg["parent_header"]["msg_id"]


def assert_error_reply(reply: dict[str, Any], ename: str, evalue: str) -> None:
    content = reply["content"]
    assert content["status"] == "error"
    assert content["ename"] == ename
    assert evalue in content["evalue"]
    assert isinstance(content["traceback"], list) and content["traceback"]


# --- bad content -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "ename", "evalue"),
    [
        (
            {"verbose": True},
            "ValueError",
            "iopub_stats_request takes no fields; unknown: ['verbose']",
        ),
        (b"[]", "TypeError", "iopub_stats_request content must be an object, not list"),
        (b'"text"', "TypeError", "iopub_stats_request content must be an object, not str"),
    ],
    ids=["unknown-field", "list", "string"],
)
def test_iopub_stats_request_with_bad_content_gets_an_error_reply(
    rig: Rig, content: Any, ename: str, evalue: str
) -> None:
    request, reply = rig.query("iopub_stats_request", content)
    assert reply["msg_type"] == "iopub_stats_reply" and parent_id(reply) == request["msg_id"]
    assert_error_reply(reply, ename, evalue)


@pytest.mark.parametrize(
    ("content", "evalue"),
    [
        ({"model_ids": "abc"}, "list of strings"),
        ({"model_ids": ["a", 1]}, "list of strings"),
        ({"model_ids": [], "extra": 1}, "unknown fields ['extra']"),
        (b"[]", "must be an object, not list"),
    ],
    ids=["ids-string", "ids-int", "unknown-field", "list"],
)
def test_widget_state_request_with_bad_content_gets_an_error_reply(
    rig: Rig, content: Any, evalue: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=LOG):
        request, reply = rig.query("widget_state_request", content)
    assert reply["msg_type"] == "widget_state_reply" and parent_id(reply) == request["msg_id"]
    assert_error_reply(reply, "WidgetStateRequestError", evalue)
    assert not reply["buffers"]
    # The client's fault: one warning line, no traceback in the kernel log.
    [record] = [r for r in caplog.records if "widget_state_request failed" in r.getMessage()]
    assert not record.exc_info


# --- both queries --------------------------------------------------------------------------


def test_queries_publish_no_status(rig: Rig) -> None:
    for msg_type in ("widget_state_request", "iopub_stats_request"):
        for content in ({}, {"bad": 1}):  # answered, and refused with an error reply
            rig.query(msg_type, content)
    # A stock control request publishes busy/idle: its busy is the first thing on IOPub.
    request, reply = rig.query("kernel_info_request", {})
    assert reply["msg_type"] == "kernel_info_reply"
    first = rig.published()
    assert first["msg_type"] == "status" and first["content"]["execution_state"] == "busy"
    assert parent_id(first) == request["msg_id"]
    assert parent_id(rig.published()) == request["msg_id"]  # its idle


@pytest.mark.parametrize(
    ("sender", "msg_type"),
    [
        ("wrong-key", "widget_state_request"),
        ("unsigned", "iopub_stats_request"),
        ("replayed", "widget_state_request"),
        ("undecodable-content", "iopub_stats_request"),
    ],
)
def test_a_query_the_session_refuses_gets_no_reply_and_the_next_is_answered(
    rig: Rig, msg_type: str, sender: str, caplog: pytest.LogCaptureFixture
) -> None:
    if sender == "replayed":
        session, socket = rig.client.session, rig.client.socket
        frames = session.serialize(session.msg(msg_type, {}))
        socket.send_multipart(frames)
        rig.deliver()
        rig.reply()  # the first is answered
        socket.send_multipart(frames)
    elif sender == "undecodable-content":
        rig.send(msg_type, b"\xff not JSON")
    else:
        # Another key (or none) on the same socket: a reply would come back on it first.
        session = Session(key=b"not-the-kernels-key" if sender == "wrong-key" else b"")
        rig.send(msg_type, {}, session)
    with caplog.at_level(logging.ERROR, logger=LOG):
        rig.deliver()
    assert "Invalid control message" in caplog.text
    # The control channel goes on: the next query's reply is the first one back.
    request, reply = rig.query(msg_type, {})
    assert parent_id(reply) == request["msg_id"] and reply["content"]["status"] == "ok"
