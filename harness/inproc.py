"""Kernel pieces in the test process, over ``inproc://``: a frontend, the IOPub socket and thread.

The unit layer's rigs stand in for a kernel in the test process (the IOPub socket alone,
BusyAnswers over real sockets, a whole ExtKernel) and talk to it as a frontend does: a
Session of its own (the kernel's key, or another for a refusal) on a DEALER. The IOPub side is
our XPUB (:class:`NoDropXPubSocket`) under ipykernel's real ``IOPubThread``, attached, started
and stopped as the apps do. Every poll waits :data:`HANG_MS` at most: a hang guard, never a
measure.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any

import zmq
from ipykernel.iostream import IOPubThread
from jupyter_client.session import Session

from ipykernel_ext.kernel.iopub.settings import IOPubSettings
from ipykernel_ext.kernel.iopub.socket import NoDropXPubSocket

#: How long a poll waits before the test fails: a hang guard only, never a measure.
HANG_MS = 10_000


def bound(ctx: zmq.Context[Any], kind: int, name: str) -> tuple[str, zmq.Socket[Any]]:
    """A socket of ``kind`` bound to a new ``inproc://`` address; the address and the socket."""
    url = f"inproc://{name}-{uuid.uuid4().hex}"
    socket = ctx.socket(kind)
    socket.linger = 0
    socket.bind(url)
    return url, socket


class Frontend:
    """A frontend: its own session (``key``) and a DEALER connected to ``url``."""

    def __init__(self, ctx: zmq.Context[Any], url: str, key: bytes) -> None:
        self.session = Session(key=key)
        self.socket = ctx.socket(zmq.DEALER)
        self.socket.linger = 0
        self.socket.connect(url)

    def msg(
        self, msg_type: str, content: Any, metadata: dict[str, Any] | None = None, **header: Any
    ) -> dict[str, Any]:
        """A request; ``content`` may be packed bytes (content that is not an object)."""
        msg = self.session.msg(msg_type, {}, metadata=metadata)
        msg["content"] = content
        msg["header"].update(header)
        return msg

    def send(self, msg: dict[str, Any], session: Session | None = None) -> dict[str, Any]:
        """Send ``msg`` signed by this frontend's session (or by ``session``: another key on
        the same socket); return it."""
        (session or self.session).send(self.socket, msg)
        return msg

    def reply(self) -> dict[str, Any]:
        """The next message back on this frontend's socket."""
        return self.read(self.socket, "no reply")

    def read(self, socket: zmq.Socket[Any], what: str = "nothing arrived") -> dict[str, Any]:
        """The next message on ``socket`` (a subscriber too), decoded with this session."""
        assert socket.poll(HANG_MS), what
        _, msg = self.session.recv(socket, mode=0)
        assert msg is not None
        return msg

    def close(self) -> None:
        self.socket.close()


def bound_xpub(ctx: zmq.Context[Any], settings: IOPubSettings) -> tuple[str, NoDropXPubSocket]:
    """Our IOPub socket, configured before it binds (as the app does); its address and it."""
    url = f"inproc://iopub-{uuid.uuid4().hex}"
    pub = ctx.socket(zmq.XPUB, socket_class=NoDropXPubSocket)
    pub.linger = 0
    pub.configure(settings)
    pub.bind(url)
    return url, pub


def subscribe(
    ctx: zmq.Context[Any], url: str, pub: zmq.Socket[Any], topic: bytes = b"", rcvhwm: int = 0
) -> zmq.Socket[Any]:
    """A SUB on ``pub`` (``rcvhwm``: its queue, 0 for libzmq's default), once ``pub`` has it.

    The subscription arrives at the XPUB as a message: once read, the pipe exists. (XPUB passes
    on only new topics, so each subscriber of one publisher uses its own prefix.) Read it before
    an IOPub thread starts: from then on only that thread may use the socket.
    """
    sub = ctx.socket(zmq.SUB)
    if rcvhwm:
        sub.rcvhwm = rcvhwm
    sub.linger = 0
    sub.connect(url)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    assert pub.poll(HANG_MS), "no subscription reached the XPUB"
    assert pub.recv() == b"\x01" + topic
    return sub


def start_iopub_thread(pub: NoDropXPubSocket) -> IOPubThread:
    """ipykernel's IOPub thread around ``pub``, attached as the apps attach it, running."""
    thread = IOPubThread(pub, session=None)
    pub.attach(thread.io_loop.call_later, thread.thread)
    thread.start()
    return thread


def run_on_iopub_thread(thread: IOPubThread, f: Callable[[], object]) -> None:
    """Run ``f`` on the IOPub thread after what is queued there, and wait for it."""
    done = threading.Event()

    def run() -> None:
        f()
        done.set()

    thread.schedule(run)
    assert done.wait(HANG_MS / 1000), "the IOPub thread did not get to it: it is blocked"


def stop_iopub_thread(thread: IOPubThread) -> None:
    """Stop the thread with no task left pending on its loop (it may be stopped already).

    IOPubThread.stop() ends the loop before its event-pipe GC task has seen its cancel, and
    asyncio then prints "Task was destroyed but it is pending!": cancel the loop's tasks on
    the loop first and let it turn once more, so they end.
    """
    if thread.thread.is_alive():

        def cancel_tasks() -> None:
            for task in asyncio.all_tasks():
                task.cancel()

        run_on_iopub_thread(thread, cancel_tasks)
        run_on_iopub_thread(thread, lambda: None)
    thread.stop()
