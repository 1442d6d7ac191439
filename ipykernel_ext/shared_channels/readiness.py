"""The shared channels' own requests, and when a fresh set is live (jupyter_server's nudge).

A SUB socket's subscription reaches the kernel some time after ``connect()``, and nothing
says when; messages published before it are lost for that socket. jupyter_server therefore
sends ``kernel_info_request`` every half second until the kernel answered *and* an IOPub
message arrived. :func:`wait_until_live` does the same for a whole
:class:`~ipykernel_ext.shared_channels.SharedChannels`, with the channels' own session (so
no client ever sees those replies). :class:`OwnRequests` sends such requests and takes
their replies out of the stream before routing; :class:`Readiness` shares one wait among
every websocket that attaches meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from jupyter_client.session import Session

from .messages import KernelMessage

#: ``request(channel, msg_type)``: a request with the channels' own session; the reply's future.
Request = Callable[[str, str], "asyncio.Future[dict[str, Any]]"]

#: How often the readiness check re-sends its kernel_info_request (as jupyter_server's nudge).
NUDGE_INTERVAL = 0.5


async def wait_until_live(
    request: Request,
    iopub_seen: asyncio.Future[None],
    log: logging.Logger | logging.LoggerAdapter[Any],
    timeout: float,
    keep_trying: Callable[[], bool] | None = None,
    settled: Callable[[], bool] | None = None,
) -> bool:
    """Nudge until shell or control answered and IOPub delivered (and ``settled()``).

    ``iopub_seen`` is resolved by the owner when an IOPub message arrives. Returns False
    when it gave up: past ``timeout``, or ``keep_trying()`` turned False.
    """
    loop = asyncio.get_running_loop()
    replies: list[asyncio.Future[dict[str, Any]]] = []
    deadline = loop.time() + timeout
    next_send = loop.time()
    try:
        while True:
            if keep_trying is not None and not keep_trying():
                log.debug("Shared channels: the kernel is gone, not waiting for it")
                return False
            answered = any(f.done() and not f.cancelled() for f in replies)
            if answered and iopub_seen.done() and (settled is None or settled()):
                return True
            now = loop.time()
            if now >= deadline:
                log.warning("Kernel did not answer the shared channels in %s s", timeout)
                return False
            if now >= next_send:
                for channel in ("shell", "control"):
                    replies.append(request(channel, "kernel_info_request"))
                next_send = now + NUDGE_INTERVAL
            futures: list[asyncio.Future[Any]] = [*replies, iopub_seen]
            waiting = [f for f in futures if not f.done()]
            if (answered and iopub_seen.done()) or not waiting:
                await asyncio.sleep(0.05)  # only `settled` is missing: poll it
            else:
                await asyncio.wait(
                    waiting,
                    timeout=max(0.01, next_send - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
    finally:
        for fut in replies:
            fut.cancel()  # its done-callback forgets the msg_id


class OwnRequests:
    """Requests signed with the channels' own session; their replies are consumed here.

    ``send(channel, frames)`` sends signed frames; :meth:`take_reply` is asked about every
    routed message first.
    """

    def __init__(self, session: Session, send: Callable[[str, list[Any]], None]) -> None:
        self.session = session
        self.send = send
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}

    def request(
        self, channel: str, msg_type: str, content: dict[str, Any] | None = None
    ) -> asyncio.Future[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()
        msg = self.session.msg(msg_type, content or {})
        msg_id = msg["header"]["msg_id"]
        self.pending[msg_id] = fut
        self.send(channel, self.session.serialize(msg))
        fut.add_done_callback(lambda _: self.pending.pop(msg_id, None))
        return fut

    def take_reply(self, msg: KernelMessage) -> bool:
        """True if ``msg`` answers one of our requests (it is then consumed)."""
        if msg.parent_header.get("session") != self.session.session:
            return False
        fut = self.pending.get(msg.parent_header.get("msg_id", ""))
        if fut is not None and not fut.done():
            fut.set_result({"channel": msg.channel, "frames": msg.frames})
        return True

    def cancel_all(self) -> None:
        for fut in list(self.pending.values()):
            if not fut.done():
                fut.cancel()
        self.pending.clear()


class Readiness:
    """One readiness wait per socket set, shared by every caller until it succeeds.

    ``request`` sends the nudge (the channels' own requests); the owner calls
    :meth:`saw_iopub` for every IOPub message, which is what a wait in progress waits for.
    """

    def __init__(self, request: Request, log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self.request = request
        self.log = log
        self.current: asyncio.Future[bool] | None = None
        self._iopub_seen: asyncio.Future[None] | None = None

    def saw_iopub(self) -> None:
        """An IOPub message arrived: a wait in progress has its IOPub delivery."""
        if self._iopub_seen is not None and not self._iopub_seen.done():
            self._iopub_seen.set_result(None)

    def ready(
        self,
        nudge: bool,
        timeout: float,
        keep_trying: Callable[[], bool] | None,
        settled: Callable[[], bool] | None,
    ) -> asyncio.Future[Any]:
        if not nudge:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        if self.current is None:
            self._iopub_seen = asyncio.get_running_loop().create_future()
            wait = wait_until_live(
                self.request, self._iopub_seen, self.log, timeout, keep_trying, settled
            )
            self.current = asyncio.ensure_future(wait)
            self.current.add_done_callback(self._forget_failure)
        return self.current

    def _forget_failure(self, ready: asyncio.Future[bool]) -> None:
        if self.current is ready and (ready.cancelled() or ready.exception() or not ready.result()):
            self.current = None  # not ready: the next caller tries again

    def stale(self) -> None:
        """The kernel restarted on the same sockets: a wait that succeeded says nothing of
        the new process (the SUB rejoins it through libzmq's reconnect, and what the kernel
        publishes before that is lost), so the next caller nudges again. A wait in progress
        goes on: its nudges reach the new process too."""
        if self.current is not None and self.current.done():
            self.current = None

    def reset(self) -> None:
        """The sockets changed: a wait in progress is void."""
        if self.current is not None and not self.current.done():
            self.current.cancel()
        self.current = None
