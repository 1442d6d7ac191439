"""What the unit layer's in-process rigs share: a frontend on a DEALER, and the hang guard.

Both rigs (``test_busy_answers_inprocess.py``: BusyAnswers over real sockets;
``test_control_queries_inprocess.py``: a whole ExtKernel in this process) stand in for the
kernel differently, but talk to it the same way: a frontend with a Session of its own (the
kernel's key, or another for a refusal) and a DEALER on the kernel's ROUTER, over
``inproc://``. Every poll waits :data:`HANG_MS` at most: a hang guard, never a measure.
"""

from __future__ import annotations

from typing import Any

import zmq
from jupyter_client.session import Session

#: How long a poll waits before the test fails: a hang guard only, never a measure.
HANG_MS = 10_000


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
